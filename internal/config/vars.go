package config

// The table. Each Var is defined once, here; its reader decodes it where
// the Reader column says (the program's edge), into that package's
// options. The order is the page's.

// Sessions (read by the session constructors for options left zero, in
// the controller's process; a process session also reads its
// ProcessOptions.Env).
var (
	Trace = define(Var{Name: "CHORUS_TRACE", Default: "unset", Reader: "runtime/session (Options.Trace)",
		Meaning: "write a Trace Event Format trace of every session to FILE at Shutdown (docs/observability.md); `--trace FILE` on a chorus command sets it for that command"})
	HangReport = define(Var{Name: "CHORUS_HANG_REPORT", Default: "`10s`", Reader: "runtime/session (Options.HangReport)",
		Meaning: "a blocking call that waits longer reports which workers have not answered (Go duration; `0` off)"})
	WorkerDeadline = define(Var{Name: "CHORUS_WORKER_DEADLINE", Default: "`0` (none)", Reader: "runtime/session (Options.WorkerDeadline)",
		Meaning: "an unresponsive worker becomes a `LostError` after this long (Go duration)"})
	SessionWait = define(Var{Name: "CHORUS_SESSION_WAIT", Default: "`auto`", Reader: "runtime/session (Options.Wait)",
		Meaning: "threaded sessions' wait policy: `busy`, `yield`, `park`; `auto` picks by GOMAXPROCS and workers (docs/performance.md)"})
	FakeGPU = define(Var{Name: "CHORUS_FAKE_GPU", Default: "unset", Reader: "runtime/session (Options.OpenDevice, worker.Options.FakeGPU)",
		Meaning: "`1`: workers bind host-memory fake GPUs (`gpu/device.Fake`; tests and CI)"})
	CPUProfile = define(Var{Name: "CHORUS_CPUPROFILE", Default: "unset", Reader: "runtime/session (worker.Options.CPUProfile)",
		Meaning: "DIR: each process worker writes a CPU profile of its life to DIR/worker-ID.pprof"})
)

// Process-wide settings, decided on first use in every process that
// needs them (workers inherit them from their controller's environment).
var (
	Clock = define(Var{Name: "CHORUS_CLOCK", Default: "`auto`", Reader: "internal/sys/tsc",
		Meaning: "clock of the flight recorder and stopwatches: `tsc`, `os`; `auto`: tsc where the kernel's clocksource is tsc; a bad value warns and uses `os`"})
	KernelCache = define(Var{Name: "CHORUS_KERNEL_CACHE", Default: "user cache dir + `chorus/kernels`", Reader: "gpu/nvrtc",
		Meaning: "where NVRTC cubins are cached"})
	TraceSkew = define(Var{Name: "CHORUS_TRACE_SKEW", Default: "`0`", Reader: "runtime/trace",
		Meaning: "shift this process's trace clock (Go duration; tests of clock alignment play a host whose clock differs); a bad value is ignored with a warning"})
	IPCAutoTable = define(Var{Name: "CHORUS_IPC_AUTO_TABLE", Default: "built in", Reader: "runtime/session (worker.Options.IPCAutoTable)",
		Meaning: "a JSON table file replacing `ccl/ipc/autotable.json` (strategy by size and ranks; `bench/autotable.py` writes one)"})
)

