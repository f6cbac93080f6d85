package gpuexec

import (
	"errors"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/algo/verify"
	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/tensor"
)

// racy drops every wait of a plan: the verifier rejects what is left.
func racy(t *testing.T, p *plan.Plan) *plan.Plan {
	raw, _ := p.Marshal()
	q, _ := plan.Parse(raw)
	for gi := range q.GPUs {
		for ti := range q.GPUs[gi].ThreadBlocks {
			tb := &q.GPUs[gi].ThreadBlocks[ti]
			var keep []plan.Op
			for _, op := range tb.Ops {
				if op.Name != plan.OpWait {
					keep = append(keep, op)
				}
			}
			tb.Ops = keep
		}
	}
	return q
}

func TestCheckPlanRefusals(t *testing.T) {
	oneshot := build(t, "allreduce_oneshot", 2)
	bad := racy(t, build(t, "allreduce_twoshot", 2))
	every := readPlan(t, "../plan/testdata/every_op_kind.json")
	cases := []struct {
		name  string
		p     *plan.Plan
		n     int
		force bool
		is    error
		msg   string
	}{
		{"ok", oneshot, 2, false, nil, ""},
		{"rank count", oneshot, 3, false, ccl.ErrBadArgs, "has 2 ranks, the communicator 3"},
		{"switch channel", every, every.NumRanks(), true, ErrUnsupported, "switch channel"},
		{"verifier", bad, 2, false, ErrRejected, "verifier rejects"},
		{"verifier forced", bad, 2, true, nil, ""},
		{"port ok", build(t, "allreduce_port", 3), 3, false, nil, ""},
		{"packets ok", build(t, "allreduce_packet", 4), 4, false, nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := CheckPlan(c.p, c.n, c.force)
			if c.is == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("got %v, want %v with %q", err, c.is, c.msg)
			}
		})
	}
	// The verifier's own error stays reachable.
	var ve *verify.Error
	if err := CheckPlan(bad, 2, false); !errors.As(err, &ve) {
		t.Errorf("no *verify.Error in %v", err)
	}
}

func TestCheckCall(t *testing.T) {
	oneshot := build(t, "allreduce_oneshot", 2)
	packet := build(t, "allreduce_packet", 2) // explicit reduce_op sum
	cases := []struct {
		name    string
		p       *plan.Plan
		dt      tensor.DType
		op      reduce.Op
		in, out int64
		is      error
		msg     string
	}{
		{"ok", oneshot, tensor.Float32, reduce.Sum, 4096, 4096, nil, ""},
		{"dtype", oneshot, tensor.Int32, reduce.Sum, 4096, 4096, ErrUnsupported, "dtype int32"},
		{"op", oneshot, tensor.Float32, reduce.Avg, 4096, 4096, ErrUnsupported, "reduce op avg"},
		{"size", oneshot, tensor.Float32, reduce.Sum, 4100, 4100, ccl.ErrBadArgs, "rank 0"},
		{"explicit op", packet, tensor.Float32, reduce.Max, 4096, 4096, ccl.ErrBadArgs, "reduces with sum, the call with max"},
		{"explicit op agrees", packet, tensor.BFloat16, reduce.Sum, 64, 64, nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			call, err := CheckCall(c.p, c.dt, c.op, c.in, c.out)
			if c.is == nil {
				if err != nil {
					t.Fatal(err)
				}
				if len(call.Layouts) != c.p.NumRanks() {
					t.Fatalf("%d layouts", len(call.Layouts))
				}
				return
			}
			if !errors.Is(err, c.is) || !strings.Contains(err.Error(), c.msg) {
				t.Fatalf("got %v, want %v with %q", err, c.is, c.msg)
			}
		})
	}
}

func TestPlanBuffersAndSizes(t *testing.T) {
	cases := []struct {
		algo      string
		ranks     int
		ipc       [3]bool
		in, out   int64
		want      [3]int64
		inWritten bool
	}{
		// one-shot: peers read the input; the output is private.
		{"allreduce_oneshot", 2, [3]bool{true, false, false}, 1024, 1024, [3]int64{1024, 0, 0}, false},
		// mesh all-gather: peers put into the output.
		{"allgather_mesh", 4, [3]bool{false, true, false}, 256, 1024, [3]int64{0, 1024, 0}, false},
		// packets: scratch holds packets, twice the data, in two halves
		// (one a call parity).
		{"allreduce_packet", 2, [3]bool{false, false, true}, 1024, 1024, [3]int64{0, 0, 4096}, false},
	}
	for _, c := range cases {
		t.Run(c.algo, func(t *testing.T) {
			p := build(t, c.algo, c.ranks)
			b, err := PlanBuffers(p)
			if err != nil {
				t.Fatal(err)
			}
			if b.IPC != c.ipc || b.InputWritten != c.inWritten {
				t.Fatalf("IPC %v input written %v, want %v %v", b.IPC, b.InputWritten, c.ipc, c.inWritten)
			}
			for r, cov := range b.OutputCovered {
				if !cov {
					t.Errorf("rank %d: output not covered", r)
				}
			}
			call, err := CheckCall(p, tensor.Float32, reduce.Sum, c.in, c.out)
			if err != nil {
				t.Fatal(err)
			}
			if s := CallSizes(p, b, call); s.Bytes != c.want {
				t.Errorf("sizes %v, want %v", s.Bytes, c.want)
			}
		})
	}
}

