package segment

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/chorus-rt/chorus/internal/sys/shmem"
)

// ErrSize: a segment does not have the size this rank expects (the
// ranks disagree on what it holds).
var ErrSize = errors.New("segment size differs")

// poll is how often Await looks for the name.
const poll = 200 * time.Microsecond

// Dir is where rendezvous files live: /dev/shm when present, else the
// temporary directory.
func Dir() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		return "/dev/shm"
	}
	return os.TempDir()
}

// Path names the rendezvous file of id: prefix followed by 32 hex digits
// of id's SHA-256, in Dir.
func Path(prefix string, id []byte) string {
	h := sha256.Sum256(id)
	return filepath.Join(Dir(), prefix+hex.EncodeToString(h[:16]))
}

// Create makes path with size bytes, hdr written at offset 0, under a
// temporary name, and links it into place only once it is complete. It
// fails (and leaves nothing behind) when path exists.
func Create(path string, size int, hdr []byte) (*os.File, error) {
	tmp := fmt.Sprintf("%s.%d.tmp", path, os.Getpid())
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, fmt.Errorf("create segment: %w", err)
	}
	fail := func(err error) (*os.File, error) {
		f.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("create segment: %w", err)
	}
	if err := f.Truncate(int64(size)); err != nil {
		return fail(err)
	}
	if len(hdr) > 0 {
		if _, err := f.WriteAt(hdr, 0); err != nil {
			return fail(err)
		}
	}
	if err := os.Link(tmp, path); err != nil {
		return fail(err)
	}
	os.Remove(tmp)
	return f, nil
}

// Await opens path once it exists. When deadline passes first, the error
// wraps timeout (the caller's sentinel, e.g. ccl.ErrTimeout) and says
// that rank 0 never created what (e.g. "the communicator segment"); when
// ctx ends first, it is ctx's error.
func Await(ctx context.Context, path string, deadline time.Time, timeout error, what string) (*os.File, error) {
	for {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("open segment: %w", err)
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: rank 0 never created %s %s", timeout, what, path)
		}
		time.Sleep(poll)
	}
}

// Map maps all of f read-write and shared, after checking that it has
// size bytes (the error wraps ErrSize otherwise).
func Map(f *os.File, size int) ([]byte, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() != int64(size) {
		return nil, fmt.Errorf("%w: %s has %d bytes, want %d", ErrSize, f.Name(), st.Size(), size)
	}
	return shmem.Map(int(f.Fd()), size)
}
