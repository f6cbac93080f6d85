package device_test

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/internal/testutil/gputest"
	"github.com/chorus-rt/chorus/internal/testutil/leaktest"
)

// devices returns the fake and, when a GPU is present, CUDA device 0.
func devices(t *testing.T) map[string]device.Device {
	out := map[string]device.Device{"fake": device.NewFake(0, 64<<20)}
	if d, err := cuda.Load(); err == nil && d.Init() == nil {
		c, err := device.OpenCUDA(d, 0)
		if err != nil {
			t.Fatalf("OpenCUDA: %v", err)
		}
		out["cuda"] = c
	} else {
		gputest.Missing(t, "no GPU: testing the fake only")
	}
	return out
}

func TestDeviceContract(t *testing.T) {
	leaktest.Check(t)
	for name, dev := range devices(t) {
		t.Run(name, func(t *testing.T) {
			defer dev.Close()
			const n = 1 << 20
			a, err := dev.Alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			b, err := dev.Alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			src := make([]byte, n)
			for i := range src {
				src[i] = byte(i*31 + 7)
			}
			if err := dev.CopyIn(a, 0, src); err != nil {
				t.Fatal(err)
			}
			if err := dev.Memset(b, 0, 0xEE, n); err != nil {
				t.Fatal(err)
			}
			if err := dev.Copy(b, 100, a, 200, 1000); err != nil {
				t.Fatal(err)
			}
			if err := dev.Sync(); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, n)
			if err := dev.CopyOut(got, b, 0); err != nil {
				t.Fatal(err)
			}
			want := bytes.Repeat([]byte{0xEE}, n)
			copy(want[100:1100], src[200:1200])
			if !bytes.Equal(got, want) {
				t.Fatal("memset + device copy + copy out gave wrong bytes")
			}
			part := make([]byte, 10)
			if err := dev.CopyOut(part, a, n-10); err != nil || !bytes.Equal(part, src[n-10:]) {
				t.Fatalf("copy out at an offset: %v", err)
			}
			// Bounds are checked before anything reaches the device.
			if err := dev.CopyIn(a, n-1, []byte{1, 2}); err == nil {
				t.Error("CopyIn past the end succeeded")
			}
			if err := dev.Copy(b, -1, a, 0, 1); err == nil {
				t.Error("negative offset accepted")
			}
			if free, total, err := dev.MemInfo(); err != nil || free > total || total <= 0 {
				t.Errorf("MemInfo = %d, %d, %v", free, total, err)
			}
			for _, x := range []*device.Buffer{a, b} {
				if err := dev.Free(x); err != nil {
					t.Fatal(err)
				}
			}
			if err := dev.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := dev.Alloc(1); !errors.Is(err, device.ErrClosed) {
				t.Errorf("Alloc after Close: %v, want ErrClosed", err)
			}
		})
	}
}

func TestFakeCatchesMisuse(t *testing.T) {
	f := device.NewFake(3, 1<<20)
	b, err := f.Alloc(100)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Free(b); err != nil {
		t.Fatal(err)
	}
	if err := f.CopyIn(b, 0, []byte{1}); err == nil {
		t.Error("use after free not caught")
	}
	if _, err := f.Alloc(2 << 20); err == nil {
		t.Error("allocation beyond capacity succeeded")
	}
	other := device.NewFake(4, 1<<20)
	ob, _ := other.Alloc(10)
	if err := f.CopyIn(ob, 0, []byte{1}); err == nil {
		t.Error("a buffer of another device was accepted")
	}
}

func TestPool(t *testing.T) {
	f := device.NewFake(0, 1<<20)
	p := device.NewPool(f)
	a, err := p.Get(1000) // class 1024
	if err != nil {
		t.Fatal(err)
	}
	if a.Size() != 1024 {
		t.Errorf("class of 1000 bytes = %d, want 1024", a.Size())
	}
	if err := p.Put(a); err != nil {
		t.Fatal(err)
	}
	if err := p.Put(a); err == nil {
		t.Error("double Put accepted")
	}
	b, _ := p.Get(700) // same class: reused
	if b != a {
		t.Error("cached buffer not reused")
	}
	st := p.Stats()
	if st.Allocs != 2 || st.Hits != 1 || st.InUse != 1024 || st.Cached != 0 || st.DeviceMem != 1024 || st.Peak != 1024 {
		t.Errorf("stats %+v", st)
	}
	p.Put(b)
	// Filling the device: the cache is given back before failing.
	big, err := p.Get(1 << 20)
	if err != nil {
		t.Fatalf("Get of the whole device with a cached buffer: %v", err)
	}
	p.Put(big)
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.DeviceMem != 0 || st.Cached != 0 {
		t.Errorf("after Release: %+v", st)
	}
	if free, total, _ := f.MemInfo(); free != total {
		t.Errorf("device memory leaked: %d of %d free", free, total)
	}
}

