package dsl

import (
	"errors"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/algo/plan"
)

func base(ranks int, proto plan.Protocol) *Program {
	return NewProgram(Config{Name: "t", Collective: plan.AllReduce, Ranks: ranks, Protocol: proto})
}

// Every argument check fires with a message that names what is wrong, and
// the error reaches Lower.
func TestArgumentChecks(t *testing.T) {
	in := func(p *Program, r, i int) Chunk { return p.Rank(r).Input().Chunk(i, 1) }
	out := func(p *Program, r, i int) Chunk { return p.Rank(r).Output().Chunk(i, 1) }
	tests := []struct {
		name  string
		cfg   *Config // nil: 2 ranks, Simple
		build func(p *Program)
		want  string
	}{
		{"empty name", &Config{Collective: plan.AllReduce, Ranks: 2}, nil, "NewProgram: empty name"},
		{"no ranks", &Config{Name: "t", Collective: plan.AllReduce}, nil, "0 ranks (want at least 1)"},
		{"bad protocol", &Config{Name: "t", Collective: plan.AllReduce, Ranks: 2, Protocol: 9}, nil, "invalid protocol"},
		{"threads", &Config{Name: "t", Collective: plan.AllReduce, Ranks: 2, ThreadsPerBlock: 2048}, nil, "2048 threads per block"},
		{"instances", &Config{Name: "t", Collective: plan.AllReduce, Ranks: 2, Instances: -1}, nil, "-1 instances"},
		{"message sizes", &Config{Name: "t", Collective: plan.AllReduce, Ranks: 2, MinMessageSize: 10, MaxMessageSize: 5}, nil, "min message size 10 > max message size 5"},
		{"no sizes", &Config{Name: "t", Collective: "custom", Ranks: 2}, nil, `collective "custom" has no default buffer sizes`},
		{"rank out of range", nil, func(p *Program) { p.Rank(2) }, "Rank: rank 2 out of range (program has 2 ranks)"},
		{"chunk outside buffer", nil, func(p *Program) { p.Rank(0).Input().Chunk(1, 2) }, "dsl: rank 0: Chunk: in chunk range [1:3) outside the buffer's 2 chunks"},
		{"scratch size", nil, func(p *Program) { p.Rank(1).NewScratch(0) }, "rank 1: NewScratch: size 0"},
		{"channel src", nil, func(p *Program) { p.MemoryChannel(0, 5) }, "MemoryChannel: source rank 5 out of range"},
		{"channel dst", nil, func(p *Program) { p.PortChannel(-1, 0) }, "PortChannel: destination rank -1 out of range"},
		{"channel self", nil, func(p *Program) { p.MemoryChannel(1, 1) }, "rank 1: MemoryChannel: channel from rank 1 to itself"},
		{"put src rank", nil, func(p *Program) { p.MemoryChannel(1, 0).Put(out(p, 1, 0), in(p, 1, 0), TB(0)) },
			"rank 0 tb 0: memory put: source chunk rank 1 does not match the channel's source rank 0"},
		{"put dst rank", nil, func(p *Program) { p.MemoryChannel(1, 0).Put(out(p, 0, 0), in(p, 0, 0), TB(3)) },
			"rank 0 tb 3: memory put: destination chunk rank 0 does not match the channel's destination rank 1"},
		{"put sizes", nil, func(p *Program) {
			p.MemoryChannel(1, 0).Put(p.Rank(1).Output().Chunk(0, 2), in(p, 0, 0), TB(0))
		}, "source chunk size 1 does not match destination chunk size 2"},
		{"nil blocks", nil, func(p *Program) { p.MemoryChannel(1, 0).Put(out(p, 1, 0), in(p, 0, 0), nil) },
			"memory put: needs a thread block (dsl.TB) or a thread-block group, got nil"},
		{"nil group", nil, func(p *Program) { var g *TBGroup; p.Rank(0).Copy(out(p, 0, 0), in(p, 0, 0), g) },
			"copy: needs a thread block (dsl.TB) or a thread-block group, got a nil group"},
		{"negative tb", nil, func(p *Program) { p.Rank(0).Copy(out(p, 0, 0), in(p, 0, 0), TB(-1)) },
			"rank 0: copy: thread block -1 negative"},
		{"port put on group", nil, func(p *Program) { p.PortChannel(1, 0).Put(out(p, 1, 0), in(p, 0, 0), p.TBGroup(0, 1)) },
			"port put: runs on a single thread block, not a thread-block group (blocks [0 1])"},
		{"signal on group", nil, func(p *Program) { p.MemoryChannel(1, 0).Signal(p.TBGroup(0, 1), SyncBoth) },
			"memory signal: runs on a single thread block"},
		{"bad sync", nil, func(p *Program) { p.MemoryChannel(1, 0).Wait(TB(0), 7) }, "memory wait: invalid data sync SyncType(7)"},
		{"group twice", nil, func(p *Program) { p.TBGroup(1, 1) }, "TBGroup: thread block 1 listed twice"},
		{"group empty", nil, func(p *Program) { p.TBGroup() }, "TBGroup: empty thread-block group"},
		{"packets need LL", nil, func(p *Program) {
			p.MemoryChannel(1, 0).PutPackets(p.Rank(1).NewScratch(1).Chunk(0, 1), in(p, 0, 0), TB(0))
		}, "memory put_packets: packet operation needs the LL protocol (program uses Simple)"},
		{"packets to scratch", &Config{Name: "t", Collective: plan.AllReduce, Ranks: 2, Protocol: plan.LL}, func(p *Program) {
			p.PortChannel(1, 0).PutPackets(out(p, 1, 0), in(p, 0, 0), TB(0))
		}, "port put_packets: destination chunk rank 1 out[0:1) must be in a scratch buffer"},
		{"read_put_packets source", &Config{Name: "t", Collective: plan.AllReduce, Ranks: 2, Protocol: plan.LL}, func(p *Program) {
			p.MemoryChannel(1, 0).ReadPutPackets(p.Rank(1).NewScratch(1).Chunk(0, 1), in(p, 0, 0), TB(0))
		}, "memory read_put_packets: source chunk rank 0 in[0:1) must be in a scratch buffer"},
		{"get dst rank", nil, func(p *Program) { p.MemoryChannel(1, 0).Get(out(p, 1, 0), in(p, 1, 0), TB(0)) },
			"memory get: destination chunk rank 1 does not match the channel's source rank 0"},
		{"get src rank", nil, func(p *Program) { p.MemoryChannel(1, 0).Get(out(p, 0, 0), in(p, 0, 1), TB(0)) },
			"memory get: source chunk rank 0 does not match the channel's destination rank 1"},
		{"reduce no remote", nil, func(p *Program) { p.MemoryChannel(1, 0).Reduce(out(p, 0, 0), in(p, 0, 0), nil, Sum, TB(0)) },
			"memory reduce: no remote source chunks"},
		{"reduce remote rank", nil, func(p *Program) {
			p.MemoryChannel(1, 0).Reduce(out(p, 0, 0), in(p, 0, 0), []Chunk{in(p, 0, 1)}, Sum, TB(0))
		}, "remote source chunk 0 rank 0 does not match the channel's destination rank 1"},
		{"reduce remote size", nil, func(p *Program) {
			p.MemoryChannel(1, 0).Reduce(out(p, 0, 0), in(p, 0, 0), []Chunk{p.Rank(1).Input().Chunk(0, 2)}, Sum, TB(0))
		}, "remote source chunk 0 size 2 does not match local source chunk size 1"},
		{"reduce local dst", nil, func(p *Program) {
			p.MemoryChannel(1, 0).Reduce(p.Rank(0).Output().Chunk(0, 2), in(p, 0, 0), []Chunk{in(p, 1, 0)}, Sum, TB(0))
		}, "local source chunk size 1 does not match local destination chunk size 2"},
		{"reduce op", nil, func(p *Program) { p.Rank(0).Reduce(out(p, 0, 0), []Chunk{in(p, 0, 0), in(p, 0, 1)}, 9, TB(0)) },
			"reduce: invalid reduce op"},
		{"local reduce one source", nil, func(p *Program) { p.Rank(0).Reduce(out(p, 0, 0), []Chunk{in(p, 0, 0)}, Sum, TB(0)) },
			"rank 0 tb 0: reduce: 1 source chunks (want at least 2)"},
		{"local reduce other rank", nil, func(p *Program) {
			p.Rank(0).Reduce(out(p, 0, 0), []Chunk{in(p, 0, 0), in(p, 1, 0)}, Sum, TB(0))
		}, "reduce: source[1] chunk rank 1 is not rank 0"},
		{"copy sizes", nil, func(p *Program) { p.Rank(0).Copy(p.Rank(0).Output().Chunk(0, 2), in(p, 0, 0), TB(0)) },
			"copy: source chunk size 1 does not match destination chunk size 2"},
		{"hand-made chunk", nil, func(p *Program) {
			p.Rank(0).Copy(out(p, 0, 0), Chunk{Rank: 0, Buffer: Input, Index: 5, Size: 1}, TB(0))
		},
			"copy: source chunk rank 0 in[5:6) outside rank 0's 2 in chunks"},
		{"chunk without buffer", nil, func(p *Program) { p.Rank(0).Copy(out(p, 0, 0), Chunk{Rank: 0, Size: 1}, TB(0)) },
			"copy: source chunk has no buffer type"},
		{"chunk rank", nil, func(p *Program) { p.Rank(0).Copy(out(p, 0, 0), Chunk{Rank: 4, Buffer: Input, Size: 1}, TB(0)) },
			"copy: source chunk on rank 4 out of range"},
		{"unpack from scratch", &Config{Name: "t", Collective: plan.AllReduce, Ranks: 2, Protocol: plan.LL}, func(p *Program) {
			p.Rank(0).UnpackPackets(out(p, 0, 0), in(p, 0, 0), TB(0))
		}, "unpack_packets: source chunk rank 0 in[0:1) must be in a scratch buffer"},
		{"barrier twice", nil, func(p *Program) { p.Rank(0).Barrier(0, 1, 1) }, "rank 0 tb 1: barrier: thread block 1 listed twice"},
		{"barrier empty", nil, func(p *Program) { p.Rank(0).Barrier() }, "barrier: no thread blocks"},
		{"semaphore", nil, func(p *Program) { p.Rank(1).Semaphore(-2) }, "rank 1: Semaphore: initial value -2 negative"},
		{"semaphore on group", nil, func(p *Program) { p.Rank(1).Semaphore(0).Acquire(p.TBGroup(0, 1), SyncNone) },
			"sem_acquire: runs on a single thread block"},
		{"switch rank", nil, func(p *Program) { p.SwitchChannel([]int{0, 2}, Input) }, "SwitchChannel: rank 2 out of range"},
		{"switch twice", nil, func(p *Program) { p.SwitchChannel([]int{0, 0}, Input) }, "SwitchChannel: rank 0 listed twice"},
		{"switch buffer", nil, func(p *Program) { p.SwitchChannel([]int{0, 1}, 0) }, "SwitchChannel: invalid buffer type"},
		{"switch member", &Config{Name: "t", Collective: plan.AllReduce, Ranks: 3}, func(p *Program) { p.SwitchChannel([]int{0, 1}, Input).At(2) },
			"rank 2: SwitchChannel.At: rank 2 is not in the switch channel's group [0 1]"},
		{"switch size", nil, func(p *Program) { p.SwitchChannel([]int{0, 1}, Input).At(0).Reduce(out(p, 0, 0), 0, 2, Sum, TB(0)) },
			"switch reduce: destination chunk size 1 does not match the size 2"},
		{"switch range", nil, func(p *Program) { p.SwitchChannel([]int{0, 1}, Input).At(0).Broadcast(in(p, 0, 0), 2, 1, TB(0)) },
			"switch broadcast: in range [2:3) beyond rank 0's 2 in chunks"},
		{"switch chunk rank", nil, func(p *Program) { p.SwitchChannel([]int{0, 1}, Input).At(0).Reduce(out(p, 1, 0), 0, 1, Sum, TB(0)) },
			"switch reduce: destination chunk rank 1 is not the executing rank 0"},
		{"switch on bad group", nil, func(p *Program) {
			p.SwitchChannel([]int{0, 1}, Input).At(0).Reduce(out(p, 0, 0), 0, 1, Sum, p.TBGroup(0, 0))
		}, "TBGroup"},
		{"nested pipeline", nil, func(p *Program) { p.Pipeline(16, 1, func() { p.Pipeline(16, 1, func() {}) }) },
			"Pipeline: nested pipeline"},
		{"pipeline unit", nil, func(p *Program) { p.Pipeline(0, 1, func() {}) }, "Pipeline: unit size 0, 1 chunks"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p *Program
			if tc.cfg != nil {
				p = NewProgram(*tc.cfg)
			} else {
				p = base(2, plan.Simple)
			}
			if tc.build != nil {
				tc.build(p)
			}
			err := p.Err()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid")
			}
			var e *Error
			if !errors.As(err, &e) {
				t.Errorf("error is not an *Error")
			}
			pl, lerr := p.Lower()
			if pl != nil || lerr == nil || !strings.Contains(lerr.Error(), tc.want) {
				t.Errorf("Lower: %v, %v; want the error", pl, lerr)
			}
		})
	}
}

