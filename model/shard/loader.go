package shard

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync/atomic"

	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/model/safetensors"
	"github.com/chorus-rt/chorus/tensor"
)

// Entry is how one tensor loads on this rank.
type Entry struct {
	Name string
	// DType and Shape are the loaded tensor's (after any conversion).
	DType tensor.DType
	Shape tensor.Shape
	// Source is the tensor in the checkpoint.
	Source safetensors.Info
	// Plan's ranges are the bytes this rank reads.
	Plan Plan
	// Rule is the index of the deciding rule, -1 for the default.
	Rule int
	file *safetensors.File
	// starts[i] is the position of Plan.Ranges[i] in the concatenation.
	starts []int64
}

// Bytes is the loaded tensor's size.
func (e *Entry) Bytes() int64 {
	n, _ := e.Shape.NumElements()
	return n * int64(e.DType.Size())
}

// Stats count what a Loader read from the checkpoint's data sections
// (headers, read when the checkpoint is opened, are not counted).
type Stats struct {
	BytesRead int64 // bytes read
	Reads     int64 // positional reads issued (one per range piece)
	Tensors   int64 // tensors loaded
}

// Loader loads rank's part of each tensor of a checkpoint. Load and
// LoadDevice may be called from several goroutines (with a Staging each).
type Loader struct {
	ck      *safetensors.Checkpoint
	owns    bool
	rank, n int
	entries map[string]*Entry
	names   []string
	bytes   atomic.Int64
	reads   atomic.Int64
	tensors atomic.Int64
	// onRead, if set (tests), sees every read: file, data-section offset,
	// length.
	onRead func(file string, off, n int64)
}

// Open opens the checkpoint at path (safetensors.OpenCheckpoint) and
// makes a Loader that owns it.
func Open(path string, spec *Spec, rank, n int) (*Loader, error) {
	ck, err := safetensors.OpenCheckpoint(path)
	if err != nil {
		return nil, err
	}
	l, err := NewLoader(ck, spec, rank, n)
	if err != nil {
		ck.Close()
		return nil, err
	}
	l.owns = true
	return l, nil
}

// NewLoader plans every tensor of ck for rank of n ranks. Every error
// of the spec against the checkpoint is found here, before any data is
// read.
func NewLoader(ck *safetensors.Checkpoint, spec *Spec, rank, n int) (*Loader, error) {
	if n < 1 || rank < 0 || rank >= n {
		return nil, fmt.Errorf("shard: %w: rank %d of %d ranks", ErrSpec, rank, n)
	}
	if spec == nil {
		spec = &Spec{}
	}
	c, err := spec.compile()
	if err != nil {
		return nil, fmt.Errorf("shard: %w", err)
	}
	l := &Loader{ck: ck, rank: rank, n: n, entries: map[string]*Entry{}}
	used := make([]bool, len(c.rules))
	for _, name := range ck.Names() {
		f, info, err := ck.Lookup(name)
		if err != nil {
			return nil, err
		}
		r := c.find(name)
		e, err := l.plan(c, r, f, info)
		if err != nil {
			where := "no rule; default"
			if r != nil {
				where = fmt.Sprintf("rule %d, %s", r.index, r.desc)
			}
			return nil, fmt.Errorf("shard: %s: tensor %q %s%v (%s), rank %d of %d: %w", f.Path, name, info.DType, []int64(info.Shape), where, rank, n, err)
		}
		if r != nil {
			used[r.index] = true
		}
		l.entries[name] = e
		l.names = append(l.names, name)
	}
	for i, u := range used {
		if !u {
			return nil, fmt.Errorf("shard: %s: %w: rule %d (%s) matches no tensor", ck.Path, ErrSpec, i, c.rules[i].desc)
		}
	}
	return l, nil
}

func (l *Loader) plan(c *compiled, r *rule, f *safetensors.File, info safetensors.Info) (*Entry, error) {
	e := &Entry{Name: info.Name, DType: info.DType, Source: info, Rule: -1, file: f}
	elem := int64(info.DType.Size())
	var err error
	switch {
	case r == nil && c.defaultError:
		return nil, fmt.Errorf("%w: no rule matches it and the spec's default is \"error\"", ErrSpec)
	case r == nil || r.act == actReplicate:
		e.Plan = Replicate(info.Shape, elem)
	case r.act == actSplit:
		dim := r.dim
		if dim < 0 {
			dim += len(info.Shape)
		}
		e.Plan, err = Split(info.Shape, elem, dim, l.rank, l.n)
	case r.act == actFunc:
		req := Request{Name: info.Name, Shape: info.Shape.Clone(), DType: info.DType, Rank: l.rank, N: l.n, Args: r.args}
		var p Plan
		if p, err = r.fn(req); err == nil {
			e.Plan, err = checkPlan(p, req)
		}
		if err != nil {
			err = fmt.Errorf("func %q: %w", r.fname, err)
		}
	}
	if err != nil {
		return nil, err
	}
	if r != nil {
		e.Rule = r.index
		if r.dtype != tensor.Invalid && r.dtype != info.DType {
			return nil, fmt.Errorf("%w: the checkpoint holds %s, the spec expects %s", ErrDType, info.DType, r.dtype)
		}
		if r.convert != tensor.Invalid && info.DType != r.convert {
			if !Convertible(info.DType) {
				return nil, fmt.Errorf("%w: convert to %s: chorus converts float32, float16 and bfloat16 only, the checkpoint holds %s", ErrDType, r.convert, info.DType)
			}
			e.DType = r.convert
		}
	}
	e.Shape = e.Plan.Shape
	e.starts = make([]int64, len(e.Plan.Ranges))
	var pos int64
	for i, rg := range e.Plan.Ranges {
		e.starts[i] = pos
		pos += rg.Len
	}
	return e, nil
}

