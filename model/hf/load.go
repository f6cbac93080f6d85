package hf

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/chorus-rt/chorus/model/decoder"
	"github.com/chorus-rt/chorus/model/safetensors"
	"github.com/chorus-rt/chorus/model/shard"
	"github.com/chorus-rt/chorus/model/shardload"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

// Options of Open.
type Options struct {
	// Workers is the tensor-parallel worker count (required).
	Workers int
	// MaxSeq is the context asked for, prompt plus new tokens (required):
	// the KV cache rows, and what a sliding window is checked against.
	MaxSeq int
	// DType converts every tensor to it as it loads (float32, float16 or
	// bfloat16); Invalid loads the checkpoint's dtype.
	DType tensor.DType
	// LMHead is the LM head's placement: decoder.LMHeadReplicated or
	// decoder.LMHeadSplit ("": decoder.DefaultLMHead).
	LMHead string
}

// Checkpoint is a Hugging Face folder checked against its config (Open):
// what Load loads.
type Checkpoint struct {
	Dir     string
	HF      *Config
	Decoder decoder.Config
	Tensors []Tensor
	// Source is the checkpoint's dtype (Invalid when its tensors mix
	// dtypes); Decoder.DType is what loads.
	Source tensor.DType
	// Bytes is the size of the tensors in the files.
	Bytes   int64
	convert tensor.DType
}

// maxListed bounds the names an error lists.
const maxListed = 8

func listNames(names []string) string {
	sort.Strings(names)
	if len(names) > maxListed {
		return fmt.Sprintf("%s and %d more", strings.Join(names[:maxListed], ", "), len(names)-maxListed)
	}
	return strings.Join(names, ", ")
}

// Open reads dir's config.json (and generation_config.json) and the
// safetensors headers, and checks, before any weight is read, that the
// checkpoint holds exactly the tensors the config needs (by name, shape
// and a float dtype), that the model splits over o.Workers and that the
// context fits (Config.Decoder).
func Open(dir string, o Options) (*Checkpoint, error) {
	hc, err := ReadConfig(dir)
	if err != nil {
		return nil, err
	}
	if o.DType != tensor.Invalid && !slices.Contains([]tensor.DType{tensor.Float32, tensor.Float16, tensor.BFloat16}, o.DType) {
		return nil, fmt.Errorf("%w: dtype %s (float32, float16, bfloat16)", ErrConfig, o.DType)
	}
	ck, err := safetensors.OpenCheckpoint(dir)
	if err != nil {
		return nil, err
	}
	defer ck.Close()
	// The decoder's shapes do not depend on the dtype: float32 for now.
	dc, err := hc.Decoder(DecoderOptions{Workers: o.Workers, MaxSeq: o.MaxSeq, DType: tensor.Float32, LMHead: o.LMHead})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dir, err)
	}
	ts, err := Tensors(dc, hc.TieEmbeddings)
	if err != nil {
		return nil, err
	}
	c := &Checkpoint{Dir: dir, HF: hc, Tensors: ts}
	want := map[string]Tensor{}
	for _, t := range ts {
		want[t.Name] = t
	}
	var missing, extra, shapes, dtypes []string
	seen := map[tensor.DType]bool{}
	for _, name := range ck.Names() {
		t, ok := want[name]
		if !ok {
			extra = append(extra, name)
			continue
		}
		_, info, err := ck.Lookup(name)
		if err != nil {
			return nil, err
		}
		c.Bytes += info.Size()
		if !info.Shape.Equal(t.Shape) {
			shapes = append(shapes, fmt.Sprintf("%s: want %v, got %v", name, []int64(t.Shape), []int64(info.Shape)))
		}
		switch info.DType {
		case tensor.Float32, tensor.Float16, tensor.BFloat16:
			seen[info.DType] = true
		default:
			dtypes = append(dtypes, fmt.Sprintf("%s: %s", name, info.DType))
		}
	}
	for _, t := range ts {
		if _, _, err := ck.Lookup(t.Name); err != nil {
			missing = append(missing, t.Name)
		}
	}
	var problems []string
	if len(missing) > 0 {
		problems = append(problems, fmt.Sprintf("missing %d tensors: %s", len(missing), listNames(missing)))
	}
	if len(extra) > 0 {
		why := ""
		if hc.TieEmbeddings && slices.Contains(extra, NameLMHead) {
			why = " (tie_word_embeddings is true: the LM head is the embedding)"
		}
		problems = append(problems, fmt.Sprintf("%d tensors the config does not use: %s%s", len(extra), listNames(extra), why))
	}
	if len(shapes) > 0 {
		problems = append(problems, fmt.Sprintf("%d mis-shaped: %s", len(shapes), listNames(shapes)))
	}
	if len(dtypes) > 0 {
		problems = append(problems, fmt.Sprintf("%d of an unsupported dtype (float32, float16, bfloat16): %s", len(dtypes), listNames(dtypes)))
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: %s (%s, %d layers): %s", ErrTensors, dir, hc.Architecture, hc.Layers, strings.Join(problems, "; "))
	}
	if len(seen) == 1 {
		for dt := range seen {
			c.Source = dt
		}
	}
	dt := o.DType
	switch {
	case dt != tensor.Invalid:
	case c.Source != tensor.Invalid:
		dt = c.Source
	case hc.DType != tensor.Invalid:
		dt = hc.DType // mixed: the config's dtype
	default:
		var names []string
		for d := range seen {
			names = append(names, d.String())
		}
		sort.Strings(names)
		return nil, fmt.Errorf("%w: %s mixes dtypes %v and config.json names none (torch_dtype or dtype): give a dtype to load them as", ErrTensors, dir, names)
	}
	if c.Source != dt {
		c.convert = dt
	}
	if c.Decoder, err = hc.Decoder(DecoderOptions{Workers: o.Workers, MaxSeq: o.MaxSeq, DType: dt, LMHead: o.LMHead}); err != nil {
		return nil, err
	}
	return c, nil
}

