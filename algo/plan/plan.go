package plan

import "math"

// Defaults the MSCCL++ executor applies when a field is absent; Read applies
// the same ones.
const (
	DefaultNumThreadsPerBlock = 1024
	DefaultBufferAlignment    = 16
	DefaultMaxMessageSize     = math.MaxUint64
)

// Plan is one execution plan: the whole program for every rank.
type Plan struct {
	Name                   string     // "name": selects the plan; must be non-empty
	Collective             Collective // "collective"
	Protocol               Protocol   // "protocol": "Simple" or "LL"
	InPlace                bool       // "inplace": input and output buffers alias
	ReuseResources         bool       // "reuse_resources" (default false)
	NumThreadsPerBlock     int        // "num_threads_per_block" (default 1024)
	UseDoubleScratchBuffer bool       // "use_double_scratch_buffer" (default false)
	BufferAlignment        int        // "buffer_alignment", bytes (default 16)
	MinMessageSize         uint64     // "min_message_size", bytes (default 0)
	MaxMessageSize         uint64     // "max_message_size", bytes (default 2^64-1)
	GPUs                   []GPU      // "gpus": GPUs[r] is rank r (Validate checks ID == r)
}

// NumRanks is len(p.GPUs).
func (p *Plan) NumRanks() int { return len(p.GPUs) }

// GPU is the program of one rank.
type GPU struct {
	ID            int            // "id": the rank
	InputChunks   int            // "input_chunks": size of the input buffer in chunks
	OutputChunks  int            // "output_chunks"
	ScratchChunks int            // "scratch_chunks"
	ThreadBlocks  []ThreadBlock  // "threadblocks": ThreadBlocks[t].ID == t
	Channels      []Channel      // "channels": memory/port entries and switch entries
	RemoteBuffers []RemoteBuffer // "remote_buffers": peers' buffers this rank accesses
	Semaphores    []Semaphore    // "semaphores": device semaphores shared by its thread blocks
}

// Chunks is the size in chunks of buffer b on this GPU (0 for BufferNone).
func (g *GPU) Chunks(b BufferType) int {
	switch b {
	case Input:
		return g.InputChunks
	case Output:
		return g.OutputChunks
	case Scratch:
		return g.ScratchChunks
	}
	return 0
}

// Channel is one entry of a GPU's "channels" list.
//
// Memory and port entries: ConnectedTo lists one peer rank per channel. The
// channel ids of a type number the peers of all entries of that type in
// order (MSCCL++ writes one entry per type, so channel id c of type memory
// connects to ConnectedTo[c]).
//
// Switch entries: BufferType is the buffer every rank of the group binds to
// the multicast object; each rank group is one switch channel, and switch
// channel ids number the rank groups of all switch entries in order
// (MSCCL++ writes one group per entry).
type Channel struct {
	Type        ChannelType // "channel_type"
	ConnectedTo []int       // "connected_to" (memory, port)
	BufferType  BufferType  // "buffer_type" (switch)
	RankGroups  []RankGroup // "rank_groups" (switch)
}

// RankGroup is the ranks of one switch channel.
type RankGroup struct {
	Size  int   // "size": len(Ranks)
	Ranks []int // "ranks"
}

// RemoteBuffer is a buffer of another rank that this rank reads or writes.
type RemoteBuffer struct {
	Rank               int           // "rank": the owner
	Type               BufferType    // "type"
	AccessChannelTypes []ChannelType // "access_channel_types": memory and/or port
}

// Semaphore is a device semaphore on one rank (sem_acquire / sem_release).
type Semaphore struct {
	InitValue int // "init_value"
}

// ThreadBlock is one GPU block: it runs Ops in order.
type ThreadBlock struct {
	ID               int            // "id"
	Ops              []Op           // "ops"
	Channels         []TBChannel    // "channels": the channels this block uses
	RemoteBufferRefs []RemoteBufRef // "remote_buffer_refs": the remote buffers it uses
}

// TBChannel lists GPU channel ids of one type that a thread block uses. An
// op's channel id i of type T is the i-th id among the thread block's
// TBChannel entries of type T (in order).
type TBChannel struct {
	Type       ChannelType // "channel_type"
	ChannelIDs []int       // "channel_ids": GPU-level channel ids of Type
	Buff       BufferType  // "buff": legacy field some plans carry; BufferNone when absent; no semantics
}

