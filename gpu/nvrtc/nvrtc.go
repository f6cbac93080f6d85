package nvrtc

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"unsafe"

	"github.com/chorus-rt/chorus/internal/config"
	"github.com/chorus-rt/chorus/internal/sys/dl"
)

// ErrNotLoaded: libnvrtc could not be loaded.
var ErrNotLoaded = errors.New("nvrtc: library not loaded")

// CompileError carries the compiler's log.
type CompileError struct {
	Name string
	Arch string
	Log  string
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("nvrtc: compiling %s for %s failed:\n%s", e.Name, e.Arch, strings.TrimSpace(e.Log))
}

// Compiler is a loaded libnvrtc.
type Compiler struct {
	c            dl.Caller
	major, minor int
}

var symbols = []string{
	"nvrtcVersion", "nvrtcGetErrorString", "nvrtcCreateProgram", "nvrtcDestroyProgram",
	"nvrtcCompileProgram", "nvrtcGetProgramLogSize", "nvrtcGetProgramLog",
	"nvrtcGetCUBINSize", "nvrtcGetCUBIN", "nvrtcGetPTXSize", "nvrtcGetPTX",
}

// libnvrtc.so.11.2 is CUDA 11.8's (Debian's libnvrtc11.2: CI compiles the kernels with it;
// it knows sm_90).
var sonames = []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so.13", "/usr/local/cuda/lib64/libnvrtc.so.12", "libnvrtc.so.11.2"}

// Sonames lists the library names Load tries, in order (chorus info
// reports the one found).
func Sonames() []string { return slices.Clone(sonames) }

// Load opens libnvrtc and resolves every symbol; the error names what is
// missing.
func Load() (*Compiler, error) {
	lib, err := dl.Open("NVRTC", sonames, symbols)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotLoaded, err)
	}
	c := &Compiler{}
	c.c = dl.NewCaller(lib, func(fn string, status int32) error {
		return fmt.Errorf("nvrtc: %s: %s (%d)", fn, c.c.Str("unknown", "nvrtcGetErrorString", uintptr(status)), status)
	})
	var major, minor int32
	if err := c.c.Call("nvrtcVersion", uintptr(unsafe.Pointer(&major)), uintptr(unsafe.Pointer(&minor))); err != nil {
		return nil, err
	}
	c.major, c.minor = int(major), int(minor)
	return c, nil
}

// Version is NVRTC's major and minor version.
func (c *Compiler) Version() (int, int) { return c.major, c.minor }

func cstr(s string) []byte { return append([]byte(s), 0) }

// Compile builds src (CUDA C) into a cubin for arch, e.g. "sm_90".
func (c *Compiler) Compile(name, src, arch string, opts ...string) ([]byte, error) {
	cubin, _, err := c.compile(name, src, arch, opts, false)
	return cubin, err
}

// PTX builds src for a virtual architecture (e.g. "compute_90") and
// returns the PTX: what the front end made of the source before ptxas
// (which parameters' addresses escape, which loads are generic).
func (c *Compiler) PTX(name, src, arch string, opts ...string) (string, error) {
	ptx, _, err := c.compile(name, src, arch, opts, true)
	return strings.TrimRight(string(ptx), "\x00"), err
}

