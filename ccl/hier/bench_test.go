package hier

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/tensor"
)

// BenchmarkAllReduce: two simulated hosts of one rank each in this
// process (TLS links over loopback), float32 sum, with the leader ring
// in 1 and in DefaultStripes stripes (the same below stripeMinBytes). Every
// rank shares this process's cores: a loopback sanity check, not a
// measurement of what stripes gain between hosts.
func BenchmarkAllReduce(b *testing.B) {
	for _, stripes := range []int{1, DefaultStripes} {
		for _, size := range []int64{1 << 10, 256 << 10, 1 << 20, 4 << 20, 64 << 20} {
			b.Run(fmt.Sprintf("s%d/%dB", stripes, size), func(b *testing.B) {
				testStripes = func(int) string { return strconv.Itoa(stripes) }
				defer func() { testStripes = nil }()
				t := &testing.T{}
				comms := world(t, []int{1, 1}, time.Minute)
				defer func() {
					for _, c := range comms {
						c.Close()
					}
				}()
				bufs := make([]*tensor.Tensor, 2)
				for r := range bufs {
					bufs[r] = tensor.MustNew(tensor.Float32, tensor.Shape{size / 4})
				}
				b.SetBytes(size)
				b.ResetTimer()
				for range b.N {
					errs := each(comms, func(r int, c *Comm) error {
						return c.AllReduce(context.Background(), bufs[r], bufs[r], reduce.Sum)
					})
					for _, err := range errs {
						if err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}
