package progress

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
)

// fakeClock advances only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// term is a fake terminal: it keeps what was written and renders the
// current line the way a terminal would (\r returns to column 0).
type term struct {
	mu     sync.Mutex
	raw    bytes.Buffer
	writes int
}

func (t *term) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.writes++
	return t.raw.Write(p)
}

// screen is the text of the last line as it would be shown.
func (t *term) screen() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var line []rune
	col := 0
	for _, r := range t.raw.String() {
		if r == '\r' {
			col = 0
			continue
		}
		if col < len(line) {
			line[col] = r
		} else {
			line = append(line, r)
		}
		col++
	}
	return strings.TrimRight(string(line), " ")
}

func TestReporterLines(t *testing.T) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	tm := &term{}
	r := New(tm, Options{Mode: On, Refresh: -1, Now: clk.now})
	steps := []Step{{"1 KiB", 1}, {"1 MiB", 1}, {"64 MiB", 2}, {"256 MiB", 8}}
	r.Begin("allreduce", steps)
	r.Step(0)
	if got := tm.screen(); got != "allreduce 1 KiB (1/4)" {
		t.Errorf("first step: %q (no estimate before a step is done)", got)
	}
	clk.add(2 * time.Second)
	r.Step(1)
	// 2 s for weight 1; left: weight 1+2+8 = 11 -> 22 s.
	if got := tm.screen(); got != "allreduce 1 MiB (2/4) ~22 s left" {
		t.Errorf("second step: %q", got)
	}
	// Throttled: another update within the interval writes nothing.
	n := tm.writes
	clk.add(50 * time.Millisecond)
	r.Step(2)
	if tm.writes != n {
		t.Errorf("a Step 50 ms after the last write wrote (interval 100 ms)")
	}
	clk.add(4 * time.Second)
	r.Step(3)
	// 6.05 s for weight 4 (1.5125 s per unit); 8 units left: 12.1 s.
	if got := tm.screen(); got != "allreduce 256 MiB (4/4) ~12 s left" {
		t.Errorf("last step: %q", got)
	}
	// Clear leaves an empty line; the next write draws again.
	r.Clear()
	if got := tm.screen(); got != "" {
		t.Errorf("after Clear: %q", got)
	}
	r.End()
	if got := tm.screen(); got != "" {
		t.Errorf("after End: %q", got)
	}
	// A shorter line after a longer one leaves no tail.
	tm2 := &term{}
	r2 := New(tm2, Options{Mode: On, Refresh: -1, Now: clk.now, Interval: -1})
	r2.Begin("x", []Step{{Label: strings.Repeat("y", 30)}, {Label: "z"}})
	r2.Step(0)
	clk.add(time.Second)
	r2.Step(1)
	if got := tm2.screen(); got != "x z (2/2) ~1 s left" {
		t.Errorf("shorter line: %q", got)
	}
	r2.End()
}

func TestOffWritesNothing(t *testing.T) {
	for _, r := range []*Reporter{
		New(&term{}, Options{Mode: Off}),
		New(&term{}, Options{}), // Auto, not a file
		nil,
	} {
		if r.Enabled() {
			t.Fatalf("reporter %v enabled", r)
		}
		r.Begin("x", []Step{{"a", 1}})
		r.Step(0)
		r.Clear()
		r.End()
		if r != nil && r.w.(*term).writes != 0 {
			t.Errorf("an off reporter wrote %q", r.w.(*term).raw.String())
		}
	}
	// A regular file is not a terminal, whatever it is named.
	f, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := New(f, Options{})
	r.Begin("x", []Step{{"a", 1}})
	r.Step(0)
	r.End()
	if st, _ := f.Stat(); st.Size() != 0 || IsTerminal(f) {
		t.Errorf("wrote %d bytes to a regular file", st.Size())
	}
	// The environment forces Auto mode either way.
	t.Setenv(EnvProgress, "on")
	if !New(&term{}, Options{}).Enabled() {
		t.Error("CHORUS_PROGRESS=on did not turn it on")
	}
	t.Setenv(EnvProgress, "off")
	if New(f, Options{}).Enabled() || !New(f, Options{Mode: On}).Enabled() {
		t.Error("CHORUS_PROGRESS=off: Auto must be off, On stays on")
	}
}

// The refresh goroutine redraws during a long step and stops at End.
func TestRefreshLoop(t *testing.T) {
	defer leaktest.Check(t)
	tm := &term{}
	r := New(tm, Options{Mode: On, Refresh: time.Millisecond, Interval: -1})
	r.Begin("plan run", []Step{{"a", 1}, {"b", 1}})
	r.Step(0)
	deadline := time.Now().Add(10 * time.Second)
	for {
		tm.mu.Lock()
		n := tm.writes
		tm.mu.Unlock()
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no redraws in 10 s (%d writes)", n)
		}
		time.Sleep(time.Millisecond)
	}
	r.End()
	if got := tm.screen(); got != "" {
		t.Errorf("after End: %q", got)
	}
}

func TestFormat(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{{0, "0 s"}, {1400 * time.Millisecond, "1 s"}, {59 * time.Second, "59 s"}, {125 * time.Second, "2 min 5 s"}, {3 * time.Minute, "3 min"}, {754 * time.Second, "13 min"}, {3900 * time.Second, "1 h 5 min"}} {
		if got := FormatDuration(c.d); got != c.want {
			t.Errorf("FormatDuration(%v) = %q, want %q", c.d, got, c.want)
		}
	}
	for _, c := range []struct {
		b    int64
		want string
	}{{512, "512 B"}, {1024, "1 KiB"}, {16 << 20, "16 MiB"}, {3 << 29, "1.5 GiB"}} {
		if got := FormatBytes(c.b); got != c.want {
			t.Errorf("FormatBytes(%d) = %q, want %q", c.b, got, c.want)
		}
	}
	if w := SizeWeight(1<<20, 64<<20); w != 1 {
		t.Errorf("SizeWeight below the knee: %v", w)
	}
	if w := SizeWeight(256<<20, 64<<20); w != 4 {
		t.Errorf("SizeWeight above the knee: %v", w)
	}
	long := Line(strings.Repeat("t", 100), nil, -1, 0, false)
	if len([]rune(long)) != MaxWidth || !strings.HasSuffix(long, "...") {
		t.Errorf("long line %q not cut to %d", long, MaxWidth)
	}
}
