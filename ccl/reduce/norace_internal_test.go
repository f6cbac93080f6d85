//go:build !race

package reduce

const raceEnabledInternal = false
