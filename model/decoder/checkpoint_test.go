package decoder_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/chorus-rt/chorus/model/decoder"
	"github.com/chorus-rt/chorus/model/shardload"
	"github.com/chorus-rt/chorus/tensor"
)

// The end-to-end path: a random model written as safetensors, loaded
// shard by shard by the workers with the config's ShardSpec (each
// worker reading its own byte ranges, every byte of a split tensor once),
// then prefill and decode steps checked against the float64 reference.
func TestCheckpointEndToEnd(t *testing.T) {
	for _, tc := range []struct {
		kind string
		n    int
		dt   tensor.DType
	}{
		{"threaded", 1, tensor.Float32},
		{"process", 2, tensor.Float32},
		{"threaded", 4, tensor.Float32},
		{"threaded", 2, tensor.BFloat16},
	} {
		t.Run(fmt.Sprintf("%s/%d/%s", tc.kind, tc.n, tc.dt), func(t *testing.T) {
			ctx := bg(t)
			c := decoder.Small(tc.dt)
			dir := t.TempDir()
			if err := decoder.WriteRandom(dir, c, seed); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dir, decoder.ConfigFile)); err != nil {
				t.Fatal(err)
			}
			s := newSession(t, ctx, tc.kind, tc.n, nil)
			if tc.n > 1 {
				if err := s.InitCCL(ctx, "cpu", 0); err != nil {
					t.Fatal(err)
				}
			}
			w, err := shardload.LoadSharded(ctx, s, dir, c.ShardSpec())
			if err != nil {
				t.Fatal(err)
			}
			defer decoder.ReleaseWeights(w)
			m, err := decoder.Load(ctx, s, c, tensor.CPUDevice, decoder.Options{PrefillLen: 3}, w)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Release()
			generate(t, ctx, m, false)
		})
	}
	// A checkpoint of another shape is refused by the loaded model's
	// checks, naming the parameter.
	t.Run("wrong config", func(t *testing.T) {
		ctx := bg(t)
		c := decoder.Small(tensor.Float32)
		dir := t.TempDir()
		if err := decoder.WriteRandom(dir, c, seed); err != nil {
			t.Fatal(err)
		}
		s := newSession(t, ctx, "threaded", 1, nil)
		other := c
		other.Layers++
		if _, err := shardload.LoadSharded(ctx, s, dir, other.ShardSpec()); err == nil {
			t.Fatal("a spec naming parameters the checkpoint lacks loaded")
		}
	})
}
