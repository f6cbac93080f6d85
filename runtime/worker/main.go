package worker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/chorus-rt/chorus/ccl/cpu"
	"github.com/chorus-rt/chorus/ccl/hier"
	"github.com/chorus-rt/chorus/internal/config"
	"github.com/chorus-rt/chorus/runtime/trace"
	"github.com/chorus-rt/chorus/runtime/transport"
	"github.com/chorus-rt/chorus/runtime/transport/shm"
	"github.com/chorus-rt/chorus/tensor"
)

// EnvSpec is the environment variable through which a controller tells a
// child process that it is a chorus worker, which one, and with what
// settings (Spec). It is internal: the only variable a worker process
// reads, written by the controller, never by users
// (docs/configuration.md).
const EnvSpec = "CHORUS_INTERNAL_WORKER"

// File descriptors a worker process inherits (exec.Cmd.ExtraFiles order).
const (
	// FDLifeline is the read end of a pipe whose write end only the
	// controller holds: EOF means the controller is gone.
	FDLifeline = 3
	// FDTransport is the transport: a memfd (shm) or a socket (stream).
	FDTransport = 4
	// FDFlight is the flight recorder's memfd, when Spec.Flight is set.
	FDFlight = 5
	// FDLog is the session's broadcast log (shm.OpenLog), when the spec
	// names the worker's place in it (Spec.Log).
	FDLog = 6
)

// Options are a process worker's settings. The controller fills them
// from its session's options (session.ProcessOptions.Worker, whose
// defaults come from the controller's environment) and sends them in
// the spec; the worker reads no other variable.
type Options struct {
	// FakeGPU binds host-memory fake GPUs (OpenFake) instead of CUDA
	// (tests and CI without a GPU).
	FakeGPU bool
	// CPUProfile names a directory: the worker writes a CPU profile
	// (runtime/pprof) of its whole life to DIR/worker-<id>.pprof, for
	// finding where a workload spends its time (e.g. a cross-host
	// collective). "": no profile.
	CPUProfile string
	// IPCAutoTable names a JSON file of strategies replacing the custom
	// all-reduce's built-in table (ipc.Options.AutoTable); "": the
	// built-in one.
	IPCAutoTable string
	// SkipChecks (test binaries only: ccl/ipc and ccl/nccl refuse it
	// elsewhere) drops the cross-rank argument checks of the custom
	// all-reduce and of NCCL, so that tests reach the kernels' and NCCL's
	// own behaviour on mismatched calls and lost peers.
	SkipChecks bool
	// NoSharedTensors (test binaries only; a worker refuses it
	// elsewhere) keeps a host worker's tensors in the Go heap, so that
	// tests reach the cpu backend's process_vm_readv path, which
	// programs take only where the shared arena cannot be made.
	NoSharedTensors bool
	// CPU are the options of the cpu backend's communicators (every
	// rank gets the controller's, so they agree); zero: the measured
	// defaults (docs/performance.md).
	CPU cpu.Options
	// Endpoint configures the data listener of cross-host collectives
	// (ccl/hier): a node agent passes its address, its credentials and
	// the plaintext switch.
	Endpoint hier.EndpointOptions
}

// Exit codes of a worker process.
const (
	ExitOK       = 0
	ExitError    = 1
	ExitOrphaned = 3 // the controller died
)

// Spec is everything a worker process needs to know about itself.
type Spec struct {
	ID, NumWorkers, NumGroups int
	Transport                 string // "shm" or "stream"
	Device                    tensor.Device
	// Log is the worker's consumer index in the broadcast log at FDLog
	// (shm only: commands come through it), or -1: none.
	Log int
	// Flight: fd FDFlight holds the flight recorder (trace.Ring) the
	// controller reads.
	Flight bool
	// TraceFile names the file the worker appends its trace events to
	// (trace part lines); the controller merges it at Shutdown. "": the
	// session does not trace.
	TraceFile string
	Options
}

// String encodes the spec for EnvSpec: comma-separated fields, strings
// query-escaped.
func (s Spec) String() string {
	v := fmt.Sprintf("v1,id=%d,n=%d,groups=%d,transport=%s,device=%s", s.ID, s.NumWorkers, s.NumGroups, s.Transport, s.Device)
	if s.Log >= 0 {
		v += fmt.Sprintf(",log=%d", s.Log)
	}
	flag := func(k string, on bool) {
		if on {
			v += "," + k + "=1"
		}
	}
	str := func(k, val string) {
		if val != "" {
			v += "," + k + "=" + url.QueryEscape(val)
		}
	}
	flag("flight", s.Flight)
	str("trace", s.TraceFile)
	flag("fake", s.FakeGPU)
	str("profile", s.CPUProfile)
	str("ipctable", s.IPCAutoTable)
	str("addr", s.Endpoint.Addr)
	str("ca", s.Endpoint.Files.CA)
	str("cert", s.Endpoint.Files.Cert)
	str("key", s.Endpoint.Files.Key)
	str("token", s.Endpoint.Files.Token)
	flag("plain", s.Endpoint.Plaintext)
	flag("unchecked", s.SkipChecks)
	flag("noarena", s.NoSharedTensors)
	if s.CPU != (cpu.Options{}) {
		js, _ := json.Marshal(s.CPU) // plain numbers and booleans: cannot fail
		str("cpu", string(js))
	}
	return v
}

