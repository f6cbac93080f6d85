package cpu_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/chorus-rt/chorus/ccl"
	"github.com/chorus-rt/chorus/ccl/cpu"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/tensor"
)

// BenchmarkAllReduce runs 2 goroutine ranks; ns/op is per allreduce.
func BenchmarkAllReduce(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			be := &cpu.Backend{}
			id, _ := be.NewID()
			const n = 2
			comms := make([]ccl.Comm, n)
			var wg sync.WaitGroup
			for r := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					c, err := be.Join(context.Background(), ccl.Config{ID: id, Rank: r, Size: n})
					if err != nil {
						panic(err)
					}
					comms[r] = c
				}()
			}
			wg.Wait()
			bufs := make([]*tensor.Tensor, n)
			for r := range n {
				bufs[r] = tensor.MustNew(tensor.Float32, tensor.Shape{int64(size / 4)})
			}
			iters := b.N
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			for r := 1; r < n; r++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range iters {
						comms[r].AllReduce(context.Background(), bufs[r], bufs[r], reduce.Sum)
					}
				}()
			}
			for range iters {
				comms[0].AllReduce(context.Background(), bufs[0], bufs[0], reduce.Sum)
			}
			wg.Wait()
			for _, c := range comms {
				c.Close()
			}
		})
	}
}
