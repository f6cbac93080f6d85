package plan

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ErrFormat is wrapped by every decoding error of Read and Parse.
var ErrFormat = errors.New("plan: bad format")

// maxPlanBytes bounds what Read accepts (a plan of 64 MiB is far beyond any
// real one).
const maxPlanBytes = 64 << 20

// Read decodes a plan from r (see Parse).
func Read(r io.Reader) (*Plan, error) {
	data, err := io.ReadAll(io.LimitReader(r, maxPlanBytes+1))
	if err != nil {
		return nil, fmt.Errorf("plan: read: %w", err)
	}
	if len(data) > maxPlanBytes {
		return nil, fmt.Errorf("%w: larger than %d bytes", ErrFormat, maxPlanBytes)
	}
	return Parse(data)
}

// Parse decodes an MSCCL++ execution plan. Decoding is strict: unknown JSON
// fields, unknown op names, channel/buffer types and reduce ops are errors
// that name where they are (gpu, thread block, op index). Absent top-level
// fields get the executor's defaults. Parse checks the format only; call
// Validate for the structure.
func Parse(data []byte) (*Plan, error) {
	var w wPlan
	if err := strictUnmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFormat, err)
	}
	return w.toPlan()
}

func strictUnmarshal(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return fmt.Errorf("unknown field %s (this version of chorus does not know it; it refuses the plan rather than drop what the field may change: docs/plans.md lists the fields)", f)
		}
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// Marshal encodes p as indented JSON (two spaces, fields in the order
// MSCCL++'s DSL writes them, a final newline). The output is a function of
// p alone, so equal plans give equal bytes. It fails only on enum values
// outside their types (for example a zero OpName).
func (p *Plan) Marshal() ([]byte, error) {
	w, err := fromPlan(p)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	e.SetIndent("", "  ")
	if err := e.Encode(w); err != nil {
		return nil, fmt.Errorf("plan: encode: %w", err)
	}
	return buf.Bytes(), nil
}

