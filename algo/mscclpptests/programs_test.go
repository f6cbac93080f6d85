package mscclpptests_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/algo/mscclpptests"
	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/algo/run"
	"github.com/chorus-rt/chorus/algo/verify"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

var kinds = map[mscclpptests.Verdict]error{
	mscclpptests.Race:          verify.ErrRace,
	mscclpptests.Deadlock:      verify.ErrDeadlock,
	mscclpptests.UndefinedRead: verify.ErrUndefinedRead,
	mscclpptests.Unmatched:     verify.ErrUnmatched,
	mscclpptests.WrongResult:   verify.ErrWrongResult,
}

// full: CHORUS_MSCCLPP_FULL=1 adds every program's More rank counts.
var full = os.Getenv("CHORUS_MSCCLPP_FULL") == "1"

// ranks are the rank counts a run tests pr at.
func ranks(pr mscclpptests.Program) []int {
	if full {
		return append(slices.Clone(pr.Ranks), pr.More...)
	}
	return pr.Ranks
}

// Every program at every rank count it supports: it loads (JSON round
// trip), validates and gets its expected verdict. Under -race only the
// smallest rank count: the DSL, plan and verifier start no goroutines, so
// the race detector has nothing to check there, and the matrix is 10x
// slower.
func TestVerdicts(t *testing.T) {
	for _, pr := range mscclpptests.Programs() {
		rs := ranks(pr)
		if raceEnabled {
			rs = rs[:1]
		}
		for _, n := range rs {
			t.Run(fmt.Sprintf("%s/n%d", pr.Name, n), func(t *testing.T) {
				p := build(t, pr, n)
				rep, err := verify.Verify(p)
				if pr.Expect == mscclpptests.OK {
					if err != nil {
						t.Fatalf("want ok: %v", err)
					}
					if rep.Movement == nil {
						t.Fatalf("no data movement reported")
					}
					return
				}
				if !errors.Is(err, kinds[pr.Expect]) {
					t.Fatalf("want %s, got %v", pr.Expect, err)
				}
				// An output chunk nothing writes has no op to name: the
				// verdict names the rank (and the chunk, in its message).
				var e *verify.Error
				if !errors.As(err, &e) || e.Rank < 0 || (e.TB < 0 && pr.Expect != mscclpptests.WrongResult) {
					t.Fatalf("verdict names no op: %v", err)
				}
			})
		}
	}
}

func build(t *testing.T, pr mscclpptests.Program, n int) *plan.Plan {
	t.Helper()
	p, err := pr.Build(n)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	raw, err := p.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	q, err := plan.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, q) {
		t.Fatalf("JSON round trip changed the plan")
	}
	raw2, err := q.Marshal()
	if err != nil || string(raw2) != string(raw) {
		t.Fatalf("JSON round trip changed the bytes (%v)", err)
	}
	return q
}

