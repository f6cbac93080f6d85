package nccl

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/chorus-rt/chorus/internal/sys/dl"
	"github.com/chorus-rt/chorus/tensor"
)

// ErrNotLoaded: libnccl could not be loaded.
var ErrNotLoaded = errors.New("nccl: library not loaded")

// UniqueID is ncclUniqueId: 128 opaque bytes made by one rank and given to
// all.
type UniqueID [128]byte

// Comm is an ncclComm_t.
type Comm uintptr

// DataType is ncclDataType_t.
type DataType int32

const (
	Int8     DataType = 0
	Uint8    DataType = 1
	Int32    DataType = 2
	Uint32   DataType = 3
	Int64    DataType = 4
	Uint64   DataType = 5
	Float16  DataType = 6
	Float32  DataType = 7
	Float64  DataType = 8
	BFloat16 DataType = 9
)

// RedOp is ncclRedOp_t.
type RedOp int32

const (
	Sum  RedOp = 0
	Prod RedOp = 1
	Max  RedOp = 2
	Min  RedOp = 3
	Avg  RedOp = 4
)

// DTypeOf maps a chorus dtype to NCCL's.
func DTypeOf(dt tensor.DType) (DataType, error) {
	switch dt {
	case tensor.Int8:
		return Int8, nil
	case tensor.Uint8:
		return Uint8, nil
	case tensor.Int32:
		return Int32, nil
	case tensor.Int64:
		return Int64, nil
	case tensor.Float16:
		return Float16, nil
	case tensor.Float32:
		return Float32, nil
	case tensor.Float64:
		return Float64, nil
	case tensor.BFloat16:
		return BFloat16, nil
	}
	return 0, fmt.Errorf("nccl: no NCCL data type for %s", dt)
}

// Error is a failed NCCL call.
type Error struct {
	Func string
	Code int
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("nccl: %s: %s (%d)", e.Func, e.Msg, e.Code) }

// Lib is a loaded libnccl.
type Lib struct {
	c dl.Caller
	// hot paths
	allReduce, groupStart, groupEnd, send, recv uintptr
}

var symbols = []string{
	"ncclGetVersion", "ncclGetUniqueId", "ncclCommInitRank", "ncclCommSplit", "ncclCommDestroy",
	"ncclCommAbort", "ncclCommFinalize", "ncclCommGetAsyncError", "ncclCommCount", "ncclCommCuDevice",
	"ncclCommUserRank", "ncclGetErrorString", "ncclGetLastError",
	"ncclAllReduce", "ncclBroadcast", "ncclReduce", "ncclAllGather", "ncclReduceScatter",
	"ncclSend", "ncclRecv", "ncclGroupStart", "ncclGroupEnd",
}

// Load opens libnccl and resolves every symbol.
func Load() (*Lib, error) {
	lib, err := dl.Open("NCCL", []string{"libnccl.so.2", "libnccl.so"}, symbols)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotLoaded, err)
	}
	l := &Lib{}
	l.c = dl.NewCaller(lib, func(fn string, status int32) error {
		return &Error{Func: fn, Code: int(status), Msg: l.c.Str("unknown error", "ncclGetErrorString", uintptr(status))}
	})
	l.allReduce, l.groupStart, l.groupEnd = l.c.Sym("ncclAllReduce"), l.c.Sym("ncclGroupStart"), l.c.Sym("ncclGroupEnd")
	l.send, l.recv = l.c.Sym("ncclSend"), l.c.Sym("ncclRecv")
	return l, nil
}

// Version is ncclGetVersion's number (e.g. 22803 for 2.28.3).
func (l *Lib) Version() (int, error) {
	var v int32
	err := l.c.Call("ncclGetVersion", uintptr(unsafe.Pointer(&v)))
	return int(v), err
}

// GetUniqueID makes a new communicator id (on one rank or the controller).
func (l *Lib) GetUniqueID() (UniqueID, error) {
	var id UniqueID
	err := l.c.Call("ncclGetUniqueId", uintptr(unsafe.Pointer(&id)))
	return id, err
}

// CommInitRank joins rank of nranks. The CUDA context of the device must
// be current on the calling thread. The unique id is passed by value: a
// 128-byte struct goes on the stack under the System V AMD64 ABI, after
// the register arguments (comm, nranks, rank), so the call fills the
// remaining register slots and then passes the id as 16 stack words.
func (l *Lib) CommInitRank(nranks int, id UniqueID, rank int) (Comm, error) {
	c := new(Comm) // heap: its address travels as an integer below
	args := []uintptr{uintptr(unsafe.Pointer(c)), uintptr(nranks), uintptr(rank), 0, 0, 0}
	for i := 0; i < len(id); i += 8 {
		args = append(args, uintptr(binary.LittleEndian.Uint64(id[i:])))
	}
	err := l.c.Call("ncclCommInitRank", args...)
	runtime.KeepAlive(c)
	return *c, err
}