// A failed call adds nothing, so one mistake gives one error.
func TestOneErrorPerMistake(t *testing.T) {
	p := base(2, plan.Simple)
	bad := p.Rank(0).Input().Chunk(7, 1)
	p.MemoryChannel(1, 0).Put(p.Rank(1).Output().Chunk(0, 1), bad, TB(0))
	p.Rank(0).Copy(p.Rank(0).Output().Chunk(0, 1), bad, TB(0))
	err := p.Err()
	if n := len(err.(interface{ Unwrap() []error }).Unwrap()); n != 1 {
		t.Fatalf("%d errors, want 1: %v", n, err)
	}
	var e *Error
	if !errors.As(err, &e) || e.Rank != 0 || e.Op != "Chunk" {
		t.Errorf("error %+v", e)
	}
}

func TestErrorLimit(t *testing.T) {
	p := base(2, plan.Simple)
	for range maxErrors + 5 {
		p.Rank(9)
	}
	if err := p.Err(); !strings.Contains(err.Error(), "and 5 more problems") {
		t.Errorf("error %v", err)
	}
}

// Zero and nil DSL objects are inert: calls on them do nothing and never
// panic (a program built from them reports its real errors elsewhere).
func TestNilObjectsDoNotPanic(t *testing.T) {
	p := base(2, plan.Simple)
	var m *MemoryChannel
	var pc *PortChannel
	var sw *SwitchChannel
	var r *Rank
	var s *Semaphore
	c := p.Rank(0).Input().Chunk(0, 1)
	m.Put(c, c, TB(0))
	m.Get(c, c, TB(0))
	m.Reduce(c, c, []Chunk{c}, Sum, TB(0))
	m.Signal(TB(0), SyncNone)
	pc.PutWithSignal(c, c, TB(0))
	pc.Flush(TB(0), SyncNone)
	sw.At(0).Reduce(c, 0, 1, Sum, TB(0))
	SwitchView{}.Broadcast(c, 0, 1, TB(0))
	r.Copy(c, c, TB(0))
	r.Barrier(0)
	r.Input().Chunk(0, 1)
	r.NewScratch(1).Chunk(0, 1)
	Buffer{}.Chunk(0, 1)
	s.Acquire(TB(0), SyncNone)
	if m.Src() != -1 || pc.Dst() != -1 || sw.Ranks() != nil || (*TBGroup)(nil).Blocks() != nil {
		t.Error("nil accessors")
	}
	if err := p.Err(); err != nil {
		t.Errorf("errors from inert objects: %v", err)
	}
	if _, err := p.Lower(); err != nil {
		t.Error(err)
	}
}
