package library

import "github.com/chorus-rt/chorus/algo/dsl"

// allreduceOneShot: every rank reduces the whole input of every rank
// into its output in one thread block (one rre over all n chunks after
// fusion), between a handshake that lets it read its peers' inputs and
// one that keeps each input until every peer has read it. The executor
// spreads the thread block over as many CUDA blocks as the bytes need
// (gpuexec.CallShape), so this is ccl/ipc's one-shot kernel: one grid
// striding over the whole buffer. A thread block per chunk instead (n
// groups, each streaming its own 1/n of every input) took 1.82x the
// kernel at 256 MB with 4 ranks sharing an H200 under MPS, against 1.30x
// for one (graph-replayed, same call, 2026-11-29; 1.00-1.04x since
// reduces of 4 or more sources keep one 16-byte vector a thread in
// flight), and tied it on 2 x H200 and with 2 ranks under MPS
// (docs/gpu-executor.md).
func allreduceOneShot(p *dsl.Program, n int) {
	ch := mesh(p, n)
	tb := dsl.TB(0)
	for r := range n {
		rk := p.Rank(r)
		in, out := rk.Input().Chunk(0, n), rk.Output().Chunk(0, n)
		handshake(ch, r, n, tb)
		src := in
		for _, q := range peers(r, n) {
			ch[r][q].Reduce(out, src, []dsl.Chunk{p.Rank(q).Input().Chunk(0, n)}, dsl.Sum, tb)
			src = out // accumulate: out = out + next peer's
		}
		// Nobody may leave (and let its input change) while peers read it.
		exchange(ch, r, n, tb)
	}
}

// allreduceTwoShot: rank r owns chunk r. It puts chunk q of its input into
// peer q's scratch, then reduces its own chunk with what the peers put into
// its scratch and sends the result to every peer's output (res).
func allreduceTwoShot(p *dsl.Program, n int) {
	ch := mesh(p, n)
	scr := make([]dsl.Buffer, n)
	for r := range n {
		scr[r] = p.Rank(r).NewScratch(n - 1)
	}
	for r := range n {
		rk := p.Rank(r)
		in, out := rk.Input(), rk.Output()
		handshake(ch, r, n, 0)
		for _, q := range peers(r, n) {
			ch[r][q].Put(scr[q].Chunk(slot(q, r, n), 1), in.Chunk(q, 1), dsl.TB(0))
		}
		exchange(ch, r, n, 0)
		srcs := []dsl.Chunk{in.Chunk(r, 1)}
		for s := range n - 1 {
			srcs = append(srcs, scr[r].Chunk(s, 1))
		}
		rk.Reduce(out.Chunk(r, 1), srcs, dsl.Sum, dsl.TB(0))
		for _, q := range peers(r, n) {
			ch[r][q].Put(p.Rank(q).Output().Chunk(r, 1), out.Chunk(r, 1), dsl.TB(0))
		}
		exchange(ch, r, n, 0)
	}
}

// allreduceTwoShotPull is ccl/ipc's two-shot: rank r owns chunk r. It
// reduces chunk r of every rank's input, read through the memory
// channels, into its own output (one rre after fusion), tells the peers
// it is there, and reads each peer's reduced chunk from the peer's
// output. At n ranks and S bytes a rank reads (2 - 1/n)·S and writes S;
// allreduceTwoShot (the peers put into the owner's scratch, the owner
// reduces and puts the result into every output) reads as much and
// writes (1 - 1/n)·S more, through a scratch buffer.
func allreduceTwoShotPull(p *dsl.Program, n int) {
	ch := mesh(p, n)
	for r := range n {
		rk := p.Rank(r)
		in, out := rk.Input(), rk.Output()
		tb := dsl.TB(0)
		handshake(ch, r, n, tb) // every peer has started: its input may be read
		src := in.Chunk(r, 1)
		for _, q := range peers(r, n) {
			ch[r][q].Reduce(out.Chunk(r, 1), src, []dsl.Chunk{p.Rank(q).Input().Chunk(r, 1)}, dsl.Sum, tb)
			src = out.Chunk(r, 1) // accumulate: out = out + next peer's
		}
		exchange(ch, r, n, tb) // my chunk is reduced, and every peer's
		for _, q := range peers(r, n) {
			ch[r][q].Get(out.Chunk(q, 1), p.Rank(q).Output().Chunk(q, 1), tb)
		}
		// Nobody may leave (and let its output change) while peers read it.
		exchange(ch, r, n, tb)
	}
}