// Spec is the shard loader's spec of the checkpoint (with the dtype
// conversion, if any).
func (c *Checkpoint) Spec() *shard.Spec { return Spec(c.Tensors, c.convert) }

// Model is a Hugging Face checkpoint loaded on a session.
type Model struct {
	*decoder.Model
	Checkpoint *Checkpoint
	// Weights are the decoder's parameters (with tied embeddings the LM
	// head is the embedding's register).
	Weights map[string]*session.DRef
	// Stats are the loader's counters (bytes read by every worker).
	Stats shardload.Stats
}

// LoadOptions of Load.
type LoadOptions struct {
	Decoder decoder.Options
	Load    shardload.Options
}

// Load loads the checked checkpoint onto s's workers (on dev: the
// workers' device), each reading its own byte ranges (model/shardload),
// and makes the decoder. The session's worker count must be the one c
// was opened for; with several workers it needs a communicator (InitCCL).
func Load(ctx context.Context, s *session.Session, c *Checkpoint, dev tensor.Device, o LoadOptions) (*Model, error) {
	if n := s.NumWorkers(); c.Decoder.Validate(n) != nil {
		return nil, fmt.Errorf("%w: %s was opened for another worker count than the session's %d", ErrConfig, c.Dir, n)
	}
	w, st, err := LoadWeights(ctx, s, c, o.Load)
	if err != nil {
		return nil, err
	}
	m := &Model{Checkpoint: c, Weights: w, Stats: st}
	if m.Model, err = decoder.Load(ctx, s, c.Decoder, dev, o.Decoder, w); err != nil {
		m.Release()
		return nil, err
	}
	return m, nil
}

// LoadWeights loads the checked checkpoint's tensors onto s's workers
// (each reading its own byte ranges) and returns them by the decoder's
// parameter names, for callers that make decoders of their own from one
// set of weights (decoder.Load; release them with
// decoder.ReleaseWeights), and the loader's counters. With tied
// embeddings the LM head is the embedding's register, or, split by
// vocabulary, a view of each worker's rows of it (no copy); an untied
// split head is read by rows, a last short block padded
// (decoder.ShardLMHead).
func LoadWeights(ctx context.Context, s *session.Session, c *Checkpoint, o shardload.Options) (map[string]*session.DRef, shardload.Stats, error) {
	o.Stats = &shardload.Stats{}
	refs, err := shardload.Load(ctx, s, c.Dir, Spec(c.Tensors, c.convert), o)
	if err != nil {
		return nil, shardload.Stats{}, err
	}
	w := map[string]*session.DRef{}
	for _, t := range c.Tensors {
		w[t.Param] = refs[t.Name]
	}
	if c.HF.TieEmbeddings {
		w[decoder.ParamLMHead] = w[decoder.ParamEmbed]
	}
	if err := decoder.ShardLMHead(ctx, s, c.Decoder, w); err != nil {
		decoder.ReleaseWeights(w)
		return nil, shardload.Stats{}, err
	}
	return w, *o.Stats, nil
}

// Release drops the decoder and the weights (each register once).
func (m *Model) Release() {
	if m.Model != nil {
		m.Model.Release()
		m.Model = nil
	}
	done := map[*session.DRef]bool{}
	for k, r := range m.Weights {
		if r != nil && !done[r] {
			done[r] = true
			r.Release()
		}
		delete(m.Weights, k)
	}
}
