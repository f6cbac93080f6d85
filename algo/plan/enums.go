package plan

import "fmt"

// Protocol is how data moves: Simple (plain data plus explicit signal/wait)
// or LL (low-latency packets: every data word travels with a flag, so the
// reader polls the flag instead of waiting for a signal; packet data lives
// in scratch buffers and takes twice its data size there).
type Protocol uint8

const (
	ProtocolInvalid Protocol = iota // zero value; never written
	Simple                          // "Simple"
	LL                              // "LL"
)

var protocolNames = []string{"", "Simple", "LL"}

func (p Protocol) String() string { return enumString(protocolNames, int(p), "Protocol") }

// ParseProtocol maps a JSON protocol name to a Protocol.
func ParseProtocol(s string) (Protocol, error) {
	v, err := enumParse(protocolNames, s, "protocol")
	return Protocol(v), err
}

// Collective is the collective a plan implements. MSCCL++ treats it as a
// free-form string (its executor selects plans by it); the constants are the
// names its DSL uses. Validate accepts any non-empty name; Known reports
// whether it is one of the constants.
type Collective string

const (
	AllReduce     Collective = "allreduce"
	AllGather     Collective = "allgather"
	ReduceScatter Collective = "reducescatter"
	AllToAll      Collective = "alltoall"
	Broadcast     Collective = "broadcast"
	SendRecv      Collective = "sendrecv"
)

// Known reports whether c is one of the collective names MSCCL++ uses.
func (c Collective) Known() bool {
	switch c {
	case AllReduce, AllGather, ReduceScatter, AllToAll, Broadcast, SendRecv:
		return true
	}
	return false
}

// BufferType names one of a rank's three buffers. JSON: "i", "o", "s".
type BufferType uint8

const (
	BufferNone BufferType = iota // zero value; never written
	Input                        // "i": the collective's input (send) buffer
	Output                       // "o": the collective's output (receive) buffer
	Scratch                      // "s": plan-private scratch space
)

var bufferNames = []string{"", "i", "o", "s"}
var bufferShort = []string{"?", "in", "out", "scr"}

func (b BufferType) String() string { return enumString(bufferNames, int(b), "BufferType") }

// Short is the name Show uses: in, out, scr.
func (b BufferType) Short() string {
	if int(b) < len(bufferShort) {
		return bufferShort[b]
	}
	return fmt.Sprintf("BufferType(%d)", b)
}

// ParseBufferType maps "i", "o", "s" to a BufferType.
func ParseBufferType(s string) (BufferType, error) {
	v, err := enumParse(bufferNames, s, "buffer type")
	return BufferType(v), err
}

// ChannelType is the kind of a channel. ChannelNone is an op's "no channel"
// (JSON "none", or the field left out); a GPU's channels are memory, port or
// switch.
type ChannelType uint8

const (
	ChannelNone   ChannelType = iota // "none"
	ChannelMemory                    // "memory": peer memory mapped, GPU threads copy
	ChannelPort                      // "port": a proxy / DMA engine copies
	ChannelSwitch                    // "switch": NVLink multicast over a rank group
)

var channelNames = []string{"none", "memory", "port", "switch"}
var channelShort = []string{"none", "mem", "port", "sw"}

func (c ChannelType) String() string { return enumString(channelNames, int(c), "ChannelType") }

// Short is the name Show uses: mem, port, sw.
func (c ChannelType) Short() string {
	if int(c) < len(channelShort) {
		return channelShort[c]
	}
	return fmt.Sprintf("ChannelType(%d)", c)
}

// ParseChannelType maps "none", "memory", "port", "switch" to a ChannelType.
func ParseChannelType(s string) (ChannelType, error) {
	v, err := enumParse(channelNames, s, "channel type")
	return ChannelType(v), err
}

// ReduceOp is the elementwise reduction of a reduce op. ReduceNone means the
// field is absent, which MSCCL++ treats as sum.
type ReduceOp uint8

const (
	ReduceNone ReduceOp = iota // field absent (sum)
	ReduceSum                  // "sum"
	ReduceMin                  // "min"
	ReduceMax                  // "max"
)

var reduceNames = []string{"", "sum", "min", "max"}

