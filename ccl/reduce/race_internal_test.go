//go:build race

package reduce

const raceEnabledInternal = true
