package nccl

import (
	"github.com/chorus-rt/chorus/gpu/cuda"
	gnccl "github.com/chorus-rt/chorus/gpu/nccl"
)

// library is the part of libnccl a communicator calls after it joined
// (*gnccl.Lib implements it); the tests check the backend's argument
// checks, descriptor exchange and failure handling against a fake.
type library interface {
	CommSplit(c gnccl.Comm, color, key int) (gnccl.Comm, error)
	CommDestroy(c gnccl.Comm) error
	CommAbort(c gnccl.Comm) error
	Count(c gnccl.Comm) (int, error)
	UserRank(c gnccl.Comm) (int, error)
	AllReduce(send, recv uint64, count int64, dt gnccl.DataType, op gnccl.RedOp, c gnccl.Comm, stream uintptr) error
	Broadcast(send, recv uint64, count int64, dt gnccl.DataType, root int, c gnccl.Comm, stream uintptr) error
	AllGather(send, recv uint64, sendCount int64, dt gnccl.DataType, c gnccl.Comm, stream uintptr) error
	ReduceScatter(send, recv uint64, recvCount int64, dt gnccl.DataType, op gnccl.RedOp, c gnccl.Comm, stream uintptr) error
	Send(buf uint64, count int64, dt gnccl.DataType, peer int, c gnccl.Comm, stream uintptr) error
	Recv(buf uint64, count int64, dt gnccl.DataType, peer int, c gnccl.Comm, stream uintptr) error
	GroupStart() error
	GroupEnd() error
}

// driver is the part of the CUDA driver a communicator calls
// (*cuda.Driver implements it).
type driver interface {
	MemAlloc(bytes int64) (cuda.DevicePtr, error)
	MemFree(p cuda.DevicePtr) error
	StreamIsCapturing(s cuda.Stream) (int, error)
	StreamSynchronize(s cuda.Stream) error
	MemcpyHtoDAsync(dst cuda.DevicePtr, src []byte, s cuda.Stream) error
	MemcpyDtoHAsync(dst []byte, src cuda.DevicePtr, s cuda.Stream) error
	MemcpyDtoDAsync(dst, src cuda.DevicePtr, bytes int64, s cuda.Stream) error
}

var (
	_ library = (*gnccl.Lib)(nil)
	_ driver  = (*cuda.Driver)(nil)
)
