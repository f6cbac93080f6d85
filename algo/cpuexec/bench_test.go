package cpuexec_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/algo/cpuexec"
	"github.com/chorus-rt/chorus/algo/handplan"
	"github.com/chorus-rt/chorus/algo/library"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/tensor"
)

// BenchmarkAllReduce: all-pairs allreduce over goroutine ranks.
func BenchmarkAllReduce(b *testing.B) {
	for _, n := range []int{2, 4} {
		for _, size := range []int64{1 << 10, 1 << 20, 16 << 20} {
			b.Run(fmt.Sprintf("n%d/%dB", n, size), func(b *testing.B) {
				p, err := handplan.AllPairsAllReduce(n, handplan.Options{})
				if err != nil {
					b.Fatal(err)
				}
				xs := ranks(b, p, 20*time.Second)
				ins := make([]*tensor.Tensor, n)
				for r := range n {
					ins[r] = tensor.MustNew(tensor.Float32, tensor.Shape{size / 4})
				}
				b.SetBytes(size)
				b.ResetTimer()
				errs := each(n, func(r int) error {
					for range b.N {
						if err := xs[r].Run(context.Background(), ins[r], ins[r], reduce.Sum); err != nil {
							return err
						}
					}
					return nil
				})
				if err := errors.Join(errs...); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}

// BenchmarkOneShot: the library's allreduce_oneshot over two goroutine
// ranks, staged through the data segment as in process sessions
// (direct=false) or on the callers' tensors (direct=true).
func BenchmarkOneShot(b *testing.B) {
	for _, direct := range []bool{false, true} {
		for _, size := range []int64{1 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20} {
			b.Run(fmt.Sprintf("direct=%v/%dB", direct, size), func(b *testing.B) {
				cpuexec.SetDirect(direct)
				defer cpuexec.SetDirect(true)
				p, err := library.Build("allreduce_oneshot", 2, library.Options{})
				if err != nil {
					b.Fatal(err)
				}
				xs := ranks(b, p, 20*time.Second)
				ins := make([]*tensor.Tensor, 2)
				outs := make([]*tensor.Tensor, 2)
				for r := range 2 {
					ins[r] = tensor.MustNew(tensor.Float32, tensor.Shape{size / 4})
					outs[r] = tensor.MustNew(tensor.Float32, tensor.Shape{size / 4})
				}
				b.SetBytes(size)
				b.ResetTimer()
				errs := each(2, func(r int) error {
					for range b.N {
						if err := xs[r].Run(context.Background(), ins[r], outs[r], reduce.Sum); err != nil {
							return err
						}
					}
					return nil
				})
				if err := errors.Join(errs...); err != nil {
					b.Fatal(err)
				}
			})
		}
	}
}