// allreduceRing: ring reduce-scatter, partial sums travelling through the
// scratch of the next rank (one slot per step, so nothing is overwritten),
// then a ring all-gather straight into the outputs. Rank q ends the
// reduce-scatter owning chunk q+1.
func allreduceRing(p *dsl.Program, n int) {
	ch := mesh(p, n)
	scr := make([]dsl.Buffer, n)
	for r := range n {
		scr[r] = p.Rank(r).NewScratch(n - 1)
	}
	for q := range n {
		next, prev := (q+1)%n, (q+n-1)%n
		rk := p.Rank(q)
		in, out := rk.Input(), rk.Output()
		tx, rx := ch[q][next], ch[q][prev]
		tb := dsl.TB(0)
		rx.Signal(tb, dsl.SyncNone) // my scratch and output may be written
		tx.Wait(tb, dsl.SyncAfter)
		tx.Put(scr[next].Chunk(0, 1), in.Chunk(q, 1), tb)
		tx.Signal(tb, dsl.SyncBefore)
		for s := range n - 1 {
			c := (q - s - 1 + 2*n) % n
			rx.Wait(tb, dsl.SyncAfter)
			if s < n-2 {
				rk.Reduce(scr[q].Chunk(s, 1), []dsl.Chunk{in.Chunk(c, 1), scr[q].Chunk(s, 1)}, dsl.Sum, tb)
				tx.Put(scr[next].Chunk(s+1, 1), scr[q].Chunk(s, 1), tb)
				tx.Signal(tb, dsl.SyncBefore)
			} else {
				rk.Reduce(out.Chunk(c, 1), []dsl.Chunk{in.Chunk(c, 1), scr[q].Chunk(s, 1)}, dsl.Sum, tb)
			}
		}
		for s := range n - 1 {
			c := (q + 1 - s + 2*n) % n
			tx.Put(p.Rank(next).Output().Chunk(c, 1), out.Chunk(c, 1), tb)
			tx.Signal(tb, dsl.SyncBefore)
			rx.Wait(tb, dsl.SyncAfter)
		}
	}
}

// allreducePacket: LL protocol. Scratch region A receives the peers'
// contributions to this rank's chunk, region B their reduced chunks; the
// packets' flags replace signals.
func allreducePacket(p *dsl.Program, n int) {
	ch := mesh(p, n)
	a := make([]dsl.Buffer, n)
	b := make([]dsl.Buffer, n)
	for r := range n {
		a[r] = p.Rank(r).NewScratch(n - 1)
		b[r] = p.Rank(r).NewScratch(n - 1)
	}
	for r := range n {
		rk := p.Rank(r)
		in, out := rk.Input(), rk.Output()
		tb := dsl.TB(0)
		for _, q := range peers(r, n) {
			ch[r][q].PutPackets(a[q].Chunk(slot(q, r, n), 1), in.Chunk(q, 1), tb)
		}
		var pkts []dsl.Chunk
		for s := range n - 1 {
			pkts = append(pkts, a[r].Chunk(s, 1))
		}
		rk.ReducePackets(out.Chunk(r, 1), in.Chunk(r, 1), pkts, dsl.Sum, tb)
		for _, q := range peers(r, n) {
			ch[r][q].PutPackets(b[q].Chunk(slot(q, r, n), 1), out.Chunk(r, 1), tb)
		}
		for _, q := range peers(r, n) {
			rk.UnpackPackets(out.Chunk(q, 1), b[r].Chunk(slot(r, q, n), 1), tb)
		}
	}
}

