package bench

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/chorus-rt/chorus/cmd/chorus/internal/progress"
	"github.com/chorus-rt/chorus/tensor"
)

// screen is a fake terminal: the last line as shown (\r returns to the
// left margin) and everything written.
type screen struct {
	mu   sync.Mutex
	all  strings.Builder
	line []rune
	col  int
}

func (s *screen) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.all.Write(p)
	for _, r := range string(p) {
		if r == '\r' {
			s.col = 0
			continue
		}
		if s.col < len(s.line) {
			s.line[s.col] = r
		} else {
			s.line = append(s.line, r)
		}
		s.col++
	}
	return len(p), nil
}

func (s *screen) shown() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.TrimRight(string(s.line), " ")
}

// A sweep shows each step (size, round, i/n) on the progress line, clears
// it before every row it emits, and leaves nothing at the end.
func TestCollectiveProgress(t *testing.T) {
	scr := &screen{}
	prog := progress.New(scr, progress.Options{Mode: progress.On, Interval: -1, Refresh: -1})
	cfg := CollectiveConfig{Bench: "allreduce", Backend: "cpu", Session: "threaded", Workers: 2, DType: tensor.Float32,
		MinBytes: 1024, MaxBytes: 4096, Step: 4, Iters: 5, Warmup: 1, Rounds: 2, Progress: prog}
	rows := 0
	err := Collective(context.Background(), cfg, func(r CollectiveResult) {
		rows++
		if got := scr.shown(); got != "" {
			t.Errorf("row %d emitted over the progress line %q", rows, got)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if rows != 2 {
		t.Fatalf("%d rows, want 2", rows)
	}
	all := scr.all.String()
	for _, want := range []string{"allreduce 1 KiB round 1/2 (1/4)", "allreduce 4 KiB round 1/2 (2/4)", "allreduce 1 KiB round 2/2 (3/4)", "allreduce 4 KiB round 2/2 (4/4)", " left"} {
		if !strings.Contains(all, want) {
			t.Errorf("progress output lacks %q: %q", want, all)
		}
	}
	if got := scr.shown(); got != "" {
		t.Errorf("line left after the sweep: %q", got)
	}
}