// compile is Compile (or PTX) that also returns the compiler's log.
func (c *Compiler) compile(name, src, arch string, opts []string, ptx bool) ([]byte, string, error) {
	csrc, cname := cstr(src), cstr(name)
	var prog uintptr
	if err := c.c.Call("nvrtcCreateProgram", uintptr(unsafe.Pointer(&prog)), uintptr(unsafe.Pointer(&csrc[0])),
		uintptr(unsafe.Pointer(&cname[0])), 0, 0, 0); err != nil {
		return nil, "", err
	}
	defer c.c.Call("nvrtcDestroyProgram", uintptr(unsafe.Pointer(&prog)))
	all := append([]string{"--gpu-architecture=" + arch, "-default-device", "-std=c++17"}, opts...)
	bufs := make([][]byte, len(all))
	ptrs := make([]uintptr, len(all))
	for i, o := range all {
		bufs[i] = cstr(o)
		ptrs[i] = uintptr(unsafe.Pointer(&bufs[i][0]))
	}
	cerr := c.c.Call("nvrtcCompileProgram", prog, uintptr(len(ptrs)), uintptr(unsafe.Pointer(&ptrs[0])))
	runtime.KeepAlive(bufs) // ptrs holds their addresses as integers
	log := c.log(prog)
	if cerr != nil {
		return nil, log, &CompileError{Name: name, Arch: arch, Log: log + "\n" + cerr.Error()}
	}
	sizeFn, getFn, what := "nvrtcGetCUBINSize", "nvrtcGetCUBIN", "cubin (is %q a real architecture, not compute_XX?)"
	if ptx {
		sizeFn, getFn, what = "nvrtcGetPTXSize", "nvrtcGetPTX", "PTX (is %q an architecture NVRTC knows?)"
	}
	var n uint64
	if err := c.c.Call(sizeFn, prog, uintptr(unsafe.Pointer(&n))); err != nil {
		return nil, log, err
	}
	if n == 0 {
		return nil, log, fmt.Errorf("nvrtc: %s produced an empty "+what, name, arch)
	}
	out := make([]byte, n)
	if err := c.c.Call(getFn, prog, uintptr(unsafe.Pointer(&out[0]))); err != nil {
		return nil, log, err
	}
	return out, log, nil
}

// Report compiles src for arch as Compile does, with ptxas's resource
// report, and returns each kernel's resources (by entry name).
func (c *Compiler) Report(name, src, arch string, opts ...string) (map[string]Resources, error) {
	_, log, err := c.compile(name, src, arch, append(slices.Clone(opts), "--ptxas-options=-v"), false)
	if err != nil {
		return nil, err
	}
	rep, err := ParseResources(log)
	if err != nil {
		return nil, fmt.Errorf("nvrtc: %s for %s: %w", name, arch, err)
	}
	return rep, nil
}

func (c *Compiler) log(prog uintptr) string {
	var n uint64
	if c.c.Call("nvrtcGetProgramLogSize", prog, uintptr(unsafe.Pointer(&n))) != nil || n <= 1 {
		return ""
	}
	b := make([]byte, n)
	if c.c.Call("nvrtcGetProgramLog", prog, uintptr(unsafe.Pointer(&b[0]))) != nil {
		return ""
	}
	return strings.TrimRight(string(b), "\x00")
}

// CacheDir is where CompileCached keeps cubins: $CHORUS_KERNEL_CACHE, or
// chorus/kernels under the user's cache directory.
func CacheDir() (string, error) {
	if d := config.Process().Get(config.KernelCache); d != "" {
		return d, nil
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(base, "chorus", "kernels"), nil
}

// Key names a compile result: source, architecture, options and compiler.
func (c *Compiler) Key(src, arch string, opts ...string) string {
	h := sha256.New()
	fmt.Fprintf(h, "nvrtc %d.%d\x00%s\x00%s\x00", c.major, c.minor, arch, strings.Join(opts, "\x00"))
	h.Write([]byte(src))
	return hex.EncodeToString(h.Sum(nil)[:20])
}

// CompileCached returns the cubin from the disk cache, or compiles and
// stores it. Concurrent processes may compile the same kernel at once;
// each writes a private temporary file and renames it into place, so a
// reader never sees a partial cubin. A cache that cannot be written is
// not an error: the cubin is still returned.
func (c *Compiler) CompileCached(name, src, arch string, opts ...string) ([]byte, bool, error) {
	dir, err := CacheDir()
	if err != nil {
		b, err := c.Compile(name, src, arch, opts...)
		return b, false, err
	}
	path := filepath.Join(dir, c.Key(src, arch, opts...)+"."+arch+".cubin")
	if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
		return b, true, nil
	}
	b, err := c.Compile(name, src, arch, opts...)
	if err != nil {
		return nil, false, err
	}
	if os.MkdirAll(dir, 0o755) == nil {
		if f, err := os.CreateTemp(dir, ".tmp-*"); err == nil {
			_, werr := f.Write(b)
			cerr := f.Close()
			if werr == nil && cerr == nil {
				_ = os.Rename(f.Name(), path)
			}
			os.Remove(f.Name())
		}
	}
	return b, false, nil
}
