package decoder

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/chorus-rt/chorus/model/safetensors"
	"github.com/chorus-rt/chorus/model/shard"
	"github.com/chorus-rt/chorus/tensor"
)

// CheckpointFile and ConfigFile are the names WriteRandom writes in its
// folder (the names Hugging Face checkpoints use).
const (
	CheckpointFile = "model.safetensors"
	ConfigFile     = "config.json"
)

// ShardSpec is the shard loader's spec for c's parameters: one rule per
// parameter, by exact name (ParamSpec.ShardRule); any other tensor in the
// checkpoint is an error.
func (c Config) ShardSpec() *shard.Spec {
	s := &shard.Spec{Default: "error"}
	for _, p := range c.Params() {
		s.Rules = append(s.Rules, p.ShardRule())
	}
	return s
}

// ShardBlockFunc is the shard loader function (model/shard) of the splits
// an even split does not express, with args [dim, units, padded (0 or
// 1)]: rank r's Block of dimension dim. A padded block may be short: the
// loaded shard then has fewer rows (or columns) than ShardShape, and
// decoder.Load pads it (LMHeadShardFunc).
const ShardBlockFunc = "decoder.block"

func init() {
	shard.MustRegister(ShardBlockFunc, func(r shard.Request) (shard.Plan, error) {
		if len(r.Args) != 3 || r.Args[0] < 0 || int(r.Args[0]) >= len(r.Shape) || r.Args[1] < 0 {
			return shard.Plan{}, fmt.Errorf("%w: %s wants args [dim, units, padded] for shape %v, got %v", shard.ErrSpec, ShardBlockFunc, r.Shape, r.Args)
		}
		dim, units, padded := int(r.Args[0]), r.Args[1], r.Args[2] != 0
		size, n := r.Shape[dim], int64(r.N)
		if !padded && (units > 0 && units < n && (n%units != 0 || size%units != 0) || (units == 0 || units >= n) && size%n != 0) {
			return shard.Plan{}, fmt.Errorf("%w: %s: dimension %d of shape %v (%d units) does not split over %d ranks", shard.ErrShape, ShardBlockFunc, dim, r.Shape, units, n)
		}
		lo, hi := Block(size, units, padded, r.Rank, r.N)
		return shard.Blocks(r.Shape, int64(r.DType.Size()), dim, []shard.Interval{{Lo: lo, Hi: hi}})
	})
}

// ShardRule is the shard loader's rule for the parameter, matching its
// name: replicated, an even split of its split dimension, or, for kv
// heads (Units) and the padded LM head, ShardBlockFunc.
func (p ParamSpec) ShardRule() shard.Rule {
	r := shard.Rule{Match: p.Name}
	d := p.splitDim()
	switch {
	case d < 0:
		r.Replicate = true
	case p.Units > 0 || p.Padded:
		padded := int64(0)
		if p.Padded {
			padded = 1
		}
		r.Func, r.Args = ShardBlockFunc, []int64{int64(d), p.Units, padded}
	default:
		r.Split = &d
	}
	return r
}

// WriteRandom writes the random model of c with seed (RandomParam's
// values, the ones RandomWeights and NewRandomReference use) into dir as
// CheckpointFile (safetensors) and ConfigFile.
func WriteRandom(dir string, c Config, seed uint64) error {
	if err := c.Validate(1); err != nil {
		return err
	}
	var ts []safetensors.Named
	for _, p := range c.Params() {
		t, err := tensor.New(c.DType, p.Shape)
		if err != nil {
			return fmt.Errorf("decoder: %s: %w", p.Name, err)
		}
		if err := RandomFill(p, seed, c.DType, t.Bytes()); err != nil {
			return fmt.Errorf("decoder: %s: %w", p.Name, err)
		}
		ts = append(ts, safetensors.Named{Name: p.Name, Tensor: t})
	}
	cfg, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	if err := safetensors.WriteFile(filepath.Join(dir, CheckpointFile), ts, map[string]string{"format": "chorus decoder", "seed": fmt.Sprint(seed)}); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, ConfigFile), append(cfg, '\n'), 0o644)
}