// A plan that leaves part of the output alone keeps the caller's values
// there: the staged output is preloaded.
func TestOutputCoverage(t *testing.T) {
	p := build(t, "allgather_mesh", 2)
	raw, _ := p.Marshal()
	q, _ := plan.Parse(raw)
	// Drop rank 1's put into rank 0's output.
	tb := &q.GPUs[1].ThreadBlocks[0]
	var keep []plan.Op
	for _, op := range tb.Ops {
		if op.Name != plan.OpPut {
			keep = append(keep, op)
		}
	}
	tb.Ops = keep
	b, err := PlanBuffers(q)
	if err != nil {
		t.Fatal(err)
	}
	if b.OutputCovered[0] || !b.OutputCovered[1] {
		t.Errorf("coverage %v, want [false true]", b.OutputCovered)
	}
}

func TestControlLayout(t *testing.T) {
	p := build(t, "allreduce_port", 3)
	c := ControlLayout(p)
	if c.Slots == 0 || c.NTickets != 2 {
		t.Fatalf("slots %d tickets %d", c.Slots, c.NTickets)
	}
	regions := []int64{c.BarStart, c.BarEnd, c.Ctl, c.FIFOHead, c.Tickets, c.Inbound, c.TBBar, c.Sems, c.GBar, c.Epochs, c.Total}
	for i := 1; i < len(regions); i++ {
		if regions[i] < regions[i-1] || regions[i]%64 != 0 {
			t.Fatalf("regions %v not ascending 64-byte aligned", regions)
		}
	}
	if c.Inbound+int64(c.Slots)*8 > c.TBBar {
		t.Errorf("inbound counters overlap the barriers: %+v", c)
	}
	if c.Epochs+int64(c.NTBs)*MaxGroup*8 > c.Total {
		t.Errorf("the blocks' call numbers pass the end: %+v", c)
	}
}

func TestOverlapAndAliasUnsafe(t *testing.T) {
	for _, c := range []struct {
		a    uint64
		an   int64
		b    uint64
		bn   int64
		want bool
	}{
		{100, 10, 100, 10, true},
		{100, 10, 109, 1, true},
		{100, 10, 110, 5, false},
		{110, 5, 100, 10, false},
		{100, 0, 100, 10, false},
		{96, 8, 100, 4, true},
	} {
		if got := Overlap(c.a, c.an, c.b, c.bn); got != c.want {
			t.Errorf("Overlap(%d+%d, %d+%d) = %v", c.a, c.an, c.b, c.bn, got)
		}
	}
	for _, c := range []struct {
		ipc     [3]bool
		inPlace bool
		want    bool
	}{
		{[3]bool{}, false, true},
		{[3]bool{}, true, false},
		{[3]bool{true, false, false}, false, false},
		{[3]bool{false, true, false}, false, false},
		{[3]bool{false, false, true}, false, true}, // scratch only: both direct
	} {
		if got := (Buffers{IPC: c.ipc}).AliasUnsafe(c.inPlace); got != c.want {
			t.Errorf("AliasUnsafe(ipc %v, in-place %v) = %v", c.ipc, c.inPlace, got)
		}
	}
	// Which library plans take send == recv (the GPU tests call them so):
	// those that stage the input or the output through IPC memory.
	for name, unsafe := range map[string]bool{"allreduce_oneshot": false, "allreduce_twoshot": false, "allreduce_ring": false,
		"allgather_ring": false, "allreduce_packet": true, "reducescatter_allpairs": true} {
		p := build(t, name, 3)
		b, err := PlanBuffers(p)
		if err != nil {
			t.Fatal(err)
		}
		if got := b.AliasUnsafe(p.InPlace); got != unsafe {
			t.Errorf("%s: AliasUnsafe = %v (buffers %+v)", name, got, b)
		}
	}
}

