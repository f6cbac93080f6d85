package decoder

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/compiler/vm"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/runtime/session"
	"github.com/chorus-rt/chorus/tensor"
)

// Sentinel errors of a loaded model.
var (
	// ErrWeights: the weight map lacks a parameter or has one the model
	// does not know.
	ErrWeights = errors.New("decoder: bad weights")
	// ErrSeq: a step would write past the KV cache (MaxSeq), an empty
	// prompt, or a token outside the vocabulary.
	ErrSeq = errors.New("decoder: sequence")
)

// Worker functions for token ids and positions.
const (
	// Int32sFunc (data []byte) -> int32 tensor on the worker's device
	// holding data's little-endian int32 values.
	Int32sFunc = "decoder.int32s"
	// SetInt32sFunc (t, data []byte) writes data's int32 values into an
	// existing tensor t in place (for graph replays: copies on the
	// worker's stream, ordered before the replay).
	SetInt32sFunc = "decoder.set_int32s"
)

func int32sHost(data []byte) (*tensor.Tensor, error) {
	if len(data)%4 != 0 {
		return nil, fmt.Errorf("%w: %d bytes are not int32 values", registry.ErrBadArgs, len(data))
	}
	h, err := tensor.New(tensor.Int32, tensor.Shape{int64(len(data) / 4)})
	if err != nil {
		return nil, err
	}
	d, _ := tensor.Data[int32](h)
	for i := range d {
		d[i] = int32(binary.LittleEndian.Uint32(data[4*i:]))
	}
	return h, nil
}

func init() {
	registry.MustRegisterTyped(Int32sFunc, func(env registry.Env, data []byte) (*tensor.Tensor, error) {
		h, err := int32sHost(data)
		if err != nil || env.Device().Kind == tensor.CPU {
			return h, err
		}
		t, err := env.Alloc(tensor.Int32, h.Shape(), env.Device(), tensor.ScopeGlobal)
		if err != nil {
			return nil, err
		}
		return t, registry.FromHost(env, t, h)
	})
	registry.MustRegisterTyped(SetInt32sFunc, func(env registry.Env, t *tensor.Tensor, data []byte) error {
		h, err := int32sHost(data)
		if err != nil {
			return err
		}
		if t.DType() != tensor.Int32 || !t.Shape().Equal(h.Shape()) {
			return fmt.Errorf("%w: %d int32 values into %s%v", registry.ErrBadArgs, h.NumElements(), t.DType(), t.Shape())
		}
		return registry.FromHost(env, t, h)
	})
}

func int32Bytes(v []int32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return b
}

// DefaultPrefillCache is how many prompt lengths keep a compiled
// @prefill when Options.PrefillCache is 0.
const DefaultPrefillCache = 8

// Options choose how a model is compiled.
type Options struct {
	// PrefillLen is a prompt length whose @prefill is compiled at Load,
	// into the main program (0: none). Prompts of other lengths work too:
	// their @prefill is compiled at their first use (see Prefill).
	PrefillLen int
	// PrefillCache bounds the prompt lengths (other than PrefillLen and
	// 1) whose compiled @prefill is kept loaded on the workers; the least
	// recently used is released first. 0 means DefaultPrefillCache;
	// negative is an error.
	PrefillCache int
	// Strategy is the custom all-reduce strategy on GPUs (vm.Pipeline).
	Strategy string
	// Batch is how many sequences every step decodes together (0 or 1:
	// one). The sequences share the position: a prefill takes Batch
	// prompts of one length, a decode step one token of each
	// (DecodeBatch); each has a KV cache of its own.
	Batch int
}

// batch is Opts.Batch, at least 1.
func (m *Model) batch() int { return max(m.Opts.Batch, 1) }

