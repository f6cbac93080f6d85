//go:build race

package reduce_test

const raceEnabled = true
