package progress

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/chorus-rt/chorus/internal/config"
)

// Mode says whether a Reporter writes.
type Mode int

const (
	// Auto writes when the writer is a terminal (IsTerminal), unless the
	// environment says otherwise (EnvProgress).
	Auto Mode = iota
	On        // always (tests, or a user who asked)
	Off       // never
)

// EnvProgress, in Auto mode, forces progress off ("0", "off") or on ("1",
// "on"); anything else is the terminal check.
const EnvProgress = "CHORUS_PROGRESS"

// Options of a Reporter; the zero value is Auto with the default rates.
type Options struct {
	Mode Mode
	// Interval is the least time between two writes (0: 100 ms, so at
	// most 10 writes a second however fast steps go).
	Interval time.Duration
	// Refresh redraws the line this often while a step runs, so that
	// the time left counts down during a long step (0: 1 s; < 0: only
	// on Step). The redraw runs on a goroutine that End stops.
	Refresh time.Duration
	// Now is the clock (nil: time.Now); tests give a fake one.
	Now func() time.Time
}

// Step is one unit of work. Weight is its expected cost relative to the
// others (<= 0 counts as 1): see Reporter for how it is used.
type Step struct {
	Label  string
	Weight float64
}

// Reporter draws the progress line of one task. A nil *Reporter, or one
// that is off, does nothing. Methods may be called from any goroutine.
//
// Time left: after step i starts, the steps before it are done; their
// elapsed time divided by their total weight is the time per unit of
// weight, and the time left is that rate times the weight of the steps
// not done yet (the current one included), less the time the current
// step has run already (never below zero). With equal weights this is
// "the average step so far, times the steps left"; callers weight by
// size where a step's cost grows with it (see SizeWeight). Nothing is
// estimated before the first step is done.
type Reporter struct {
	w        io.Writer
	on       bool
	interval time.Duration
	refresh  time.Duration
	now      func() time.Time

	mu        sync.Mutex
	task      string
	steps     []Step
	cur       int       // current step, -1 before the first
	begin     time.Time // when the task began
	stepStart time.Time // when the current step began
	doneW     float64   // weight of the steps before cur
	doneAt    time.Duration
	shown     int  // runes of the line now on the terminal (0: none)
	broken    bool // a write failed: write no more
	lastWrite time.Time
	stop      chan struct{}
	exited    chan struct{}
}

// New returns a Reporter writing to w (normally os.Stderr).
func New(w io.Writer, opt Options) *Reporter {
	r := &Reporter{w: w, interval: opt.Interval, refresh: opt.Refresh, now: opt.Now, cur: -1}
	if r.interval == 0 {
		r.interval = 100 * time.Millisecond
	}
	if r.refresh == 0 {
		r.refresh = time.Second
	}
	if r.now == nil {
		r.now = time.Now
	}
	switch opt.Mode {
	case On:
		r.on = true
	case Auto:
		switch strings.ToLower(config.Process().Get(config.Progress)) {
		case "0", "off", "false", "no":
		case "1", "on", "true", "yes":
			r.on = true
		default:
			r.on = IsTerminal(w)
		}
	}
	return r
}

// IsTerminal reports whether w is a file on a character device (a
// terminal; /dev/null too, where writing is harmless). Standard library
// only: no ioctl.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || f == nil {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// Enabled reports whether r writes anything.
func (r *Reporter) Enabled() bool { return r != nil && r.on }

// Begin starts a task of the given steps (replacing any earlier one).
func (r *Reporter) Begin(task string, steps []Step) {
	if !r.Enabled() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.task, r.steps, r.cur = task, steps, -1
	r.begin = r.now()
	r.doneW, r.doneAt = 0, 0
	if r.refresh > 0 && r.stop == nil {
		r.stop, r.exited = make(chan struct{}), make(chan struct{})
		go r.loop(r.stop, r.exited)
	}
}

// loop redraws while a task runs; End closes stop and waits for exited.
func (r *Reporter) loop(stop <-chan struct{}, exited chan<- struct{}) {
	defer close(exited)
	t := time.NewTicker(r.refresh)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			r.mu.Lock()
			if r.cur >= 0 {
				r.draw(false)
			}
			r.mu.Unlock()
		}
	}
}

// Step says that step i (0-based) starts: steps 0..i-1 are done.
func (r *Reporter) Step(i int) {
	if !r.Enabled() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if i < 0 || i >= len(r.steps) {
		return
	}
	now := r.now()
	r.doneW = 0
	for _, s := range r.steps[:i] {
		r.doneW += weight(s)
	}
	r.doneAt = now.Sub(r.begin)
	r.cur, r.stepStart = i, now
	r.draw(false)
}

