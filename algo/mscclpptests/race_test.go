//go:build race

package mscclpptests_test

// raceEnabled trims TestCPUExecutor under -race (about 10x slower): one
// message size and only the largest rank count of each program.
const raceEnabled = true