// Rank and N are this loader's rank and rank count.
func (l *Loader) Rank() int { return l.rank }
func (l *Loader) N() int    { return l.n }

// Checkpoint is the checkpoint being loaded.
func (l *Loader) Checkpoint() *safetensors.Checkpoint { return l.ck }

// Names lists every tensor, sorted.
func (l *Loader) Names() []string { return append([]string(nil), l.names...) }

// Entry returns how name loads; the error wraps ErrNotFound.
func (l *Loader) Entry(name string) (*Entry, error) {
	e, ok := l.entries[name]
	if !ok {
		return nil, fmt.Errorf("shard: %s: tensor %q: %w", l.ck.Path, name, ErrNotFound)
	}
	return e, nil
}

// Stats returns the counters so far.
func (l *Loader) Stats() Stats {
	return Stats{BytesRead: l.bytes.Load(), Reads: l.reads.Load(), Tensors: l.tensors.Load()}
}

// Close closes the checkpoint if the Loader opened it (Open).
func (l *Loader) Close() error {
	if l.owns {
		return l.ck.Close()
	}
	return nil
}

// readIn fills p with bytes [off, off+len(p)) of the concatenation of
// e's ranges: one positional read per range piece.
func (l *Loader) readIn(e *Entry, p []byte, off int64) error {
	rs := e.Plan.Ranges
	i := sort.Search(len(rs), func(i int) bool { return e.starts[i]+rs[i].Len > off })
	for len(p) > 0 {
		if i >= len(rs) {
			return fmt.Errorf("shard: tensor %q: read past its plan", e.Name) // a bug, not bad input
		}
		within := off - e.starts[i]
		k := min(int64(len(p)), rs[i].Len-within)
		if err := e.file.ReadRange(e.Source, p[:k], rs[i].Off+within); err != nil {
			return err
		}
		l.bytes.Add(k)
		l.reads.Add(1)
		if l.onRead != nil {
			l.onRead(e.file.Path, e.Source.Begin+rs[i].Off+within, k)
		}
		p, off, i = p[k:], off+k, i+1
	}
	return nil
}

// readOut fills p with bytes [off, off+len(p)) of the loaded tensor,
// converting if asked (off and len(p) are multiples of the element size).
func (l *Loader) readOut(e *Entry, p []byte, off int64, scratch *[]byte) error {
	if e.DType == e.Source.DType {
		return l.readIn(e, p, off)
	}
	src, dst := e.Source.DType.Size(), e.DType.Size()
	n := len(p) / dst
	in := *scratch
	if cap(in) < n*src {
		in = make([]byte, n*src)
		*scratch = in
	}
	in = in[:n*src]
	if err := l.readIn(e, in, off/int64(dst)*int64(src)); err != nil {
		return err
	}
	convert(e.Source.DType, in, e.DType, p[:n*dst])
	return nil
}

// Convertible reports the dtypes a rule's Convert takes and converts
// from: float32, float16 and bfloat16.
func Convertible(dt tensor.DType) bool {
	return dt == tensor.Float32 || dt == tensor.Float16 || dt == tensor.BFloat16
}

// convert writes the values of in (dtype from) into out (dtype to),
// through float32: widening is exact, narrowing rounds to nearest even.
func convert(from tensor.DType, in []byte, to tensor.DType, out []byte) {
	n := len(out) / to.Size()
	for j := range n {
		var f float32
		switch from {
		case tensor.Float32:
			f = math.Float32frombits(binary.LittleEndian.Uint32(in[4*j:]))
		case tensor.Float16:
			f = tensor.F16(binary.LittleEndian.Uint16(in[2*j:])).Float32()
		case tensor.BFloat16:
			f = tensor.BF16(binary.LittleEndian.Uint16(in[2*j:])).Float32()
		}
		switch to {
		case tensor.Float32:
			binary.LittleEndian.PutUint32(out[4*j:], math.Float32bits(f))
		case tensor.Float16:
			binary.LittleEndian.PutUint16(out[2*j:], uint16(tensor.F16FromFloat32(f)))
		case tensor.BFloat16:
			binary.LittleEndian.PutUint16(out[2*j:], uint16(tensor.BF16FromFloat32(f)))
		}
	}
}