// Every program that verifies runs on the CPU executor with no wrong
// element (checked against its collective, or against the data movement
// the verifier computed for collectives without a fixed result), at its
// smallest and largest tested rank count, at two message sizes (or the
// smallest sizes above them the plan's layout accepts). Under -race (about
// 10x slower): one size, at the largest rank count where the plan there
// has at most raceMaxTBs thread blocks in all, else (and for the large
// plans, those with More rank counts) at the smallest.
func TestCPUExecutor(t *testing.T) {
	leaktest.Check(t)
	byN := map[int][]mscclpptests.Program{}
	for _, pr := range mscclpptests.Programs() {
		if pr.Expect != mscclpptests.OK {
			continue
		}
		rs := ranks(pr)
		switch {
		case raceEnabled && (pr.More != nil || threadBlocks(build(t, pr, rs[len(rs)-1])) > raceMaxTBs):
			rs = rs[:1]
		case raceEnabled:
			rs = rs[len(rs)-1:]
		case len(rs) > 1:
			rs = []int{rs[0], rs[len(rs)-1]}
		}
		for _, n := range rs {
			byN[n] = append(byN[n], pr)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for n, prs := range byN {
		t.Run(fmt.Sprintf("n%d", n), func(t *testing.T) {
			s, err := session.NewThreaded(session.Options{NumWorkers: n})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				if err := s.Shutdown(); err != nil {
					t.Error(err)
				}
			}()
			for _, pr := range prs {
				p := build(t, pr, n)
				c, err := run.Load(ctx, s, p, 20*time.Second)
				if err != nil {
					t.Fatalf("%s: %v", pr.Name, err)
				}
				sizes := []int64{4 << 10, 96 << 10}
				if raceEnabled {
					sizes = sizes[:1]
				}
				for _, bytes := range sizes {
					inN, outN := fit(p, bytes)
					if inN == 0 && outN == 0 {
						t.Fatalf("%s: no message of %d bytes to 1 MiB fits the plan", pr.Name, bytes)
					}
					res, err := c.Bench(ctx, tensor.Float32, inN, outN, 2, 1)
					if err != nil {
						t.Fatalf("%s: %v", pr.Name, err)
					}
					if res.Wrong != 0 {
						t.Errorf("%s n%d %d bytes: %d wrong elements", pr.Name, n, bytes, res.Wrong)
					}
				}
				if err := c.Close(); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// raceMaxTBs bounds the plans TestCPUExecutor runs at their largest rank
// count under -race (the old programs have at most 56 thread blocks at 8
// ranks; the 2- and 4-instance all-to-alls have 100 to 224).
const raceMaxTBs = 64

func threadBlocks(p *plan.Plan) int {
	n := 0
	for _, g := range p.GPUs {
		n += len(g.ThreadBlocks)
	}
	return n
}

// fit returns the element counts of the first message of at least bytes
// (doubling, up to 1 MiB) that p's layout accepts: plans with hundreds of
// chunks per rank (32 instances) need more than 4 KiB.
func fit(p *plan.Plan, bytes int64) (in, out int64) {
	for b := bytes; b <= 1<<20; b *= 2 {
		if in, out = run.Counts(p, tensor.Float32, b); in != 0 || out != 0 {
			return in, out
		}
	}
	return 0, 0
}

// alltoallv_dynamic's template keys are fields this version does not know:
// the template is refused with an error naming them and where they are.
func TestUncoveredShapesRefused(t *testing.T) {
	var base *plan.Plan
	for _, pr := range mscclpptests.Programs() {
		if pr.Name == "single_node/allgather_nvls_zero_copy.py" {
			base = build(t, pr, 2)
		}
	}
	if base == nil {
		t.Fatal("no allgather_nvls_zero_copy program")
	}
	raw, err := base.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ old, new, want string }{
		{`"inplace"`, `"dynamic": true, "inplace"`, `unknown field "dynamic"`},
		{`"size": 1`, `"size": 1, "dynamic_index": "${src_chunk_index}"`, `unknown field "dynamic_index"`},
		{`"input_chunks"`, `"dynamic_input_chunks": 2, "input_chunks"`, `unknown field "dynamic_input_chunks"`},
	} {
		s := strings.Replace(string(raw), tc.old, tc.new, 1)
		if s == string(raw) {
			t.Fatalf("%s not in the plan", tc.old)
		}
		_, err := plan.Parse([]byte(s))
		if !errors.Is(err, plan.ErrFormat) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want a format error containing %q", tc.new, err, tc.want)
		}
	}
}

// The two NVLS allgathers built on chorus's reading of MSCCL++'s packet
// multicast (gstorepkt) and switch barrier run with 0 wrong elements at
// every rank count they are built at (TestCPUExecutor takes the smallest
// and largest), over repeated calls (the barrier's counters and the
// packets' flags carry over).
func TestSwitchProgramsEveryRankCount(t *testing.T) {
	leaktest.Check(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	found := 0
	for _, pr := range mscclpptests.Programs() {
		if pr.Name != "single_node/allgather_nvls_zero_copy_pkt.py" && pr.Name != "single_node/allgather_nvls_zero_copy_barrier.py" {
			continue
		}
		found++
		rs := pr.Ranks
		if raceEnabled {
			rs = rs[:1]
		}
		for _, n := range rs {
			p := build(t, pr, n)
			s, err := session.NewThreaded(session.Options{NumWorkers: n})
			if err != nil {
				t.Fatal(err)
			}
			c, err := run.Load(ctx, s, p, 20*time.Second)
			if err != nil {
				t.Fatalf("%s n%d: %v", pr.Name, n, err)
			}
			for _, bytes := range []int64{4 << 10, 96 << 10} {
				inN, outN := fit(p, bytes)
				res, err := c.Bench(ctx, tensor.Float32, inN, outN, 3, 1)
				if err != nil {
					t.Fatalf("%s n%d: %v", pr.Name, n, err)
				}
				if res.Wrong != 0 {
					t.Errorf("%s n%d %d bytes: %d wrong elements", pr.Name, n, bytes, res.Wrong)
				}
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if err := s.Shutdown(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if found != 2 {
		t.Fatalf("%d of the 2 programs found", found)
	}
}

// Plan.Traffic takes every op of every program that runs (packets, switch
// and port channels, pipelines, thread-block groups) at each of its rank
// counts; the ranks move bytes exactly when some op touches a buffer
// (the unit tests of signals, barriers and flushes move none).
func TestTraffic(t *testing.T) {
	for _, pr := range mscclpptests.Programs() {
		if pr.Expect != mscclpptests.OK {
			continue
		}
		for _, n := range pr.Ranks {
			t.Run(fmt.Sprintf("%s/n%d", pr.Name, n), func(t *testing.T) {
				p := build(t, pr, n)
				inN, outN := run.Counts(p, tensor.Float32, 1<<20)
				if inN == 0 && outN == 0 {
					t.Fatal("no size up to 1 MB fits")
				}
				data := false
				for g := range p.GPUs {
					for tb := range p.GPUs[g].ThreadBlocks {
						for op := range p.GPUs[g].ThreadBlocks[tb].Ops {
							acc, err := p.Access(g, tb, op)
							if err != nil {
								t.Fatal(err)
							}
							data = data || len(acc) > 0
						}
					}
				}
				var total int64
				for r := range n {
					tr, err := p.Traffic(r, 4*inN, 4*outN)
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
					if tr.LocalRead < 0 || tr.LocalWrite < 0 || tr.PeerRead < 0 || tr.PeerWrite < 0 {
						t.Errorf("rank %d: %+v", r, tr)
					}
					total += tr.Total()
				}
				if data != (total > 0) {
					t.Errorf("ops touch buffers: %v; bytes moved: %d", data, total)
				}
			})
		}
	}
}
