// Command benchdoc writes docs/benchmarks.md from the curated benchmark
// results under bench/results: one folder per benchmark and machine kind
// (bench/results/<benchmark>-<machine-kind>/), each with a README.md (its
// first line "# <claim>", then the list items "- Machine: ...",
// "- Date: YYYY-MM-DD" and "- Command: ...", how to read the table and
// what the files are) and a table.md (the current
// result, with the anchors measured in the same run). The folders go into
// the page in the order of their names, after a fixed header and a table
// of contents; headings move one level down and relative links are
// rewritten to point into the folder.
//
//	scripts/benchdoc.sh            # rewrite docs/benchmarks.md
//	scripts/benchdoc.sh -check     # exit 1 when docs/benchmarks.md is stale
//
// A test in this package fails when docs/benchmarks.md differs from what
// benchdoc would write, so CI keeps the page and the folders in step.
package main
