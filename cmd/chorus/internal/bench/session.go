package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/chorus-rt/chorus/internal/config"
	"github.com/chorus-rt/chorus/runtime/session"
)

// SessionConfig selects one session-latency measurement.
type SessionConfig struct {
	Session   string // "threaded" or "process"
	Transport string // "inproc" for threaded; "shm" or "stream" for process
	Workers   int
	Iters     int
	Warmup    int
	// Idle is how long the controller waits, untimed, before each round
	// (time.Sleep): 0 measures back-to-back rounds, where waiters poll;
	// a longer idle than the wait policy's polling budget measures the
	// round that has to wake parked workers (a controller that computed
	// between commands).
	Idle time.Duration
	// Process holds how to start worker processes (program, args).
	Process session.ProcessOptions
	// Open, when set, makes the session instead (multi-host sessions).
	Open func(ctx context.Context) (*session.Session, error)
}

// SessionResult is one row of `chorus bench session`.
type SessionResult struct {
	Bench     string  `json:"bench"`
	Session   string  `json:"session"`
	Transport string  `json:"transport"`
	Workers   int     `json:"workers"`
	IdleUs    float64 `json:"idle_us,omitempty"`
	// Wait is the threaded session's CHORUS_SESSION_WAIT ("auto" when
	// unset) and Procs GOMAXPROCS, which the auto policy depends on.
	Wait   string  `json:"wait,omitempty"`
	Procs  int     `json:"procs"`
	Iters  int     `json:"-"`
	P50us  float64 `json:"p50_us"`
	P99us  float64 `json:"p99_us"`
	Meanus float64 `json:"-"`
}

// Session measures a no-op CallPacked followed by a sync of every worker.
func Session(ctx context.Context, cfg SessionConfig) (SessionResult, error) {
	res := SessionResult{Bench: "session", Session: cfg.Session, Transport: cfg.Transport, Workers: cfg.Workers, Iters: cfg.Iters,
		IdleUs: float64(cfg.Idle) / float64(time.Microsecond), Procs: runtime.GOMAXPROCS(0)}
	if cfg.Session == "threaded" {
		res.Wait = config.Process().Get(config.SessionWait)
		if res.Wait == "" {
			res.Wait = "auto"
		}
	}
	var s *session.Session
	var err error
	switch {
	case cfg.Open != nil:
		if s, err = cfg.Open(ctx); err == nil {
			res.Workers = s.NumWorkers()
		}
	case cfg.Session == "threaded":
		s, err = session.NewThreaded(session.Options{NumWorkers: cfg.Workers})
	case cfg.Session == "process":
		po := cfg.Process
		po.NumWorkers = cfg.Workers
		po.Transport = cfg.Transport
		s, err = session.NewProcess(ctx, po)
	default:
		err = fmt.Errorf("unknown session kind %q", cfg.Session)
	}
	if err != nil {
		return res, err
	}
	defer s.Shutdown()
	f, err := s.GetGlobalFunc(ctx, "chorus.noop")
	if err != nil {
		return res, err
	}
	lat := make([]time.Duration, 0, cfg.Iters)
	for i := range cfg.Warmup + cfg.Iters {
		if cfg.Idle > 0 {
			time.Sleep(cfg.Idle)
		}
		t0 := time.Now()
		if err := s.CallPackedDiscard(f); err != nil {
			return res, err
		}
		if err := s.Sync(ctx); err != nil {
			return res, err
		}
		if i >= cfg.Warmup {
			lat = append(lat, time.Since(t0))
		}
	}
	if err := s.Shutdown(); err != nil {
		return res, err
	}
	st := summarize(lat, 1)
	res.P50us, res.P99us, res.Meanus = st.p50, st.p99, st.mean
	return res, nil
}

// WriteSessionTable prints results in the style of nccl-tests.
func WriteSessionTable(w io.Writer, rs []SessionResult) {
	fmt.Fprintf(w, "# chorus bench session: no-op CallPacked + sync of every worker\n")
	fmt.Fprintf(w, "#%9s %10s %6s %6s %8s %8s %8s %10s %10s %10s\n", "session", "transport", "wait", "procs", "idle(us)", "workers", "iters", "p50(us)", "p99(us)", "mean(us)")
	for _, r := range rs {
		wait := r.Wait
		if wait == "" {
			wait = "-"
		}
		fmt.Fprintf(w, " %9s %10s %6s %6d %8.0f %8d %8d %10.2f %10.2f %10.2f\n", r.Session, r.Transport, wait, r.Procs, r.IdleUs, r.Workers, r.Iters, r.P50us, r.P99us, r.Meanus)
	}
}

// WriteJSON prints one JSON object per line.
func WriteJSON[T any](w io.Writer, rs []T) error {
	enc := json.NewEncoder(w)
	for _, r := range rs {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	return nil
}
