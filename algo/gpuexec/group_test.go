package gpuexec

import (
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/algo/handplan"
	"github.com/chorus-rt/chorus/algo/library"
	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/ccl/ipc"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/tensor"
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

// TestCallShape: launch shapes for one GPU per rank, ranks sharing a
// GPU under MPS, and plans that cannot group.
func TestCallShape(t *testing.T) {
	h := GroupInput{Plan: "p", Blocks: 2, Threads: 512, Grouped: true, BlocksPerSM: 2, SmallBlocksPerSM: 2, SMs: 132, PerGPU: 1}
	wide := GroupInput{Plan: "p", Blocks: 4, Threads: 1024, Grouped: true, BlocksPerSM: 2, SmallBlocksPerSM: 4, SMs: 132, PerGPU: 1}
	with := func(base GroupInput, f func(*GroupInput)) GroupInput {
		in := base
		f(&in)
		return in
	}
	cases := []struct {
		name string
		in   GroupInput
		want Shape
		err  string
	}{
		{"1 KB: two warps", with(h, func(in *GroupInput) { in.OpBytes = 512 }), Shape{1, 64}, ""},
		{"1 MB op: one vector per thread", with(h, func(in *GroupInput) { in.OpBytes = 1 << 20 }), Shape{128, 512}, ""},
		{"64 MB op: resident limit", with(h, func(in *GroupInput) { in.OpBytes = 64 << 20; in.Blocks = 4 }), Shape{66, 512}, ""},
		{"MaxGroup", with(h, func(in *GroupInput) { in.OpBytes = 64 << 20; in.Blocks = 1 }), Shape{MaxGroup, 512}, ""},
		{"not groupable", with(h, func(in *GroupInput) { in.OpBytes = 64 << 20; in.Grouped = false }), Shape{1, 512}, ""},
		{"not groupable, small op", with(h, func(in *GroupInput) { in.OpBytes = 2048; in.Grouped = false }), Shape{1, 128}, ""},
		{"2 ranks under MPS", with(h, func(in *GroupInput) { in.OpBytes = 64 << 20; in.SharedSMs = 66; in.PerGPU = 2 }), Shape{33, 512}, ""},
		{"MPS at 10%", with(h, func(in *GroupInput) { in.OpBytes = 64 << 20; in.SMs = 13; in.SharedSMs = 66; in.PerGPU = 2 }), Shape{6, 512}, ""},
		{"too many thread blocks", with(h, func(in *GroupInput) { in.Blocks = 40; in.SMs = 13; in.SharedSMs = 16; in.PerGPU = 8 }), Shape{}, "only 26 can be resident"},
		{"warps: 101 vectors", with(wide, func(in *GroupInput) { in.OpBytes = 16*100 + 1 }), Shape{1, 128}, ""},
		{"packets: 8 data bytes a thread", with(wide, func(in *GroupInput) { in.OpBytes = 2048; in.LL = true }), Shape{1, 256}, ""},
		{"16 KB op: two blocks of 512", with(wide, func(in *GroupInput) { in.OpBytes = 16 << 10 }), Shape{2, 512}, ""},
		{"128 KB op: 16 blocks of 512", with(wide, func(in *GroupInput) { in.OpBytes = 128 << 10 }), Shape{16, 512}, ""},
		{"under MPS: a small block a multiprocessor of the share", with(wide, func(in *GroupInput) { in.OpBytes = 1 << 20; in.SharedSMs = 33; in.PerGPU = 4 }), Shape{8, 512}, ""},
		{"under MPS, one thread block: 33 of 512", with(wide, func(in *GroupInput) {
			in.OpBytes, in.Blocks, in.BlocksPerSM, in.SmallBlocksPerSM, in.SharedSMs, in.PerGPU = 512<<10, 1, 1, 2, 33, 4
		}), Shape{33, 512}, ""},
		{"under MPS, small op: one block", with(wide, func(in *GroupInput) { in.OpBytes = 4 << 10; in.SharedSMs = 33; in.PerGPU = 4 }), Shape{1, 256}, ""},
		{"under MPS, packets past the small blocks' room: whole blocks", with(wide, func(in *GroupInput) { in.OpBytes = 1 << 20; in.LL = true; in.SharedSMs = 33; in.PerGPU = 4 }), Shape{16, 1024}, ""},
		{"few threads: kept", with(wide, func(in *GroupInput) { in.OpBytes = 16; in.Threads = 32 }), Shape{1, 32}, ""},
		{"empty op", with(wide, func(in *GroupInput) { in.OpBytes = 0 }), Shape{1, minLaunchThreads}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := CallShape(c.in)
			if c.err != "" {
				if !errors.Is(err, ipc.ErrNotCoResident) || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("error %v, want ErrNotCoResident with %q", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("CallShape = %+v, %v; want %+v", got, err, c.want)
			}
			bps := c.in.BlocksPerSM
			if got.Threads < c.in.Threads {
				bps = c.in.SmallBlocksPerSM
			}
			sms := c.in.SMs
			if c.in.SharedSMs > 0 {
				sms = min(sms, c.in.SharedSMs)
			}
			if got.Group*c.in.Blocks > bps*sms {
				t.Errorf("grid %d x %d exceeds what is resident", got.Group, c.in.Blocks)
			}
			if got.Threads > c.in.Threads || got.Threads%32 != 0 && got.Threads != c.in.Threads {
				t.Errorf("threads %d: more than the kernel's %d or not whole warps", got.Threads, c.in.Threads)
			}
		})
	}
}

// TestCallSync: the call boundary each library plan gets (2, 4 and 8
// ranks, 1 and 2 instances), and its kernels' defines.
func TestCallSync(t *testing.T) {
	want := map[string]Sync{"allreduce_packet": SyncFlags, "allreduce_port": SyncBarriers}
	defines := map[Sync]string{
		SyncBarriers:   "#define START 1\n#define END_RELEASE 1\n#define ZERO_EARLY 0\n#define END_WAIT 1\n#define MONO 0\n",
		SyncPackets:    "#define START 0\n#define END_RELEASE 0\n#define ZERO_EARLY 0\n#define END_WAIT 1\n#define MONO 0\n",
		SyncHandshakes: "#define START 0\n#define END_RELEASE 1\n#define ZERO_EARLY 1\n#define END_WAIT 1\n#define MONO 0\n",
		SyncFlags:      "#define START 0\n#define END_RELEASE 0\n#define ZERO_EARLY 0\n#define END_WAIT 0\n#define MONO 0\n",
		SyncSignals:    "#define START 0\n#define END_RELEASE 1\n#define ZERO_EARLY 0\n#define END_WAIT 0\n#define MONO 1\n",
	}
	for _, name := range library.Names() {
		for _, n := range []int{2, 4, 8} {
			for _, inst := range []int{1, 2} {
				p, err := library.Build(name, n, library.Options{Instances: inst})
				if err != nil {
					t.Fatal(err)
				}
				w, ok := want[name]
				if !ok {
					w = SyncSignals // every other library plan starts and ends with a handshake
				}
				if got := CallSync(p); got != w {
					t.Errorf("%s %d ranks %d instances: CallSync %d, want %d", name, n, inst, got, w)
				}
				k, err := Generate(p, n-1, tensor.Float32, reduce.Sum)
				if err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(k.Source, defines[w]) || k.Res.Sync != w {
					t.Errorf("%s %d ranks: kernel lacks %q (Res.Sync %d)", name, n, defines[w], k.Res.Sync)
				}
			}
		}
	}
}

// TestCallSyncNeedsBarriers: plans one edit away from the library's that
// must keep the start barrier (or lose the packet or flag boundary).
func TestCallSyncNeedsBarriers(t *testing.T) {
	ops := func(p *plan.Plan, r, tb int) *[]plan.Op { return &p.GPUs[r].ThreadBlocks[tb].Ops }
	drop := func(p *plan.Plan, r, tb int, name plan.OpName) bool {
		o := ops(p, r, tb)
		for i, op := range *o {
			if op.Name == name {
				*o = append((*o)[:i], (*o)[i+1:]...)
				return true
			}
		}
		return false
	}
	for _, c := range []struct {
		algo string
		what string
		edit func(p *plan.Plan) bool
		want Sync
	}{
		{"allreduce_packet", "in place", func(p *plan.Plan) bool { p.InPlace = true; return true }, SyncBarriers},
		// one scratch for every call: a peer one call ahead would store
		// into packets this rank has not read yet; the end barrier stays.
		{"allreduce_packet", "one scratch", func(p *plan.Plan) bool { p.UseDoubleScratchBuffer = false; return true }, SyncPackets},
		// rank 1 stores nothing into rank 0, so rank 0's progress does
		// not hold rank 1 back: it could run two calls ahead.
		{"allreduce_packet", "stores one way", func(p *plan.Plan) bool {
			o := ops(p, 1, 0)
			var keep []plan.Op
			for _, op := range *o {
				if op.Name != plan.OpPutPackets && op.Name != plan.OpReduceSendPackets {
					keep = append(keep, op)
				}
			}
			changed := len(keep) < len(*o)
			*o = keep
			return changed
		}, SyncPackets},
		{"allreduce_packet", "a plain put instead of ppkt", func(p *plan.Plan) bool {
			for i, op := range *ops(p, 0, 0) {
				if op.Name == plan.OpPutPackets {
					(*ops(p, 0, 0))[i].Name = plan.OpPut
					return true
				}
			}
			return false
		}, SyncBarriers},
		// the closing handshake moved before the reduce: the peer's input
		// is read after the last signal to it, so the end barrier stays.
		{"allreduce_oneshot", "no closing handshake after the reads", func(p *plan.Plan) bool {
			moved := 0
			for r := range p.GPUs {
				o := ops(p, r, 0)
				n := len(*o)
				if n < 8 || (*o)[n-3].Name != plan.OpSignal || (*o)[n-2].Name != plan.OpWait || (*o)[1].Name != plan.OpWait {
					return false
				}
				sig, wait := (*o)[n-3], (*o)[n-2]
				rest := append([]plan.Op{}, (*o)[2:n-3]...)
				*o = append(append(append([]plan.Op{}, (*o)[:2]...), sig, wait), append(rest, (*o)[n-1])...)
				moved++
			}
			return moved == len(p.GPUs)
		}, SyncHandshakes},
		// a relaxed wait does not acquire what the peer's closing signal
		// publishes.
		{"allreduce_twoshot", "a relaxed closing wait", func(p *plan.Plan) bool {
			o := ops(p, 0, 0)
			for i := len(*o) - 1; i >= 0; i-- {
				if (*o)[i].Name == plan.OpWait {
					(*o)[i].Name = plan.OpRelaxedWait
					return true
				}
			}
			return false
		}, SyncHandshakes},
		// tb 0 reads the peer's input with no wait before it.
		{"allreduce_oneshot", "no first wait", func(p *plan.Plan) bool { return drop(p, 0, 0, plan.OpWait) }, SyncBarriers},
		// a signal nobody waits for could land after the counters were zeroed.
		{"allreduce_twoshot", "one more signal", func(p *plan.Plan) bool {
			o := ops(p, 0, 0)
			*o = append(*o, (*o)[0])
			return (*o)[0].Name == plan.OpSignal
		}, SyncBarriers},
		{"allreduce_twoshot", "no first wait", func(p *plan.Plan) bool {
			// the put into the peer's scratch then precedes every wait;
			// the matching signal goes too, so the counts stay equal
			return drop(p, 0, 0, plan.OpWait) && drop(p, 1, 0, plan.OpSignal)
		}, SyncBarriers},
	} {
		p, err := library.Build(c.algo, 2, library.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !c.edit(p) {
			t.Fatalf("%s: %s: the edit found nothing to change", c.algo, c.what)
		}
		if got := CallSync(p); got != c.want {
			t.Errorf("%s with %s: CallSync %d, want %d", c.algo, c.what, got, c.want)
		}
	}
	// With two instances tb 1 has channels of its own: without its first
	// wait nothing tells it that the peer started.
	p, err := library.Build("allreduce_oneshot", 2, library.Options{Instances: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !drop(p, 0, 1, plan.OpWait) {
		t.Fatal("allreduce_oneshot, 2 instances: no wait in tb 1")
	}
	if got := CallSync(p); got != SyncBarriers {
		t.Errorf("allreduce_oneshot, 2 instances, no first wait in tb 1: CallSync %d, want %d", got, SyncBarriers)
	}
}

// A nop makes a group's CUDA blocks meet only where a data op before it
// and one after it touch the same chunks of one buffer of one rank, one
// of them writing (in-place plans: input and output are one buffer).
func TestNopMeetings(t *testing.T) {
	// allreduce_oneshot in two instances (4 chunks), rank 0, thread
	// block 0: signal, wait, nop, rre (r0.in[0:2] r1.in[0:2] ->
	// r0.out[0:2]), nop, signal, wait, nop.
	copyOp := func(src, dst plan.BufRef) plan.Op {
		return plan.Op{Name: plan.OpCopy, Src: []plan.BufRef{src}, Dst: []plan.BufRef{dst}}
	}
	for _, c := range []struct {
		name    string
		first   *plan.Op // inserted before the opening signal
		inPlace bool
		want    []int // indices of the nops that meet
	}{
		{"library plan", nil, false, nil},
		{"write, then a write of the same chunk", ptr(copyOp(plan.Local(plan.Input, 0, 1), plan.Local(plan.Output, 0, 1))), false, []int{3}},
		{"write of another chunk", ptr(copyOp(plan.Local(plan.Input, 0, 1), plan.Local(plan.Output, 2, 1))), false, nil},
		{"reads only", ptr(copyOp(plan.Local(plan.Input, 0, 1), plan.Local(plan.Scratch, 0, 1))), false, nil},
		{"in place: input and output are one buffer", ptr(copyOp(plan.Local(plan.Input, 1, 1), plan.Local(plan.Output, 1, 1))), true, []int{3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, err := library.Build("allreduce_oneshot", 2, library.Options{Instances: 2})
			if err != nil {
				t.Fatal(err)
			}
			p.InPlace = c.inPlace
			ops := &p.GPUs[0].ThreadBlocks[0].Ops
			if c.first != nil {
				*ops = append([]plan.Op{*c.first}, *ops...)
			}
			meet, err := NopMeetings(p, 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			var got []int
			for i, op := range *ops {
				if op.Name != plan.OpNop && meet[i] {
					t.Errorf("op %d (%s) marked", i, op.Name)
				}
				if meet[i] {
					got = append(got, i)
				}
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("nops that meet: %v, want %v (ops %v)", got, c.want, opNames(*ops))
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func opNames(ops []plan.Op) []string {
	var s []string
	for _, op := range ops {
		s = append(s, op.Name.String())
	}
	return s
}

// TestCallShapeProperties: over random inputs, a shape CallShape returns
// is resident (blocks x group within occupancy x multiprocessors for
// its threads), has whole warps or the kernel's threads, at most the
// kernel's threads and at least minLaunchThreads of them (or all), a
// group within MaxGroup, and one thread for at most one vector where
// the room allows (an op of at most smallThreads vectors: one block).
func TestCallShapeProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20000 {
		threads := []int{32, 64, 256, 512, 1024}[rng.IntN(5)]
		in := GroupInput{
			Plan: "p", Blocks: 1 + rng.IntN(16), Threads: threads, Grouped: rng.IntN(4) != 0, LL: rng.IntN(2) == 0,
			OpBytes: rng.Int64N(64 << 20), BlocksPerSM: 1 + rng.IntN(2), SMs: 1 + rng.IntN(132), PerGPU: 1,
		}
		in.SmallBlocksPerSM = in.BlocksPerSM * max(1, threads/min(smallThreads, threads))
		if rng.IntN(2) == 0 {
			in.SharedSMs, in.PerGPU = 1+rng.IntN(66), 2+rng.IntN(3)
		}
		sh, err := CallShape(in)
		sms := in.SMs
		if in.SharedSMs > 0 {
			sms = min(sms, in.SharedSMs)
		}
		if in.Blocks > in.BlocksPerSM*sms {
			if !errors.Is(err, ipc.ErrNotCoResident) {
				t.Fatalf("case %d %+v: %+v, %v; want ErrNotCoResident", i, in, sh, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("case %d %+v: %v", i, in, err)
		}
		bps := in.BlocksPerSM
		if sh.Threads < in.Threads {
			bps = in.SmallBlocksPerSM
		}
		switch {
		case sh.Group < 1 || sh.Group > MaxGroup:
			t.Fatalf("case %d %+v: group %d", i, in, sh.Group)
		case sh.Group*in.Blocks > bps*sms:
			t.Fatalf("case %d %+v: %+v not resident (%d a multiprocessor, %d multiprocessors)", i, in, sh, bps, sms)
		case sh.Threads > in.Threads || (sh.Threads != in.Threads && (sh.Threads%32 != 0 || sh.Threads < minLaunchThreads)):
			t.Fatalf("case %d %+v: threads %d", i, in, sh.Threads)
		case !in.Grouped && sh.Group != 1:
			t.Fatalf("case %d %+v: a plan that cannot group got group %d", i, in, sh.Group)
		case in.SharedSMs > 0 && !in.LL && sh.Group > 1 && sh.Group*in.Blocks > sms:
			t.Fatalf("case %d %+v: %+v: more than a block a multiprocessor of the share", i, in, sh)
		}
	}
}
