#!/usr/bin/env bash
# Writes docs/benchmarks.md from the curated folders of bench/results (a
# README.md and a table.md each); -check only says whether the page is
# stale. cmd/benchdoc's test runs the same comparison in CI.
set -euo pipefail
cd "$(dirname "$0")/.."
exec go run ./cmd/benchdoc "$@"
