// Package demo registers the functions that `chorus demo` runs on its
// workers, and the demo's controller program. Importing it (the chorus
// binary does) makes the functions available in worker processes too.
package demo