// Model is the decoder loaded on a session: the program, the weights (not
// owned), the KV caches (owned) and the next position.
type Model struct {
	Config  Config
	Device  tensor.Device
	Opts    Options
	Module  *ir.Module // the compiled module the workers run
	Program *vm.Program

	s      *session.Session
	params []*session.DRef // Config.Params order, then the caches
	caches []*session.DRef
	// head holds the split LM head's registers the model made (the
	// worker's shard, the one-hot placement, the padding mask): passed
	// after the caches, the shard in the LM head's place.
	head     []*session.DRef
	int32s   *session.DRef
	setInt32 *session.DRef
	pos      int

	graph      *session.DRef // @decode captured, with its own buffers
	gIDs, gPos *session.DRef

	// prefills are the @prefill programs of other prompt lengths, loaded
	// at first use; lru lists their lengths, least recently used first.
	prefills map[int]*vm.Program
	lru      []int
}

// Load compiles the decoder for s's workers (on dev: the workers'
// device), loads it, checks that weights has exactly the parameters of
// c.Params (each a DRef of the worker's shard, as RandomWeights or the
// shard loader make them) and allocates the KV caches. Shard shapes and
// dtypes are checked by the workers at the first step. The session needs
// a communicator when it has several workers (InitCCL: "cpu" on CPUs,
// "nccl" or "ipc" on GPUs).
func Load(ctx context.Context, s *session.Session, c Config, dev tensor.Device, opts Options, weights map[string]*session.DRef) (*Model, error) {
	n := s.NumWorkers()
	specs := c.Params()
	var missing, extra []string
	for _, p := range specs {
		if weights[p.Name] == nil {
			missing = append(missing, p.Name)
		}
	}
	for name := range weights {
		if !slices.ContainsFunc(specs, func(p ParamSpec) bool { return p.Name == name }) {
			extra = append(extra, name)
		}
	}
	if len(missing)+len(extra) > 0 {
		slices.Sort(extra)
		return nil, fmt.Errorf("%w: missing %v, unknown %v", ErrWeights, missing, extra)
	}
	if opts.PrefillCache < 0 {
		return nil, fmt.Errorf("%w: Options.PrefillCache %d", ErrConfig, opts.PrefillCache)
	}
	if opts.Batch < 0 {
		return nil, fmt.Errorf("%w: Options.Batch %d (0 or 1: one sequence)", ErrConfig, opts.Batch)
	}
	mod, err := compileBatch(c, n, opts.PrefillLen, max(opts.Batch, 1), dev, opts.Strategy, nil)
	if err != nil {
		return nil, err
	}
	m := &Model{Config: c, Device: dev, Opts: opts, Module: mod, s: s, prefills: map[int]*vm.Program{}}
	fail := func(err error) (*Model, error) {
		m.Release()
		return nil, err
	}
	if m.Program, err = vm.Load(ctx, s, mod); err != nil {
		return fail(err)
	}
	if m.int32s, err = s.GetGlobalFunc(ctx, Int32sFunc); err != nil {
		return fail(err)
	}
	if m.setInt32, err = s.GetGlobalFunc(ctx, SetInt32sFunc); err != nil {
		return fail(err)
	}
	empty, err := s.GetGlobalFunc(ctx, "chorus.empty")
	if err != nil {
		return fail(err)
	}
	defer empty.Release()
	for _, p := range specs {
		m.params = append(m.params, weights[p.Name])
	}
	if err := m.loadHead(ctx); err != nil {
		return fail(err)
	}
	for range 2 * c.Layers {
		r, err := s.CallPacked(empty, c.BatchCacheShape(n, opts.Batch), c.DType, nil, false, false)
		if err != nil {
			return fail(err)
		}
		m.caches = append(m.caches, r)
	}
	if err := s.Sync(ctx); err != nil {
		return fail(fmt.Errorf("decoder: KV caches: %w", err))
	}
	return m, nil
}