// The chorus command.
var (
	Controller = define(Var{Name: "CHORUS_CONTROLLER", Default: "`MASTER_ADDR:MASTER_PORT`", Reader: "cmd/chorus (node)",
		Meaning: "`chorus node`: the controller's address"})
	NodeRank = define(Var{Name: "CHORUS_NODE_RANK", Default: "`NODE_RANK`, `GROUP_RANK`, `SLURM_NODEID`", Reader: "cmd/chorus (node)",
		Meaning: "`chorus node`: this host's rank (the first set wins)"})
	NNodes = define(Var{Name: "CHORUS_NNODES", Default: "`NNODES`, `SLURM_NNODES`", Reader: "cmd/chorus (node)",
		Meaning: "`chorus node`: the number of hosts, checked against the controller's"})
	WorkersPerNode = define(Var{Name: "CHORUS_WORKERS_PER_NODE", Default: "`NPROC_PER_NODE`, `LOCAL_WORLD_SIZE`", Reader: "cmd/chorus (node)",
		Meaning: "`chorus node`: workers on this host"})
	CA = define(Var{Name: "CHORUS_CA", Default: "unset", Reader: "cmd/chorus (node, cluster)",
		Meaning: "default of `--ca`: the cluster CA certificate"})
	Cert = define(Var{Name: "CHORUS_CERT", Default: "unset", Reader: "cmd/chorus (node, cluster)",
		Meaning: "default of `--cert`: this host's certificate"})
	Key = define(Var{Name: "CHORUS_KEY", Default: "unset", Reader: "cmd/chorus (node, cluster)",
		Meaning: "default of `--key`: its private key"})
	TokenFile = define(Var{Name: "CHORUS_TOKEN_FILE", Default: "unset", Reader: "cmd/chorus (node, cluster)",
		Meaning: "default of `--token-file`: the pre-shared token"})
	Plaintext = define(Var{Name: "CHORUS_HIER_PLAINTEXT", Default: "unset", Reader: "cmd/chorus (node: hier.EndpointOptions.Plaintext)",
		Meaning: "`1`: data links between hosts without encryption after a TLS-keyed proof (trusted networks only; every node agent alike)"})
	Progress = define(Var{Name: "CHORUS_PROGRESS", Default: "terminal check", Reader: "cmd/chorus",
		Meaning: "`0`/`off` or `1`/`on`: the progress line of long commands"})
	BenchLaps = define(Var{Name: "CHORUS_BENCH_LAPS", Default: "unset", Reader: "cmd/chorus (bench; its workers, which inherit it)",
		Meaning: "DIR: every worker writes each call's time per round (where slow calls fall)"})
)

// Internal: a parent's word to its children.
var (
	WorkerSpec = define(Var{Name: "CHORUS_INTERNAL_WORKER", Default: "set by the controller", Reader: "runtime/worker (Main)", Class: Internal,
		Meaning: "the worker spec (`v1,id=..,n=..,groups=..,transport=..,device=..` and the worker's options: flight recorder, trace part file, fake GPU, CPU profile, data endpoint): makes a process a worker; the only variable a worker process reads from its parent"})
)

