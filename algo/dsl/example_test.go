package dsl_test

import (
	"errors"
	"fmt"

	"github.com/chorus-rt/chorus/algo/dsl"
	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/algo/verify"
)

// allGather2 is an all-gather of 2 ranks: each copies its input into
// its own output and puts it into the peer's, over a memory channel.
// Without the last signal and wait a rank may finish before the peer's
// chunk has arrived.
func allGather2(lastSync bool) (*plan.Plan, error) {
	p := dsl.NewProgram(dsl.Config{Name: "allgather_2", Collective: plan.AllGather, Ranks: 2})
	tb := dsl.TB(0)
	for r := range 2 {
		q := 1 - r
		rk := p.Rank(r)
		ch := p.MemoryChannel(q, r) // lives on r, reaches q
		rk.Copy(rk.Output().Chunk(r, 1), rk.Input().Chunk(0, 1), tb)
		ch.Signal(tb, dsl.SyncNone) // ready: the peer may write my output
		ch.Wait(tb, dsl.SyncAfter)
		ch.Put(p.Rank(q).Output().Chunk(r, 1), rk.Input().Chunk(0, 1), tb)
		if lastSync {
			ch.Signal(tb, dsl.SyncBefore) // my chunk is in the peer's output
			ch.Wait(tb, dsl.SyncAfter)    // the peer's chunk is in mine
		}
	}
	return p.Lower()
}

// A program in the DSL lowers to an MSCCL++ execution plan, and the
// verifier proves the plan computes its collective with neither deadlock
// nor race, or says what goes wrong.
func Example() {
	for _, lastSync := range []bool{true, false} {
		pl, err := allGather2(lastSync)
		if err != nil {
			fmt.Println("lower:", err)
			return
		}
		_, err = verify.Verify(pl)
		switch {
		case err == nil:
			fmt.Printf("%s with the last signal and wait: verified\n", pl.Name)
		case errors.Is(err, verify.ErrRace):
			fmt.Printf("%s without it: rejected, a race\n", pl.Name)
		default:
			fmt.Printf("%s without it: rejected: %v\n", pl.Name, err)
		}
	}
	// Output:
	// allgather_2 with the last signal and wait: verified
	// allgather_2 without it: rejected, a race
}