// convertChunk bounds the scratch memory of a converting host load (a
// variable so tests can make it small).
var convertChunk int64 = 8 << 20

// Load reads rank's part of name into a new host tensor.
func (l *Loader) Load(name string) (*tensor.Tensor, error) {
	e, err := l.Entry(name)
	if err != nil {
		return nil, err
	}
	t, err := tensor.New(e.DType, e.Shape)
	if err != nil {
		return nil, fmt.Errorf("shard: tensor %q: %w", name, err)
	}
	out := t.Bytes()
	// Without conversion, one pass (one read per range); converting, in
	// chunks that bound the scratch memory.
	step := int64(len(out))
	if e.DType != e.Source.DType {
		step = convertChunk
	}
	var scratch []byte
	for pos := int64(0); pos < int64(len(out)); pos += step {
		end := min(pos+step, int64(len(out)))
		if err := l.readOut(e, out[pos:end], pos, &scratch); err != nil {
			return nil, err
		}
	}
	l.tensors.Add(1)
	return t, nil
}

// DefaultStagingChunk is the size of each of a Staging's two pinned
// buffers.
const DefaultStagingChunk = 8 << 20

// Staging is a pair of pinned host buffers of one device: LoadDevice
// fills one from the file while the device copies the other. Not safe
// for concurrent use.
type Staging struct {
	dev     device.Stager
	bufs    [2]*device.PinnedBuffer
	busy    [2]bool
	scratch []byte
}

// NewStaging allocates two pinned buffers of chunk bytes (0: the
// default; rounded down to a multiple of 64) on dev, which must be a
// device.Stager.
func NewStaging(dev device.Device, chunk int64) (*Staging, error) {
	st, ok := dev.(device.Stager)
	if !ok {
		return nil, fmt.Errorf("shard: device %T cannot stage through pinned memory", dev)
	}
	if chunk == 0 {
		chunk = DefaultStagingChunk
	}
	chunk &^= 63
	if chunk <= 0 {
		return nil, fmt.Errorf("shard: staging chunk of %d bytes: want at least 64", chunk)
	}
	s := &Staging{dev: st}
	for i := range s.bufs {
		b, err := st.AllocPinned(chunk)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("shard: staging buffers: %w", err)
		}
		s.bufs[i] = b
	}
	return s, nil
}

// Close frees the pinned buffers (after the device is done with them).
func (s *Staging) Close() error {
	var errs []error
	for i, b := range s.bufs {
		if b != nil {
			errs = append(errs, s.dev.FreePinned(b))
			s.bufs[i] = nil
		}
	}
	return errors.Join(errs...)
}

// LoadDevice reads rank's part of name into dst at byte offset off on
// s's device, staging through s's pinned buffers; it returns once the
// data is on the device.
func (l *Loader) LoadDevice(name string, s *Staging, dst *device.Buffer, off int64) (err error) {
	e, err := l.Entry(name)
	if err != nil {
		return err
	}
	total := e.Bytes()
	if dst == nil || off < 0 || off > dst.Size() || total > dst.Size()-off {
		return fmt.Errorf("shard: tensor %q: %d bytes do not fit at offset %d of the destination", name, total, off)
	}
	if s.bufs[0] == nil {
		return fmt.Errorf("shard: tensor %q: staging is closed", name)
	}
	defer func() {
		// Whatever happened, the pinned buffers are idle when we return.
		if serr := s.dev.Sync(); err == nil && serr != nil {
			err = fmt.Errorf("shard: tensor %q: %w", name, serr)
		}
		s.busy = [2]bool{}
	}()
	chunk := int64(len(s.bufs[0].Bytes()))
	i := 0
	for pos := int64(0); pos < total; pos += chunk {
		if s.busy[i] {
			if err := s.dev.Sync(); err != nil {
				return fmt.Errorf("shard: tensor %q: %w", name, err)
			}
			s.busy = [2]bool{}
		}
		k := min(chunk, total-pos)
		if err := l.readOut(e, s.bufs[i].Bytes()[:k], pos, &s.scratch); err != nil {
			return err
		}
		if err := s.dev.CopyInAsync(dst, off+pos, s.bufs[i], 0, k); err != nil {
			return fmt.Errorf("shard: tensor %q: %w", name, err)
		}
		s.busy[i] = true
		i ^= 1
	}
	l.tensors.Add(1)
	return nil
}