// allreducePort: the two-shot algorithm over port channels: every put is
// followed by a signal on its channel (fused to put_with_signal), the
// final ones also by a flush (put_with_signal_and_flush).
func allreducePort(p *dsl.Program, n int) {
	pc := make([][]*dsl.PortChannel, n)
	for r := range n {
		pc[r] = make([]*dsl.PortChannel, n)
		for q := range n {
			if q != r {
				pc[r][q] = p.PortChannel(q, r)
			}
		}
	}
	scr := make([]dsl.Buffer, n)
	for r := range n {
		scr[r] = p.Rank(r).NewScratch(n - 1)
	}
	for r := range n {
		rk := p.Rank(r)
		in, out := rk.Input(), rk.Output()
		tb := dsl.TB(0)
		for _, q := range peers(r, n) {
			pc[r][q].Signal(tb, dsl.SyncNone)
		}
		for _, q := range peers(r, n) {
			pc[r][q].Wait(tb, dsl.SyncAfter)
		}
		for _, q := range peers(r, n) {
			pc[r][q].Put(scr[q].Chunk(slot(q, r, n), 1), in.Chunk(q, 1), tb)
			pc[r][q].Signal(tb, dsl.SyncNone)
		}
		for _, q := range peers(r, n) {
			pc[r][q].Wait(tb, dsl.SyncAfter)
		}
		srcs := []dsl.Chunk{in.Chunk(r, 1)}
		for s := range n - 1 {
			srcs = append(srcs, scr[r].Chunk(s, 1))
		}
		rk.Reduce(out.Chunk(r, 1), srcs, dsl.Sum, tb)
		for _, q := range peers(r, n) {
			pc[r][q].Put(p.Rank(q).Output().Chunk(r, 1), out.Chunk(r, 1), tb)
			pc[r][q].Signal(tb, dsl.SyncNone)
			pc[r][q].Flush(tb, dsl.SyncNone)
		}
		for _, q := range peers(r, n) {
			pc[r][q].Wait(tb, dsl.SyncAfter)
		}
	}
}

// allgatherMesh: every rank copies its input into its own output slot and
// puts it into every peer's.
func allgatherMesh(p *dsl.Program, n int) {
	ch := mesh(p, n)
	for r := range n {
		rk := p.Rank(r)
		tb := dsl.TB(0)
		handshake(ch, r, n, tb)
		rk.Copy(rk.Output().Chunk(r, 1), rk.Input().Chunk(0, 1), tb)
		for _, q := range peers(r, n) {
			ch[r][q].Put(p.Rank(q).Output().Chunk(r, 1), rk.Input().Chunk(0, 1), tb)
		}
		exchange(ch, r, n, tb)
	}
}

// allgatherRing: rank q copies its input to output chunk q, then in step s
// sends output chunk q-s to the next rank (its own first, then what it
// received in the step before).
func allgatherRing(p *dsl.Program, n int) {
	ch := mesh(p, n)
	for q := range n {
		next, prev := (q+1)%n, (q+n-1)%n
		rk := p.Rank(q)
		out := rk.Output()
		tx, rx := ch[q][next], ch[q][prev]
		tb := dsl.TB(0)
		rx.Signal(tb, dsl.SyncNone)
		tx.Wait(tb, dsl.SyncAfter)
		rk.Copy(out.Chunk(q, 1), rk.Input().Chunk(0, 1), tb)
		for s := range n - 1 {
			c := (q - s + n) % n
			tx.Put(p.Rank(next).Output().Chunk(c, 1), out.Chunk(c, 1), tb)
			tx.Signal(tb, dsl.SyncBefore)
			rx.Wait(tb, dsl.SyncAfter)
		}
	}
}

// reduceScatterAllPairs: input n chunks, output one; rank r puts input
// chunk q into peer q's scratch and reduces its own chunk r with what it
// received.
func reduceScatterAllPairs(p *dsl.Program, n int) {
	ch := mesh(p, n)
	scr := make([]dsl.Buffer, n)
	for r := range n {
		scr[r] = p.Rank(r).NewScratch(n - 1)
	}
	for r := range n {
		rk := p.Rank(r)
		in := rk.Input()
		tb := dsl.TB(0)
		handshake(ch, r, n, tb)
		for _, q := range peers(r, n) {
			ch[r][q].Put(scr[q].Chunk(slot(q, r, n), 1), in.Chunk(q, 1), tb)
		}
		exchange(ch, r, n, tb)
		srcs := []dsl.Chunk{in.Chunk(r, 1)}
		for s := range n - 1 {
			srcs = append(srcs, scr[r].Chunk(s, 1))
		}
		rk.Reduce(rk.Output().Chunk(0, 1), srcs, dsl.Sum, tb)
	}
}
