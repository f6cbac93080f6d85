//go:build race

package hier

// raceBuild: see race_off.go.
const raceBuild = true
