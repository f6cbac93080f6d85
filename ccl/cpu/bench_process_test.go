package cpu_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/cpu"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/tensor"
)

// The child rank of BenchmarkAllReduceProcess: set in its environment.
const (
	envBenchID    = "CHORUS_CPU_BENCH_ID"
	envBenchBytes = "CHORUS_CPU_BENCH_BYTES"
	envBenchIters = "CHORUS_CPU_BENCH_ITERS"
)

// BenchmarkAllReduceProcess runs rank 0 here and rank 1 in a child
// process (this test binary again, running TestAllReduceProcessChild), as
// a process session does: no direct reads, the staging path for small
// messages. ns/op is per allreduce on rank 0; -cpuprofile profiles rank 0.
func BenchmarkAllReduceProcess(b *testing.B) {
	for _, size := range []int{64, 1 << 10, 4 << 10, 16 << 10} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			be := &cpu.Backend{}
			id, err := be.NewID()
			if err != nil {
				b.Fatal(err)
			}
			iters := b.N
			child := exec.Command(os.Args[0], "-test.run=^TestAllReduceProcessChild$", "-test.count=1")
			child.Env = append(os.Environ(), envBenchID+"="+hex.EncodeToString(id),
				envBenchBytes+"="+strconv.Itoa(size), envBenchIters+"="+strconv.Itoa(iters))
			var out bytes.Buffer
			child.Stdout, child.Stderr = &out, &out
			if err := child.Start(); err != nil {
				b.Fatal(err)
			}
			defer func() {
				if err := child.Wait(); err != nil {
					b.Errorf("rank 1: %v\n%s", err, out.Bytes())
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			c, err := be.Join(ctx, ccl.Config{ID: id, Rank: 0, Size: 2})
			if err != nil {
				child.Process.Kill()
				b.Fatal(err)
			}
			defer c.Close()
			buf := tensor.MustNew(tensor.Float32, tensor.Shape{int64(size / 4)})
			b.SetBytes(int64(size))
			b.ReportAllocs()
			// Warm up: both ranks run 1000 extra calls first.
			for range 1000 {
				if err := c.AllReduce(ctx, buf, buf, reduce.Sum); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			for range iters {
				if err := c.AllReduce(ctx, buf, buf, reduce.Sum); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
		})
	}
}

// TestAllReduceProcessChild is BenchmarkAllReduceProcess's rank 1; it
// skips unless that benchmark started it.
func TestAllReduceProcessChild(t *testing.T) {
	idHex := os.Getenv(envBenchID)
	if idHex == "" {
		t.Skip("rank 1 of BenchmarkAllReduceProcess only")
	}
	id, err := hex.DecodeString(idHex)
	if err != nil {
		t.Fatal(err)
	}
	size, _ := strconv.Atoi(os.Getenv(envBenchBytes))
	iters, _ := strconv.Atoi(os.Getenv(envBenchIters))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := (&cpu.Backend{}).Join(ctx, ccl.Config{ID: id, Rank: 1, Size: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := tensor.MustNew(tensor.Float32, tensor.Shape{int64(size / 4)})
	for range 1000 + iters {
		if err := c.AllReduce(ctx, buf, buf, reduce.Sum); err != nil {
			t.Fatal(err)
		}
	}
}