// TestPoolDevicePeak: DevicePeak is the most device memory the pool held
// at once, cached buffers included; it survives Release and Close, a
// failed allocation leaves it alone, and reused buffers do not add to it.
func TestPoolDevicePeak(t *testing.T) {
	f := device.NewFake(0, 1<<16)
	p := device.NewPool(f)
	step := func(what string, wantMem, wantPeak int64) {
		t.Helper()
		if st := p.Stats(); st.DeviceMem != wantMem || st.DevicePeak != wantPeak {
			t.Fatalf("%s: device memory %d, peak %d; want %d, %d (%+v)", what, st.DeviceMem, st.DevicePeak, wantMem, wantPeak, st)
		}
	}
	step("new", 0, 0)
	a, _ := p.Get(1000) // 1024
	b, _ := p.Get(5000) // 8192
	step("two buffers", 9216, 9216)
	p.Put(a)
	p.Put(b)
	step("cached", 9216, 9216) // cached memory is still held
	c, _ := p.Get(4097)        // the cached 8192 again
	step("reused", 9216, 9216)
	p.Put(c)
	if err := p.Release(); err != nil {
		t.Fatal(err)
	}
	step("released", 0, 9216)
	if _, err := p.Get(1 << 17); err == nil { // more than the device has
		t.Fatal("allocation past the device's capacity succeeded")
	}
	step("failed", 0, 9216)
	d, _ := p.Get(1 << 15)
	e, _ := p.Get(1 << 14)
	step("higher", 1<<15+1<<14, 1<<15+1<<14)
	p.Put(d)
	p.Put(e)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	step("closed", 0, 1<<15+1<<14)
}

// TestCaptureContract: recorded work does not run until the graph is
// launched, replays see the memory as it is at replay time, calls that
// would wait for the device are refused during the capture (and do not
// spoil it), and capture state errors are reported.
func TestCaptureContract(t *testing.T) {
	leaktest.Check(t)
	for name, dev := range devices(t) {
		t.Run(name, func(t *testing.T) {
			defer dev.Close()
			c, ok := dev.(device.Capturer)
			if !ok {
				t.Fatalf("%T is not a Capturer", dev)
			}
			const n = 4096
			src, err := dev.Alloc(n)
			if err != nil {
				t.Fatal(err)
			}
			dst, err := dev.Alloc(2 * n)
			if err != nil {
				t.Fatal(err)
			}
			if err := dev.Memset(dst, 0, 0xEE, 2*n); err != nil {
				t.Fatal(err)
			}
			if _, err := c.EndCapture(); !errors.Is(err, device.ErrNotCapturing) {
				t.Fatalf("EndCapture without a capture: %v", err)
			}
			if err := c.BeginCapture(); err != nil {
				t.Fatal(err)
			}
			if !c.Capturing() {
				t.Fatal("Capturing is false during a capture")
			}
			if err := c.BeginCapture(); !errors.Is(err, device.ErrNotCapturing) {
				t.Fatalf("nested BeginCapture: %v", err)
			}
			if err := dev.Copy(dst, 0, src, 0, n); err != nil {
				t.Fatal(err)
			}
			if err := dev.Memset(dst, n, 7, n); err != nil {
				t.Fatal(err)
			}
			out := make([]byte, 2*n)
			if err := dev.Sync(); !errors.Is(err, device.ErrCapturing) {
				t.Fatalf("Sync during capture: %v", err)
			}
			if err := dev.CopyOut(out, dst, 0); !errors.Is(err, device.ErrCapturing) {
				t.Fatalf("CopyOut during capture: %v", err)
			}
			if err := dev.CopyIn(src, 0, out[:n]); !errors.Is(err, device.ErrCapturing) {
				t.Fatalf("CopyIn during capture: %v", err)
			}
			if err := dev.Copy(dst, n+1, src, 0, n); err == nil {
				t.Fatal("an out-of-range copy was recorded")
			}
			g, err := c.EndCapture()
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if c.Capturing() {
				t.Fatal("Capturing after EndCapture")
			}
			if err := dev.CopyOut(out, dst, 0); err != nil {
				t.Fatal(err)
			}
			if out[0] != 0xEE || out[2*n-1] != 0xEE {
				t.Fatalf("recorded work ran during the capture: %#x %#x", out[0], out[2*n-1])
			}
			for it := range 3 {
				if err := dev.Memset(src, 0, byte(10+it), n); err != nil {
					t.Fatal(err)
				}
				if err := g.Launch(); err != nil {
					t.Fatal(err)
				}
				if err := dev.CopyOut(out, dst, 0); err != nil {
					t.Fatal(err)
				}
				want := append(bytes.Repeat([]byte{byte(10 + it)}, n), bytes.Repeat([]byte{7}, n)...)
				if !bytes.Equal(out, want) {
					t.Fatalf("replay %d: wrong bytes", it)
				}
			}
			if err := g.Close(); err != nil {
				t.Fatal(err)
			}
			dev.Free(src)
			dev.Free(dst)
		})
	}
}

