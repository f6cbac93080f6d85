package plan

import (
	"errors"
	"testing"
)

// MSCCL++'s allpairs all-reduce at 2 ranks (in place, chunks of c bytes):
// the put reads one input chunk and writes the peer's scratch; the
// reduce-and-send reads an input chunk and the scratch, writes the chunk
// here and in the peer's input.
func TestTrafficAllPairs(t *testing.T) {
	p := load(t, "allreduce_allpairs_2.json")
	const c = 32 << 10
	want := Traffic{LocalRead: 3 * c, LocalWrite: c, PeerWrite: 2 * c}
	for r := range 2 {
		got, err := p.Traffic(r, 2*c, 2*c)
		if err != nil || got != want {
			t.Errorf("rank %d: %+v, %v; want %+v", r, got, err, want)
		}
	}
	if got := want.Peer(); got != 2*c {
		t.Errorf("Peer %d, want %d", got, 2*c)
	}
	if got := want.Total(); got != 6*c {
		t.Errorf("Total %d, want %d", got, 6*c)
	}
	if _, err := p.Traffic(0, 2*c+8, 2*c+8); !errors.Is(err, ErrMessageSize) {
		t.Errorf("a size off the alignment: %v, want ErrMessageSize", err)
	}
	if _, err := p.MaxTraffic(8, 8); !errors.Is(err, ErrMessageSize) {
		t.Errorf("MaxTraffic of a size off the alignment: %v, want ErrMessageSize", err)
	}
}
