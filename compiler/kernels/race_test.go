//go:build race

package kernels

// raceBuild: the tests run under the race detector.
const raceBuild = true
