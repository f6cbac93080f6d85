// Command confdoc writes docs/configuration.md from the table of
// environment variables in internal/config (go run ./cmd/confdoc; -check
// only compares). internal/lint runs the same comparison as a test.
package main
