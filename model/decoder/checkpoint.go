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
// parameter, by exact name, with its Megatron split (columns: dim 1, rows:
// dim 0) or replicated; any other tensor in the checkpoint is an error.
func (c Config) ShardSpec() *shard.Spec {
	s := &shard.Spec{Default: "error"}
	for _, p := range c.Params() {
		r := shard.Rule{Match: p.Name}
		switch p.Split {
		case SplitCols:
			d := len(p.Shape) - 1
			r.Split = &d
		case SplitRows:
			d := 0
			r.Split = &d
		default:
			r.Replicate = true
		}
		s.Rules = append(s.Rules, r)
	}
	return s
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
