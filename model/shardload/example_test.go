package shardload_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/chorus-rt/chorus/model/safetensors"
	"github.com/chorus-rt/chorus/model/shard"
	"github.com/chorus-rt/chorus/model/shardload"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

// A checkpoint loaded sharded: each worker reads only its own byte
// ranges. Here a 2x4 weight is split by columns over 2 workers and a
// bias is replicated (tensors no rule matches are).
func ExampleLoadSharded() {
	dir, err := os.MkdirTemp("", "chorus-shardload-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	w := tensor.MustNew(tensor.Float32, tensor.Shape{2, 4})
	if err := tensor.SetFromFloat64(w, []float64{0, 1, 2, 3, 4, 5, 6, 7}); err != nil {
		log.Fatal(err)
	}
	b := tensor.FromSlice([]float32{9, 9, 9, 9})
	err = safetensors.WriteFile(filepath.Join(dir, "model.safetensors"), []safetensors.Named{{Name: "up.weight", Tensor: w}, {Name: "up.bias", Tensor: b}}, nil)
	if err != nil {
		log.Fatal(err)
	}
	cols := 1
	spec := &shard.Spec{Rules: []shard.Rule{{Match: "*.weight", Split: &cols}}}

	ctx := context.Background()
	s, err := session.NewThreaded(session.Options{NumWorkers: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Shutdown()
	refs, err := shardload.LoadSharded(ctx, s, dir, spec) // one register per tensor
	if err != nil {
		log.Fatal(err)
	}
	for _, name := range []string{"up.weight", "up.bias"} {
		for wk := range s.NumWorkers() {
			v, err := s.DebugGetFromRemote(ctx, refs[name], wk)
			if err != nil {
				log.Fatal(err)
			}
			t := v.(*tensor.Tensor)
			d, _ := tensor.ToFloat64(t)
			fmt.Printf("%s on worker %d: shape %v %v\n", name, wk, t.Shape(), d)
		}
	}
	// Output:
	// up.weight on worker 0: shape (2, 2) [0 1 4 5]
	// up.weight on worker 1: shape (2, 2) [2 3 6 7]
	// up.bias on worker 0: shape (4,) [9 9 9 9]
	// up.bias on worker 1: shape (4,) [9 9 9 9]
}
