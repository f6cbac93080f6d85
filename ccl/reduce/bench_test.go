package reduce_test

import (
	"testing"

	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/tensor"
)

// Benchmarks report MB/s of dst (1 MiB unless the name says otherwise), so
// they compare directly with BenchmarkCopy; a reduction of n sources
// moves n+1 times that many bytes.

const benchBytes = 1 << 20

func benchReduce(b *testing.B, op reduce.Op, dt tensor.DType, n, nbytes int) {
	elems := nbytes / dt.Size()
	srcs := make([][]byte, n)
	for k := range srcs {
		x := tensor.MustNew(dt, tensor.Shape{int64(elems)})
		if err := tensor.Random(x, uint64(k)); err != nil {
			b.Fatal(err)
		}
		srcs[k] = x.Bytes()
	}
	dst := make([]byte, nbytes)
	copy(dst, srcs[0]) // touch the pages
	b.SetBytes(int64(nbytes))
	b.ResetTimer()
	for b.Loop() {
		if err := reduce.Reduce(op, dt, dst, srcs...); err != nil {
			b.Fatal(err)
		}
	}
}

func benchCopy(b *testing.B, nbytes int) {
	src := make([]byte, nbytes)
	for i := range src {
		src[i] = byte(i)
	}
	dst := make([]byte, nbytes)
	copy(dst, src)
	b.SetBytes(int64(nbytes))
	b.ResetTimer()
	for b.Loop() {
		copy(dst, src)
	}
}

func BenchmarkCopy(b *testing.B)          { benchCopy(b, benchBytes) }
func BenchmarkReduceF32Sum2(b *testing.B) { benchReduce(b, reduce.Sum, tensor.Float32, 2, benchBytes) }
func BenchmarkReduceF32Sum3(b *testing.B) { benchReduce(b, reduce.Sum, tensor.Float32, 3, benchBytes) }
func BenchmarkReduceF32Sum8(b *testing.B) { benchReduce(b, reduce.Sum, tensor.Float32, 8, benchBytes) }
func BenchmarkReduceF32Avg2(b *testing.B) { benchReduce(b, reduce.Avg, tensor.Float32, 2, benchBytes) }
func BenchmarkReduceF32Max2(b *testing.B) { benchReduce(b, reduce.Max, tensor.Float32, 2, benchBytes) }
func BenchmarkReduceF64Sum2(b *testing.B) { benchReduce(b, reduce.Sum, tensor.Float64, 2, benchBytes) }
func BenchmarkReduceBF16Sum2(b *testing.B) {
	benchReduce(b, reduce.Sum, tensor.BFloat16, 2, benchBytes)
}
func BenchmarkReduceBF16Sum8(b *testing.B) {
	benchReduce(b, reduce.Sum, tensor.BFloat16, 8, benchBytes)
}
func BenchmarkReduceBF16Avg2(b *testing.B) {
	benchReduce(b, reduce.Avg, tensor.BFloat16, 2, benchBytes)
}
func BenchmarkReduceF16Sum2(b *testing.B)     { benchReduce(b, reduce.Sum, tensor.Float16, 2, benchBytes) }
func BenchmarkReduceF16Max2(b *testing.B)     { benchReduce(b, reduce.Max, tensor.Float16, 2, benchBytes) }
func BenchmarkReduceI32Sum2(b *testing.B)     { benchReduce(b, reduce.Sum, tensor.Int32, 2, benchBytes) }
func BenchmarkReduceI32Avg2(b *testing.B)     { benchReduce(b, reduce.Avg, tensor.Int32, 2, benchBytes) }
func BenchmarkReduceBoolMax2(b *testing.B)    { benchReduce(b, reduce.Max, tensor.Bool, 2, benchBytes) }
func BenchmarkCopy64M(b *testing.B)           { benchCopy(b, 64<<20) }
func BenchmarkReduceF32Sum2x64M(b *testing.B) { benchReduce(b, reduce.Sum, tensor.Float32, 2, 64<<20) }
func BenchmarkReduceBF16Sum2x64M(b *testing.B) {
	benchReduce(b, reduce.Sum, tensor.BFloat16, 2, 64<<20)
}
