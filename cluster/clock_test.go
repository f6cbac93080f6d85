package cluster

import (
	"math/rand/v2"
	"testing"
	"time"
)

// fakePings plays ping round trips on a fake clock: the controller sends
// at T, the ping takes there ns to reach the agent, whose clock reads
// T+there+offset, and the pong takes back ns to return.
func fakePings(offset int64, delays [][2]int64) []clockSample {
	t := int64(1_700_000_000) * int64(time.Second)
	var out []clockSample
	for _, d := range delays {
		out = append(out, clockSample{sent: t, remote: t + d[0] + offset, recv: t + d[0] + d[1]})
		t += int64(time.Second)
	}
	return out
}

func TestClockEstimate(t *testing.T) {
	ms, us := int64(time.Millisecond), int64(time.Microsecond)
	cases := []struct {
		name      string
		offset    int64
		delays    [][2]int64 // there, back
		want, unc int64
	}{
		{"same clock", 0, [][2]int64{{ms, ms}}, 0, ms},
		{"agent 5 s ahead", 5 * int64(time.Second), [][2]int64{{40 * us, 40 * us}}, 5 * int64(time.Second), 40 * us},
		{"agent 3 s behind", -3 * int64(time.Second), [][2]int64{{us, us}}, -3 * int64(time.Second), us},
		// One way slower: the estimate is off by half the difference,
		// within the bound.
		{"slow there", 2 * ms, [][2]int64{{3 * ms, ms}}, 2*ms + ms, 2 * ms},
		{"slow back", 2 * ms, [][2]int64{{ms, 5 * ms}}, 2*ms + (ms-5*ms)/2, 3 * ms},
		// The smallest round trip wins, wherever it comes.
		{"best of noisy", 7 * ms, [][2]int64{{9 * ms, ms}, {100 * us, 100 * us}, {ms, 20 * ms}}, 7 * ms, 100 * us},
		{"best first", -ms, [][2]int64{{10 * us, 30 * us}, {ms, ms}, {2 * ms, 2 * ms}}, -ms - 10*us, 20 * us},
		{"odd round trip", 0, [][2]int64{{1, 2}}, 0, 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var e clockEst
			for _, s := range fakePings(c.offset, c.delays) {
				if !e.add(s) {
					t.Fatalf("sample %+v refused", s)
				}
			}
			off, unc, ok := e.estimate()
			if !ok || off != c.want || unc != c.unc {
				t.Fatalf("estimate %d ± %d (ok %v), want %d ± %d", off, unc, ok, c.want, c.unc)
			}
			if d := off - c.offset; d > unc || -d > unc {
				t.Fatalf("estimate %d is %d from the true offset %d, beyond its bound %d", off, d, c.offset, unc)
			}
			if e.n != len(c.delays) {
				t.Fatalf("%d samples counted, want %d", e.n, len(c.delays))
			}
		})
	}
}

// TestClockEstimateBound: with random offsets and delays the true offset
// is always within the reported bound.
func TestClockEstimateBound(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		offset := r.Int64N(int64(time.Hour)) - int64(time.Hour)/2
		var delays [][2]int64
		for range 1 + r.IntN(8) {
			delays = append(delays, [2]int64{r.Int64N(int64(10 * time.Millisecond)), r.Int64N(int64(10 * time.Millisecond))})
		}
		var e clockEst
		for _, s := range fakePings(offset, delays) {
			e.add(s)
		}
		off, unc, ok := e.estimate()
		if d := off - offset; !ok || d > unc || -d > unc {
			t.Fatalf("offset %d, delays %v: estimate %d ± %d", offset, delays, off, unc)
		}
	}
}

func TestClockEstimateRefuses(t *testing.T) {
	var e clockEst
	if _, _, ok := e.estimate(); ok {
		t.Fatal("an estimate without samples")
	}
	if e.add(clockSample{sent: 10, remote: 5, recv: 9}) {
		t.Fatal("a pong that arrived before its ping was taken")
	}
	if _, _, ok := e.estimate(); ok {
		t.Fatal("an estimate from a refused sample")
	}
}

// TestClockDrift: the best samples of the start and of the end (after
// markEnd) say how far the offset moved; the session's offset is still
// the best sample overall.
func TestClockDrift(t *testing.T) {
	ms, us := int64(time.Millisecond), int64(time.Microsecond)
	cases := []struct {
		name         string
		start, end   int64 // true offsets
		startD, endD [][2]int64
		drift, bound int64
		offset       int64
		noEnd        bool // no drift to tell
	}{
		{"no drift", 2 * ms, 2 * ms, [][2]int64{{ms, ms}, {us, us}}, [][2]int64{{3 * us, 3 * us}}, 0, 4 * us, 2 * ms, false},
		{"3 ms ahead later", 0, 3 * ms, [][2]int64{{10 * us, 10 * us}}, [][2]int64{{5 * us, 5 * us}, {ms, ms}}, 3 * ms, 15 * us, 3 * ms, false},
		{"asymmetric end", 0, -ms, [][2]int64{{10 * us, 10 * us}}, [][2]int64{{20 * us, 40 * us}}, -ms - 10*us, 10*us + 30*us, 0, false},
		{"no end samples", 0, 0, [][2]int64{{us, us}}, nil, 0, 0, 0, true},
		{"no start samples", 0, 0, nil, [][2]int64{{us, us}}, 0, 0, 0, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var e clockEst
			for _, s := range fakePings(c.start, c.startD) {
				e.add(s)
			}
			e.markEnd()
			for _, s := range fakePings(c.end, c.endD) {
				s.sent, s.remote, s.recv = s.sent+int64(time.Hour), s.remote+int64(time.Hour), s.recv+int64(time.Hour)
				e.add(s)
			}
			d, b, over, ok := e.drift()
			if ok == c.noEnd {
				t.Fatalf("drift ok %v", ok)
			}
			if !ok {
				return
			}
			if d != c.drift || b != c.bound || over < int64(time.Hour)/2 {
				t.Fatalf("drift %d ± %d over %d, want %d ± %d", d, b, over, c.drift, c.bound)
			}
			if off, _, _ := e.estimate(); off != c.offset {
				t.Fatalf("offset %d, want %d (the best sample)", off, c.offset)
			}
		})
	}
}
