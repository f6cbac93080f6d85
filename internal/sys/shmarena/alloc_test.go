package shmarena

import (
	"errors"
	"math/rand/v2"
	"testing"
)

func TestAllocatorTable(t *testing.T) {
	type step struct {
		free  int64 // > 0: free the block at this offset instead
		size  int64
		align int64
		want  int64 // offset, or -1: ErrExhausted
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"bump", []step{{size: 64, align: 64, want: 0}, {size: 128, align: 64, want: 64}, {size: 4096, align: 4096, want: 4096}}},
		{"alignment gap is reused", []step{{size: 64, align: 64, want: 0}, {size: 4096, align: 4096, want: 4096}, {size: 64, align: 64, want: 64}}},
		{"reuse freed block", []step{{size: 256, align: 64, want: 0}, {size: 256, align: 64, want: 256}, {free: 1, want: 0}, {size: 128, align: 64, want: 0}, {size: 128, align: 64, want: 128}, {size: 64, align: 64, want: 512}}},
		{"coalesce back into top", []step{{size: 256, align: 64, want: 0}, {size: 256, align: 64, want: 256}, {free: 1, want: 0}, {free: 1, want: 256}, {size: 512, align: 64, want: 0}}},
		{"exhausted", []step{{size: 8192, align: 64, want: 0}, {size: 64, align: 64, want: -1}}},
		{"too big", []step{{size: 16384, align: 64, want: -1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAllocator(0, 8192)
			for i, s := range tc.steps {
				if s.free > 0 {
					if _, err := a.freeBlock(s.want); err != nil {
						t.Fatalf("step %d: %v", i, err)
					}
					continue
				}
				off, err := a.alloc(s.size, s.align)
				switch {
				case s.want < 0 && !errors.Is(err, ErrExhausted):
					t.Fatalf("step %d: got %d, %v; want ErrExhausted", i, off, err)
				case s.want >= 0 && (err != nil || off != s.want):
					t.Fatalf("step %d: got %d, %v; want %d", i, off, err, s.want)
				}
				checkInvariants(t, a)
			}
		})
	}
}

func TestAllocatorBadArgs(t *testing.T) {
	a := newAllocator(0, 1<<20)
	for _, c := range [][2]int64{{0, 64}, {-64, 64}, {64, 0}, {64, 48}, {100, 64}} {
		if _, err := a.alloc(c[0], c[1]); err == nil || errors.Is(err, ErrExhausted) {
			t.Errorf("alloc(%d, %d): %v, want a bad-argument error", c[0], c[1], err)
		}
	}
	if _, err := a.freeBlock(0); err == nil {
		t.Error("free of a block never allocated succeeded")
	}
}

// checkInvariants: free list sorted, coalesced, below top; in-use sum.
func checkInvariants(t *testing.T, a *allocator) {
	t.Helper()
	var sum int64
	for _, s := range a.used {
		sum += s
	}
	if sum != a.inUse {
		t.Fatalf("inUse %d, live blocks sum to %d", a.inUse, sum)
	}
	for i, s := range a.free {
		if s.size <= 0 || s.off+s.size >= a.top {
			t.Fatalf("free span %v: empty, or reaches top %d", s, a.top)
		}
		if i > 0 && a.free[i-1].off+a.free[i-1].size >= s.off {
			t.Fatalf("free spans %v and %v overlap or touch", a.free[i-1], s)
		}
	}
}

// TestAllocatorModel checks random alloc/free sequences against a model
// that places every block at the lowest aligned offset where it fits: the
// allocator must agree on every offset and on every exhaustion.
func TestAllocatorModel(t *testing.T) {
	const unit, units = 64, 512
	for seed := range uint64(40) {
		rng := rand.New(rand.NewPCG(seed, 7))
		a := newAllocator(0, unit*units)
		used := make([]bool, units)
		var live []int64
		for step := range 400 {
			if len(live) > 0 && rng.IntN(3) == 0 {
				i := rng.IntN(len(live))
				off := live[i]
				live = append(live[:i], live[i+1:]...)
				size, err := a.freeBlock(off)
				if err != nil {
					t.Fatalf("seed %d step %d: %v", seed, step, err)
				}
				for u := off / unit; u < (off+size)/unit; u++ {
					used[u] = false
				}
				checkInvariants(t, a)
				continue
			}
			align := int64(unit) << rng.IntN(4)
			size := align * int64(1+rng.IntN(6))
			want := int64(-1)
			for start := int64(0); start+size <= unit*units; start += align {
				free := true
				for u := start / unit; u < (start+size)/unit; u++ {
					free = free && !used[u]
				}
				if free {
					want = start
					break
				}
			}
			off, err := a.alloc(size, align)
			if want < 0 {
				if !errors.Is(err, ErrExhausted) {
					t.Fatalf("seed %d step %d: alloc(%d, %d) = %d, %v; model: exhausted", seed, step, size, align, off, err)
				}
				continue
			}
			if err != nil || off != want {
				t.Fatalf("seed %d step %d: alloc(%d, %d) = %d, %v; model: %d", seed, step, size, align, off, err, want)
			}
			for u := off / unit; u < (off+size)/unit; u++ {
				used[u] = true
			}
			live = append(live, off)
			checkInvariants(t, a)
		}
		for _, off := range live {
			if _, err := a.freeBlock(off); err != nil {
				t.Fatal(err)
			}
		}
		if a.top != 0 || len(a.free) != 0 || a.inUse != 0 {
			t.Fatalf("seed %d: all freed but top %d, free %v, inUse %d", seed, a.top, a.free, a.inUse)
		}
	}
}