// loadHead makes the split LM head's registers on several workers: the
// worker's shard of the head it was given (LMHeadShardFunc: the register
// itself when it is one already), in the head's place among the
// parameters, and the placement and mask parameters.
func (m *Model) loadHead(ctx context.Context) error {
	c, n := m.Config, m.s.NumWorkers()
	extra := c.HeadParams(n)
	if len(extra) == 0 {
		return nil
	}
	r, err := shardLMHead(m.s, c, m.params[len(m.params)-1])
	if err != nil {
		return err
	}
	m.head = append(m.head, r)
	m.params[len(m.params)-1] = r
	for _, name := range extra {
		fn, args := LMHeadPlaceFunc, []any{c.DType}
		if name == ParamLMHeadMask {
			fn, args = LMHeadMaskFunc, []any{c.DType, int64(c.Vocab), int64(c.LogitsWidth(n))}
		}
		f, err := m.s.GetGlobalFunc(ctx, fn)
		if err != nil {
			return err
		}
		r, err := m.s.CallPacked(f, args...)
		f.Release()
		if err != nil {
			return err
		}
		m.head = append(m.head, r)
	}
	if err := m.s.Sync(ctx); err != nil {
		return fmt.Errorf("decoder: LM head shards: %w", err)
	}
	return nil
}

// Release drops the program, the caches, the split LM head's registers
// and any captured graph (not the weights, which the caller owns).
func (m *Model) Release() {
	for _, r := range append(append(m.caches, m.head...), m.int32s, m.setInt32, m.graph, m.gIDs, m.gPos) {
		if r != nil {
			r.Release()
		}
	}
	m.caches, m.head, m.int32s, m.setInt32, m.graph, m.gIDs, m.gPos = nil, nil, nil, nil, nil, nil, nil
	for _, p := range m.prefills {
		p.Release()
	}
	m.prefills, m.lru = nil, nil
	if m.Program != nil {
		m.Program.Release()
		m.Program = nil
	}
}

// Pos is the next position (the number of tokens in the caches).
func (m *Model) Pos() int { return m.pos }

// Reset starts a new sequence: positions from 0 again (old cache rows
// are overwritten as the new sequence reaches them; attention never reads
// past the current position).
func (m *Model) Reset() { m.pos = 0 }

// Step is the result of a prefill or decode step on every worker.
type Step struct {
	Logits *session.DRef // [T, vocab] (a batch: every sequence's T rows in turn)
	Next   *session.DRef // int32 [T]: argmax of every row
	result *session.DRef // the result list (nil for graph replays, which own it)
}

// Release drops the step's results.
func (st *Step) Release() {
	for _, r := range []*session.DRef{st.Logits, st.Next, st.result} {
		if r != nil {
			r.Release()
		}
	}
}

func (m *Model) args(ids, pos *session.DRef) []any {
	args := []any{ids, pos}
	for _, p := range m.params {
		args = append(args, p)
	}
	for _, c := range m.caches {
		args = append(args, c)
	}
	if len(m.head) > 1 {
		for _, r := range m.head[1:] {
			args = append(args, r)
		}
	}
	return args
}

// positions are the positions of t next tokens of every sequence,
// sequence by sequence.
func (m *Model) positions(t int) ([]int32, error) {
	if m.pos+t > m.Config.MaxSeq {
		return nil, fmt.Errorf("%w: %d tokens at position %d pass the cache's %d rows", ErrSeq, t, m.pos, m.Config.MaxSeq)
	}
	p := make([]int32, 0, t*m.batch())
	for range m.batch() {
		for i := range t {
			p = append(p, int32(m.pos+i))
		}
	}
	return p, nil
}

func (m *Model) checkIDs(ids []int32) error {
	for i, id := range ids {
		if id < 0 || int(id) >= m.Config.Vocab {
			return fmt.Errorf("%w: token %d (index %d) outside the vocabulary of %d", ErrSeq, id, i, m.Config.Vocab)
		}
	}
	return nil
}

