package shardload

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/model/shard"
	"github.com/chorus-rt/chorus/runtime/registry"
	"github.com/chorus-rt/chorus/tensor"
)

// Names of the worker functions.
const (
	FuncOpen      = "chorus.shard.open"
	FuncInfo      = "chorus.shard.info"
	FuncLoad      = "chorus.shard.load"
	FuncBytesRead = "chorus.shard.bytes_read"
	FuncClose     = "chorus.shard.close"
)

// ErrArgs: a handle argument that is not an open handle.
var ErrArgs = fmt.Errorf("shardload: %w", registry.ErrBadArgs)

// Handle is an open checkpoint on one worker (the value chorus.shard.open
// leaves in a register).
type Handle struct {
	mu     sync.Mutex
	*state               // shared with the cleanup, which must not reach the Handle
	dev    device.Device // the worker's GPU, nil on the host
	closed bool
	worker int
	chunk  int64 // staging buffer size, 0: shard.DefaultStagingChunk
}

// state is what a Handle owns: the loader (open files) and the pinned
// staging buffers, made on the first load to a GPU.
type state struct {
	l       *shard.Loader
	staging *shard.Staging
}

func (s *state) release() error {
	var errs []error
	if s.staging != nil {
		errs = append(errs, s.staging.Close())
		s.staging = nil
	}
	return errors.Join(append(errs, s.l.Close())...)
}

// Info is what chorus.shard.info returns (as JSON).
type Info struct {
	Names []string `json:"names"`
	// Bytes are the whole tensors' sizes in the checkpoint.
	Bytes []int64 `json:"bytes"`
	// Fingerprint hashes every tensor's name, dtype, shape and file
	// offsets, and the spec's plan for it (not the rank's part).
	Fingerprint string `json:"fingerprint"`
}

func open(env registry.Env, path, specJSON string, stagingBytes int64) (*Handle, error) {
	if stagingBytes < 0 {
		return nil, fmt.Errorf("%w: %s: negative staging size %d", ErrArgs, FuncOpen, stagingBytes)
	}
	spec, err := shard.ParseSpec([]byte(specJSON))
	if err != nil {
		return nil, err
	}
	l, err := shard.Open(path, spec, env.WorkerRank(), env.GroupSize())
	if err != nil {
		return nil, err
	}
	h := &Handle{state: &state{l: l}, worker: env.WorkerID(), chunk: stagingBytes}
	if env.Device().Kind == tensor.CUDA {
		g, err := registry.GPUOf(env)
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("shardload: worker %d on %v has no device bound", env.WorkerID(), env.Device())
		}
		h.dev = g.GPUDevice()
	}
	// A handle dropped without close still gives its pinned memory and
	// files back.
	runtime.AddCleanup(h, func(s *state) { s.release() }, h.state)
	return h, nil
}

func handleOf(v any, fn string) (*Handle, error) {
	h, ok := v.(*Handle)
	if !ok || h == nil {
		return nil, fmt.Errorf("%w: %s: argument is a %T, not a handle made by %s", ErrArgs, fn, v, FuncOpen)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil, fmt.Errorf("%w: %s: the handle was closed", ErrArgs, fn)
	}
	return h, nil
}

func (h *Handle) info() (string, error) {
	var inf Info
	sum := sha256.New()
	for _, n := range h.l.Names() {
		e, _ := h.l.Entry(n)
		inf.Names = append(inf.Names, n)
		inf.Bytes = append(inf.Bytes, e.Source.Size())
		fmt.Fprintf(sum, "%q %v %v %d %d %d\n", n, e.Source.DType, e.Source.Shape, e.Source.Begin, e.Source.End, e.Rule)
	}
	inf.Fingerprint = hex.EncodeToString(sum.Sum(nil))
	b, err := json.Marshal(inf)
	return string(b), err
}

func (h *Handle) load(env registry.Env, name string) (*tensor.Tensor, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.dev == nil {
		return h.l.Load(name)
	}
	e, err := h.l.Entry(name)
	if err != nil {
		return nil, err
	}
	if h.staging == nil {
		if h.staging, err = shard.NewStaging(h.dev, h.chunk); err != nil {
			return nil, fmt.Errorf("worker %d: %w", h.worker, err)
		}
	}
	t, err := env.Alloc(e.DType, e.Shape, env.Device(), "")
	if err != nil {
		return nil, fmt.Errorf("worker %d: tensor %q: %w", h.worker, name, err)
	}
	buf, ok := t.Storage().Buffer().(*device.Buffer)
	if !ok {
		return nil, fmt.Errorf("worker %d: tensor %q: device storage is a %T", h.worker, name, t.Storage().Buffer())
	}
	if err := h.l.LoadDevice(name, h.staging, buf, t.Offset()); err != nil {
		return nil, fmt.Errorf("worker %d: %w", h.worker, err)
	}
	return t, nil
}

func (h *Handle) close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	return h.release()
}

func init() {
	registry.MustRegisterTyped(FuncOpen, open)
	registry.MustRegisterTyped(FuncInfo, func(v any) (string, error) {
		h, err := handleOf(v, FuncInfo)
		if err != nil {
			return "", err
		}
		return h.info()
	})
	registry.MustRegisterTyped(FuncLoad, func(env registry.Env, v any, name string) (*tensor.Tensor, error) {
		h, err := handleOf(v, FuncLoad)
		if err != nil {
			return nil, err
		}
		return h.load(env, name)
	})
	registry.MustRegisterTyped(FuncBytesRead, func(v any) (int64, error) {
		h, err := handleOf(v, FuncBytesRead)
		if err != nil {
			return 0, err
		}
		return h.l.Stats().BytesRead, nil
	})
	registry.MustRegisterTyped(FuncClose, func(v any) error {
		h, ok := v.(*Handle)
		if !ok || h == nil {
			return fmt.Errorf("%w: %s: argument is a %T, not a handle made by %s", ErrArgs, FuncClose, v, FuncOpen)
		}
		return h.close()
	})
}