// TestFakeCaptureMatchesEager: a random sequence of copies and memsets
// recorded by the fake and replayed leaves memory exactly as running the
// same sequence directly does, from the same starting contents.
func TestFakeCaptureMatchesEager(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for trial := range 50 {
		const nbuf, size = 3, 256
		eager, captured := device.NewFake(0, 1<<20), device.NewFake(0, 1<<20)
		var eb, cb [nbuf]*device.Buffer
		for i := range nbuf {
			var err error
			if eb[i], err = eager.Alloc(size); err != nil {
				t.Fatal(err)
			}
			if cb[i], err = captured.Alloc(size); err != nil {
				t.Fatal(err)
			}
			init := make([]byte, size)
			for j := range init {
				init[j] = byte(rng.IntN(256))
			}
			eager.CopyIn(eb[i], 0, init)
			captured.CopyIn(cb[i], 0, init)
		}
		type op struct {
			copy          bool
			dst, src      int
			doff, soff, n int64
			v             byte
		}
		ops := make([]op, 1+rng.IntN(12))
		for i := range ops {
			n := int64(1 + rng.IntN(size/2))
			ops[i] = op{copy: rng.IntN(2) == 0, dst: rng.IntN(nbuf), src: rng.IntN(nbuf),
				doff: rng.Int64N(size - n + 1), soff: rng.Int64N(size - n + 1), n: n, v: byte(rng.IntN(256))}
		}
		apply := func(d device.Device, bs [nbuf]*device.Buffer) error {
			for _, o := range ops {
				var err error
				if o.copy {
					err = d.Copy(bs[o.dst], o.doff, bs[o.src], o.soff, o.n)
				} else {
					err = d.Memset(bs[o.dst], o.doff, o.v, o.n)
				}
				if err != nil {
					return err
				}
			}
			return nil
		}
		if err := apply(eager, eb); err != nil {
			t.Fatal(err)
		}
		if err := captured.BeginCapture(); err != nil {
			t.Fatal(err)
		}
		if err := apply(captured, cb); err != nil {
			t.Fatal(err)
		}
		g, err := captured.EndCapture()
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Launch(); err != nil {
			t.Fatal(err)
		}
		for i := range nbuf {
			want, got := make([]byte, size), make([]byte, size)
			eager.CopyOut(want, eb[i], 0)
			captured.CopyOut(got, cb[i], 0)
			if !bytes.Equal(want, got) {
				t.Fatalf("trial %d: buffer %d differs after replaying %d ops", trial, i, len(ops))
			}
		}
		g.Close()
	}
}

func TestStopwatchMarks(t *testing.T) {
	f := device.NewFake(0, 1<<20)
	for _, tc := range []struct {
		name  string
		sw    func() (device.Stopwatch, error)
		marks int
	}{
		{"fake", func() (device.Stopwatch, error) { return f.NewStopwatch(3) }, 3},
		{"host", func() (device.Stopwatch, error) { return device.NewHostStopwatch(3), nil }, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := tc.sw()
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for round := range 2 { // Laps starts over
				for i := range tc.marks {
					if err := s.Mark(); err != nil {
						t.Fatalf("round %d mark %d: %v", round, i, err)
					}
				}
				if err := s.Mark(); !errors.Is(err, device.ErrStopwatch) {
					t.Fatalf("round %d: mark past the end: %v, want device.ErrStopwatch", round, err)
				}
				laps, err := s.Laps()
				if err != nil || len(laps) != tc.marks-1 {
					t.Fatalf("round %d: Laps = %v, %v; want %d laps", round, laps, err, tc.marks-1)
				}
				for _, l := range laps {
					if l < 0 {
						t.Fatalf("negative lap %v", l)
					}
				}
			}
		})
	}
	if _, err := f.NewStopwatch(1); !errors.Is(err, device.ErrStopwatch) {
		t.Fatalf("NewStopwatch(1): %v", err)
	}
}
