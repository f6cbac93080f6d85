package plot

import (
	"strings"
	"testing"
)

func TestTicks(t *testing.T) {
	bt := func(lo, hi float64) string {
		var out []string
		for _, t := range bytesTicks(lo, hi) {
			if t.Label != "" {
				out = append(out, t.Label)
			}
		}
		return strings.Join(out, " ")
	}
	dt := func(lo, hi float64, f func(float64) string) string {
		var out []string
		for _, t := range decadeTicks(f).Ticks(lo, hi) {
			if t.Label != "" {
				out = append(out, t.Label)
			}
		}
		return strings.Join(out, " ")
	}
	for _, c := range []struct{ got, want string }{
		// Labels start at the first power of two inside the range.
		{bt(1024/1.41, 4096*1.41), "1K 2K 4K 8K"},
		{bt(1024/1.41, (64<<20)*1.41), "1K 16K 256K 4M 64M"},
		{dt(1, 10, formatG), "1 2 5 10"},
		{dt(0.1, 1000, formatUs), "0.1 us 1 us 10 us 100 us 1 ms"},
		{dt(1, 1e12, formatUs), "1 us 100 us 10 ms 1 s 100 s 10000 s 1e+06 s"},
	} {
		if c.got != c.want {
			t.Errorf("labels %q, want %q", c.got, c.want)
		}
	}
	for _, r := range [][2]float64{{1, 1 << 40}, {3, 5000}, {1000, 1001}} {
		if n := len(strings.Fields(bt(r[0], r[1]))); n > 9 || n < 1 {
			t.Errorf("bytesTicks(%v, %v): %d labels", r[0], r[1], n)
		}
	}
	for _, c := range []struct {
		b    float64
		want string
	}{{512, "512"}, {1024, "1K"}, {3 << 20, "3M"}, {1 << 30, "1G"}, {1000, "1000"}} {
		if got := humanBytes(c.b); got != c.want {
			t.Errorf("humanBytes(%v) = %q, want %q", c.b, got, c.want)
		}
	}
}
