//go:build race

package run_test

// raceEnabled trims the library matrix under -race (about 10x slower):
// every algorithm, op and worker-count class still runs, with fewer
// dtypes and rank counts.
const raceEnabled = true
