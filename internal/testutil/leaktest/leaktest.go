package leaktest

import (
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"
)

// Check records the goroutines running now and registers a cleanup that
// fails the test if, after waiting up to 5 s for stragglers to exit, new
// goroutines remain. The wait is a bound, not a measurement.
func Check(t testing.TB) {
	t.Helper()
	before := stacks()
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		var extra []string
		for {
			extra = extra[:0]
			for id, st := range stacks() {
				if _, ok := before[id]; !ok && !ignorable(st) {
					extra = append(extra, st)
				}
			}
			if len(extra) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if len(extra) > 0 {
			sort.Strings(extra)
			t.Errorf("leaked %d goroutine(s):\n%s", len(extra), strings.Join(extra, "\n\n"))
		}
	})
}

// stacks maps goroutine id line ("goroutine 12") to its stack.
func stacks() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for _, g := range strings.Split(string(buf), "\n\n") {
		head, _, _ := strings.Cut(g, " [")
		out[head] = g
	}
	return out
}

func ignorable(st string) bool {
	for _, s := range []string{
		"testing.(*T).Run", "testing.tRunner.func1", "testing.(*M).", "signal.signal_recv",
		"os/signal.loop", "runtime.ensureSigM", "testing.runFuzzing",
	} {
		if strings.Contains(st, s) && !strings.Contains(st, "chorus-rt/chorus/") {
			return true
		}
	}
	return false
}