func (r ReduceOp) String() string { return enumString(reduceNames, int(r), "ReduceOp") }

// Effective is r with ReduceNone read as ReduceSum.
func (r ReduceOp) Effective() ReduceOp {
	if r == ReduceNone {
		return ReduceSum
	}
	return r
}

// ParseReduceOp maps "sum", "min", "max" to a ReduceOp.
func ParseReduceOp(s string) (ReduceOp, error) {
	v, err := enumParse(reduceNames, s, "reduce op")
	return ReduceOp(v), err
}

// OpName is the kind of an operation: every name the MSCCL++ execution-plan
// format has. docs/plans.md gives each one's semantics.
type OpName uint8

const (
	OpInvalid               OpName = iota // zero value; never written
	OpNop                                 // "nop": __syncthreads of the thread block
	OpBarrier                             // "barrier": barrier across thread blocks of one rank
	OpSignal                              // "signal"
	OpWait                                // "wait"
	OpRelaxedSignal                       // "rlxsignal"
	OpRelaxedWait                         // "rlxwait"
	OpFlush                               // "flush"
	OpCopy                                // "copy"
	OpPut                                 // "put"
	OpGet                                 // "get"
	OpPutWithSignal                       // "pws"
	OpPutWithSignalAndFlush               // "pwsf"
	OpPutPackets                          // "ppkt"
	OpReadPutPackets                      // "rppkt"
	OpCopyPackets                         // "cpkt"
	OpUnpackPackets                       // "upkt"
	OpReduce                              // "re"
	OpReadReduce                          // "rre"
	OpReduceSend                          // "res"
	OpReadReduceSend                      // "rres"
	OpReducePackets                       // "repkt"
	OpReduceSendPackets                   // "respkt"
	OpReduceCopyPackets                   // "recpkt"
	OpReduceCopySendPackets               // "recspkt"
	OpGroupLoadReduce                     // "glre"
	OpGroupStore                          // "gstore"
	OpGroupLoadReduceStore                // "glres"
	OpSemAcquire                          // "sem_acquire"
	OpSemRelease                          // "sem_release"
	OpPipeline                            // "pipeline"
	// OpGroupStorePackets is MSCCL++'s packet switch store (MULTI_STORE_PKT,
	// written by SwitchChannel.broadcast_packets). Its JSON is chorus's
	// reading (docs/plans.md): MSCCL++'s own was not available.
	OpGroupStorePackets // "gstorepkt"
	numOpNames
)

var opNames = []string{
	"", "nop", "barrier", "signal", "wait", "rlxsignal", "rlxwait", "flush",
	"copy", "put", "get", "pws", "pwsf", "ppkt", "rppkt", "cpkt", "upkt",
	"re", "rre", "res", "rres", "repkt", "respkt", "recpkt", "recspkt",
	"glre", "gstore", "glres", "sem_acquire", "sem_release", "pipeline",
	"gstorepkt",
}

// isGroupStore: the switch stores (multimem store of a local range to the
// group range): gstore and its packet form gstorepkt.
func isGroupStore(n OpName) bool { return n == OpGroupStore || n == OpGroupStorePackets }

// isGroupOne: the switch ops with one local and one group range (chunk or
// buffer form): glre, gstore, gstorepkt.
func isGroupOne(n OpName) bool { return n == OpGroupLoadReduce || isGroupStore(n) }

func (o OpName) String() string { return enumString(opNames, int(o), "OpName") }

// ParseOpName maps a JSON op name to an OpName.
func ParseOpName(s string) (OpName, error) {
	v, err := enumParse(opNames, s, "op name")
	return OpName(v), err
}

// OpNames lists every valid op name in the order of the constants.
func OpNames() []OpName {
	out := make([]OpName, 0, numOpNames-1)
	for o := OpNop; o < numOpNames; o++ {
		out = append(out, o)
	}
	return out
}

func enumString(names []string, v int, typ string) string {
	if v > 0 && v < len(names) || (v == 0 && names[0] != "") {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, v)
}

func enumParse(names []string, s, what string) (int, error) {
	if s != "" {
		for i, n := range names {
			if n == s {
				return i, nil
			}
		}
	}
	return 0, fmt.Errorf("unknown %s %q", what, s)
}
