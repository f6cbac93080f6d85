package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/cluster"
	"github.com/chorus-rt/chorus/cmd/chorus/internal/bench"
	"github.com/chorus-rt/chorus/net/link"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

func init() {
	// For `chorus cluster check --fault`: a call that waits until told.
	registry.MustRegisterTyped("chorus.cluster.sleep_ms", func(env registry.Env, ms int) {
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-env.Context().Done():
		}
	})
}

const clusterUsage = `Usage: chorus cluster <command> [flags]

A controller of a multi-host session: it listens, waits for --nodes agents
(chorus node --connect ...) and then:

  check           run the cross-host suite (every command, collectives,
                  mismatches); with --fault, wait for a host to be lost
  bench allreduce|allgather|reducescatter|broadcast
                  collective sweeps across the hosts (nccl-tests style)
  bench session   round trip of a no-op call + sync across the hosts
  bench stream    a plain TCP or TLS 1.3 stream between two hosts (--serve on
                  one, --connect on the other): what the link carries at all
`

// clusterFlags are the controller flags every cluster command shares.
type clusterFlags struct {
	listen    *string
	nodes     *int
	groups    *int
	heartbeat *time.Duration
	deadline  *time.Duration
	timeout   *time.Duration
	files     link.Files
}

func addClusterFlags(fs *flag.FlagSet) *clusterFlags {
	env, _ := fromEnv(func(string) string { return "" })
	c := &clusterFlags{
		listen:    fs.String("listen", "127.0.0.1:29400", "address to listen on (loopback unless told otherwise)"),
		nodes:     fs.Int("nodes", 2, "node agents to wait for"),
		groups:    fs.Int("groups", 0, "worker groups (0: 1)"),
		heartbeat: fs.Duration("heartbeat", time.Second, "heartbeat interval"),
		deadline:  fs.Duration("deadline", 3*time.Second, "a host silent this long is lost"),
		timeout:   fs.Duration("start-timeout", 120*time.Second, "how long to wait for the agents"),
		files:     env.Files,
	}
	credFlags(fs, &c.files)
	return c
}

func (c *clusterFlags) open(errOut io.Writer) func(ctx context.Context) (*session.Session, error) {
	return func(ctx context.Context) (*session.Session, error) {
		sec, err := c.files.Load()
		if err != nil {
			return nil, err
		}
		l, err := cluster.Listen(cluster.Options{Listen: *c.listen, Nodes: *c.nodes, NumGroups: *c.groups, Security: sec,
			Heartbeat: *c.heartbeat, Deadline: *c.deadline, StartTimeout: *c.timeout,
			Log: func(s string) { fmt.Fprintln(errOut, s) }})
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(errOut, "chorus cluster: listening on %s for %d node agents\n", l.Addr(), *c.nodes)
		return l.Accept(ctx)
	}
}

func cmdCluster(ctx context.Context, args []string, out, errOut io.Writer) error {
	if len(args) == 0 {
		return usageError{"cluster: which command? check or bench (chorus cluster --help)"}
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(out, clusterUsage)
		return nil
	}
	switch args[0] {
	case "check":
		return clusterCheck(ctx, args[1:], out, errOut)
	case "bench":
		if len(args) < 2 {
			return usageError{"cluster bench: which benchmark? allreduce, allgather, reducescatter, broadcast, session or stream (chorus cluster bench --help)"}
		}
		if args[1] == "-h" || args[1] == "--help" || args[1] == "help" {
			fmt.Fprint(out, clusterUsage)
			return flag.ErrHelp
		}
		if args[1] == "session" {
			return clusterBenchSession(ctx, args[2:], out, errOut)
		}
		if args[1] == "stream" {
			return clusterBenchStream(ctx, args[2:], out, errOut)
		}
		if bench.IsCollective(args[1]) {
			return clusterBenchCollective(ctx, args[1], args[2:], out, errOut)
		}
		return usageError{fmt.Sprintf("cluster bench: unknown benchmark %q: want allreduce, allgather, reducescatter, broadcast, session or stream", args[1])}
	}
	return usageError{fmt.Sprintf("cluster: unknown command %q: want check or bench (chorus cluster --help)", args[0])}
}