// CommSplit makes a sub-communicator of the ranks with the same color,
// ordered by key (NCCL_SPLIT_NOCOLOR = -1 leaves).
func (l *Lib) CommSplit(c Comm, color, key int) (Comm, error) {
	var out Comm
	err := l.c.Call("ncclCommSplit", uintptr(c), uintptr(int64(color)), uintptr(int64(key)), uintptr(unsafe.Pointer(&out)), 0)
	return out, err
}

func (l *Lib) CommDestroy(c Comm) error  { return l.c.Call("ncclCommDestroy", uintptr(c)) }
func (l *Lib) CommAbort(c Comm) error    { return l.c.Call("ncclCommAbort", uintptr(c)) }
func (l *Lib) CommFinalize(c Comm) error { return l.c.Call("ncclCommFinalize", uintptr(c)) }

// AsyncError returns the communicator's asynchronous error state (nil
// while healthy; ncclInProgress shows as an *Error with code 7).
func (l *Lib) AsyncError(c Comm) error {
	var res int32
	if err := l.c.Call("ncclCommGetAsyncError", uintptr(c), uintptr(unsafe.Pointer(&res))); err != nil {
		return err
	}
	if res == 0 {
		return nil
	}
	return &Error{Func: "async", Code: int(res), Msg: l.c.Str("unknown", "ncclGetErrorString", uintptr(res))}
}

func (l *Lib) intQuery(name string, c Comm) (int, error) {
	var v int32
	err := l.c.Call(name, uintptr(c), uintptr(unsafe.Pointer(&v)))
	return int(v), err
}

func (l *Lib) Count(c Comm) (int, error)    { return l.intQuery("ncclCommCount", c) }
func (l *Lib) CuDevice(c Comm) (int, error) { return l.intQuery("ncclCommCuDevice", c) }
func (l *Lib) UserRank(c Comm) (int, error) { return l.intQuery("ncclCommUserRank", c) }

// Collectives: buffers are device addresses, count is in elements, stream
// is a CUstream (0 for the legacy default stream).

func (l *Lib) AllReduce(send, recv uint64, count int64, dt DataType, op RedOp, c Comm, stream uintptr) error {
	return l.c.Check("ncclAllReduce", l.allReduce, uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(op), uintptr(c), stream)
}

func (l *Lib) Broadcast(send, recv uint64, count int64, dt DataType, root int, c Comm, stream uintptr) error {
	return l.c.Call("ncclBroadcast", uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(root), uintptr(c), stream)
}

func (l *Lib) Reduce(send, recv uint64, count int64, dt DataType, op RedOp, root int, c Comm, stream uintptr) error {
	return l.c.Call("ncclReduce", uintptr(send), uintptr(recv), uintptr(count), uintptr(dt), uintptr(op), uintptr(root), uintptr(c), stream)
}

// AllGather: sendCount elements per rank.
func (l *Lib) AllGather(send, recv uint64, sendCount int64, dt DataType, c Comm, stream uintptr) error {
	return l.c.Call("ncclAllGather", uintptr(send), uintptr(recv), uintptr(sendCount), uintptr(dt), uintptr(c), stream)
}

// ReduceScatter: recvCount elements per rank.
func (l *Lib) ReduceScatter(send, recv uint64, recvCount int64, dt DataType, op RedOp, c Comm, stream uintptr) error {
	return l.c.Call("ncclReduceScatter", uintptr(send), uintptr(recv), uintptr(recvCount), uintptr(dt), uintptr(op), uintptr(c), stream)
}

func (l *Lib) Send(buf uint64, count int64, dt DataType, peer int, c Comm, stream uintptr) error {
	return l.c.Check("ncclSend", l.send, uintptr(buf), uintptr(count), uintptr(dt), uintptr(peer), uintptr(c), stream)
}

func (l *Lib) Recv(buf uint64, count int64, dt DataType, peer int, c Comm, stream uintptr) error {
	return l.c.Check("ncclRecv", l.recv, uintptr(buf), uintptr(count), uintptr(dt), uintptr(peer), uintptr(c), stream)
}

func (l *Lib) GroupStart() error { return l.c.Check("ncclGroupStart", l.groupStart) }
func (l *Lib) GroupEnd() error   { return l.c.Check("ncclGroupEnd", l.groupEnd) }
