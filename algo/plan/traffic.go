package plan

import "fmt"

// Traffic is the memory one rank's ops read and write in one call: in its
// own buffers (Local) and in its peers' (Peer: through memory, port or
// switch channels; across GPUs these bytes cross the links). LL packets
// count at their size in memory, twice their data (both LL8 and LL16
// carry as many flag bytes as data bytes); a packet read counts once,
// however often its flags are polled. It is the least any executor of the
// plan moves, so the time of a plan on a bandwidth-bound size is at least
// Peer over the link bandwidth and Total over the memory bandwidth, and
// two algorithms of the same collective compare by it before either
// runs. A switch op counts every group rank's copy it reads or writes,
// what the switch moves; its links carry less (the switch reduces and
// multicasts), so there Peer is not a bound on the link.
type Traffic struct {
	LocalRead, LocalWrite int64
	PeerRead, PeerWrite   int64
}

// Peer is the bytes read from and written to peers' memory.
func (t Traffic) Peer() int64 { return t.PeerRead + t.PeerWrite }

// Total is every byte read or written.
func (t Traffic) Total() int64 { return t.LocalRead + t.LocalWrite + t.Peer() }

// Traffic returns what rank gpu's ops move in a call of inputBytes and
// outputBytes: every access of every op (OpAccess), its byte range from
// the rank's Layout (the executing rank's chunk size, which the executors
// use for peers' buffers too), doubled for packets. Errors are Layout's
// (ErrMessageSize) and OpAccess's.
func (p *Plan) Traffic(gpu int, inputBytes, outputBytes int64) (Traffic, error) {
	l, err := p.Layout(gpu, inputBytes, outputBytes)
	if err != nil {
		return Traffic{}, err
	}
	var t Traffic
	g := &p.GPUs[gpu]
	for ti := range g.ThreadBlocks {
		for oi := range g.ThreadBlocks[ti].Ops {
			acc, err := p.OpAccess(gpu, ti, &g.ThreadBlocks[ti].Ops[oi])
			if err != nil {
				return Traffic{}, fmt.Errorf("plan: gpu %d tb %d op %d: %w", gpu, ti, oi, err)
			}
			for _, a := range acc {
				_, n := l.AccessBytes(a)
				if a.Packet {
					n *= 2
				}
				switch {
				case a.Rank == gpu && a.Mode == AccessRead:
					t.LocalRead += n
				case a.Rank == gpu:
					t.LocalWrite += n
				case a.Mode == AccessRead:
					t.PeerRead += n
				default:
					t.PeerWrite += n
				}
			}
		}
	}
	return t, nil
}

// MaxTraffic is the Traffic of the rank that moves the most (by Total;
// the lowest such rank) in a call of inputBytes and outputBytes on every
// rank: the one that bounds the call.
func (p *Plan) MaxTraffic(inputBytes, outputBytes int64) (Traffic, error) {
	var best Traffic
	for r := range p.GPUs {
		t, err := p.Traffic(r, inputBytes, outputBytes)
		if err != nil {
			return Traffic{}, err
		}
		if r == 0 || t.Total() > best.Total() {
			best = t
		}
	}
	return best, nil
}
