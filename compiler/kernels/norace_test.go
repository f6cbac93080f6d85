//go:build !race

package kernels

const raceBuild = false
