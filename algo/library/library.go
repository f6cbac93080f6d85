package library

import (
	"errors"
	"fmt"
	"slices"

	"github.com/chorus-rt/chorus/algo/dsl"
	"github.com/chorus-rt/chorus/algo/plan"
)

// Options parameterise an algorithm.
type Options struct {
	// Instances replicates the algorithm over more thread blocks and
	// interleaved chunks (0 means 1); see dsl.Config.Instances.
	Instances int
}

// ErrUnknown and ErrRanks are wrapped by Build's errors for an unknown
// algorithm name and an unsupported rank count.
var (
	ErrUnknown = errors.New("library: unknown algorithm")
	ErrRanks   = errors.New("library: unsupported rank count")
)

// MinRanks and MaxRanks bound the rank counts every algorithm supports.
const (
	MinRanks = 2
	MaxRanks = 8
)

type algorithm struct {
	collective plan.Collective
	protocol   plan.Protocol
	doc        string
	build      func(p *dsl.Program, n int)
}

var algorithms = map[string]algorithm{
	"allreduce_oneshot": {plan.AllReduce, plan.Simple,
		"every rank reads every peer's input through memory channels and reduces all of it itself", allreduceOneShot},
	"allreduce_twoshot": {plan.AllReduce, plan.Simple,
		"all-pairs reduce-scatter into scratch, then reduce-and-send of each rank's chunk to all peers", allreduceTwoShot},
	"allreduce_twoshot_pull": {plan.AllReduce, plan.Simple,
		"each rank reduces its own chunk reading every peer's input, then reads every peer's reduced chunk (ccl/ipc's two-shot)", allreduceTwoShotPull},
	"allreduce_ring": {plan.AllReduce, plan.Simple,
		"ring reduce-scatter through scratch, then ring all-gather", allreduceRing},
	"allreduce_packet": {plan.AllReduce, plan.LL,
		"LL packets, all-pairs: packet reduce-scatter, reduce-and-send of packets, unpack; no signals", allreducePacket},
	"allreduce_port": {plan.AllReduce, plan.Simple,
		"two-shot over port channels (proxy copies): put-with-signal, flush", allreducePort},
	"allgather_mesh": {plan.AllGather, plan.Simple,
		"every rank puts its input into every peer's output", allgatherMesh},
	"allgather_ring": {plan.AllGather, plan.Simple,
		"ring: each rank forwards the chunk it received last", allgatherRing},
	"reducescatter_allpairs": {plan.ReduceScatter, plan.Simple,
		"every rank puts each peer's chunk into the peer's scratch; each reduces its own", reduceScatterAllPairs},
}

// Names lists the algorithms, sorted.
func Names() []string {
	out := make([]string, 0, len(algorithms))
	for n := range algorithms {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// Describe returns an algorithm's collective and a one-line description.
func Describe(name string) (plan.Collective, string, bool) {
	a, ok := algorithms[name]
	return a.collective, a.doc, ok
}

// Program builds the DSL program of algorithm name for ranks ranks (not
// lowered yet).
func Program(name string, ranks int, opts Options) (*dsl.Program, error) {
	a, ok := algorithms[name]
	if !ok {
		return nil, fmt.Errorf("%w %q (have %v)", ErrUnknown, name, Names())
	}
	if ranks < MinRanks || ranks > MaxRanks {
		return nil, fmt.Errorf("%w: %s for %d ranks (supports %d..%d)", ErrRanks, name, ranks, MinRanks, MaxRanks)
	}
	if opts.Instances < 0 {
		return nil, fmt.Errorf("library: %s: %d instances", name, opts.Instances)
	}
	p := dsl.NewProgram(dsl.Config{
		Name:       name,
		Collective: a.collective,
		Ranks:      ranks,
		Instances:  opts.Instances,
		Protocol:   a.protocol,
		// LL plans alternate two scratch halves by call parity, so their
		// kernels need no call barrier (gpuexec.FlagSynced).
		DoubleScratch: a.protocol == plan.LL,
	})
	a.build(p, ranks)
	return p, nil
}

// Build returns the execution plan of algorithm name for ranks ranks.
func Build(name string, ranks int, opts Options) (*plan.Plan, error) {
	p, err := Program(name, ranks, opts)
	if err != nil {
		return nil, err
	}
	pl, err := p.Lower()
	if err != nil {
		return nil, fmt.Errorf("library: %s for %d ranks: %w", name, ranks, err)
	}
	return pl, nil
}

// mesh makes one memory channel for every ordered pair of ranks: ch[r][q]
// lives on r and connects to q (nil for r == q). With one channel per pair
// each signal pairs with the wait on the reverse channel.
func mesh(p *dsl.Program, n int) [][]*dsl.MemoryChannel {
	ch := make([][]*dsl.MemoryChannel, n)
	for r := range n {
		ch[r] = make([]*dsl.MemoryChannel, n)
		for q := range n {
			if q != r {
				ch[r][q] = p.MemoryChannel(q, r)
			}
		}
	}
	return ch
}

// peers lists the ranks other than r, starting after r (so that ranks do
// not all target rank 0 first).
func peers(r, n int) []int {
	out := make([]int, 0, n-1)
	for k := 1; k < n; k++ {
		out = append(out, (r+k)%n)
	}
	return out
}

// slot is where rank from's contribution lands in rank at's scratch: the
// position of from among at's peers.
func slot(at, from, n int) int { return (from - at - 1 + n) % n }

// handshake: r tells every peer it is ready (its buffers may be written and
// its input read) and waits until every peer told it the same.
func handshake(ch [][]*dsl.MemoryChannel, r, n int, tb dsl.TB) {
	for _, q := range peers(r, n) {
		ch[r][q].Signal(tb, dsl.SyncNone)
	}
	for _, q := range peers(r, n) {
		ch[r][q].Wait(tb, dsl.SyncAfter)
	}
}

// exchange: r announces its earlier writes to every peer and waits for
// theirs.
func exchange(ch [][]*dsl.MemoryChannel, r, n int, tb dsl.TB) {
	for _, q := range peers(r, n) {
		ch[r][q].Signal(tb, dsl.SyncBefore)
	}
	for _, q := range peers(r, n) {
		ch[r][q].Wait(tb, dsl.SyncAfter)
	}
}
