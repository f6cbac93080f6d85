package shardload

import (
	"fmt"
	"io"
	"os"
	"time"
)

// Reporter receives loading progress. (A shared progress package may
// replace it; this interface is what Load needs.)
type Reporter interface {
	// Progress: done of total tensors loaded, doneBytes of totalBytes
	// (whole tensors' sizes in the checkpoint).
	Progress(done, total int, doneBytes, totalBytes int64)
	// Done: the load finished.
	Done()
}

// Terminal returns a reporter that rewrites one line on stderr ("loading
// 37/120 tensors, 1.2/4.0 GB") at most ten times a second, or nil when
// stderr is not a terminal (a character device: /dev/null counts, and
// gets the line harmlessly).
func Terminal() Reporter {
	fi, err := os.Stderr.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	return NewLine(os.Stderr)
}

// NewLine is the line reporter on w.
func NewLine(w io.Writer) Reporter { return &line{w: w} }

type line struct {
	w     io.Writer
	last  time.Time
	wrote bool
}

func (l *line) Progress(done, total int, doneBytes, totalBytes int64) {
	if now := time.Now(); done < total && now.Sub(l.last) < 100*time.Millisecond {
		return
	} else {
		l.last = now
	}
	fmt.Fprintf(l.w, "\rloading %d/%d tensors, %.1f/%.1f GB", done, total, float64(doneBytes)/1e9, float64(totalBytes)/1e9)
	l.wrote = true
}

func (l *line) Done() {
	if l.wrote {
		fmt.Fprintln(l.w)
	}
}
