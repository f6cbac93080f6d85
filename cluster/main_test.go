package cluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/cluster"
	"github.com/chorus-rt/chorus/cluster/node"
	"github.com/chorus-rt/chorus/net/cert"
	"github.com/chorus-rt/chorus/net/link"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/runtime/worker"
)

// Environment of an agent started by a test (this binary re-executed).
const (
	envAgent   = "CHORUS_TEST_AGENT" // controller address
	envWorkers = "CHORUS_TEST_AGENT_WORKERS"
	envRank    = "CHORUS_TEST_AGENT_RANK"
)

func TestMain(m *testing.M) {
	worker.Main()
	if addr := os.Getenv(envAgent); addr != "" {
		os.Exit(runAgent(addr))
	}
	os.Exit(m.Run())
}

func runAgent(addr string) int {
	n, _ := strconv.Atoi(os.Getenv(envWorkers))
	rank, err := strconv.Atoi(os.Getenv(envRank))
	if err != nil {
		rank = -1
	}
	err = node.Run(context.Background(), node.Options{Connect: addr, NodeRank: rank, Workers: n,
		Files:          link.Files{CA: os.Getenv("CHORUS_CA"), Cert: os.Getenv("CHORUS_CERT"), Key: os.Getenv("CHORUS_KEY"), Token: os.Getenv("CHORUS_TOKEN_FILE")},
		ConnectTimeout: 20 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		return 1
	}
	return 0
}

func init() {
	registry.MustRegisterTyped("test.pid", func() int64 { return int64(os.Getpid()) })
	registry.MustRegisterTyped("test.fail_on", func(env registry.Env, w int) error {
		if env.WorkerID() == w {
			return errors.New("failed on purpose")
		}
		return nil
	})
	registry.MustRegisterTyped("test.sleep_on", func(env registry.Env, w, ms int) {
		if env.WorkerID() != w {
			return
		}
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-env.Context().Done():
		}
	})
	registry.MustRegisterTyped("test.sleep_ms", func(env registry.Env, ms int) {
		select {
		case <-time.After(time.Duration(ms) * time.Millisecond):
		case <-env.Context().Done():
		}
	})
}

// creds are credential files in a temporary directory.
type creds struct {
	files link.Files
	cfg   *link.Config
}

func tokenCreds(t *testing.T) creds {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := cert.NewToken(p); err != nil {
		t.Fatal(err)
	}
	f := link.Files{Token: p}
	cfg, err := f.Load()
	if err != nil {
		t.Fatal(err)
	}
	return creds{f, cfg}
}

func mtlsCreds(t *testing.T) creds {
	t.Helper()
	dir := t.TempDir()
	ca, err := cert.NewCA("test", time.Now().Add(-time.Hour), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	caFile, _, err := ca.Write(dir, "ca")
	if err != nil {
		t.Fatal(err)
	}
	n, err := ca.Issue("node", nil, time.Now().Add(-time.Hour), 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	cf, kf, err := n.Write(dir, "node")
	if err != nil {
		t.Fatal(err)
	}
	f := link.Files{CA: caFile, Cert: cf, Key: kf}
	cfg, err := f.Load()
	if err != nil {
		t.Fatal(err)
	}
	return creds{f, cfg}
}

// agent is a node agent process started by a test.
type agent struct {
	cmd    *exec.Cmd
	out    *syncBuf
	exited chan struct{}
	err    error
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startAgent(t *testing.T, addr string, workers, rank int, files link.Files, extraEnv ...string) *agent {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envAgent+"="+addr, envWorkers+"="+strconv.Itoa(workers), envRank+"="+strconv.Itoa(rank))
	// The agent reads its credentials as chorus node does.
	for _, kv := range [][2]string{{"CHORUS_CA", files.CA}, {"CHORUS_CERT", files.Cert}, {"CHORUS_KEY", files.Key}, {"CHORUS_TOKEN_FILE", files.Token}} {
		if kv[1] != "" {
			cmd.Env = append(cmd.Env, kv[0]+"="+kv[1])
		}
	}
	cmd.Env = append(cmd.Env, extraEnv...)
	a := &agent{cmd: cmd, out: &syncBuf{}, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = a.out, a.out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		a.err = cmd.Wait()
		close(a.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-a.exited
		if t.Failed() {
			t.Logf("agent %d output:\n%s", cmd.Process.Pid, a.out.String())
		}
	})
	return a
}

// wait waits for the agent to exit and returns its error.
func (a *agent) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case <-a.exited:
		return a.err
	case <-time.After(d):
		t.Fatalf("agent %d still running after %v:\n%s", a.cmd.Process.Pid, d, a.out.String())
		return nil
	}
}

// logBuf collects controller log lines.
type logBuf struct{ syncBuf }

func (l *logBuf) log(s string) { l.Write([]byte(s + "\n")) }

// startCluster starts a controller and agents (workers[i] on node i) on
// loopback and returns the session.
func startCluster(t *testing.T, c creds, workers []int, mod func(*cluster.Options)) (*session.Session, []*agent, *logBuf) {
	t.Helper()
	lb := &logBuf{}
	opts := cluster.Options{Nodes: len(workers), Security: c.cfg, Log: lb.log, StartTimeout: 30 * time.Second,
		Heartbeat: 200 * time.Millisecond, Deadline: time.Second, ShutdownGrace: 2 * time.Second}
	if mod != nil {
		mod(&opts)
	}
	l, err := cluster.Listen(opts)
	if err != nil {
		t.Fatal(err)
	}
	var agents []*agent
	for i, n := range workers {
		agents = append(agents, startAgent(t, l.Addr(), n, i, c.files))
	}
	s, err := l.Accept(context.Background())
	if err != nil {
		t.Fatalf("%v\ncontroller log:\n%s", err, lb.String())
	}
	t.Cleanup(func() { s.Shutdown() })
	return s, agents, lb
}

// pids returns every worker's process id.
func pids(t *testing.T, s *session.Session) []int {
	t.Helper()
	ctx := context.Background()
	f, err := s.GetGlobalFunc(ctx, "test.pid")
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.CallPacked(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for w := range s.NumWorkers() {
		v, err := s.DebugGetFromRemote(ctx, r, w)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, int(v.(int64)))
	}
	return out
}

// gone waits until none of the processes exists.
func gone(t *testing.T, ps []int, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for _, p := range ps {
		for syscall.Kill(p, 0) == nil {
			if time.Now().After(deadline) {
				t.Fatalf("process %d still running after %v", p, d)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func contains(t *testing.T, s, sub string) {
	t.Helper()
	if !strings.Contains(s, sub) {
		t.Fatalf("%q does not contain %q", s, sub)
	}
}