// run calls fn of prog on new id and position tensors and advances the
// position. The ids and the positions have been checked.
func (m *Model) run(ctx context.Context, prog *vm.Program, fn string, ids, pos []int32) (*Step, error) {
	idr, err := m.s.CallPacked(m.int32s, int32Bytes(ids))
	if err != nil {
		return nil, err
	}
	defer idr.Release()
	pr, err := m.s.CallPacked(m.int32s, int32Bytes(pos))
	if err != nil {
		return nil, err
	}
	defer pr.Release()
	res, err := prog.Call(ctx, fn, m.args(idr, pr)...)
	if err != nil {
		return nil, err
	}
	st, err := m.split(res)
	if err != nil {
		return nil, err
	}
	m.pos += len(ids) / m.batch()
	return st, nil
}

func (m *Model) split(res *session.DRef) (*Step, error) {
	st := &Step{result: res}
	var err error
	if st.Logits, err = m.Program.Result(res, 0); err != nil {
		st.Release()
		return nil, err
	}
	if st.Next, err = m.Program.Result(res, 1); err != nil {
		st.Release()
		return nil, err
	}
	return st, nil
}

// Prefill runs a prompt of any length from 1 to MaxSeq - Pos() at the
// next positions, in one step (asynchronously, like Program.Call): the
// main program's @prefill for Opts.PrefillLen tokens, @decode for one,
// and otherwise a @prefill compiled for exactly len(ids) tokens, loaded
// on the workers at the first prompt of that length and kept for the
// next ones (at most Opts.PrefillCache lengths; see PrefillLengths).
// The step's logits are [len(ids), vocab]. With Opts.Batch sequences,
// ids holds Batch prompts of one length, one after the other.
func (m *Model) Prefill(ctx context.Context, ids []int32) (*Step, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: empty prompt", ErrSeq)
	}
	if len(ids)%m.batch() != 0 {
		return nil, fmt.Errorf("%w: %d tokens are not %d prompts of one length", ErrSeq, len(ids), m.batch())
	}
	if err := m.checkIDs(ids); err != nil {
		return nil, err
	}
	t := len(ids) / m.batch()
	pos, err := m.positions(t)
	if err != nil {
		return nil, err
	}
	switch {
	case t == m.Opts.PrefillLen:
		return m.run(ctx, m.Program, FuncPrefill, ids, pos)
	case t == 1:
		return m.run(ctx, m.Program, FuncDecode, ids, pos)
	}
	p, err := m.prefillProgram(ctx, t)
	if err != nil {
		return nil, err
	}
	return m.run(ctx, p, FuncPrefill, ids, pos)
}

// prefillProgram returns the loaded @prefill of t tokens, compiling and
// loading it when there is none, after releasing the least recently used
// one when the cache is full.
func (m *Model) prefillProgram(ctx context.Context, t int) (*vm.Program, error) {
	if m.Program == nil {
		return nil, fmt.Errorf("decoder: prefill: %w", session.ErrReleased)
	}
	if p := m.prefills[t]; p != nil {
		m.lru = append(slices.DeleteFunc(m.lru, func(x int) bool { return x == t }), t)
		return p, nil
	}
	limit := m.Opts.PrefillCache
	if limit == 0 {
		limit = DefaultPrefillCache
	}
	for len(m.lru) >= limit {
		old := m.lru[0]
		m.lru = m.lru[1:]
		m.prefills[old].Release()
		delete(m.prefills, old)
	}
	src, err := buildPrefill(m.Config, m.s.NumWorkers(), t, m.batch())
	if err != nil {
		return nil, err
	}
	mod, err := compileModule(src, m.Device, m.Opts.Strategy, nil)
	if err != nil {
		return nil, err
	}
	p, err := vm.Load(ctx, m.s, mod)
	if err != nil {
		return nil, fmt.Errorf("decoder: prefill of %d tokens: %w", t, err)
	}
	m.prefills[t] = p
	m.lru = append(m.lru, t)
	return p, nil
}

