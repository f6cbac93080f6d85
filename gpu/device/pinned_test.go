package device_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
)

// TestStagerContract: data staged through two pinned buffers, alternating
// as a loader does (fill one while the other's copy runs; Sync before
// refilling), arrives intact, on the fake and on a GPU when present.
func TestStagerContract(t *testing.T) {
	leaktest.Check(t)
	for name, dev := range devices(t) {
		t.Run(name, func(t *testing.T) {
			defer dev.Close()
			st, ok := dev.(device.Stager)
			if !ok {
				t.Fatalf("%T is not a Stager", dev)
			}
			const n, chunk = 1<<20 + 123, 64 << 10
			want := make([]byte, n)
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range want {
				want[i] = byte(rng.Uint32())
			}
			dst, err := dev.Alloc(n + 16)
			if err != nil {
				t.Fatal(err)
			}
			defer dev.Free(dst)
			var bufs [2]*device.PinnedBuffer
			for i := range bufs {
				if bufs[i], err = st.AllocPinned(chunk); err != nil {
					t.Fatal(err)
				}
			}
			busy := [2]bool{}
			for off, i := 0, 0; off < n; off, i = off+chunk, i^1 {
				if busy[i] {
					if err := dev.Sync(); err != nil {
						t.Fatal(err)
					}
					busy = [2]bool{}
				}
				k := copy(bufs[i].Bytes(), want[off:])
				if err := st.CopyInAsync(dst, int64(16+off), bufs[i], 0, int64(k)); err != nil {
					t.Fatal(err)
				}
				busy[i] = true
			}
			if err := dev.Sync(); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, n)
			if err := dev.CopyOut(got, dst, 16); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatal("staged data differs")
			}
			// Misuse: ranges, a freed buffer.
			if err := st.CopyInAsync(dst, 0, bufs[0], chunk-1, 2); err == nil {
				t.Error("range past the pinned buffer: no error")
			}
			if err := st.CopyInAsync(dst, n+15, bufs[0], 0, 2); err == nil {
				t.Error("range past the device buffer: no error")
			}
			for _, b := range bufs {
				if err := st.FreePinned(b); err != nil {
					t.Fatal(err)
				}
			}
			if err := st.CopyInAsync(dst, 0, bufs[0], 0, 1); !errors.Is(err, device.ErrPinnedFreed) {
				t.Errorf("copy from a freed buffer: %v", err)
			}
			if err := st.FreePinned(bufs[0]); !errors.Is(err, device.ErrPinnedFreed) {
				t.Errorf("double free: %v", err)
			}
			// Not while capturing.
			c := dev.(device.Capturer)
			p, err := st.AllocPinned(8)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.BeginCapture(); err != nil {
				t.Fatal(err)
			}
			err = st.CopyInAsync(dst, 0, p, 0, 8)
			if g, _ := c.EndCapture(); g != nil {
				g.Close()
			}
			if !errors.Is(err, device.ErrCapturing) {
				t.Errorf("CopyInAsync while capturing: %v", err)
			}
			if err := st.FreePinned(p); err != nil {
				t.Fatal(err)
			}
			if f, ok := dev.(*device.Fake); ok && f.PinnedInUse() != 0 {
				t.Errorf("%d pinned buffers left", f.PinnedInUse())
			}
		})
	}
}

// TestFakeCopyInAsyncIsLate: the fake copies at the next ordered call,
// so writing a pinned buffer before Sync shows in the result, as the
// corruption it would be on a GPU; a loader that breaks the rule fails
// its tests on the fake.
func TestFakeCopyInAsyncIsLate(t *testing.T) {
	f := device.NewFake(0, 1<<20)
	defer f.Close()
	dst, _ := f.Alloc(4)
	p, _ := f.AllocPinned(4)
	copy(p.Bytes(), "good")
	if err := f.CopyInAsync(dst, 0, p, 0, 4); err != nil {
		t.Fatal(err)
	}
	copy(p.Bytes(), "evil")
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	f.CopyOut(got, dst, 0)
	if string(got) != "evil" {
		t.Errorf("got %q: the fake copied before the stream reached the copy", got)
	}
	// FreePinned lets a queued copy finish first, as CUDA's does.
	copy(p.Bytes(), "last")
	if err := f.CopyInAsync(dst, 0, p, 0, 4); err != nil {
		t.Fatal(err)
	}
	if err := f.FreePinned(p); err != nil {
		t.Fatal(err)
	}
	f.CopyOut(got, dst, 0)
	if string(got) != "last" {
		t.Errorf("got %q after FreePinned", got)
	}
}