// The direct route: the caller's tensor stands in for the staged IPC
// buffer only where peers can reach all of it and nothing aliases.
func TestDirectProposal(t *testing.T) {
	p := build(t, "allreduce_twoshot", 2)
	inPlace := build(t, "allreduce_twoshot", 2)
	inPlace.InPlace = true
	ipcAt := func(off, room int64) Place { return Place{IPC: true, Seq: 3, Offset: off, Room: room} }
	const n = 1024
	both := Buffers{IPC: [3]bool{true, true, false}}
	s := Sizes{Bytes: [3]int64{n, n, 0}}
	cases := []struct {
		name    string
		p       *plan.Plan
		b       Buffers
		in, out Place
		overlap bool
		want    [2]bool
	}{
		{"both in IPC memory", p, both, ipcAt(0, n), ipcAt(0, 4*n), false, [2]bool{true, true}},
		{"neither in IPC memory", p, both, Place{}, Place{}, false, [2]bool{false, false}},
		{"only the output", p, both, Place{}, ipcAt(256, n), false, [2]bool{false, true}},
		{"buffer not staged: the kernel uses the tensor anyway", p, Buffers{IPC: [3]bool{false, true, false}}, ipcAt(0, n), ipcAt(0, n), false, [2]bool{false, true}},
		{"unaligned offset", p, both, ipcAt(8, n), ipcAt(0, n), false, [2]bool{false, true}},
		{"allocation ends before the bytes the kernel reaches", p, both, ipcAt(0, n-16), ipcAt(0, n), false, [2]bool{false, true}},
		{"send and recv overlap", p, both, ipcAt(0, n), ipcAt(0, n), true, [2]bool{false, false}},
		{"the plan writes its input", p, Buffers{IPC: [3]bool{true, true, false}, InputWritten: true}, ipcAt(0, n), ipcAt(0, n), false, [2]bool{false, true}},
		{"in place", inPlace, both, ipcAt(0, n), ipcAt(0, n), false, [2]bool{false, false}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := DirectProposal(c.p, c.b, s, c.in, c.out, n, n, c.overlap); got != c.want {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
	// A tensor smaller than the bytes the kernel addresses (another rank's
	// larger layout) never goes direct: the kernel would write past it.
	if got := DirectProposal(p, both, Sizes{Bytes: [3]int64{2 * n, 2 * n, 0}}, ipcAt(0, 8*n), ipcAt(0, 8*n), n, n, false); got != [2]bool{} {
		t.Errorf("tensor smaller than the buffer: got %v, want no direct route", got)
	}
}

// Every rank must propose a route, with the same allocation and offset,
// for it to be taken; the descriptor carries the proposal.
func TestAgreeDirect(t *testing.T) {
	mine := desc{direct: 3, inSeq: 5, inOff: 64, outSeq: 6}
	var b [descBytes]byte
	mine.encode(b[:])
	if got := decodeDesc(b[:]); got != mine {
		t.Fatalf("descriptor round trip: got %+v, want %+v", got, mine)
	}
	cases := []struct {
		name string
		peer desc
		want [2]bool
	}{
		{"same", mine, [2]bool{true, true}},
		{"peer stages its input", desc{direct: 2, outSeq: 6}, [2]bool{false, true}},
		{"input at another offset", desc{direct: 3, inSeq: 5, inOff: 128, outSeq: 6}, [2]bool{false, true}},
		{"output in another allocation", desc{direct: 3, inSeq: 5, inOff: 64, outSeq: 7}, [2]bool{true, false}},
		{"peer proposes nothing", desc{}, [2]bool{false, false}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := agreeDirect(mine, []desc{mine, c.peer}); got != c.want {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}

// TestArgsMirror: the Go kernel arguments (args) and runtime.cuh's Args
// have the same fields at the same offsets, so an edit of one side
// alone fails here instead of feeding the kernels shifted arguments.
func TestArgsMirror(t *testing.T) {
	src := runtimeSource
	start := strings.Index(src, "struct Args {")
	if start < 0 {
		t.Fatal("runtime.cuh has no struct Args")
	}
	body := src[start+len("struct Args {"):]
	body = body[:strings.Index(body, "};")]
	type field struct{ off, size int64 }
	var cf []field
	off := int64(0)
	for _, line := range strings.Split(body, "\n") {
		if i := strings.Index(line, "//"); i >= 0 {
			line = line[:i]
		}
		line = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(line), ";"))
		if line == "" {
			continue
		}
		parts := strings.Fields(line)
		if len(parts) != 2 || (parts[0] != "u64" && parts[0] != "i64") {
			t.Fatalf("runtime.cuh Args: unexpected field %q (want u64 or i64, arrays of MAX_RANKS)", line)
		}
		n := int64(8)
		for _, dim := range strings.Split(parts[1], "[")[1:] {
			d := strings.TrimSuffix(dim, "]")
			switch d {
			case "MAX_RANKS":
				n *= MaxRanks
			default:
				v, err := strconv.Atoi(d)
				if err != nil {
					t.Fatalf("runtime.cuh Args: dimension %q of %q", d, line)
				}
				n *= int64(v)
			}
		}
		cf = append(cf, field{off, n})
		off += n
	}
	var gf []field
	rt := reflect.TypeOf(args{})
	for i := range rt.NumField() {
		f := rt.Field(i)
		gf = append(gf, field{int64(f.Offset), int64(f.Type.Size())})
	}
	if int64(rt.Size()) != off {
		t.Errorf("args is %d bytes, runtime.cuh's Args %d", rt.Size(), off)
	}
	if !slices.Equal(cf, gf) {
		t.Errorf("fields (offset, size): runtime.cuh %v, Go %v", cf, gf)
	}
}