// PrefillLengths lists the prompt lengths with a @prefill compiled at
// first use and still loaded, least recently used first (Opts.PrefillLen
// and 1, served by the main program, are not listed).
func (m *Model) PrefillLengths() []int { return slices.Clone(m.lru) }

// Decode runs @decode on one token at the next position (one sequence:
// DecodeBatch for Opts.Batch > 1).
func (m *Model) Decode(ctx context.Context, id int32) (*Step, error) {
	return m.DecodeBatch(ctx, []int32{id})
}

// DecodeBatch runs @decode on one token of every sequence (Opts.Batch
// of them, in order) at the next position.
func (m *Model) DecodeBatch(ctx context.Context, ids []int32) (*Step, error) {
	if err := m.checkBatch(ids); err != nil {
		return nil, err
	}
	pos, err := m.positions(1)
	if err != nil {
		return nil, err
	}
	return m.run(ctx, m.Program, FuncDecode, ids, pos)
}

// checkBatch checks a decode step's tokens: one per sequence, each in
// the vocabulary.
func (m *Model) checkBatch(ids []int32) error {
	if len(ids) != m.batch() {
		return fmt.Errorf("%w: %d tokens for a decode step of %d sequences", ErrSeq, len(ids), m.batch())
	}
	return m.checkIDs(ids)
}

// CaptureDecode captures @decode as a CUDA graph on every worker (GPU
// workers only: vm.Program.Capture), reading its id and position from
// buffers of its own. The capture's warm-up run writes a cache row at the
// current position, which the next real step there overwrites.
func (m *Model) CaptureDecode(ctx context.Context) error {
	if m.graph != nil {
		return nil
	}
	p := min(m.pos, m.Config.MaxSeq-1)
	ids, pos := make([]int32, m.batch()), make([]int32, m.batch())
	for i := range pos {
		pos[i] = int32(p)
	}
	var err error
	if m.gIDs, err = m.s.CallPacked(m.int32s, int32Bytes(ids)); err != nil {
		return err
	}
	if m.gPos, err = m.s.CallPacked(m.int32s, int32Bytes(pos)); err != nil {
		return err
	}
	if m.graph, err = m.Program.Capture(ctx, FuncDecode, m.args(m.gIDs, m.gPos)...); err != nil {
		return err
	}
	return m.s.Sync(ctx)
}

// ReplayDecode is Decode through the captured graph: it writes id and the
// position into the graph's buffers (on the workers' streams) and replays.
// The step's tensors are the same at every replay (a later replay
// overwrites them); release the Step when done with it.
func (m *Model) ReplayDecode(ctx context.Context, id int32) (*Step, error) {
	return m.ReplayDecodeBatch(ctx, []int32{id})
}

// ReplayDecodeBatch is DecodeBatch through the captured graph (see
// ReplayDecode).
func (m *Model) ReplayDecodeBatch(ctx context.Context, ids []int32) (*Step, error) {
	if m.graph == nil {
		return nil, fmt.Errorf("%w: ReplayDecode before CaptureDecode", vm.ErrArgs)
	}
	if err := m.checkBatch(ids); err != nil {
		return nil, err
	}
	pos, err := m.positions(1)
	if err != nil {
		return nil, err
	}
	if err := m.s.CallPackedDiscard(m.setInt32, m.gIDs, int32Bytes(ids)); err != nil {
		return nil, err
	}
	if err := m.s.CallPackedDiscard(m.setInt32, m.gPos, int32Bytes(pos)); err != nil {
		return nil, err
	}
	res, err := m.Program.Replay(ctx, m.graph)
	if err != nil {
		return nil, err
	}
	st, err := m.split(res)
	if err != nil {
		return nil, err
	}
	m.pos++
	return st, nil
}

