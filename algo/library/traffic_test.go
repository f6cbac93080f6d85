package library

import (
	"fmt"
	"testing"

	"github.com/chorus-rt/chorus/algo/plan"
)

// The library's allreduce plans move what their algorithms say, at every
// rank count and with instances: S bytes a rank, n ranks, s = S/n a chunk.
// The one-shot plan reads its input and every peer's, writes its output
// once; the pull two-shot reads its chunk of every input and every peer's
// reduced chunk; the put two-shot writes its chunks into the peers'
// scratch, reduces its own from its scratch and puts the result into
// every output as it goes (the lowering fuses the reduce and the puts:
// the result is not read back); the packet plan likewise, its packets
// twice their data (written to the peers, read from its own scratch).
func TestAllReduceTraffic(t *testing.T) {
	const S = 1 << 20 * 3 * 5 * 7 // splits into n chunks of 16-byte units for n = 2..8
	for n := MinRanks; n <= MaxRanks; n++ {
		s, m := int64(S/n), int64(n-1)
		want := map[string]plan.Traffic{
			"allreduce_oneshot":      {LocalRead: S, LocalWrite: S, PeerRead: m * S},
			"allreduce_twoshot_pull": {LocalRead: s, LocalWrite: S, PeerRead: 2 * m * s},
			"allreduce_twoshot":      {LocalRead: m*s + int64(n)*s, LocalWrite: s, PeerWrite: 2 * m * s},
			"allreduce_packet":       {LocalRead: m*s + s + 2*m*s + 2*m*s, LocalWrite: S, PeerWrite: 4 * m * s},
		}
		for name, w := range want {
			for _, inst := range []int{1, 2} {
				t.Run(fmt.Sprintf("%s/n=%d/i=%d", name, n, inst), func(t *testing.T) {
					p, err := Build(name, n, Options{Instances: inst})
					if err != nil {
						t.Fatal(err)
					}
					for r := range n {
						got, err := p.Traffic(r, S, S)
						if err != nil {
							t.Fatal(err)
						}
						if got != w {
							t.Errorf("rank %d: %+v, want %+v", r, got, w)
						}
					}
					mx, err := p.MaxTraffic(S, S)
					if err != nil || mx != w {
						t.Errorf("MaxTraffic: %+v, %v; want %+v", mx, err, w)
					}
				})
			}
		}
	}
}
