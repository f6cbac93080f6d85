//go:build !race

package run_test

const raceEnabled = false
