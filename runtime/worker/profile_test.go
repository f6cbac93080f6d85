package worker

import (
	"os"
	"path/filepath"
	"testing"
)

func TestStartProfile(t *testing.T) {
	dir := t.TempDir()
	stop, err := startProfile(dir, 7)
	if err != nil {
		t.Fatal(err)
	}
	stop()
	st, err := os.Stat(filepath.Join(dir, "worker-7.pprof"))
	if err != nil || st.Size() == 0 {
		t.Fatalf("profile: %v, %v", st, err)
	}
	if _, err := startProfile(filepath.Join(dir, "missing"), 1); err == nil {
		t.Fatal("a profile in a missing directory started")
	}
}