// Write writes Marshal's output to w.
func (p *Plan) Write(w io.Writer) error {
	b, err := p.Marshal()
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// ---- wire structs (JSON field order = MSCCL++ DSL order) ----

type wPlan struct {
	Name                   *string `json:"name"`
	Collective             *string `json:"collective"`
	Protocol               *string `json:"protocol"`
	InPlace                *bool   `json:"inplace"`
	ReuseResources         *bool   `json:"reuse_resources,omitempty"`
	GPUs                   []wGPU  `json:"gpus"`
	NumThreadsPerBlock     *int    `json:"num_threads_per_block,omitempty"`
	UseDoubleScratchBuffer *bool   `json:"use_double_scratch_buffer,omitempty"`
	BufferAlignment        *int    `json:"buffer_alignment,omitempty"`
	MinMessageSize         *uint64 `json:"min_message_size,omitempty"`
	MaxMessageSize         *uint64 `json:"max_message_size,omitempty"`
}

type wGPU struct {
	ID            *int            `json:"id"`
	InputChunks   *int            `json:"input_chunks"`
	OutputChunks  *int            `json:"output_chunks"`
	ScratchChunks *int            `json:"scratch_chunks"`
	ThreadBlocks  []wTB           `json:"threadblocks"`
	Channels      []wChannel      `json:"channels"`
	RemoteBuffers []wRemoteBuffer `json:"remote_buffers"`
	Semaphores    []wSemaphore    `json:"semaphores"`
}

type wChannel struct {
	ChannelType string      `json:"channel_type"`
	ConnectedTo *[]int      `json:"connected_to,omitempty"`
	BufferType  *string     `json:"buffer_type,omitempty"`
	RankGroups  *[]wRankGrp `json:"rank_groups,omitempty"`
}

type wRankGrp struct {
	Size  *int  `json:"size"`
	Ranks []int `json:"ranks"`
}

type wRemoteBuffer struct {
	Rank               *int     `json:"rank"`
	Type               *string  `json:"type"`
	AccessChannelTypes []string `json:"access_channel_types"`
}

type wSemaphore struct {
	InitValue *int `json:"init_value"`
}

type wTB struct {
	ID               *int              `json:"id"`
	Ops              []json.RawMessage `json:"ops"`
	Channels         []wTBChannel      `json:"channels"`
	RemoteBufferRefs []wRBRef          `json:"remote_buffer_refs"`
}

type wTBChannel struct {
	ChannelType string  `json:"channel_type"`
	ChannelIDs  []int   `json:"channel_ids"`
	Buff        *string `json:"buff,omitempty"`
}

type wRBRef struct {
	AccessChannelType string `json:"access_channel_type"`
	RemoteBufferIDs   []int  `json:"remote_buffer_ids"`
}

type wOp struct {
	Name         string            `json:"name"`
	SrcBuff      []wBuf            `json:"src_buff,omitempty"`
	DstBuff      []wBuf            `json:"dst_buff,omitempty"`
	ChannelIDs   []int             `json:"channel_ids,omitempty"`
	ChannelType  string            `json:"channel_type,omitempty"`
	ReduceOp     string            `json:"reduce_op,omitempty"`
	TBGInfo      *wTBG             `json:"tbg_info,omitempty"`
	TBG          *wTBG             `json:"tbg,omitempty"` // read-only alias some DSL versions write
	BarrierID    *int              `json:"barrier_id,omitempty"`
	NumTBs       *int              `json:"num_threadblocks,omitempty"`
	SemaphoreIDs []int             `json:"semaphore_ids,omitempty"`
	IterContext  *wIter            `json:"iter_context,omitempty"`
	Ops          []json.RawMessage `json:"ops,omitempty"`
	SrcChunk     *wChunk           `json:"src_chunk,omitempty"`
	BufferType   string            `json:"buffer_type,omitempty"`
	BufferOffset *int              `json:"buffer_offset,omitempty"`
	Size         *int              `json:"size,omitempty"`
	DstChunk     *wChunk           `json:"dst_chunk,omitempty"`
}

type wBuf struct {
	Rank            *int    `json:"rank,omitempty"`
	Type            *string `json:"type,omitempty"`
	BufferID        *int    `json:"buffer_id,omitempty"`
	SwitchChannelID *int    `json:"switch_channel_id,omitempty"`
	Index           *int    `json:"index"`
	Size            *int    `json:"size"`
}

type wTBG struct {
	TBID    *int `json:"tb_id"`
	TBGSize *int `json:"tbg_size"`
}

type wIter struct {
	UnitSize  *int `json:"unit_size"`
	NumChunks *int `json:"num_chunks"`
}

type wChunk struct {
	Rank  *int    `json:"rank"`
	Type  *string `json:"type"`
	Index *int    `json:"index"`
	Size  *int    `json:"size"`
}

// ---- decoding ----

func formatErr(where, format string, args ...any) error {
	msg := fmt.Sprintf(format, args...)
	if where != "" {
		msg = where + ": " + msg
	}
	return fmt.Errorf("%w: %s", ErrFormat, msg)
}

func need[T any](v *T, where, field string) (T, error) {
	if v == nil {
		var z T
		return z, formatErr(where, "missing field %q", field)
	}
	return *v, nil
}

func (w *wPlan) toPlan() (*Plan, error) {
	p := &Plan{
		NumThreadsPerBlock: DefaultNumThreadsPerBlock,
		BufferAlignment:    DefaultBufferAlignment,
		MaxMessageSize:     DefaultMaxMessageSize,
	}
	var err error
	if p.Name, err = need(w.Name, "plan", "name"); err != nil {
		return nil, err
	}
	col, err := need(w.Collective, "plan", "collective")
	if err != nil {
		return nil, err
	}
	p.Collective = Collective(col)
	proto, err := need(w.Protocol, "plan", "protocol")
	if err != nil {
		return nil, err
	}
	if p.Protocol, err = ParseProtocol(proto); err != nil {
		return nil, formatErr("plan", "%v", err)
	}
	if p.InPlace, err = need(w.InPlace, "plan", "inplace"); err != nil {
		return nil, err
	}
	if w.ReuseResources != nil {
		p.ReuseResources = *w.ReuseResources
	}
	if w.NumThreadsPerBlock != nil {
		p.NumThreadsPerBlock = *w.NumThreadsPerBlock
	}
	if w.UseDoubleScratchBuffer != nil {
		p.UseDoubleScratchBuffer = *w.UseDoubleScratchBuffer
	}
	if w.BufferAlignment != nil {
		p.BufferAlignment = *w.BufferAlignment
	}
	if w.MinMessageSize != nil {
		p.MinMessageSize = *w.MinMessageSize
	}
	if w.MaxMessageSize != nil {
		p.MaxMessageSize = *w.MaxMessageSize
	}
	if w.GPUs == nil {
		return nil, formatErr("plan", "missing field %q", "gpus")
	}
	for gi := range w.GPUs {
		g, err := w.GPUs[gi].toGPU(gi)
		if err != nil {
			return nil, err
		}
		p.GPUs = append(p.GPUs, g)
	}
	return p, nil
}

func (w *wGPU) toGPU(gi int) (GPU, error) {
	var g GPU
	where := fmt.Sprintf("gpu %d", gi)
	var err error
	if g.ID, err = need(w.ID, where, "id"); err != nil {
		return g, err
	}
	if g.InputChunks, err = need(w.InputChunks, where, "input_chunks"); err != nil {
		return g, err
	}
	if g.OutputChunks, err = need(w.OutputChunks, where, "output_chunks"); err != nil {
		return g, err
	}
	if g.ScratchChunks, err = need(w.ScratchChunks, where, "scratch_chunks"); err != nil {
		return g, err
	}
	for ci, wc := range w.Channels {
		cwhere := fmt.Sprintf("%s channel %d", where, ci)
		t, err := ParseChannelType(wc.ChannelType)
		if err != nil {
			return g, formatErr(cwhere, "%v", err)
		}
		c := Channel{Type: t}
		switch t {
		case ChannelMemory, ChannelPort:
			if wc.ConnectedTo == nil {
				return g, formatErr(cwhere, "missing field %q", "connected_to")
			}
			if wc.BufferType != nil || wc.RankGroups != nil {
				return g, formatErr(cwhere, "%s channel with switch fields", t)
			}
			c.ConnectedTo = nilIfEmpty(*wc.ConnectedTo)
		case ChannelSwitch:
			if wc.ConnectedTo != nil {
				return g, formatErr(cwhere, "switch channel with %q", "connected_to")
			}
			bt, err := need(wc.BufferType, cwhere, "buffer_type")
			if err != nil {
				return g, err
			}
			if c.BufferType, err = ParseBufferType(bt); err != nil {
				return g, formatErr(cwhere, "%v", err)
			}
			if wc.RankGroups == nil {
				return g, formatErr(cwhere, "missing field %q", "rank_groups")
			}
			for ri, rg := range *wc.RankGroups {
				size, err := need(rg.Size, fmt.Sprintf("%s rank group %d", cwhere, ri), "size")
				if err != nil {
					return g, err
				}
				c.RankGroups = append(c.RankGroups, RankGroup{Size: size, Ranks: nilIfEmpty(rg.Ranks)})
			}
		default:
			return g, formatErr(cwhere, "channel type %q is not a GPU channel", wc.ChannelType)
		}
		g.Channels = append(g.Channels, c)
	}
	for ri, wr := range w.RemoteBuffers {
		rwhere := fmt.Sprintf("%s remote buffer %d", where, ri)
		var rb RemoteBuffer
		if rb.Rank, err = need(wr.Rank, rwhere, "rank"); err != nil {
			return g, err
		}
		ts, err := need(wr.Type, rwhere, "type")
		if err != nil {
			return g, err
		}
		if rb.Type, err = ParseBufferType(ts); err != nil {
			return g, formatErr(rwhere, "%v", err)
		}
		for _, s := range wr.AccessChannelTypes {
			ct, err := ParseChannelType(s)
			if err != nil {
				return g, formatErr(rwhere, "%v", err)
			}
			rb.AccessChannelTypes = append(rb.AccessChannelTypes, ct)
		}
		g.RemoteBuffers = append(g.RemoteBuffers, rb)
	}
	for si, ws := range w.Semaphores {
		v, err := need(ws.InitValue, fmt.Sprintf("%s semaphore %d", where, si), "init_value")
		if err != nil {
			return g, err
		}
		g.Semaphores = append(g.Semaphores, Semaphore{InitValue: v})
	}
	for ti := range w.ThreadBlocks {
		tb, err := w.ThreadBlocks[ti].toTB(gi, ti)
		if err != nil {
			return g, err
		}
		g.ThreadBlocks = append(g.ThreadBlocks, tb)
	}
	return g, nil
}

func (w *wTB) toTB(gi, ti int) (ThreadBlock, error) {
	var tb ThreadBlock
	where := fmt.Sprintf("gpu %d tb %d", gi, ti)
	var err error
	if tb.ID, err = need(w.ID, where, "id"); err != nil {
		return tb, err
	}
	for ci, wc := range w.Channels {
		t, err := ParseChannelType(wc.ChannelType)
		if err != nil {
			return tb, formatErr(fmt.Sprintf("%s channels[%d]", where, ci), "%v", err)
		}
		c := TBChannel{Type: t, ChannelIDs: nilIfEmpty(wc.ChannelIDs)}
		if wc.Buff != nil {
			if c.Buff, err = ParseBufferType(*wc.Buff); err != nil {
				return tb, formatErr(fmt.Sprintf("%s channels[%d]", where, ci), "%v", err)
			}
		}
		tb.Channels = append(tb.Channels, c)
	}
	for ri, wr := range w.RemoteBufferRefs {
		t, err := ParseChannelType(wr.AccessChannelType)
		if err != nil {
			return tb, formatErr(fmt.Sprintf("%s remote_buffer_refs[%d]", where, ri), "%v", err)
		}
		tb.RemoteBufferRefs = append(tb.RemoteBufferRefs, RemoteBufRef{AccessChannelType: t, RemoteBufferIDs: nilIfEmpty(wr.RemoteBufferIDs)})
	}
	for oi, raw := range w.Ops {
		op, err := decodeOp(raw, fmt.Sprintf("%s op %d", where, oi), 0)
		if err != nil {
			return tb, err
		}
		tb.Ops = append(tb.Ops, op)
	}
	return tb, nil
}

func decodeOp(raw json.RawMessage, where string, depth int) (Op, error) {
	var op Op
	var w wOp
	if err := strictUnmarshal(raw, &w); err != nil {
		return op, formatErr(where, "%v", err)
	}
	name, err := ParseOpName(w.Name)
	if err != nil {
		return op, formatErr(where, "%v", err)
	}
	op.Name = name
	where = fmt.Sprintf("%s (%s)", where, name)
	if op.Src, err = decodeBufs(w.SrcBuff, where, "src_buff"); err != nil {
		return op, err
	}
	if op.Dst, err = decodeBufs(w.DstBuff, where, "dst_buff"); err != nil {
		return op, err
	}
	op.ChannelIDs = nilIfEmpty(w.ChannelIDs)
	if w.ChannelType != "" {
		if op.ChannelType, err = ParseChannelType(w.ChannelType); err != nil {
			return op, formatErr(where, "%v", err)
		}
	}
	if w.ReduceOp != "" {
		if op.ReduceOp, err = ParseReduceOp(w.ReduceOp); err != nil {
			return op, formatErr(where, "%v", err)
		}
	}
	tbg := w.TBGInfo
	if tbg == nil {
		tbg = w.TBG
	} else if w.TBG != nil {
		return op, formatErr(where, "both %q and %q", "tbg_info", "tbg")
	}
	if tbg != nil {
		id, err := need(tbg.TBID, where+" tbg_info", "tb_id")
		if err != nil {
			return op, err
		}
		size, err := need(tbg.TBGSize, where+" tbg_info", "tbg_size")
		if err != nil {
			return op, err
		}
		op.TBG = &TBGroup{ID: id, Size: size}
	}
	op.SemaphoreIDs = nilIfEmpty(w.SemaphoreIDs)

	// Kind-specific fields: only the kinds that own them may carry them,
	// so the writer (which writes them by kind) loses nothing.
	if name == OpBarrier {
		if op.BarrierID, err = need(w.BarrierID, where, "barrier_id"); err != nil {
			return op, err
		}
		if op.NumThreadBlocks, err = need(w.NumTBs, where, "num_threadblocks"); err != nil {
			return op, err
		}
	} else if w.BarrierID != nil || w.NumTBs != nil {
		return op, formatErr(where, "barrier fields on a %s op", name)
	}
	if name == OpPipeline {
		ic, err := need(w.IterContext, where, "iter_context")
		if err != nil {
			return op, err
		}
		op.Iter = &IterContext{}
		if op.Iter.UnitSize, err = need(ic.UnitSize, where+" iter_context", "unit_size"); err != nil {
			return op, err
		}
		if op.Iter.NumChunks, err = need(ic.NumChunks, where+" iter_context", "num_chunks"); err != nil {
			return op, err
		}
		if depth > 0 {
			return op, formatErr(where, "nested pipeline")
		}
		for i, r := range w.Ops {
			in, err := decodeOp(r, fmt.Sprintf("%s body op %d", where, i), depth+1)
			if err != nil {
				return op, err
			}
			op.Ops = append(op.Ops, in)
		}
	} else if w.IterContext != nil || w.Ops != nil {
		return op, formatErr(where, "pipeline fields on a %s op", name)
	}
	group := isGroupOne(name)
	bufferForm := group && w.BufferType == "" && w.BufferOffset == nil && w.Size == nil && w.SrcChunk == nil && w.DstChunk == nil
	if group && !bufferForm {
		bt, err := need(nilIfBlank(w.BufferType), where, "buffer_type")
		if err != nil {
			return op, err
		}
		if op.GroupBuffer, err = ParseBufferType(bt); err != nil {
			return op, formatErr(where, "%v", err)
		}
		if op.GroupOffset, err = need(w.BufferOffset, where, "buffer_offset"); err != nil {
			return op, err
		}
		if op.GroupSize, err = need(w.Size, where, "size"); err != nil {
			return op, err
		}
	} else if w.BufferType != "" || w.BufferOffset != nil || w.Size != nil {
		return op, formatErr(where, "switch group fields on a %s op", name)
	}
	if isGroupStore(name) && !bufferForm {
		c, err := need(w.SrcChunk, where, "src_chunk")
		if err != nil {
			return op, err
		}
		if op.SrcChunk, err = decodeChunk(&c, where+" src_chunk"); err != nil {
			return op, err
		}
	} else if w.SrcChunk != nil {
		return op, formatErr(where, "%q on a %s op", "src_chunk", name)
	}
	if name == OpGroupLoadReduce && !bufferForm {
		c, err := need(w.DstChunk, where, "dst_chunk")
		if err != nil {
			return op, err
		}
		if op.DstChunk, err = decodeChunk(&c, where+" dst_chunk"); err != nil {
			return op, err
		}
	} else if w.DstChunk != nil {
		return op, formatErr(where, "%q on a %s op", "dst_chunk", name)
	}
	return op, nil
}

func nilIfBlank(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

func decodeChunk(w *wChunk, where string) (*RankChunk, error) {
	var c RankChunk
	var err error
	if c.Rank, err = need(w.Rank, where, "rank"); err != nil {
		return nil, err
	}
	ts, err := need(w.Type, where, "type")
	if err != nil {
		return nil, err
	}
	if c.Type, err = ParseBufferType(ts); err != nil {
		return nil, formatErr(where, "%v", err)
	}
	if c.Index, err = need(w.Index, where, "index"); err != nil {
		return nil, err
	}
	if c.Size, err = need(w.Size, where, "size"); err != nil {
		return nil, err
	}
	return &c, nil
}

func decodeBufs(ws []wBuf, where, field string) ([]BufRef, error) {
	var out []BufRef
	for i, w := range ws {
		bw := fmt.Sprintf("%s %s[%d]", where, field, i)
		var b BufRef
		n := 0
		if w.Type != nil {
			n++
			t, err := ParseBufferType(*w.Type)
			if err != nil {
				return nil, formatErr(bw, "%v", err)
			}
			b.Kind, b.Type = RefLocal, t
		}
		if w.BufferID != nil {
			n++
			b.Kind, b.ID = RefRemote, *w.BufferID
		}
		if w.SwitchChannelID != nil {
			n++
			b.Kind, b.ID = RefSwitch, *w.SwitchChannelID
		}
		if n != 1 {
			return nil, formatErr(bw, "needs exactly one of %q, %q, %q", "type", "buffer_id", "switch_channel_id")
		}
		if w.Rank != nil {
			if b.Kind != RefLocal {
				return nil, formatErr(bw, "%q on a %s reference (only local references may name their rank)", "rank", kindName(b.Kind))
			}
			b.HasRank, b.Rank = true, *w.Rank
		}
		var err error
		if b.Index, err = need(w.Index, bw, "index"); err != nil {
			return nil, err
		}
		if b.Size, err = need(w.Size, bw, "size"); err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// ---- encoding ----

func ptr[T any](v T) *T { return &v }

func encErr(where, format string, args ...any) error {
	return fmt.Errorf("plan: encode %s: %s", where, fmt.Sprintf(format, args...))
}

func fromPlan(p *Plan) (*wPlan, error) {
	if p.Protocol != Simple && p.Protocol != LL {
		return nil, encErr("plan", "invalid protocol %v", p.Protocol)
	}
	w := &wPlan{
		Name:                   ptr(p.Name),
		Collective:             ptr(string(p.Collective)),
		Protocol:               ptr(p.Protocol.String()),
		InPlace:                ptr(p.InPlace),
		ReuseResources:         ptr(p.ReuseResources),
		GPUs:                   []wGPU{},
		NumThreadsPerBlock:     ptr(p.NumThreadsPerBlock),
		UseDoubleScratchBuffer: ptr(p.UseDoubleScratchBuffer),
		BufferAlignment:        ptr(p.BufferAlignment),
		MinMessageSize:         ptr(p.MinMessageSize),
		MaxMessageSize:         ptr(p.MaxMessageSize),
	}
	for gi := range p.GPUs {
		g, err := fromGPU(&p.GPUs[gi], gi)
		if err != nil {
			return nil, err
		}
		w.GPUs = append(w.GPUs, g)
	}
	return w, nil
}

func bufName(b BufferType, where string) (string, error) {
	if b < Input || b > Scratch {
		return "", encErr(where, "invalid buffer type %v", b)
	}
	return b.String(), nil
}

func chanName(c ChannelType, where string) (string, error) {
	if c > ChannelSwitch {
		return "", encErr(where, "invalid channel type %v", c)
	}
	return c.String(), nil
}

func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func fromGPU(g *GPU, gi int) (wGPU, error) {
	where := fmt.Sprintf("gpu %d", gi)
	w := wGPU{
		ID: ptr(g.ID), InputChunks: ptr(g.InputChunks), OutputChunks: ptr(g.OutputChunks), ScratchChunks: ptr(g.ScratchChunks),
		ThreadBlocks: []wTB{}, Channels: []wChannel{}, RemoteBuffers: []wRemoteBuffer{}, Semaphores: []wSemaphore{},
	}
	for ti := range g.ThreadBlocks {
		tb, err := fromTB(&g.ThreadBlocks[ti], fmt.Sprintf("%s tb %d", where, ti))
		if err != nil {
			return w, err
		}
		w.ThreadBlocks = append(w.ThreadBlocks, tb)
	}
	for ci, c := range g.Channels {
		cw := fmt.Sprintf("%s channel %d", where, ci)
		wc := wChannel{ChannelType: c.Type.String()}
		switch c.Type {
		case ChannelMemory, ChannelPort:
			wc.ConnectedTo = ptr(orEmpty(c.ConnectedTo))
		case ChannelSwitch:
			bt, err := bufName(c.BufferType, cw)
			if err != nil {
				return w, err
			}
			wc.BufferType = &bt
			rgs := []wRankGrp{}
			for _, rg := range c.RankGroups {
				rgs = append(rgs, wRankGrp{Size: ptr(rg.Size), Ranks: orEmpty(rg.Ranks)})
			}
			wc.RankGroups = &rgs
		default:
			return w, encErr(cw, "channel type %v is not a GPU channel", c.Type)
		}
		w.Channels = append(w.Channels, wc)
	}
	for ri, rb := range g.RemoteBuffers {
		rw := fmt.Sprintf("%s remote buffer %d", where, ri)
		bt, err := bufName(rb.Type, rw)
		if err != nil {
			return w, err
		}
		wr := wRemoteBuffer{Rank: ptr(rb.Rank), Type: &bt, AccessChannelTypes: []string{}}
		for _, ct := range rb.AccessChannelTypes {
			s, err := chanName(ct, rw)
			if err != nil {
				return w, err
			}
			wr.AccessChannelTypes = append(wr.AccessChannelTypes, s)
		}
		w.RemoteBuffers = append(w.RemoteBuffers, wr)
	}
	for _, s := range g.Semaphores {
		w.Semaphores = append(w.Semaphores, wSemaphore{InitValue: ptr(s.InitValue)})
	}
	return w, nil
}

func fromTB(tb *ThreadBlock, where string) (wTB, error) {
	w := wTB{ID: ptr(tb.ID), Ops: []json.RawMessage{}, Channels: []wTBChannel{}, RemoteBufferRefs: []wRBRef{}}
	for oi := range tb.Ops {
		raw, err := encodeOp(&tb.Ops[oi], fmt.Sprintf("%s op %d", where, oi))
		if err != nil {
			return w, err
		}
		w.Ops = append(w.Ops, raw)
	}
	for ci, c := range tb.Channels {
		s, err := chanName(c.Type, fmt.Sprintf("%s channels[%d]", where, ci))
		if err != nil {
			return w, err
		}
		wc := wTBChannel{ChannelType: s, ChannelIDs: orEmpty(c.ChannelIDs)}
		if c.Buff != BufferNone {
			b, err := bufName(c.Buff, fmt.Sprintf("%s channels[%d]", where, ci))
			if err != nil {
				return w, err
			}
			wc.Buff = &b
		}
		w.Channels = append(w.Channels, wc)
	}
	for ri, r := range tb.RemoteBufferRefs {
		s, err := chanName(r.AccessChannelType, fmt.Sprintf("%s remote_buffer_refs[%d]", where, ri))
		if err != nil {
			return w, err
		}
		w.RemoteBufferRefs = append(w.RemoteBufferRefs, wRBRef{AccessChannelType: s, RemoteBufferIDs: orEmpty(r.RemoteBufferIDs)})
	}
	return w, nil
}

func encodeOp(op *Op, where string) (json.RawMessage, error) {
	if op.Name <= OpInvalid || op.Name >= numOpNames {
		return nil, encErr(where, "invalid op name %v", op.Name)
	}
	where = fmt.Sprintf("%s (%s)", where, op.Name)
	w := wOp{Name: op.Name.String(), ChannelIDs: op.ChannelIDs, SemaphoreIDs: op.SemaphoreIDs}
	var err error
	if w.SrcBuff, err = encodeBufs(op.Src, where); err != nil {
		return nil, err
	}
	if w.DstBuff, err = encodeBufs(op.Dst, where); err != nil {
		return nil, err
	}
	if op.ChannelType != ChannelNone {
		if w.ChannelType, err = chanName(op.ChannelType, where); err != nil {
			return nil, err
		}
	}
	if op.ReduceOp != ReduceNone {
		if op.ReduceOp > ReduceMax {
			return nil, encErr(where, "invalid reduce op %v", op.ReduceOp)
		}
		w.ReduceOp = op.ReduceOp.String()
	}
	if op.TBG != nil {
		w.TBGInfo = &wTBG{TBID: ptr(op.TBG.ID), TBGSize: ptr(op.TBG.Size)}
	}
	switch op.Name {
	case OpBarrier:
		w.BarrierID, w.NumTBs = ptr(op.BarrierID), ptr(op.NumThreadBlocks)
	case OpPipeline:
		it := IterContext{}
		if op.Iter != nil {
			it = *op.Iter
		}
		w.IterContext = &wIter{UnitSize: ptr(it.UnitSize), NumChunks: ptr(it.NumChunks)}
		w.Ops = []json.RawMessage{}
		for i := range op.Ops {
			raw, err := encodeOp(&op.Ops[i], fmt.Sprintf("%s body op %d", where, i))
			if err != nil {
				return nil, err
			}
			w.Ops = append(w.Ops, raw)
		}
	case OpGroupLoadReduce, OpGroupStore, OpGroupStorePackets:
		if op.GroupBuffer == BufferNone && op.SrcChunk == nil && op.DstChunk == nil {
			break // buffer form: src_buff / dst_buff only
		}
		if w.BufferType, err = bufName(op.GroupBuffer, where); err != nil {
			return nil, err
		}
		w.BufferOffset, w.Size = ptr(op.GroupOffset), ptr(op.GroupSize)
		c := op.DstChunk
		if isGroupStore(op.Name) {
			c = op.SrcChunk
		}
		if c == nil {
			return nil, encErr(where, "missing chunk")
		}
		bt, err := bufName(c.Type, where)
		if err != nil {
			return nil, err
		}
		wc := &wChunk{Rank: ptr(c.Rank), Type: &bt, Index: ptr(c.Index), Size: ptr(c.Size)}
		if isGroupStore(op.Name) {
			w.SrcChunk = wc
		} else {
			w.DstChunk = wc
		}
	}
	var v any = w
	if isGroupOne(op.Name) && w.BufferType != "" {
		v = wGroupOp{
			Name: w.Name, SrcChunk: w.SrcChunk, BufferType: w.BufferType, BufferOffset: w.BufferOffset, Size: w.Size,
			DstChunk: w.DstChunk, SrcBuff: w.SrcBuff, DstBuff: w.DstBuff, ChannelIDs: w.ChannelIDs,
			ChannelType: w.ChannelType, ReduceOp: w.ReduceOp, TBGInfo: w.TBGInfo, SemaphoreIDs: w.SemaphoreIDs,
		}
	}
	b, err := marshalNoEscape(v)
	if err != nil {
		return nil, encErr(where, "%v", err)
	}
	return b, nil
}

// wGroupOp is wOp in the field order MSCCL++ writes glre and gstore.
type wGroupOp struct {
	Name         string  `json:"name"`
	SrcChunk     *wChunk `json:"src_chunk,omitempty"`
	BufferType   string  `json:"buffer_type,omitempty"`
	BufferOffset *int    `json:"buffer_offset,omitempty"`
	Size         *int    `json:"size,omitempty"`
	DstChunk     *wChunk `json:"dst_chunk,omitempty"`
	SrcBuff      []wBuf  `json:"src_buff,omitempty"`
	DstBuff      []wBuf  `json:"dst_buff,omitempty"`
	ChannelIDs   []int   `json:"channel_ids,omitempty"`
	ChannelType  string  `json:"channel_type,omitempty"`
	ReduceOp     string  `json:"reduce_op,omitempty"`
	TBGInfo      *wTBG   `json:"tbg_info,omitempty"`
	SemaphoreIDs []int   `json:"semaphore_ids,omitempty"`
}

func marshalNoEscape(v any) ([]byte, error) {
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	if err := e.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

func encodeBufs(bs []BufRef, where string) ([]wBuf, error) {
	var out []wBuf
	for _, b := range bs {
		w := wBuf{Index: ptr(b.Index), Size: ptr(b.Size)}
		if b.HasRank {
			if b.Kind != RefLocal {
				return nil, encErr(where, "rank on a %s reference", kindName(b.Kind))
			}
			w.Rank = ptr(b.Rank)
		}
		switch b.Kind {
		case RefLocal:
			s, err := bufName(b.Type, where)
			if err != nil {
				return nil, err
			}
			w.Type = &s
		case RefRemote:
			w.BufferID = ptr(b.ID)
		case RefSwitch:
			w.SwitchChannelID = ptr(b.ID)
		default:
			return nil, encErr(where, "invalid buffer reference kind %d", b.Kind)
		}
		out = append(out, w)
	}
	return out, nil
}
