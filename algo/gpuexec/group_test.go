package gpuexec

import (
	"errors"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/algo/handplan"
	"github.com/chorus-rt/chorus/algo/library"
	"github.com/chorus-rt/chorus/ccl/ipc"
)

// TestGroupable: every library plan without port channels groups; the
// port-channel plan does not (its proxy counts signals itself).
func TestGroupable(t *testing.T) {
	for _, name := range library.Names() {
		for _, n := range []int{2, 4, 8} {
			for _, inst := range []int{1, 2} {
				p, err := library.Build(name, n, library.Options{Instances: inst})
				if err != nil {
					t.Fatal(err)
				}
				want := name != "allreduce_port"
				if got := Groupable(p); got != want {
					t.Errorf("%s %d ranks %d instances: Groupable %v, want %v", name, n, inst, got, want)
				}
			}
		}
	}
	p, err := handplan.Build(handplan.Names()[0], 2, handplan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	Groupable(p) // any answer; it must not fail on hand-built plans
}

// TestGroupSize: grid sizing for one GPU per rank, ranks sharing a GPU
// under MPS, an active thread percentage, plans that cannot group, and
// the refusal when a plan's thread blocks alone cannot be resident.
func TestGroupSize(t *testing.T) {
	h := GroupInput{Plan: "p", Blocks: 2, Threads: 512, Grouped: true, BlocksPerSM: 2, SMs: 132, PerGPU: 1}
	with := func(f func(*GroupInput)) GroupInput {
		in := h
		f(&in)
		return in
	}
	cases := []struct {
		name string
		in   GroupInput
		want int
		err  string
	}{
		{"1 KB", with(func(in *GroupInput) { in.OpBytes = 512 }), 1, ""},
		{"1 MB op: one vector per thread", with(func(in *GroupInput) { in.OpBytes = 1 << 20 }), 128, ""},
		{"64 MB op: resident limit", with(func(in *GroupInput) { in.OpBytes = 64 << 20; in.Blocks = 4 }), 66, ""},
		{"MaxGroup", with(func(in *GroupInput) { in.OpBytes = 64 << 20; in.Blocks = 1 }), MaxGroup, ""},
		{"not groupable", with(func(in *GroupInput) { in.OpBytes = 64 << 20; in.Grouped = false }), 1, ""},
		{"2 ranks under MPS", with(func(in *GroupInput) { in.OpBytes = 64 << 20; in.SharedSMs = 66; in.PerGPU = 2 }), 66, ""},
		{"MPS at 10%", with(func(in *GroupInput) { in.OpBytes = 64 << 20; in.SMs = 13; in.SharedSMs = 66; in.PerGPU = 2 }), 13, ""},
		{"too many thread blocks", with(func(in *GroupInput) { in.Blocks = 40; in.SMs = 13; in.SharedSMs = 16; in.PerGPU = 8 }), 0, "only 26 can be resident"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g, err := GroupSize(c.in)
			if c.err != "" {
				if !errors.Is(err, ipc.ErrNotCoResident) || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want ErrNotCoResident with %q", err, c.err)
				}
				return
			}
			if err != nil || g != c.want {
				t.Fatalf("GroupSize = %d, %v; want %d", g, err, c.want)
			}
			if g*c.in.Blocks > c.in.BlocksPerSM*c.in.SMs {
				t.Errorf("grid %d x %d exceeds what is resident", g, c.in.Blocks)
			}
		})
	}
}
