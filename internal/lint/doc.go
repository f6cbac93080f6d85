// Package lint holds repository rules written as tests: every package has
// a doc comment in doc.go, and imports follow the layer order of
// docs/architecture.md (bindings and tensors at the bottom, then
// transports, then workers and sessions, then the CLI).
package lint
