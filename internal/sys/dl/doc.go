// Package dl loads shared libraries at run time without cgo (purego) the
// way every GPU binding in chorus needs it: try a list of sonames, resolve
// every symbol up front, and fail with one error that names all that is
// missing. It also reads the C strings those libraries return.
package dl
