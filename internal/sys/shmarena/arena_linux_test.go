package shmarena

import (
	"errors"
	"runtime"
	"testing"
	"time"
	"unsafe"
)

func newArena(t *testing.T, capacity int64) *Arena {
	t.Helper()
	a, err := New(Config{Capacity: capacity, Name: "chorus-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a
}

func mapSelf(t *testing.T, a *Arena) *Peer {
	t.Helper()
	p, err := MapPeer(a.Identity())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// A block is zeroed, page aligned, located, and what the owner writes a
// peer mapping reads at the located offset.
func TestAllocVisibleToPeer(t *testing.T) {
	a := newArena(t, 64<<20)
	p := mapSelf(t, a)
	for _, n := range []int64{1, 4095, 4096, 100_000, 3 << 20} {
		b, err := a.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(b)) != n {
			t.Fatalf("len %d, want %d", len(b), n)
		}
		for i, v := range b {
			if v != 0 {
				t.Fatalf("n=%d: byte %d is %d, want zero", n, i, v)
			}
		}
		for i := range b {
			b[i] = byte(i*7 + 1)
		}
		mid := b[n/3:]
		off, ok := a.Locate(mid)
		if !ok {
			t.Fatalf("n=%d: Locate of a sub-slice failed", n)
		}
		got, ok := p.Slice(off, int64(len(mid)))
		if !ok || string(got) != string(mid) {
			t.Fatalf("n=%d: peer mapping does not show the owner's bytes", n)
		}
		if _, ok := a.Locate(append([]byte(nil), b...)); ok {
			t.Fatalf("n=%d: Locate found a heap copy in the arena", n)
		}
		runtime.KeepAlive(b)
	}
	if _, ok := p.Slice(0, 16); ok {
		t.Error("peer Slice of the header succeeded")
	}
	if _, ok := p.Slice(64<<20-10, 16); ok {
		t.Error("peer Slice past the end succeeded")
	}
}

// Freed blocks (by the collector) are reused, and a reused block is
// zeroed again.
func TestFreeByGCAndReuse(t *testing.T) {
	a := newArena(t, 64<<20)
	b, err := a.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	off, _ := a.Locate(b)
	for i := range b {
		b[i] = 0xAB
	}
	b = nil
	waitFrees(t, a, 1)
	c, err := a.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if off2, _ := a.Locate(c); off2 != off {
		t.Errorf("new block at %d, want the freed one at %d", off2, off)
	}
	for i, v := range c {
		if v != 0 {
			t.Fatalf("reused block: byte %d is %#x, want zero", i, v)
		}
	}
	if s := a.Stats(); s.InUse != 1<<20 || s.Allocs != 2 || s.Frees != 1 || s.Peak != 1<<20 {
		t.Errorf("stats %+v", s)
	}
	runtime.KeepAlive(c)
}

func waitFrees(t *testing.T, a *Arena, want int64) {
	t.Helper()
	for i := 0; i < 200 && a.Stats().Frees < want; i++ {
		runtime.GC()
		time.Sleep(5 * time.Millisecond)
	}
	if got := a.Stats().Frees; got < want {
		t.Fatalf("%d blocks freed by the collector, want %d", got, want)
	}
}

// Asking for more than the arena holds is ErrExhausted, and the arena
// stays usable.
func TestExhausted(t *testing.T) {
	a := newArena(t, 8<<20)
	b, err := a.Alloc(6 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Alloc(4 << 20); !errors.Is(err, ErrExhausted) {
		t.Fatalf("got %v, want ErrExhausted", err)
	}
	if _, err := a.Alloc(1 << 20); err != nil {
		t.Fatalf("after exhaustion: %v", err)
	}
	runtime.KeepAlive(b)
	if _, err := a.Alloc(0); err == nil {
		t.Error("Alloc(0) succeeded")
	}
}

// A peer must get the file it was told about.
func TestMapPeerChecks(t *testing.T) {
	a := newArena(t, 8<<20)
	id := a.Identity()
	for _, tc := range []struct {
		name string
		edit func(*Identity)
	}{
		{"token", func(id *Identity) { id.Token++ }},
		{"size", func(id *Identity) { id.Size += 4096 }},
		{"fd", func(id *Identity) { id.FD = 1 << 20 }},
		{"pid", func(id *Identity) { id.PID = 1 << 30 }},
	} {
		bad := id
		tc.edit(&bad)
		if p, err := MapPeer(bad); err == nil {
			p.Close()
			t.Errorf("%s: MapPeer of a wrong identity succeeded", tc.name)
		}
	}
	a.Close()
	if _, err := a.Alloc(4096); err == nil {
		t.Error("Alloc after Close succeeded")
	}
}

func TestProcess(t *testing.T) {
	a := newArena(t, 8<<20)
	prev := SetProcess(a)
	defer SetProcess(prev)
	if Process() != a {
		t.Fatal("Process() is not the arena set")
	}
}

// A huge block freed at the top of the arena gives its pages back; the
// arena's memory (Reserved) follows, and the next block is zeroed.
func TestTrim(t *testing.T) {
	a := newArena(t, 1<<30)
	small, err := a.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	big, err := a.Alloc(trimMin + 8<<20)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(big); i += 4096 {
		big[i] = 1
	}
	if r := a.Stats().Reserved; r < trimMin {
		t.Fatalf("reserved %d with a %d-byte block live", r, len(big))
	}
	big = nil
	waitFrees(t, a, 1)
	s := a.Stats()
	if s.Trims != 1 || s.Reserved > 8<<20 {
		t.Errorf("after freeing the big block: %+v, want one trim and a few MiB reserved", s)
	}
	again, err := a.Alloc(64 << 20)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < len(again); i += 4096 {
		if again[i] != 0 {
			t.Fatalf("byte %d of a block in trimmed room is %d", i, again[i])
		}
	}
	runtime.KeepAlive(small)
	runtime.KeepAlive(again)
}

// Any slice of a block keeps it: the collector, not the holder of the
// first slice, decides when the block is free.
func TestSubSliceKeepsBlock(t *testing.T) {
	a := newArena(t, 64<<20)
	p := mapSelf(t, a)
	b, err := a.Alloc(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	tail := b[len(b)-100:]
	b = nil
	for i := range tail {
		tail[i] = 42
	}
	off, ok := a.Locate(tail)
	if !ok {
		t.Fatal("Locate of the tail failed")
	}
	for range 3 {
		runtime.GC()
	}
	if s := a.Stats(); s.Frees != 0 {
		t.Fatalf("block freed while a slice of it is live: %+v", s)
	}
	if got, _ := p.Slice(off, 100); got[99] != 42 {
		t.Fatal("peer lost the block's bytes")
	}
	runtime.KeepAlive(tail)
	tail = nil
	waitFrees(t, a, 1)
}

// On hosts with pages larger than the Go heap's 8 KiB, blocks are mapped
// at a page boundary inside a larger allocation (simulated: 64 KiB pages).
func TestLargePages(t *testing.T) {
	a := newArena(t, 64<<20)
	a.page = 64 << 10
	p := mapSelf(t, a)
	var keep [][]byte
	for i := range 6 {
		b, err := a.Alloc(int64(100_000 + i*70_000))
		if err != nil {
			t.Fatal(err)
		}
		if addr := uintptr(unsafe.Pointer(&b[0])); addr%(64<<10) != 0 {
			t.Fatalf("block at %#x, not 64 KiB aligned", addr)
		}
		b[len(b)-1] = byte(i + 1)
		off, ok := a.Locate(b)
		if got, _ := p.Slice(off, int64(len(b))); !ok || got[len(b)-1] != byte(i+1) {
			t.Fatalf("block %d: peer does not see it", i)
		}
		keep = append(keep, b)
	}
	runtime.KeepAlive(keep)
	keep = nil
	waitFrees(t, a, 6)
	if s := a.Stats(); s.InUse != 0 {
		t.Errorf("all freed, %+v", s)
	}
}

// Mapping the same arena twice shares one mapping until both are closed.
func TestMapPeerShared(t *testing.T) {
	a := newArena(t, 8<<20)
	p1, err := MapPeer(a.Identity())
	if err != nil {
		t.Fatal(err)
	}
	p2, err := MapPeer(a.Identity())
	if err != nil {
		t.Fatal(err)
	}
	if p1 != p2 {
		t.Fatal("two mappings of one arena")
	}
	p1.Close()
	if _, ok := p2.Slice(headerSize, 8); !ok {
		t.Fatal("second user lost the mapping when the first closed")
	}
	p2.Close()
	p2.Close() // a second Close is a no-op
	if _, ok := p2.Slice(headerSize, 8); ok {
		t.Fatal("mapping still there after the last Close")
	}
}

// Peer.Slice is the bounds check of offsets that other processes publish:
// whatever they are, it never panics and gives only ranges past the
// header and inside the arena.
func FuzzPeerSlice(f *testing.F) {
	a, err := New(Config{Capacity: 8 << 20, Name: "chorus-fuzz"})
	if err != nil {
		f.Fatal(err)
	}
	defer a.Close()
	p, err := MapPeer(a.Identity())
	if err != nil {
		f.Fatal(err)
	}
	defer p.Close()
	for _, s := range [][2]int64{{headerSize, 1}, {0, 1}, {8 << 20, 0}, {8<<20 - 1, 2}, {-1, 5}, {headerSize, -1}, {1 << 62, 1 << 62}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, off, n int64) {
		b, ok := p.Slice(off, n)
		if !ok {
			return
		}
		if off < headerSize || n < 0 || off+n > 8<<20 || int64(len(b)) != n {
			t.Fatalf("Slice(%d, %d) gave %d bytes", off, n, len(b))
		}
		if n > 0 {
			_ = b[n-1] // readable
		}
	})
}