// specFlag decodes a 0/1 field.
func specFlag(val string) (bool, error) {
	switch val {
	case "0":
		return false, nil
	case "1":
		return true, nil
	}
	return false, fmt.Errorf("want 0 or 1")
}

// ParseSpec decodes EnvSpec's value.
func ParseSpec(v string) (Spec, error) {
	s := Spec{Log: -1}
	parts := strings.Split(v, ",")
	if len(parts) == 0 || parts[0] != "v1" {
		return s, fmt.Errorf("worker: spec %q: unsupported version (want v1)", v)
	}
	seen := map[string]bool{}
	for _, p := range parts[1:] {
		k, val, ok := strings.Cut(p, "=")
		if !ok {
			return s, fmt.Errorf("worker: spec %q: field %q has no value", v, p)
		}
		var err error
		switch k {
		case "id":
			s.ID, err = strconv.Atoi(val)
		case "n":
			s.NumWorkers, err = strconv.Atoi(val)
		case "groups":
			s.NumGroups, err = strconv.Atoi(val)
		case "transport":
			if val != "shm" && val != "stream" {
				err = fmt.Errorf("unknown transport %q", val)
			}
			s.Transport = val
		case "device":
			s.Device, err = tensor.ParseDevice(val)
		case "log":
			s.Log, err = strconv.Atoi(val)
			if err == nil && s.Log < 0 {
				err = fmt.Errorf("negative index")
			}
		case "flight":
			s.Flight, err = specFlag(val)
		case "fake":
			s.FakeGPU, err = specFlag(val)
		case "plain":
			s.Endpoint.Plaintext, err = specFlag(val)
		case "unchecked":
			s.SkipChecks, err = specFlag(val)
		case "noarena":
			s.NoSharedTensors, err = specFlag(val)
		case "cpu":
			var u string
			if u, err = url.QueryUnescape(val); err == nil {
				d := json.NewDecoder(strings.NewReader(u))
				d.DisallowUnknownFields()
				s.CPU = cpu.Options{}
				err = d.Decode(&s.CPU)
			}
		case "trace", "profile", "ipctable", "addr", "ca", "cert", "key", "token":
			var u string
			if u, err = url.QueryUnescape(val); err == nil {
				*map[string]*string{"trace": &s.TraceFile, "profile": &s.CPUProfile, "ipctable": &s.IPCAutoTable, "addr": &s.Endpoint.Addr,
					"ca": &s.Endpoint.Files.CA, "cert": &s.Endpoint.Files.Cert, "key": &s.Endpoint.Files.Key, "token": &s.Endpoint.Files.Token}[k] = u
			}
		default:
			err = fmt.Errorf("unknown field")
		}
		if err != nil {
			return s, fmt.Errorf("worker: spec %q: %s: %w", v, k, err)
		}
		seen[k] = true
	}
	for _, k := range []string{"id", "n", "groups", "transport", "device"} {
		if !seen[k] {
			return s, fmt.Errorf("worker: spec %q: missing %s", v, k)
		}
	}
	if s.Log >= 0 && s.Transport != "shm" {
		return s, fmt.Errorf("worker: spec %q: a log needs transport shm", v)
	}
	return s, (Config{ID: s.ID, NumWorkers: s.NumWorkers, NumGroups: s.NumGroups, Device: s.Device}).Validate()
}

// IsWorkerProcess reports whether this process was started as a worker.
func IsWorkerProcess() bool { return config.Process().Get(config.WorkerSpec) != "" }

// Main turns the process into a worker if it was started as one, and never
// returns in that case; otherwise it returns at once. Programs call it
// first thing in main (or TestMain), after registering their functions.
func Main() {
	if !IsWorkerProcess() {
		return
	}
	os.Exit(Run())
}