// Clear erases the line now, so that other output (a table row on the
// same terminal) starts at the left margin; the next Step or refresh
// draws it again.
func (r *Reporter) Clear() {
	if !r.Enabled() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.erase()
}

// End erases the line and stops the refresh goroutine. Call it when the
// task ends, failed or not (defer).
func (r *Reporter) End() {
	if !r.Enabled() {
		return
	}
	r.mu.Lock()
	stop, exited := r.stop, r.exited
	r.stop, r.exited = nil, nil
	r.erase()
	r.cur, r.steps = -1, nil
	r.mu.Unlock()
	if stop != nil {
		close(stop)
		<-exited
	}
}

func weight(s Step) float64 {
	if s.Weight > 0 {
		return s.Weight
	}
	return 1
}

// Left is the estimated time left when step cur (of steps) has run for
// inStep, the steps before it took doneAt in all; ok is false before the
// first step is done.
func Left(steps []Step, cur int, doneAt, inStep time.Duration) (time.Duration, bool) {
	if cur <= 0 || cur > len(steps) {
		return 0, false
	}
	var doneW, leftW float64
	for i, s := range steps {
		if i < cur {
			doneW += weight(s)
		} else {
			leftW += weight(s)
		}
	}
	perW := float64(doneAt) / doneW
	return max(0, time.Duration(perW*leftW)-inStep), true
}

// MaxWidth bounds the line (runes) so that it never wraps on an 80-column
// terminal: a wrapped line cannot be rewritten with a carriage return.
const MaxWidth = 79

// Line is the text for step cur: "TASK LABEL (i/n) ~T left".
func Line(task string, steps []Step, cur int, left time.Duration, ok bool) string {
	var b strings.Builder
	b.WriteString(task)
	if cur >= 0 && cur < len(steps) {
		if l := steps[cur].Label; l != "" {
			b.WriteString(" " + l)
		}
		fmt.Fprintf(&b, " (%d/%d)", cur+1, len(steps))
	}
	if ok {
		b.WriteString(" ~" + FormatDuration(left) + " left")
	}
	s := b.String()
	if utf8.RuneCountInString(s) > MaxWidth {
		s = string([]rune(s)[:MaxWidth-3]) + "..."
	}
	return s
}

// draw writes the line unless the last write was less than the interval
// ago (force ignores the interval). Called with mu held.
func (r *Reporter) draw(force bool) {
	now := r.now()
	if r.broken || (!force && r.shown > 0 && now.Sub(r.lastWrite) < r.interval) {
		return
	}
	left, ok := Left(r.steps, r.cur, r.doneAt, now.Sub(r.stepStart))
	line := Line(r.task, r.steps, r.cur, left, ok)
	n := utf8.RuneCountInString(line)
	pad := ""
	if r.shown > n {
		pad = strings.Repeat(" ", r.shown-n)
	}
	// A carriage return and padding rather than terminal escapes: works
	// on any terminal, and the line never wraps (MaxWidth).
	if _, err := io.WriteString(r.w, "\r"+line+pad); err != nil {
		r.broken = true // a terminal that fails writes gets no more of them
		return
	}
	r.shown = max(n, 1)
	r.lastWrite = now
}

// erase blanks the line (mu held).
func (r *Reporter) erase() {
	if r.shown == 0 || r.broken {
		return
	}
	_, _ = io.WriteString(r.w, "\r"+strings.Repeat(" ", r.shown)+"\r")
	r.shown = 0
}

// FormatDuration rounds for a human: "8 s", "2 min 5 s", "1 h 4 min".
func FormatDuration(d time.Duration) string {
	s := int64((d + time.Second/2) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%d s", s)
	case s < 3600:
		if s%60 == 0 || s >= 600 {
			return fmt.Sprintf("%d min", (s+30)/60)
		}
		return fmt.Sprintf("%d min %d s", s/60, s%60)
	}
	return fmt.Sprintf("%d h %d min", s/3600, (s%3600)/60)
}

// SizeWeight is the weight of a benchmark step at size bytes for loops
// that choose their iteration counts so that every size takes about the
// same time until the count reaches its floor (cmd/chorus/internal/bench's itersFor,
// chorus plan run's planItersFor), past which the time grows with the
// size: 1 below knee bytes, growing linearly above it.
func SizeWeight(bytes, knee int64) float64 {
	if knee <= 0 || bytes <= knee {
		return 1
	}
	return float64(bytes) / float64(knee)
}

// FormatBytes: 512 B, 4 KiB, 16 MiB, 1.5 GiB.
func FormatBytes(b int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	v, i := float64(b), 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	if v == float64(int64(v)) {
		return fmt.Sprintf("%d %s", int64(v), units[i])
	}
	return fmt.Sprintf("%.1f %s", v, units[i])
}
