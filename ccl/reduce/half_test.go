package reduce

import (
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"sync"
	"testing"

	"github.com/chorus-rt/chorus/tensor"
)

// The fast conversions must agree bit for bit with package tensor's.

func TestHalfDecodeExhaustive(t *testing.T) {
	for i := 0; i < 1<<16; i++ {
		h := uint16(i)
		if g, w := math.Float32bits(f16ToF32(h)), math.Float32bits(tensor.F16(h).Float32()); g != w {
			t.Fatalf("f16ToF32(%#04x) = %#08x, want %#08x", h, g, w)
		}
		if g, w := math.Float32bits(bf16ToF32(h)), math.Float32bits(tensor.BF16(h).Float32()); g != w {
			t.Fatalf("bf16ToF32(%#04x) = %#08x, want %#08x", h, g, w)
		}
	}
}

// checkLoops runs the decode and encode loops of both formats, with and
// without the assembly, over vals (float32 bits) and all 2^16 halves, and
// compares with package tensor.
func checkLoops(t *testing.T, vals []uint32) {
	t.Helper()
	halves := make([]uint16, 1<<16)
	for i := range halves {
		halves[i] = uint16(i)
	}
	acc := make([]float32, len(vals))
	for i, b := range vals {
		acc[i] = math.Float32frombits(b)
	}
	for _, on := range []bool{false, true} {
		restore := SetSIMD(on)
		for _, f := range []halfFmt{f16, bf16} {
			dec := make([]float32, len(halves)-3) // odd length: a Go tail
			f.decode(dec, halves[3:])
			for i, v := range dec {
				h := halves[3+i]
				want := tensor.F16(h).Float32()
				if f == bf16 {
					want = tensor.BF16(h).Float32()
				}
				if math.Float32bits(v) != math.Float32bits(want) {
					t.Fatalf("simd %v fmt %d: decode(%#04x) = %#08x, want %#08x", on, f, h, math.Float32bits(v), math.Float32bits(want))
				}
			}
			enc := make([]uint16, len(acc))
			f.encode(enc, acc)
			for i, h := range enc {
				want := uint16(tensor.F16FromFloat32(acc[i]))
				if f == bf16 {
					want = uint16(tensor.BF16FromFloat32(acc[i]))
				}
				if h != want {
					t.Fatalf("simd %v fmt %d: encode(%#08x = %g) = %#04x, want %#04x", on, f, vals[i], acc[i], h, want)
				}
			}
		}
		restore()
	}
}

// checkEncode compares both encoders with tensor's on float32 bits b.
func checkEncode(t *testing.T, b uint32) {
	f := math.Float32frombits(b)
	if g, w := f32ToF16(f), uint16(tensor.F16FromFloat32(f)); g != w {
		t.Fatalf("f32ToF16(%#08x = %g) = %#04x, want %#04x", b, f, g, w)
	}
	if g, w := f32ToBF16(f), uint16(tensor.BF16FromFloat32(f)); g != w {
		t.Fatalf("f32ToBF16(%#08x = %g) = %#04x, want %#04x", b, f, g, w)
	}
}

// TestHalfEncode checks every float32 near a half value or a rounding
// boundary of either format (every value, the midpoints to the next one
// and their float32 neighbours), plus random bit patterns.
func TestHalfEncode(t *testing.T) {
	var vals []uint32
	for i := 0; i < 1<<16; i++ {
		for _, dec := range []func(uint16) float32{f16ToF32, bf16ToF32} {
			v := dec(uint16(i))
			next := dec(uint16(i + 1))
			mid := math.Float32bits(v)
			if !math.IsNaN(float64(v)) && !math.IsNaN(float64(next)) && !math.IsInf(float64(v), 0) {
				mid = math.Float32bits(float32((float64(v) + float64(next)) / 2))
			}
			for _, b := range []uint32{math.Float32bits(v), mid} {
				for d := uint32(0); d < 3; d++ {
					checkEncode(t, b+d)
					checkEncode(t, b-d)
					vals = append(vals, b+d, b-d)
				}
			}
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	n := 1 << 20
	if raceEnabledInternal {
		n = 1 << 16
	}
	for range n {
		b := r.Uint32()
		checkEncode(t, b)
		vals = append(vals, b)
	}
	checkLoops(t, vals[:len(vals)-5]) // an odd length: a Go tail
}

// TestHalfEncodeExhaustive tries all 2^32 float32 values (about 2 minutes);
// set REDUCE_EXHAUSTIVE=1 to run it.
func TestHalfEncodeExhaustive(t *testing.T) {
	if os.Getenv("REDUCE_EXHAUSTIVE") == "" {
		t.Skip("set REDUCE_EXHAUSTIVE=1")
	}
	workers := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var bad []uint32
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for hi := uint32(w); hi < 1<<16; hi += uint32(workers) {
				for lo := uint32(0); lo < 1<<16; lo++ {
					b := hi<<16 | lo
					f := math.Float32frombits(b)
					if f32ToF16(f) != uint16(tensor.F16FromFloat32(f)) || f32ToBF16(f) != uint16(tensor.BF16FromFloat32(f)) {
						mu.Lock()
						bad = append(bad, b)
						mu.Unlock()
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	for _, b := range bad {
		checkEncode(t, b)
	}
	// The block loops, with and without assembly, 2^24 values at a time.
	chunk := make([]uint32, 1<<24)
	for base := uint64(0); base < 1<<32; base += 1 << 24 {
		for i := range chunk {
			chunk[i] = uint32(base) + uint32(i)
		}
		checkLoops(t, chunk)
	}
}