// Logits fetches a step's logits from worker w as float64, row-major
// [T, vocab].
func (m *Model) Logits(ctx context.Context, st *Step, w int) ([]float64, error) {
	v, err := m.s.DebugGetFromRemote(ctx, st.Logits, w)
	if err != nil {
		return nil, err
	}
	t, ok := v.(*tensor.Tensor)
	if !ok {
		return nil, fmt.Errorf("decoder: worker %d returned logits as a %T", w, v)
	}
	l, err := tensor.ToFloat64(t)
	if err != nil {
		return nil, err
	}
	// A split head's padding columns (past the vocabulary) are dropped.
	if width, vocab := m.Config.LogitsWidth(m.s.NumWorkers()), m.Config.Vocab; width > vocab {
		out := make([]float64, 0, len(l)/width*vocab)
		for i := 0; i+width <= len(l); i += width {
			out = append(out, l[i:i+vocab]...)
		}
		l = out
	}
	return l, nil
}

// Tokens fetches a step's argmax tokens from worker w.
func (m *Model) Tokens(ctx context.Context, st *Step, w int) ([]int32, error) {
	v, err := m.s.DebugGetFromRemote(ctx, st.Next, w)
	if err != nil {
		return nil, err
	}
	t, ok := v.(*tensor.Tensor)
	if !ok || t.DType() != tensor.Int32 {
		return nil, fmt.Errorf("decoder: worker %d returned tokens as %v", w, v)
	}
	d, err := tensor.Data[int32](t)
	return slices.Clone(d), err
}

// Generation is the outcome of Generate.
type Generation struct {
	Tokens  []int32         // the generated tokens (the prefill's next token first)
	Prefill time.Duration   // the prefill step, through reading its token
	Steps   []time.Duration // every decode step, through reading its token
}

// Generate runs a greedy generation from the current position: the
// prompt in one Prefill step (which compiles a @prefill for its length
// first, unless it is Opts.PrefillLen, 1, or seen before), then steps
// decode steps, each fed the previous token, read back from worker 0
// (through the captured graph when graph is set). The durations include
// the round trip for the token.
func (m *Model) Generate(ctx context.Context, prompt []int32, steps int, graph bool) (*Generation, error) {
	if len(prompt) == 0 {
		return nil, fmt.Errorf("%w: empty prompt", ErrSeq)
	}
	if graph {
		if err := m.CaptureDecode(ctx); err != nil {
			return nil, err
		}
	}
	g := &Generation{}
	last := func(st *Step) (int32, error) {
		defer st.Release()
		tok, err := m.Tokens(ctx, st, 0)
		if err != nil {
			return 0, err
		}
		return tok[len(tok)-1], nil
	}
	t0 := time.Now()
	st, err := m.Prefill(ctx, prompt)
	if err != nil {
		return nil, err
	}
	tok, err := last(st)
	if err != nil {
		return nil, err
	}
	g.Prefill = time.Since(t0)
	g.Tokens = append(g.Tokens, tok)
	for range steps {
		t0 := time.Now()
		if graph {
			st, err = m.ReplayDecode(ctx, tok)
		} else {
			st, err = m.Decode(ctx, tok)
		}
		if err != nil {
			return g, err
		}
		if tok, err = last(st); err != nil {
			return g, err
		}
		g.Steps = append(g.Steps, time.Since(t0))
		g.Tokens = append(g.Tokens, tok)
	}
	return g, nil
}

// PeakMemory returns every worker's memory high-water marks
// (session.Memory): the peak resident memory of its process (shared by
// threaded workers and the controller: HostShared) and, on GPUs, the most
// device memory its allocator held plus its IPC memory. It waits for the
// work sent before it.
func (m *Model) PeakMemory(ctx context.Context) ([]registry.MemoryStats, error) {
	return m.s.Memory(ctx)
}

// Workers is the number of workers of the model's session.
func (m *Model) Workers() int { return m.s.NumWorkers() }
