package plan

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Show writes a listing of p for people: a header, then per rank its
// buffers, channels, remote buffers and semaphores, then one line per op:
//
//	rank 0 tb 1  #3  put  in[0:1] -> rank1 out[2:3] via mem ch0
//
// Local chunks print as buf[start:end] (in, out, scr), remote ones with
// their owner (rank1 out[2:3]), switch ones with their group
// (group{0,1} in[0:1]); channel ids are GPU-level ids. Pipeline bodies
// print as #3.0, #3.1, ... References that do not resolve print with a
// '?' instead of failing, so Show works on invalid plans too.
func (p *Plan) Show(w io.Writer) error {
	bw := bufio.NewWriter(w)
	maxMsg := strconv.FormatUint(p.MaxMessageSize, 10)
	if p.MaxMessageSize == DefaultMaxMessageSize {
		maxMsg = "max"
	}
	fmt.Fprintf(bw, "plan %q: %s, protocol %v, %d ranks, inplace %v, %d threads/block, alignment %d, messages %d..%s bytes",
		p.Name, p.Collective, p.Protocol, len(p.GPUs), p.InPlace, p.NumThreadsPerBlock, p.BufferAlignment, p.MinMessageSize, maxMsg)
	if p.ReuseResources {
		bw.WriteString(", reuse_resources")
	}
	if p.UseDoubleScratchBuffer {
		bw.WriteString(", double scratch")
	}
	bw.WriteString("\n")
	for gi := range p.GPUs {
		g := &p.GPUs[gi]
		fmt.Fprintf(bw, "rank %d: in %d, out %d, scr %d chunks", gi, g.InputChunks, g.OutputChunks, g.ScratchChunks)
		for _, t := range []ChannelType{ChannelMemory, ChannelPort} {
			for id, peer := range g.ChannelPeers(t) {
				fmt.Fprintf(bw, "; %s ch%d -> rank%d", t.Short(), id, peer)
			}
		}
		for id, sg := range g.SwitchGroups() {
			fmt.Fprintf(bw, "; sw ch%d %s %s", id, groupName(sg.Ranks), sg.Buffer.Short())
		}
		for i, rb := range g.RemoteBuffers {
			var ts []string
			for _, t := range rb.AccessChannelTypes {
				ts = append(ts, t.Short())
			}
			fmt.Fprintf(bw, "; rbuf%d rank%d %s (%s)", i, rb.Rank, rb.Type.Short(), strings.Join(ts, ","))
		}
		if len(g.Semaphores) > 0 {
			var vs []string
			for _, s := range g.Semaphores {
				vs = append(vs, strconv.Itoa(s.InitValue))
			}
			fmt.Fprintf(bw, "; semaphores [%s]", strings.Join(vs, " "))
		}
		bw.WriteString("\n")
		for ti := range g.ThreadBlocks {
			tb := &g.ThreadBlocks[ti]
			for oi := range tb.Ops {
				op := &tb.Ops[oi]
				fmt.Fprintf(bw, "rank %d tb %d  #%d  %s\n", gi, ti, oi, p.opLine(gi, ti, op))
				for bi := range op.Ops {
					fmt.Fprintf(bw, "rank %d tb %d  #%d.%d  %s\n", gi, ti, oi, bi, p.opLine(gi, ti, &op.Ops[bi]))
				}
			}
		}
	}
	return bw.Flush()
}

func groupName(ranks []int) string {
	var rs []string
	for _, r := range ranks {
		rs = append(rs, strconv.Itoa(r))
	}
	return "group{" + strings.Join(rs, ",") + "}"
}

func (p *Plan) refString(gi, ti int, op *Op, b BufRef) string {
	rng := fmt.Sprintf("[%d:%d]", b.Index, b.Index+b.Size)
	switch b.Kind {
	case RefLocal:
		return b.Type.Short() + rng
	case RefRemote:
		if _, rb, err := p.RemoteBufferOf(gi, ti, op.ChannelType, b.ID); err == nil {
			return fmt.Sprintf("rank%d %s%s", rb.Rank, rb.Type.Short(), rng)
		}
		return fmt.Sprintf("rbuf?%d%s", b.ID, rng)
	case RefSwitch:
		if sg, err := p.SwitchGroupOf(gi, ti, b.ID); err == nil {
			return fmt.Sprintf("%s %s%s", groupName(sg.Ranks), sg.Buffer.Short(), rng)
		}
		return fmt.Sprintf("switch?%d%s", b.ID, rng)
	}
	return "?" + rng
}