func clusterCheck(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("cluster check", "chorus cluster check --listen ADDR --nodes N (--token-file F | --ca ...) [--fault]", out)
	cf := addClusterFlags(fs)
	fault := fs.Bool("fault", false, "after the suite, wait for a host to be lost (the caller injects the fault after FAULT-READY)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	s, err := cf.open(errOut)(ctx)
	if err != nil {
		return err
	}
	defer s.Shutdown()
	if err := checkSuite(ctx, s, out); err != nil {
		return fmt.Errorf("cluster check: %w", err)
	}
	if *fault {
		f, err := s.GetGlobalFunc(ctx, "chorus.cluster.sleep_ms")
		if err != nil {
			return err
		}
		if err := s.CallPackedDiscard(f, 600_000); err != nil {
			return err
		}
		fmt.Fprintln(out, "FAULT-READY")
		err = s.Sync(ctx)
		at := time.Now()
		if !errors.Is(err, cluster.ErrHostLost) && !errors.Is(err, session.ErrWorkerLost) {
			return fmt.Errorf("cluster check: waiting for a lost host: %v", err)
		}
		fmt.Fprintf(out, "LOST at %d: %v\n", at.UnixNano(), err)
		_ = s.Shutdown()
		return nil
	}
	if err := s.Shutdown(); err != nil {
		return err
	}
	fmt.Fprintln(out, "PASS")
	return nil
}

// checkSuite runs every command and the collectives across the hosts.
func checkSuite(ctx context.Context, s *session.Session, out io.Writer) error {
	n := s.NumWorkers()
	step := func(name string, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		fmt.Fprintf(out, "ok   %s\n", name)
		return nil
	}
	get := func(name string) (*session.DRef, error) { return s.GetGlobalFunc(ctx, name) }
	wid, err := get("chorus.worker_id")
	if err != nil {
		return err
	}
	r, err := s.CallPacked(wid)
	if err != nil {
		return err
	}
	for w := range n {
		v, err := s.DebugGetFromRemote(ctx, r, w)
		if err != nil {
			return err
		}
		if v != int64(w) {
			return fmt.Errorf("worker %d says it is %v", w, v)
		}
	}
	if err := step(fmt.Sprintf("worker ids 0-%d, host-major", n-1), nil); err != nil {
		return err
	}
	empty, err := get("chorus.empty")
	if err != nil {
		return err
	}
	buf, err := s.CallPacked(empty, tensor.Shape{1 << 16}, tensor.Float32, nil, false, false)
	if err != nil {
		return err
	}
	host := tensor.MustNew(tensor.Float32, tensor.Shape{1 << 16})
	tensor.Fill(host, 3.5)
	back := tensor.MustNew(tensor.Float32, tensor.Shape{1 << 16})
	err = s.CopyToWorker0(host, buf)
	if err == nil {
		err = s.CopyFromWorker0(ctx, back, buf)
	}
	if err == nil {
		err = tensor.Equal(host, back)
	}
	if err := step("CopyToWorker0 / CopyFromWorker0", err); err != nil {
		return err
	}
	reg, _ := s.NewRegister()
	err = s.DebugSetRegister(reg, "last", n-1)
	if err == nil {
		var v any
		if v, err = s.DebugGetFromRemote(ctx, reg, n-1); err == nil && v != "last" {
			err = fmt.Errorf("got %v", v)
		}
	}
	if err := step(fmt.Sprintf("DebugSetRegister / DebugGetFromRemote on worker %d", n-1), err); err != nil {
		return err
	}
	if err := step("InitCCL cpu", s.InitCCL(ctx, "cpu", 30*time.Second)); err != nil {
		return err
	}
	ar, err := get("chorus.allreduce")
	if err != nil {
		return err
	}
	for _, count := range []int64{1, 1000, 1 << 18, 1 << 22} {
		x, err := s.CallPacked(empty, tensor.Shape{count}, tensor.Float32, nil, false, false)
		if err != nil {
			return err
		}
		for w := range n {
			t := tensor.MustNew(tensor.Float32, tensor.Shape{count})
			tensor.Fill(t, float64(w+1))
			if err := s.DebugSetRegister(x, t, w); err != nil {
				return err
			}
		}
		if err := s.CallPackedDiscard(ar, x, "sum", false, x); err != nil {
			return err
		}
		if err := s.Sync(ctx); err != nil {
			return err
		}
		want := float64(n*(n+1)) / 2
		for w := range n {
			v, err := s.DebugGetFromRemote(ctx, x, w)
			if err != nil {
				return err
			}
			d, _ := tensor.ToFloat64(v.(*tensor.Tensor))
			if d[0] != want || d[count-1] != want {
				return fmt.Errorf("allreduce of %d floats: worker %d has %v, want %v", count, w, d[0], want)
			}
		}
		x.Release()
		if err := step(fmt.Sprintf("allreduce sum of %d float32 on %d workers", count, n), nil); err != nil {
			return err
		}
	}
	odd, _ := s.CallPacked(empty, tensor.Shape{4}, tensor.Float32, nil, false, false)
	if err := s.DebugSetRegister(odd, tensor.MustNew(tensor.Float32, tensor.Shape{5}), n-1); err != nil {
		return err
	}
	s.CallPackedDiscard(ar, odd, "sum", false, odd)
	if err := s.Sync(ctx); !errors.Is(err, ccl.ErrMismatch) {
		return fmt.Errorf("a count mismatch on worker %d: %v, want ccl.ErrMismatch", n-1, err)
	}
	if err := step("mismatched allreduce fails every worker", nil); err != nil {
		return err
	}
	bar, _ := get("chorus.barrier")
	s.CallPackedDiscard(bar, false)
	return step("barrier after the mismatch", s.Sync(ctx))
}

func clusterBenchCollective(ctx context.Context, name string, args []string, out, errOut io.Writer) error {
	fs := newFlags("cluster bench "+name, "chorus cluster bench "+name+" --listen ADDR --nodes N [--min 1K] [--max 256M] [--json]", out)
	cf := addClusterFlags(fs)
	dtype := fs.String("dtype", "float32", "element type")
	minS := fs.String("min", "1K", "smallest size")
	maxS := fs.String("max", "256M", "largest size")
	step := fs.Int64("step", 4, "size multiplier between rows")
	iters := fs.Int("iters", 0, "timed iterations per size (0: by size)")
	iterCap := fs.Int("iters-cap", 500, "with --iters 0: at most this many per size")
	asJSON := fs.Bool("json", false, "JSON lines")
	pf := addPlotFlags(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := pf.prepare(commandLine(append([]string{"cluster", "bench", name}, args...)...), errOut); err != nil {
		return err
	}
	cmd := "cluster bench " + name
	dt, err := parseNumericDType(cmd, "dtype", *dtype)
	if err != nil {
		return err
	}
	lo, err := parseSizeFlag(cmd, "min", *minS)
	if err != nil {
		return err
	}
	hi, err := parseSizeFlag(cmd, "max", *maxS)
	if err != nil {
		return err
	}
	if err := checkSweep(cmd, lo, hi, *step); err != nil {
		return err
	}
	if *cf.nodes < 1 {
		return badFlag(cmd, "nodes", *cf.nodes, "want 1 or more")
	}
	cfg := bench.CollectiveConfig{Bench: name, Backend: "cpu", Session: fmt.Sprintf("remote-%dnodes", *cf.nodes), DType: dt,
		MinBytes: lo, MaxBytes: hi, Step: *step, Iters: *iters, IterCap: *iterCap, Open: cf.open(errOut), Progress: newProgress(errOut)}
	first := true
	err = bench.Collective(ctx, cfg, func(r bench.CollectiveResult) {
		pf.add(r)
		if *asJSON {
			_ = bench.WriteJSON(out, []bench.CollectiveResult{r})
			return
		}
		if first {
			cfg.Workers = r.Workers
			bench.CollectiveHeader(out, cfg)
			first = false
		}
		bench.CollectiveRow(out, r)
	})
	if err != nil {
		return err
	}
	return pf.write(errOut)
}

func clusterBenchSession(ctx context.Context, args []string, out, errOut io.Writer) error {
	fs := newFlags("cluster bench session", "chorus cluster bench session --listen ADDR --nodes N [--iters N] [--json]", out)
	cf := addClusterFlags(fs)
	iters := fs.Int("iters", 2000, "timed iterations")
	warmup := fs.Int("warmup", 200, "untimed iterations")
	asJSON := fs.Bool("json", false, "JSON lines")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	r, err := bench.Session(ctx, bench.SessionConfig{Session: fmt.Sprintf("remote-%dnodes", *cf.nodes), Transport: "tls",
		Iters: *iters, Warmup: *warmup, Open: cf.open(errOut)})
	if err != nil {
		return err
	}
	if *asJSON {
		return bench.WriteJSON(out, []bench.SessionResult{r})
	}
	bench.WriteSessionTable(out, []bench.SessionResult{r})
	return nil
}
