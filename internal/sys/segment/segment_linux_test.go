package segment

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var errTimeout = errors.New("test timeout")

func TestPath(t *testing.T) {
	a, b := Path("chorus-x-", []byte("id1")), Path("chorus-x-", []byte("id2"))
	if a == b || a != Path("chorus-x-", []byte("id1")) {
		t.Fatalf("paths %s, %s: want equal for one id and different for two", a, b)
	}
	if filepath.Dir(a) != Dir() || !strings.HasPrefix(filepath.Base(a), "chorus-x-") || len(filepath.Base(a)) != len("chorus-x-")+32 {
		t.Fatalf("path %s: want Dir()/chorus-x- and 32 hex digits", a)
	}
}

// TestCreateAwaitMap: rank 0 creates while another rank waits; the
// waiter sees the whole header and both map the same memory.
func TestCreateAwaitMap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seg")
	type opened struct {
		f   *os.File
		err error
	}
	got := make(chan opened, 1)
	go func() {
		f, err := Await(context.Background(), path, time.Now().Add(10*time.Second), errTimeout, "the test segment")
		got <- opened{f, err}
	}()
	time.Sleep(2 * time.Millisecond) // let the waiter poll at least once
	f0, err := Create(path, 8192, []byte("HDR!"))
	if err != nil {
		t.Fatal(err)
	}
	defer f0.Close()
	o := <-got
	if o.err != nil {
		t.Fatal(o.err)
	}
	defer o.f.Close()
	m0, err := Map(f0, 8192)
	if err != nil {
		t.Fatal(err)
	}
	m1, err := Map(o.f, 8192)
	if err != nil {
		t.Fatal(err)
	}
	if string(m1[:4]) != "HDR!" {
		t.Fatalf("header %q", m1[:4])
	}
	m0[100] = 7
	if m1[100] != 7 {
		t.Fatal("the two mappings do not share memory")
	}
	if _, err := Map(o.f, 4096); !errors.Is(err, ErrSize) {
		t.Fatalf("Map with the wrong size: %v, want ErrSize", err)
	}
	// A second Create of the same name fails and leaves no temporary file.
	if _, err := Create(path, 8192, nil); err == nil {
		t.Fatal("Create over an existing segment succeeded")
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Fatalf("%d files left, want the segment alone", len(ents))
	}
}

func TestAwaitEnds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "never")
	_, err := Await(context.Background(), path, time.Now().Add(time.Millisecond), errTimeout, "the test segment")
	if !errors.Is(err, errTimeout) || !strings.Contains(err.Error(), "rank 0 never created the test segment "+path) {
		t.Fatalf("past the deadline: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Await(ctx, path, time.Now().Add(time.Hour), errTimeout, "x"); !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled: %v", err)
	}
	// A path that cannot exist (its parent is a file) fails at once.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Await(context.Background(), filepath.Join(file, "x"), time.Now().Add(time.Hour), errTimeout, "x"); err == nil || errors.Is(err, errTimeout) {
		t.Fatalf("under a file: %v, want an open error", err)
	}
}
