package cpu

import "github.com/chorus-rt/chorus/internal/sys/shmarena"

// SetArenaFor makes f say which arena each rank that joins from now on
// publishes (nil: none); restore puts the process's back.
func SetArenaFor(f func(rank int) *shmarena.Arena) (restore func()) {
	prev := arenaFor
	arenaFor = f
	return func() { arenaFor = prev }
}

// SetReduced sets the hook a pipelined allreduce calls after reducing
// each group (nil: none); restore removes it.
func SetReduced(f func(rank, g int)) (restore func()) {
	testReduced = f
	return func() { testReduced = nil }
}
