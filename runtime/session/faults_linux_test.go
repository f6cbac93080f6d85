package session_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
	"github.com/chorus-rt/chorus/runtime/session"
)

const envController = "CHORUS_TEST_CONTROLLER"

// processAlive reports whether pid exists and is not a zombie.
func processAlive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// waitGone polls until pid has exited; the deadline is only a hang guard.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still alive", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func processKinds() []kind { return kinds[1:] }

func TestWorkerKilled(t *testing.T) {
	for _, k := range processKinds() {
		t.Run(k.name, func(t *testing.T) {
			leaktest.Check(t)
			s := k.start(t, 3, 1)
			defer func() {
				if err := s.Shutdown(); err != nil {
					t.Logf("Shutdown after a lost worker: %v", err)
				}
			}()
			// A call in flight: every worker sleeps, then we sync.
			sleep := mustFunc(t, s, "test.sleep_ms")
			if err := s.CallPackedDiscard(sleep, 60_000); err != nil {
				t.Fatal(err)
			}
			victim := s.PIDs()[1]
			done := make(chan error, 1)
			go func() {
				// The pending call must fail within 1 s of the kill.
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				done <- s.Sync(ctx)
			}()
			time.Sleep(50 * time.Millisecond) // let the sync block first
			if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			var err error
			select {
			case err = <-done:
			case <-time.After(time.Second):
				t.Fatal("pending Sync did not return within 1 s of SIGKILL")
			}
			var lost *session.LostError
			if !errors.As(err, &lost) || !errors.Is(err, session.ErrWorkerLost) {
				t.Fatalf("pending Sync: %v, want a LostError", err)
			}
			if lost.Worker != 1 || lost.PID != victim || !strings.Contains(lost.Status, "killed") {
				t.Errorf("LostError = %+v, want worker 1, pid %d, killed", lost, victim)
			}
			// Later calls fail the same way, at once.
			if _, err := s.GetGlobalFunc(bg(t), "test.add"); !errors.Is(err, session.ErrWorkerLost) || !strings.Contains(err.Error(), "worker 1") {
				t.Errorf("later call: %v", err)
			}
			if _, err := s.CallPacked(sleep, 1); !errors.Is(err, session.ErrWorkerLost) {
				t.Errorf("later CallPacked: %v", err)
			}
			pids := s.PIDs()
			start := time.Now()
			if err := s.Shutdown(); err != nil && !strings.Contains(err.Error(), "killed") {
				t.Errorf("Shutdown: %v", err)
			}
			t.Logf("Shutdown with a lost worker took %v", time.Since(start))
			for _, pid := range pids {
				waitGone(t, pid)
			}
		})
	}
}

func TestWorkerKilledWhileIdle(t *testing.T) {
	for _, k := range processKinds() {
		t.Run(k.name, func(t *testing.T) {
			leaktest.Check(t)
			s := k.start(t, 2, 1)
			defer s.Shutdown()
			victim := s.PIDs()[0]
			if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			waitGone(t, victim)
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err := s.SyncWorker(ctx, 0)
			if !errors.Is(err, session.ErrWorkerLost) || !strings.Contains(err.Error(), "worker 0") {
				t.Fatalf("sync of a dead worker: %v", err)
			}
		})
	}
}

func TestShutdownWithHungWorker(t *testing.T) {
	t.Run("process", func(t *testing.T) {
		leaktest.Check(t)
		s, err := session.NewProcess(bg(t), session.ProcessOptions{Options: session.Options{NumWorkers: 2, ShutdownGrace: 200 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CallPackedDiscard(mustFunc(t, s, "test.block")); err != nil {
			t.Fatal(err)
		}
		pids := s.PIDs()
		err = s.Shutdown()
		if err == nil || !strings.Contains(err.Error(), "forced to exit") {
			t.Errorf("Shutdown of hung workers: %v, want a report that they were forced", err)
		}
		for _, pid := range pids {
			waitGone(t, pid)
		}
	})
	t.Run("process-controller-blocked", func(t *testing.T) {
		leaktest.Check(t)
		s, err := session.NewProcess(bg(t), session.ProcessOptions{Options: session.Options{NumWorkers: 1, ShutdownGrace: 200 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CallPackedDiscard(mustFunc(t, s, "test.block")); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- s.Sync(context.Background()) }() // blocks forever
		time.Sleep(50 * time.Millisecond)
		_ = s.Shutdown()
		if err := <-done; err == nil {
			t.Error("blocked Sync returned nil after Shutdown")
		}
	})
	t.Run("threaded", func(t *testing.T) {
		s, err := session.NewThreaded(session.Options{NumWorkers: 2, ShutdownGrace: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.CallPackedDiscard(mustFunc(t, s, "test.fail_on"), 0, "x"); err != nil {
			t.Fatal(err)
		}
		sleep := mustFunc(t, s, "test.sleep_ms")
		if err := s.CallPackedDiscard(sleep, 60_000); err != nil {
			t.Fatal(err)
		}
		// Shutdown cannot stop a goroutine inside a function; it must say
		// so instead of hanging. The sleeping function watches its
		// context, so the goroutine still ends.
		err = s.Shutdown()
		if err == nil || !strings.Contains(err.Error(), "did not stop") {
			t.Errorf("Shutdown: %v", err)
		}
	})
}

// runController is the body of the stand-alone controller process used by
// TestControllerKilled: it starts workers, prints their pids, and waits to
// be killed.
func runController() int {
	s, err := session.NewProcess(context.Background(), session.ProcessOptions{
		Options: session.Options{NumWorkers: 2}, Transport: os.Getenv(envController),
	})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	// Keep one worker busy in a function so the lifeline, not the command
	// loop, must notice.
	f, err := s.GetGlobalFunc(context.Background(), "test.block")
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	if err := s.CallPackedDiscard(f); err != nil {
		fmt.Println("error", err)
		return 1
	}
	for _, p := range s.PIDs() {
		fmt.Println("pid", p)
	}
	fmt.Println("ready")
	select {}
}

func TestControllerKilled(t *testing.T) {
	for _, tr := range []string{"shm", "stream"} {
		t.Run(tr, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), envController+"="+tr)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var pids []int
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				line := sc.Text()
				if p, ok := strings.CutPrefix(line, "pid "); ok {
					n, _ := strconv.Atoi(p)
					pids = append(pids, n)
				}
				if strings.HasPrefix(line, "error") {
					t.Fatal(line)
				}
				if line == "ready" {
					break
				}
			}
			if len(pids) != 2 {
				t.Fatalf("controller reported pids %v", pids)
			}
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			for _, pid := range pids {
				waitGone(t, pid)
			}
		})
	}
}