// Run is the worker process body; it returns the exit code.
func Run() int {
	spec, err := ParseSpec(config.Process().Get(config.WorkerSpec))
	if err != nil {
		fmt.Fprintln(os.Stderr, "chorus worker:", err)
		return ExitError
	}
	if spec.NoSharedTensors && !testing.Testing() {
		fmt.Fprintf(os.Stderr, "chorus worker %d: Options.NoSharedTensors is for tests only\n", spec.ID)
		return ExitError
	}
	installSharedTensors(spec)
	// Keep our descriptors out of any process a worker function starts.
	syscall.CloseOnExec(FDLifeline)
	syscall.CloseOnExec(FDTransport)
	lifeline := os.NewFile(FDLifeline, "chorus-lifeline")
	go watchLifeline(lifeline, spec.ID)

	var conn transport.Conn
	f := os.NewFile(FDTransport, "chorus-transport")
	switch spec.Transport {
	case "shm":
		c, err := shm.Open(f)
		if err != nil {
			fmt.Fprintf(os.Stderr, "chorus worker %d: %v\n", spec.ID, err)
			return ExitError
		}
		conn = c
		if spec.Log >= 0 {
			syscall.CloseOnExec(FDLog)
			lr, err := shm.OpenLog(os.NewFile(FDLog, "chorus-log"), spec.Log)
			if err != nil {
				c.Close()
				fmt.Fprintf(os.Stderr, "chorus worker %d: %v\n", spec.ID, err)
				return ExitError
			}
			conn = shm.NewLogConn(c, lr)
		}
	case "stream":
		conn = transport.NewStream(f, 0)
	}
	defer conn.Close()
	if dir := spec.CPUProfile; dir != "" {
		stop, err := startProfile(dir, spec.ID)
		if err != nil {
			fmt.Fprintf(os.Stderr, "chorus worker %d: %v\n", spec.ID, err)
			return ExitError
		}
		defer stop()
	}
	cfg := Config{ID: spec.ID, NumWorkers: spec.NumWorkers, NumGroups: spec.NumGroups, Device: spec.Device, Endpoint: spec.Endpoint,
		IPCAutoTable: spec.IPCAutoTable, SkipChecks: spec.SkipChecks, CPU: spec.CPU}
	if spec.FakeGPU {
		cfg.OpenDevice = OpenFake
	}
	rec, out, err := processTrace(spec)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chorus worker %d: %v\n", spec.ID, err)
		return ExitError
	}
	if out != nil {
		defer out.Close()
		cfg.TraceOut = out
	}
	cfg.Trace = rec
	w, err := New(cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "chorus worker %d: %v\n", spec.ID, err)
		return ExitError
	}
	defer w.Close()
	flush := func() {
		if err := w.FlushTrace(); err != nil {
			fmt.Fprintf(os.Stderr, "chorus worker %d: trace: %v\n", spec.ID, err)
		}
	}
	defer flush()
	// A worker that exits because its controller is gone (the session
	// failed) still hands over its trace events.
	exitFlush.Store(&flush)
	defer exitFlush.Store(nil)
	// The controller sends SignalAbort when a peer worker is lost, so a
	// collective waiting for that peer ends instead of hanging.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, SignalAbort)
	stopAbort := make(chan struct{})
	aborted := make(chan struct{})
	go func() {
		defer close(aborted)
		select {
		case <-sig:
			fmt.Fprintf(os.Stderr, "chorus worker %d: a peer was lost; aborting communicators\n", spec.ID)
			w.Abort(ErrPeerLost)
		case <-stopAbort:
		}
	}()
	defer func() {
		signal.Stop(sig)
		close(stopAbort)
		<-aborted
	}()
	if err := Serve(w, conn); err != nil {
		fmt.Fprintf(os.Stderr, "chorus worker %d: %v\n", spec.ID, err)
		return ExitError
	}
	return ExitOK
}

// processTrace makes a process worker's recorder: the flight recorder
// the controller shares with it (Spec.Flight), and a trace part file
// (Spec.TraceFile) when the session traces.
func processTrace(spec Spec) (*trace.Recorder, *os.File, error) {
	id := spec.ID
	var ring *trace.Ring
	if spec.Flight {
		syscall.CloseOnExec(FDFlight)
		r, err := attachFlight()
		if err != nil {
			return nil, nil, err
		}
		ring = r
	} else {
		ring = trace.NewHeapRing(trace.DefaultRingSlots, id)
	}
	path := spec.TraceFile
	if path == "" {
		return trace.NewRecorder(trace.ProcWorker(id), ring, false), nil, nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("trace: %w", err)
	}
	return trace.NewRecorder(trace.ProcWorker(id), ring, true), f, nil
}

// startProfile starts a CPU profile into dir/worker-<id>.pprof; stop
// ends it and closes the file.
func startProfile(dir string, id int) (stop func(), err error) {
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("worker-%d.pprof", id)))
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// SignalAbort asks a worker process to abort its communicators.
const SignalAbort = syscall.SIGUSR1

// ErrPeerLost: the session lost another worker; communicators were aborted.
var ErrPeerLost = errors.New("a peer worker was lost")

// watchLifeline exits the process when the controller dies: the kernel
// closes the controller's write end, and our read returns EOF. This works
// even while the worker is busy in a long function.
func watchLifeline(f *os.File, id int) {
	_, _ = io.Copy(io.Discard, f)
	if fl := exitFlush.Load(); fl != nil {
		(*fl)()
	}
	fmt.Fprintf(os.Stderr, "chorus worker %d: controller gone, exiting\n", id)
	os.Exit(ExitOrphaned)
}

// exitFlush writes the worker's trace events before the lifeline ends
// the process (os.Exit runs no deferred calls).
var exitFlush atomic.Pointer[func()]
