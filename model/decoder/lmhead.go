package decoder

import (
	"context"
	"fmt"
	"math"

	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

// Worker functions of the split LM head (LMHeadSplit).
const (
	// LMHeadShardFunc (t, dim, vocab int64) -> the worker's LM head shard
	// (ParamSpec.ShardShape): t itself when it has that shape already; a
	// view of rows [r·P, (r+1)·P) when t is the whole head split by rows
	// (a tied embedding: no copy); otherwise a copy padded with zeros to P
	// along dim (a short last block, or a whole head split by columns).
	LMHeadShardFunc = "decoder.lm_head_shard"
	// LMHeadPlaceFunc (dtype) -> [n, 1] on the worker's device: 1 in row
	// r (the worker's rank), 0 elsewhere.
	LMHeadPlaceFunc = "decoder.lm_head_place"
	// LMHeadMaskFunc (dtype, vocab, width int64) -> [width]: 0 for the
	// first vocab elements, -inf after.
	LMHeadMaskFunc = "decoder.lm_head_mask"
)

// onDevice returns host tensor h on env's device (h itself on CPUs).
func onDevice(env registry.Env, h *tensor.Tensor) (*tensor.Tensor, error) {
	if env.Device().Kind == tensor.CPU {
		return h, nil
	}
	t, err := env.Alloc(h.DType(), h.Shape(), env.Device(), tensor.ScopeGlobal)
	if err != nil {
		return nil, err
	}
	return t, registry.FromHost(env, t, h)
}

// lmHeadShard is LMHeadShardFunc's work on worker r of n.
func lmHeadShard(env registry.Env, t *tensor.Tensor, dim, vocab int64, r, n int) (*tensor.Tensor, error) {
	s := t.Shape()
	if len(s) != 2 || dim < 0 || dim > 1 || vocab < 1 || n < 1 {
		return nil, fmt.Errorf("%w: LM head shard of %s%v along dimension %d of a vocabulary of %d", registry.ErrBadArgs, t.DType(), s, dim, vocab)
	}
	p := (vocab + int64(n) - 1) / int64(n)
	lo, hi := Block(vocab, 0, true, r, n)
	switch {
	case s[dim] == p:
		return t, nil
	case s[dim] == vocab && dim == 0 && hi-lo == p:
		return t.View(lo*s[1]*int64(t.DType().Size()), t.DType(), tensor.Shape{p, s[1]})
	case s[dim] != vocab && s[dim] > p:
		return nil, fmt.Errorf("%w: LM head shard of %v: dimension %d is neither the vocabulary %d nor at most a block of %d", registry.ErrBadArgs, s, dim, vocab, p)
	}
	h, err := registry.ToHost(env, t)
	if err != nil {
		return nil, err
	}
	// Take [lo, hi) of a whole head, all of a short block.
	from := int64(0)
	if s[dim] == vocab {
		from = lo
	} else {
		hi, lo = s[dim], 0
	}
	out := tensor.Shape{s[0], s[1]}
	out[dim] = p
	o, err := tensor.New(t.DType(), out)
	if err != nil {
		return nil, err
	}
	es := int64(t.DType().Size())
	src, dst := h.Bytes(), o.Bytes()
	if dim == 0 {
		copy(dst, src[from*s[1]*es:(from+hi-lo)*s[1]*es])
	} else {
		for i := range s[0] {
			copy(dst[i*p*es:], src[(i*s[1]+from)*es:(i*s[1]+from+hi-lo)*es])
		}
	}
	return onDevice(env, o)
}

func init() {
	registry.MustRegisterTyped(LMHeadShardFunc, func(env registry.Env, t *tensor.Tensor, dim, vocab int64) (*tensor.Tensor, error) {
		return lmHeadShard(env, t, dim, vocab, env.WorkerID(), env.NumWorkers())
	})
	registry.MustRegisterTyped(LMHeadPlaceFunc, func(env registry.Env, dt tensor.DType) (*tensor.Tensor, error) {
		n := env.NumWorkers()
		h, err := tensor.New(dt, tensor.Shape{int64(n), 1})
		if err != nil {
			return nil, err
		}
		v := make([]float64, n)
		v[env.WorkerID()] = 1
		if err := tensor.SetFromFloat64(h, v); err != nil {
			return nil, err
		}
		return onDevice(env, h)
	})
	registry.MustRegisterTyped(LMHeadMaskFunc, func(env registry.Env, dt tensor.DType, vocab, width int64) (*tensor.Tensor, error) {
		if vocab < 0 || width < vocab {
			return nil, fmt.Errorf("%w: mask of %d columns past a vocabulary of %d", registry.ErrBadArgs, width, vocab)
		}
		h, err := tensor.New(dt, tensor.Shape{width})
		if err != nil {
			return nil, err
		}
		v := make([]float64, width)
		for i := vocab; i < width; i++ {
			v[i] = math.Inf(-1)
		}
		if err := tensor.SetFromFloat64(h, v); err != nil {
			return nil, err
		}
		return onDevice(env, h)
	})
}

// lmHeadSpec is c's LM head parameter.
func (c Config) lmHeadSpec() ParamSpec {
	ps := c.Params()
	return ps[len(ps)-1]
}

// shardLMHead calls LMHeadShardFunc on every worker's head register.
func shardLMHead(s *session.Session, c Config, head *session.DRef) (*session.DRef, error) {
	f, err := s.GetGlobalFunc(context.Background(), LMHeadShardFunc)
	if err != nil {
		return nil, err
	}
	defer f.Release()
	return s.CallPacked(f, head, int64(c.lmHeadSpec().splitDim()), int64(c.Vocab))
}

// ShardLMHead makes w's LM head the workers' shards of a split head
// (LMHeadSplit, several workers; otherwise it does nothing): a tied
// embedding (w[ParamLMHead] is w[ParamEmbed]'s register) becomes a view
// of each worker's rows; a short last block (the vocabulary not dividing
// over the workers) a padded copy, the short one released. Load does the
// same for heads it is given unsharded, keeping the copies while the
// model lives; loaders call this first so no short block stays loaded
// next to its padded copy.
func ShardLMHead(ctx context.Context, s *session.Session, c Config, w map[string]*session.DRef) error {
	if c.LMHeadMode() != LMHeadSplit || s.NumWorkers() == 1 {
		return nil
	}
	head := w[ParamLMHead]
	if head == nil {
		return fmt.Errorf("%w: missing %s", ErrWeights, ParamLMHead)
	}
	r, err := shardLMHead(s, c, head)
	if err != nil {
		return err
	}
	if err := s.Sync(ctx); err != nil {
		r.Release()
		return fmt.Errorf("decoder: LM head shards: %w", err)
	}
	if head != w[ParamEmbed] {
		head.Release()
	}
	w[ParamLMHead] = r
	return nil
}