func (p *Plan) refList(gi, ti int, op *Op, bs []BufRef) string {
	var out []string
	for _, b := range bs {
		out = append(out, p.refString(gi, ti, op, b))
	}
	return strings.Join(out, ", ")
}

func (p *Plan) channelList(gi, ti int, op *Op) string {
	if op.ChannelType == ChannelNone {
		return ""
	}
	var ids []string
	for _, i := range op.ChannelIDs {
		if id, err := p.TBChannel(gi, ti, op.ChannelType, i); err == nil {
			ids = append(ids, fmt.Sprintf("ch%d", id))
		} else {
			ids = append(ids, fmt.Sprintf("ch?%d", i))
		}
	}
	s := "via " + op.ChannelType.Short()
	if len(ids) > 0 {
		s += " " + strings.Join(ids, ",")
	}
	return s
}

func (p *Plan) opLine(gi, ti int, op *Op) string {
	var parts []string
	add := func(s string) {
		if s != "" {
			parts = append(parts, s)
		}
	}
	add(op.Name.String())
	switch op.Name {
	case OpBarrier:
		add(fmt.Sprintf("id %d, %d tbs", op.BarrierID, op.NumThreadBlocks))
	case OpSemAcquire, OpSemRelease:
		add("sem " + intList(op.SemaphoreIDs))
	case OpPipeline:
		if op.Iter != nil {
			add(fmt.Sprintf("unit %d bytes, %d chunks, %d body ops", op.Iter.UnitSize, op.Iter.NumChunks, len(op.Ops)))
		}
	case OpGroupLoadReduce, OpGroupStore, OpGroupStorePackets:
		if op.GroupBuffer == BufferNone { // buffer form
			add(p.refList(gi, ti, op, op.Src) + " -> " + p.refList(gi, ti, op, op.Dst))
			break
		}
		grp := fmt.Sprintf("%s[%d:%d]", op.GroupBuffer.Short(), op.GroupOffset, op.GroupOffset+op.GroupSize)
		if len(op.ChannelIDs) > 0 {
			if sg, err := p.SwitchGroupOf(gi, ti, op.ChannelIDs[0]); err == nil {
				grp = groupName(sg.Ranks) + " " + grp
			}
		}
		chunk := func(c *RankChunk) string {
			if c == nil {
				return "?"
			}
			return fmt.Sprintf("%s[%d:%d]", c.Type.Short(), c.Index, c.Index+c.Size)
		}
		if op.Name == OpGroupLoadReduce {
			add(grp + " -> " + chunk(op.DstChunk))
		} else {
			add(chunk(op.SrcChunk) + " -> " + grp)
		}
	default:
		if op.ChannelType == ChannelMemory || op.ChannelType == ChannelPort {
			if len(op.Src) == 0 && len(op.Dst) == 0 && len(op.ChannelIDs) > 0 {
				var peers []string
				for _, i := range op.ChannelIDs {
					peer := "rank?"
					if id, err := p.TBChannel(gi, ti, op.ChannelType, i); err == nil {
						if r, err := p.ChannelPeer(gi, op.ChannelType, id); err == nil {
							peer = fmt.Sprintf("rank%d", r)
						}
					}
					peers = append(peers, peer)
				}
				add(strings.Join(peers, ", "))
			}
		}
		if len(op.Src) > 0 || len(op.Dst) > 0 {
			add(p.refList(gi, ti, op, op.Src) + " -> " + p.refList(gi, ti, op, op.Dst))
		}
	}
	add(p.channelList(gi, ti, op))
	if op.ReduceOp != ReduceNone {
		add("(" + op.ReduceOp.String() + ")")
	}
	if op.TBG != nil {
		add(fmt.Sprintf("tbg %d/%d", op.TBG.ID, op.TBG.Size))
	}
	if op.Name != OpSemAcquire && op.Name != OpSemRelease && len(op.SemaphoreIDs) > 0 {
		add("sem " + intList(op.SemaphoreIDs))
	}
	return strings.Join(parts, "  ")
}

func intList(xs []int) string {
	var out []string
	for _, x := range xs {
		out = append(out, strconv.Itoa(x))
	}
	return strings.Join(out, ",")
}