// Tests.
var (
	RequireGPU = define(Var{Name: "CHORUS_REQUIRE_GPU", Reader: "internal/testutil/gputest (every GPU test)", Class: Test,
		Meaning: "N: the run promises N GPUs, so every GPU test that needs at most N fails instead of skipping when a GPU, its driver or a GPU library is missing (tests needing more still skip); `scripts/gpu-check.sh` sets it to the GPUs it finds"})
	RequireNVRTC = define(Var{Name: "CHORUS_REQUIRE_NVRTC", Reader: "internal/testutil/gputest (the tests that compile kernels without a GPU)", Class: Test,
		Meaning: "`1`: the tests that need only NVRTC (every kernel module compiled for sm_90, no GPU) fail instead of skipping where libnvrtc is missing; `.ci/run` sets it after installing Debian's libnvrtc11.2"})
	UpdateDocs = define(Var{Name: "CHORUS_UPDATE_DOCS", Reader: "cmd/chorus/internal/plot tests", Class: Test,
		Meaning: "`1`: rewrite the pictures under docs/img"})
	DecoderRef = define(Var{Name: "CHORUS_DECODER_REF", Reader: "model/decoder tests", Class: Test,
		Meaning: "the output of `bench/decoder_ref.py` to compare with"})
	DecoderDevice = define(Var{Name: "CHORUS_DECODER_DEVICE", Reader: "model/decoder tests", Class: Test,
		Meaning: "the device of the decoder reference test"})
	DecoderWorkers = define(Var{Name: "CHORUS_DECODER_WORKERS", Reader: "model/decoder tests", Class: Test,
		Meaning: "the worker count of the decoder reference test (default 1)"})
	GPUPlanRanks = define(Var{Name: "CHORUS_GPU_PLAN_RANKS", Reader: "algo/run tests", Class: Test,
		Meaning: "rank counts of the GPU plan tests (default `2,3`)"})
	MSCCLPPFull = define(Var{Name: "CHORUS_MSCCLPP_FULL", Reader: "algo/mscclpptests tests", Class: Test,
		Meaning: "`1`: the MSCCL++ DSL test programs also run their large rank counts (16-32 instances)"})
	CPUBenchBytes = define(Var{Name: "CHORUS_CPU_BENCH_BYTES", Reader: "ccl/cpu tests", Class: Test,
		Meaning: "the process benchmark's child ranks: message size"})
	CPUBenchID = define(Var{Name: "CHORUS_CPU_BENCH_ID", Reader: "ccl/cpu tests", Class: Test,
		Meaning: "the process benchmark's child ranks: communicator id"})
	CPUBenchIters = define(Var{Name: "CHORUS_CPU_BENCH_ITERS", Reader: "ccl/cpu tests", Class: Test,
		Meaning: "the process benchmark's child ranks: iterations"})
	ShmBenchSpin = define(Var{Name: "CHORUS_SHM_BENCH_SPIN", Reader: "runtime/transport/shm tests", Class: Test,
		Meaning: "the shm transport benchmark's polling"})
	ShmTestPeer = define(Var{Name: "CHORUS_SHM_TEST_PEER", Reader: "runtime/transport/shm tests", Class: Test,
		Meaning: "the shm transport's peer process"})
	CUDAIPCChild = define(Var{Name: "CHORUS_CUDA_IPC_CHILD", Reader: "gpu/cuda tests", Class: Test,
		Meaning: "a child process of the CUDA IPC tests"})
	NCCLTestID = define(Var{Name: "CHORUS_NCCL_TEST_ID", Reader: "gpu/nccl tests", Class: Test,
		Meaning: "a child process of the NCCL tests: the unique id"})
	NCCLTestRank = define(Var{Name: "CHORUS_NCCL_TEST_RANK", Reader: "gpu/nccl tests", Class: Test,
		Meaning: "a child process of the NCCL tests: its rank"})
	TestAgent = define(Var{Name: "CHORUS_TEST_AGENT", Reader: "cluster tests", Class: Test,
		Meaning: "a test binary started as a node agent (the controller's address)"})
	TestAgentRank = define(Var{Name: "CHORUS_TEST_AGENT_RANK", Reader: "cluster tests", Class: Test,
		Meaning: "the node rank of a test binary started as a node agent"})
	TestAgentWorkers = define(Var{Name: "CHORUS_TEST_AGENT_WORKERS", Reader: "cluster tests", Class: Test,
		Meaning: "the workers of a test binary started as a node agent"})
	TestController = define(Var{Name: "CHORUS_TEST_CONTROLLER", Reader: "runtime/session tests", Class: Test,
		Meaning: "a test binary started as a controller to kill"})
	TestForgetful = define(Var{Name: "CHORUS_TEST_FORGETFUL", Reader: "runtime/session tests", Class: Test,
		Meaning: "a test binary started as a program whose main forgets worker.Main (the value: a file counting the processes that ran main)"})
	HelloRunMain = define(Var{Name: "CHORUS_HELLO_RUN_MAIN", Reader: "examples/hello tests", Class: Test,
		Meaning: "`1`: the test binary runs examples/hello's main (and its workers, re-executed, become workers there)"})
	ScriptBin = define(Var{Name: "CHORUS_BIN", Reader: "scripts/netns-check.sh", Class: Test,
		Meaning: "a built chorus binary for the script to run (instead of building one)"})
	TestX = define(Var{Name: "CHORUS_X", Reader: "internal/config tests", Class: Test,
		Meaning: "the variable the environment-decoding tests set"})
)
