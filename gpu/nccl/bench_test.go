package nccl_test

import (
	"runtime"
	"testing"

	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/gpu/nccl"
	"github.com/chorus-rt/chorus/internal/testutil/gputest"
)

// BenchmarkBindingCall measures the Go -> C call path alone: a driver
// call that does almost nothing (cuDriverGetVersion).
func BenchmarkBindingCall(b *testing.B) {
	d, err := cuda.Load()
	if err != nil {
		gputest.Skipf(b, "no CUDA driver: %v", err)
	}
	for b.Loop() {
		if _, err := d.DriverVersion(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllReduceEnqueue measures the host time of one ncclAllReduce
// call (binding + NCCL's own enqueue) on a one-rank communicator, 256
// floats, without waiting for the GPU in between.
func BenchmarkAllReduceEnqueue(b *testing.B) {
	l, err := nccl.Load()
	if err != nil {
		gputest.Skipf(b, "no NCCL here: %v", err)
	}
	d, err := cuda.Load()
	if err != nil || d.Init() != nil {
		gputest.Skipf(b, "no CUDA driver")
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	dev, _ := d.DeviceGet(0)
	ctx, _ := d.PrimaryCtxRetain(dev)
	defer d.PrimaryCtxRelease(dev)
	d.SetCurrent(ctx)
	id, _ := l.GetUniqueID()
	c, err := l.CommInitRank(1, id, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer l.CommDestroy(c)
	p, _ := d.MemAlloc(1024)
	defer d.MemFree(p)
	s, _ := d.StreamCreate(cuda.StreamNonBlocking)
	defer d.StreamDestroy(s)
	i := 0
	for b.Loop() {
		if err := l.AllReduce(uint64(p), uint64(p), 256, nccl.Float32, nccl.Sum, c, uintptr(s)); err != nil {
			b.Fatal(err)
		}
		if i++; i%1024 == 0 {
			d.StreamSynchronize(s) // keep the queue bounded
		}
	}
	d.StreamSynchronize(s)
}