// RemoteBufRef lists the GPU remote buffers that a thread block reaches
// through channels of one type. A remote BufRef's BufferID i in an op with
// channel type T is the i-th id among the entries with AccessChannelType T.
type RemoteBufRef struct {
	AccessChannelType ChannelType // "access_channel_type": memory or port
	RemoteBufferIDs   []int       // "remote_buffer_ids": indices into GPU.RemoteBuffers
}

// Op is one operation. Which fields an op may carry depends on its Name
// (Validate checks it; docs/plans.md has the table). Empty lists and
// zero enums mean "absent" and are not written.
type Op struct {
	Name         OpName      // "name"
	Src          []BufRef    // "src_buff": chunks read
	Dst          []BufRef    // "dst_buff": chunks written
	ChannelIDs   []int       // "channel_ids": thread-block-local channel indices of ChannelType
	ChannelType  ChannelType // "channel_type" (ChannelNone: absent)
	ReduceOp     ReduceOp    // "reduce_op" (ReduceNone: absent, means sum)
	TBG          *TBGroup    // "tbg_info": this block's share of an op split over a group
	SemaphoreIDs []int       // "semaphore_ids": indices into GPU.Semaphores

	// barrier only ("barrier_id", "num_threadblocks").
	BarrierID       int
	NumThreadBlocks int

	// pipeline only: "iter_context" and the loop body "ops".
	Iter *IterContext
	Ops  []Op

	// glre / gstore only (switch ops before fusion into glres), in the
	// "chunk form": the multicast range is
	// GroupBuffer[GroupOffset : GroupOffset+GroupSize] on every rank of the
	// switch channel ChannelIDs[0]; "buffer_type", "buffer_offset", "size".
	// SrcChunk ("src_chunk", gstore) and DstChunk ("dst_chunk", glre) are
	// the local chunk. In the "buffer form" that newer MSCCL++ versions
	// write, GroupBuffer is BufferNone and the op uses Src/Dst instead:
	// gstore reads local Src[0] and writes switch Dst[0]; glre reads switch
	// Src[0] and writes local Dst[0].
	GroupBuffer BufferType
	GroupOffset int
	GroupSize   int
	SrcChunk    *RankChunk
	DstChunk    *RankChunk
}

// TBGroup says that an op is split over Size thread blocks and this block
// does part ID (0-based) of every chunk range: see Layout.Part.
type TBGroup struct {
	ID   int // "tb_id"
	Size int // "tbg_size"
}

// IterContext is a pipeline loop's context: the body runs over NumChunks
// chunks in steps of UnitSize bytes.
type IterContext struct {
	UnitSize  int // "unit_size", bytes per iteration
	NumChunks int // "num_chunks"
}

// RankChunk is a chunk with its rank, as glre/gstore write it.
type RankChunk struct {
	Rank  int        // "rank"
	Type  BufferType // "type"
	Index int        // "index"
	Size  int        // "size"
}

// RefKind says how a BufRef names its buffer.
type RefKind uint8

const (
	RefLocal  RefKind = iota // "type": a buffer of the executing rank
	RefRemote                // "buffer_id": a peer's buffer, via the tb's remote_buffer_refs
	RefSwitch                // "switch_channel_id": the multicast buffer of a switch channel
)

// BufRef is one element of src_buff / dst_buff: the chunk range
// [Index, Index+Size) of a buffer.
type BufRef struct {
	Kind RefKind
	// Type is the local buffer (RefLocal).
	Type BufferType
	// ID is the thread-block-local remote buffer id (RefRemote, "buffer_id")
	// or the thread-block-local switch channel index (RefSwitch,
	// "switch_channel_id").
	ID    int
	Index int // "index"
	Size  int // "size"
	// HasRank and Rank: the optional "rank" key some MSCCL++ DSL versions
	// write on local references (the switch store's source). MSCCL++'s
	// executor ignores it; chorus keeps it for the round trip and Validate
	// checks that it names the executing rank.
	HasRank bool
	Rank    int
}

// Local returns a reference to chunks [index, index+size) of the executing
// rank's buffer t.
func Local(t BufferType, index, size int) BufRef {
	return BufRef{Kind: RefLocal, Type: t, Index: index, Size: size}
}

// Remote returns a reference through thread-block-local remote buffer id.
func Remote(bufferID, index, size int) BufRef {
	return BufRef{Kind: RefRemote, ID: bufferID, Index: index, Size: size}
}

// Switch returns a reference to the multicast buffer of thread-block-local
// switch channel ch.
func Switch(ch, index, size int) BufRef {
	return BufRef{Kind: RefSwitch, ID: ch, Index: index, Size: size}
}
