package gpuexec

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/chorus-rt/chorus/algo/handplan"
	"github.com/chorus-rt/chorus/algo/library"
	"github.com/chorus-rt/chorus/algo/mscclpptests"
	"github.com/chorus-rt/chorus/algo/plan"
	"github.com/chorus-rt/chorus/ccl/reduce"
	"github.com/chorus-rt/chorus/gpu/nvrtc/nvrtctest"
	"github.com/chorus-rt/chorus/tensor"
)

var update = flag.Bool("update", false, "rewrite the golden kernels in testdata")

func build(t *testing.T, name string, ranks int) *plan.Plan {
	t.Helper()
	p, err := library.Build(name, ranks, library.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func readPlan(t *testing.T, path string) *plan.Plan {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p, err := plan.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// withoutSwitchOps drops the switch-channel ops (which the GPU executor
// refuses), so the rest of a plan can be generated.
func withoutSwitchOps(p *plan.Plan) *plan.Plan {
	raw, _ := p.Marshal()
	q, _ := plan.Parse(raw)
	for gi := range q.GPUs {
		for ti := range q.GPUs[gi].ThreadBlocks {
			tb := &q.GPUs[gi].ThreadBlocks[ti]
			var keep []plan.Op
			for _, op := range tb.Ops {
				switch op.Name {
				case plan.OpGroupLoadReduce, plan.OpGroupStore, plan.OpGroupLoadReduceStore:
					continue
				}
				keep = append(keep, op)
			}
			tb.Ops = keep
		}
	}
	return q
}

// The generated sources of small plans are compared byte for byte with
// testdata/*.cu (go test -run Golden -update rewrites them).
func TestGoldenKernels(t *testing.T) {
	every := withoutSwitchOps(readPlan(t, "../plan/testdata/every_op_kind.json"))
	cases := []struct {
		file string
		p    *plan.Plan
		rank int
		dt   tensor.DType
		op   reduce.Op
	}{
		{"allreduce_oneshot_2_r0_bf16_sum.cu", build(t, "allreduce_oneshot", 2), 0, tensor.BFloat16, reduce.Sum},
		{"allreduce_packet_2_r1_f32_max.cu", build(t, "allreduce_packet", 2), 1, tensor.Float32, reduce.Max},
		{"allreduce_port_2_r0_f16_sum.cu", build(t, "allreduce_port", 2), 0, tensor.Float16, reduce.Sum},
		{"every_op_kind_noswitch_r0_f32_sum.cu", every, 0, tensor.Float32, reduce.Sum},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			k, err := Generate(c.p, c.rank, c.dt, c.op)
			if err != nil {
				t.Fatal(err)
			}
			// The golden files hold the plan part only: the runtime and the
			// half conversions are the same in every kernel.
			got := planPart(k.Source)
			path := filepath.Join("testdata", c.file)
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -run Golden -update)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from the generated kernel (go test -run Golden -update after checking the change):\n%s", path, firstDiff(string(want), got))
			}
		})
	}
}

// planPart is the generated header (#defines) and everything after the
// runtime.
func planPart(src string) string {
	head, _, _ := strings.Cut(src, "\n\n")
	_, tail, _ := strings.Cut(src, "// ---- the plan ----\n")
	return head + "\n...\n" + tail
}

func firstDiff(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range max(len(la), len(lb)) {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			return fmt.Sprintf("line %d:\n  want %q\n  got  %q", i+1, x, y)
		}
	}
	return "(no difference)"
}

// rppktToTwo gives rank 0's first rppkt of p a second destination: the
// same remote chunk's neighbour (one source, several destinations).
func rppktToTwo(t *testing.T, p *plan.Plan) *plan.Plan {
	t.Helper()
	raw, _ := p.Marshal()
	q, err := plan.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	for ti := range q.GPUs[0].ThreadBlocks {
		for oi := range q.GPUs[0].ThreadBlocks[ti].Ops {
			op := &q.GPUs[0].ThreadBlocks[ti].Ops[oi]
			if op.Name != plan.OpReadPutPackets {
				continue
			}
			d := op.Dst[0]
			d.Index ^= 1
			op.Dst = append(op.Dst, d)
			if err := q.Validate(); err != nil {
				t.Fatalf("rppkt with two destinations: %v", err)
			}
			return q
		}
	}
	t.Fatal("no rppkt on rank 0")
	return nil
}

// TestRppktSeveralDestinations: one source forwarded to every
// destination, each packet waited for once.
func TestRppktSeveralDestinations(t *testing.T) {
	p := rppktToTwo(t, withoutSwitchOps(readPlan(t, "../plan/testdata/every_op_kind.json")))
	k, err := Generate(p, 0, tensor.Float32, reduce.Sum)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(k.Source, "forward_packets_to<2>(a, dst, ") {
		t.Errorf("no two-destination forward in:\n%s", planPart(k.Source))
	}
}

// portPacketNames are MSCCL++'s two-node packet programs: their hop to
// the other node is an rppkt over a port channel.
var portPacketNames = []string{"multi_node/allgather_pkt.py", "multi_node/reducescatter_pkt.py", "multi_node/allreduce_pkt.py", "multi_node/allreduce_brodcast_pkt.py"}

// portPacketPrograms builds them at n ranks.
func portPacketPrograms(t *testing.T, n int) []*plan.Plan {
	t.Helper()
	var out []*plan.Plan
	for _, pr := range mscclpptests.Programs() {
		if !slices.Contains(portPacketNames, pr.Name) {
			continue
		}
		p, err := pr.Build(n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	if len(out) != len(portPacketNames) {
		t.Fatalf("%d of the %d programs found", len(out), len(portPacketNames))
	}
	return out
}

// An rppkt over a port channel waits for its source packets and has the
// proxy copy them, twice the data bytes, on every rank of the two-node
// packet programs (CheckPlan takes them); a ppkt over a port channel
// (plain source) and an rppkt with a port destination among several stay
// refused, naming the op.
func TestPortPackets(t *testing.T) {
	for _, p := range portPacketPrograms(t, 4) {
		if err := CheckPlan(p, 4, false); err != nil {
			t.Fatalf("%s: %v", p.Name, err)
		}
		for r := range 4 {
			k, err := Generate(p, r, tensor.BFloat16, reduce.Sum)
			if err != nil {
				t.Fatalf("%s rank %d: %v", p.Name, r, err)
			}
			w := strings.Count(k.Source, "wait_packets(a, ")
			if w == 0 || w != strings.Count(k.Source, ", 2 * r0.n, ") {
				t.Errorf("%s rank %d: %d packet waits, want one port copy of twice the bytes after each, in:\n%s", p.Name, r, w, planPart(k.Source))
			}
		}
	}
	for _, c := range []struct {
		name string
		edit func(op *plan.Op)
		want string
	}{
		{"ppkt", func(op *plan.Op) { op.Name = plan.OpPutPackets }, "(ppkt): packets over port channels"},
		{"rppkt to two", func(op *plan.Op) { op.Dst = append(op.Dst, op.Dst[0]) }, "(rppkt): packets over port channels"},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := portPacketPrograms(t, 4)[0]
			found := false
			for ti := range p.GPUs[0].ThreadBlocks {
				for oi := range p.GPUs[0].ThreadBlocks[ti].Ops {
					op := &p.GPUs[0].ThreadBlocks[ti].Ops[oi]
					if op.Name == plan.OpReadPutPackets && op.ChannelType == plan.ChannelPort {
						c.edit(op)
						found = true
					}
				}
			}
			if !found {
				t.Fatalf("%s: no rppkt over a port channel on rank 0", p.Name)
			}
			_, err := Generate(p, 0, tensor.Float32, reduce.Sum)
			if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("got %v, want ErrUnsupported containing %q", err, c.want)
			}
		})
	}
}

// allKernels generates every library algorithm at 2..4 ranks, every rank,
// plus the every-op plan, for a few dtype/op pairs.
func allKernels(t *testing.T) map[string]*Kernel {
	t.Helper()
	out := map[string]*Kernel{}
	type dtop struct {
		dt tensor.DType
		op reduce.Op
	}
	combos := []dtop{{tensor.Float32, reduce.Sum}, {tensor.Float16, reduce.Min}, {tensor.BFloat16, reduce.Max}}
	for _, name := range library.Names() {
		for _, n := range []int{2, 3, 4} {
			p := build(t, name, n)
			for r := range n {
				c := combos[(r+n)%len(combos)]
				k, err := Generate(p, r, c.dt, c.op)
				if err != nil {
					t.Fatalf("%s on %d ranks, rank %d: %v", name, n, r, err)
				}
				out[fmt.Sprintf("%s_%d_r%d", name, n, r)] = k
			}
		}
	}
	every := withoutSwitchOps(readPlan(t, "../plan/testdata/every_op_kind.json"))
	for r := range every.NumRanks() {
		k, err := Generate(every, r, tensor.BFloat16, reduce.Sum)
		if err != nil {
			t.Fatal(err)
		}
		out[fmt.Sprintf("every_op_kind_r%d", r)] = k
	}
	multi := rppktToTwo(t, every)
	k, err := Generate(multi, 0, tensor.Float16, reduce.Sum)
	if err != nil {
		t.Fatal(err)
	}
	out["every_op_kind_rppkt2_r0"] = k
	for _, p := range portPacketPrograms(t, 4) {
		for r := range p.NumRanks() {
			k, err := Generate(p, r, tensor.Float16, reduce.Sum)
			if err != nil {
				t.Fatalf("%s rank %d: %v", p.Name, r, err)
			}
			out[fmt.Sprintf("%s_4_r%d", p.Name, r)] = k
		}
	}
	// The 1-rank plan of chorus bench planops (no peers: no call barriers).
	copies, err := handplan.CopyOps(8, handplan.Options{TBs: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckPlan(copies, 1, false); err != nil {
		t.Fatal(err)
	}
	k, err = Generate(copies, 0, tensor.Float32, reduce.Sum)
	if err != nil {
		t.Fatal(err)
	}
	out["copy_ops_8_r0"] = k
	return out
}

var (
	callRE = regexp.MustCompile(`\b([A-Za-z_][A-Za-z0-9_]*)\s*(<[^<>;]*>)?\s*\(`)
	defRE  = regexp.MustCompile(`\b([A-Za-z_][A-Za-z0-9_]*)\s*\([^;{}()]*\)\s*(const\s*)?\{`)
)

// keywords and NVRTC built-ins that generated code may call without
// defining them.
var builtins = map[string]bool{
	"if": true, "else": true, "for": true, "while": true, "switch": true, "return": true, "sizeof": true, "asm": true, "volatile": true,
	"__syncthreads": true, "clock64": true, "__uint_as_float": true, "__float_as_uint": true, "fminf": true, "fmaxf": true,
	"make_uint2": true, "make_uint4": true, "__launch_bounds__": true, "defined": true,
	// casts and declarations that look like calls
	"u32": true, "u64": true, "u16": true, "int": true, "float": true, "i64": true,
}

// Every generated kernel is self-consistent: brackets balance outside
// strings and comments, and every function it calls is defined in it
// (or is an NVRTC built-in).
func TestGeneratedSourceIsSelfConsistent(t *testing.T) {
	for name, k := range allKernels(t) {
		code := stripCommentsAndStrings(k.Source)
		for _, pair := range []string{"{}", "()", "[]"} {
			depth := 0
			for i, c := range code {
				switch c {
				case rune(pair[0]):
					depth++
				case rune(pair[1]):
					depth--
				}
				if depth < 0 {
					t.Fatalf("%s: unbalanced %q at byte %d", name, pair[1], i)
				}
			}
			if depth != 0 {
				t.Errorf("%s: %d unclosed %q", name, depth, pair[0])
			}
		}
		defined := map[string]bool{}
		for _, m := range defRE.FindAllStringSubmatch(code, -1) {
			defined[m[1]] = true
		}
		for _, m := range callRE.FindAllStringSubmatch(code, -1) {
			id := m[1]
			if !defined[id] && !builtins[id] && !strings.HasPrefix(id, "__") {
				t.Errorf("%s: calls %s, which it does not define", name, id)
			}
		}
		if !strings.Contains(k.Source, "extern \"C\" __global__ void __launch_bounds__(NTHREADS, 1) "+KernelName+"(") {
			t.Errorf("%s: no kernel %s", name, KernelName)
		}
	}
}

// The kernel parameter is __grid_constant__ and named once, by the
// reference every function takes: without the qualifier, a reference
// that escapes into the __noinline__ thread-block functions makes the
// compiler copy all 1056 bytes into every thread's local memory.
func TestKernelParameterReadOnce(t *testing.T) {
	const sig = KernelName + "(const __grid_constant__ Args params)"
	for name, k := range allKernels(t) {
		code := stripCommentsAndStrings(k.Source)
		i := strings.Index(code, sig)
		if i < 0 {
			t.Fatalf("%s: the kernel does not take `const __grid_constant__ Args params`", name)
		}
		body := code[i+len(sig):]
		uses := regexp.MustCompile(`\bparams\b`).FindAllStringIndex(body, -1)
		if len(uses) != 1 || !strings.Contains(body, "const Args& a = params;") {
			t.Errorf("%s: the kernel uses its parameter %d times; want only `const Args& a = params;`", name, len(uses))
		}
	}
}

func stripCommentsAndStrings(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case strings.HasPrefix(s[i:], "//"):
			for i < len(s) && s[i] != '\n' {
				i++
			}
			b.WriteByte('\n')
		case s[i] == '"':
			i++
			for i < len(s) && s[i] != '"' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			b.WriteString(`""`)
		case s[i] == '#' && (i == 0 || s[i-1] == '\n'):
			// preprocessor lines (macros are not calls)
			for i < len(s) && s[i] != '\n' {
				i++
			}
			b.WriteByte('\n')
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

// With a C++ compiler at hand (g++), every generated kernel must pass a
// syntax check against testdata/nvcc_shim.h, which stands in for NVRTC's
// built-ins: a compile error is found here, not on the GPU machine.
func TestGeneratedSourceCompilesAsCXX(t *testing.T) {
	cxx, err := exec.LookPath("g++")
	if err != nil {
		t.Skip("no g++: syntax check of the generated kernels skipped")
	}
	shim, err := filepath.Abs("testdata/nvcc_shim.h")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ks := allKernels(t)
	// One translation unit per kernel (each has its own #defines), checked
	// in one g++ call each; a handful is enough to cover every op kind and
	// rank count, so the test stays fast.
	var names []string
	for name := range ks {
		if strings.HasSuffix(name, "_r0") || strings.HasPrefix(name, "every_op_kind") {
			names = append(names, name)
		}
	}
	for _, name := range names {
		f := filepath.Join(dir, name+".cpp")
		if err := os.WriteFile(f, []byte("#include \""+shim+"\"\n"+ks[name].Source), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(cxx, "-std=c++17", "-fsyntax-only", "-Wno-unknown-pragmas", f).CombinedOutput()
		if err != nil {
			t.Errorf("%s: g++ -fsyntax-only: %v\n%s", name, err, out)
		}
	}
}

// spillingKernels spill registers to local memory at NVRTC 11.8's
// placement (CI's) within the 64 registers a thread of a 1024-thread
// block has: the test plan with every op kind in one thread block, and
// MSCCL++'s 4-rank broadcast packet plan (its loops over 3 peers' packets
// at once).
var spillingKernels = map[string]bool{
	"every_op_kind_r0": true, "every_op_kind_r1": true, "every_op_kind_rppkt2_r0": true,
	"allreduce_brodcast_pkt_4_r0": true,
}

// TestGeneratedSourceCompilesNVRTC builds the same kernels as
// TestGeneratedSourceCompilesAsCXX with NVRTC itself for sm_90, no GPU
// needed, and each library plan's rank 0 at 2 to 4 ranks in bfloat16
// sum (what the benchmarks and the decoder run): each compiles, defines
// KernelName, and does not spill registers to local memory unless
// spillingKernels lists it. On a GPU machine this is the check of its
// own NVRTC (13.0 spilled kernels that 11.8 did not).
func TestGeneratedSourceCompilesNVRTC(t *testing.T) {
	c := nvrtctest.Load(t)
	ks := allKernels(t)
	var names []string
	for name := range ks {
		if strings.HasSuffix(name, "_r0") || strings.HasPrefix(name, "every_op_kind") {
			names = append(names, name)
		}
	}
	// The library's kernels from 2 to 4 ranks keep no stack frame: an
	// array indexed at run time would be every thread's local memory,
	// stored and loaded every op (the channel arrays did: 240 bytes of
	// stores a thread a call in the 4-rank one-shot kernel, 31 MB a 512
	// KB call against 10 MB of data).
	noStack := map[string]bool{}
	for _, name := range library.Names() {
		for _, n := range []int{2, 3, 4} {
			if k := ks[fmt.Sprintf("%s_%d_r0", name, n)]; k != nil && k.DType == tensor.BFloat16 && k.Op == reduce.Sum {
				noStack[fmt.Sprintf("%s_%d_r0", name, n)] = true
				continue
			}
			k, err := Generate(build(t, name, n), 0, tensor.BFloat16, reduce.Sum)
			if err != nil {
				t.Fatalf("%s on %d ranks: %v", name, n, err)
			}
			key := fmt.Sprintf("%s_%d_r0_bf16_sum", name, n)
			ks[key] = k
			names = append(names, key)
			noStack[key] = true
		}
	}
	slices.Sort(names)
	for _, name := range names {
		rep, err := c.Report(name+".cu", ks[name].Source, "sm_90")
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		nvrtctest.Check(t, name, rep, []string{KernelName}, func(string) bool { return spillingKernels[name] })
		if r := rep[KernelName]; noStack[name] && r.StackFrame != 0 {
			t.Errorf("%s: %d bytes of stack a thread (an array indexed at run time?)", name, r.StackFrame)
		}
	}
}

func TestGenerateRefusals(t *testing.T) {
	every := readPlan(t, "../plan/testdata/every_op_kind.json")
	oneshot := build(t, "allreduce_oneshot", 2)
	cases := []struct {
		name string
		p    *plan.Plan
		dt   tensor.DType
		op   reduce.Op
		want string
	}{
		{"switch op", every, tensor.Float32, reduce.Sum, "switch channels (NVLink multicast)"},
		{"dtype", oneshot, tensor.Int32, reduce.Sum, "dtype int32"},
		{"op", oneshot, tensor.Float32, reduce.Prod, "reduce op prod"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Generate(c.p, 0, c.dt, c.op)
			if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want ErrUnsupported mentioning %q", err, c.want)
			}
		})
	}
	// The switch op is named with its place.
	_, err := Generate(every, 0, tensor.Float32, reduce.Sum)
	if !regexp.MustCompile(`rank 0 tb \d+ op \d+ \(gl(re|store|res)\)`).MatchString(err.Error()) {
		t.Errorf("error does not name the op: %v", err)
	}
	// So are the packet multicast and the switch barrier (chorus's reading
	// of MSCCL++'s gstorepkt and switch signal/wait).
	sw := readPlan(t, "../plan/testdata/switch_ops.json")
	_, err = Generate(sw, 0, tensor.Float32, reduce.Sum)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "rank 0 tb 0 op 0 (signal): switch channels (NVLink multicast) are not supported") {
		t.Errorf("switch signal: %v", err)
	}
	tb := &sw.GPUs[0].ThreadBlocks[0]
	tb.Ops = tb.Ops[3:] // from the cpkt on
	_, err = Generate(sw, 0, tensor.Float32, reduce.Sum)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "rank 0 tb 0 op 1 (gstorepkt): switch channels (NVLink multicast) are not supported") {
		t.Errorf("gstorepkt: %v", err)
	}
}

// TestQuietRank: the one-shot plan's ranks write only their own output,
// which no peer reads, so every signal of theirs is relaxed; plans whose
// ranks write into peers (mesh all-gather, packets, reduce-scatter) or
// whose peers read what a rank wrote (the two-shot plan's scratch, the
// ring's forwarded chunks) keep release signals after their first op.
func TestQuietRank(t *testing.T) {
	for _, c := range []struct {
		name  string
		ranks int
		quiet bool
	}{
		{"allreduce_oneshot", 2, true},
		{"allreduce_oneshot", 4, true},
		{"allreduce_twoshot", 2, false},
		{"allreduce_twoshot", 4, false},
		{"allreduce_ring", 3, false},
		{"allreduce_packet", 2, false},
		{"allgather_mesh", 3, false},
		{"allgather_ring", 3, false},
		{"reducescatter_allpairs", 4, false},
	} {
		p := build(t, c.name, c.ranks)
		for r := range c.ranks {
			if got := QuietRank(p, r); got != c.quiet {
				t.Errorf("%s %d ranks: QuietRank(%d) = %v, want %v", c.name, c.ranks, r, got, c.quiet)
			}
		}
		k, err := Generate(p, 0, tensor.BFloat16, reduce.Sum)
		if err != nil {
			t.Fatal(err)
		}
		release := strings.Contains(k.Source, "signal_mem(a, peer, slot, 1, false);")
		if c.quiet && release {
			t.Errorf("%s: a quiet rank's kernel has a release signal", c.name)
		}
	}
}

// TestEndCount: the library's allreduce plans skip the end count (no
// block waits at the end for an atomic round trip: runtime.cuh,
// END_COUNT and epochs_of), and a plan whose last block has work (port
// channels: the end barrier meets the peers) keeps it. END_COUNT is
// evaluated here from the kernel's #defines, as runtime.cuh spells it.
func TestEndCount(t *testing.T) {
	const expr = "#define END_COUNT (NSEMS > 0 || END_WAIT || (GROUPED && (ZERO_EARLY || START)))"
	if !strings.Contains(runtimeSource, expr) {
		t.Fatalf("runtime.cuh no longer defines %q: update this test", expr)
	}
	for _, c := range []struct {
		name  string
		ranks int
		want  bool
	}{
		{"allreduce_oneshot", 2, false},
		{"allreduce_oneshot", 4, false},
		{"allreduce_twoshot", 2, false},
		{"allreduce_twoshot", 4, false},
		{"allreduce_twoshot_pull", 2, false},
		{"allreduce_twoshot_pull", 4, false},
		{"allreduce_packet", 2, false},
		{"allreduce_packet", 4, false},
		{"allreduce_port", 2, true},
	} {
		k, err := Generate(build(t, c.name, c.ranks), 0, tensor.BFloat16, reduce.Sum)
		if err != nil {
			t.Fatal(err)
		}
		def := map[string]int{}
		for _, line := range strings.Split(k.Source, "\n") {
			var name string
			var v int
			if n, _ := fmt.Sscanf(line, "#define %s %d", &name, &v); n == 2 {
				def[name] = v
			}
		}
		for _, name := range []string{"NSEMS", "END_WAIT", "GROUPED", "ZERO_EARLY", "START"} {
			if _, ok := def[name]; !ok {
				t.Fatalf("%s: the kernel does not define %s", c.name, name)
			}
		}
		got := def["NSEMS"] > 0 || def["END_WAIT"] != 0 || def["GROUPED"] != 0 && (def["ZERO_EARLY"] != 0 || def["START"] != 0)
		if got != c.want {
			t.Errorf("%s, %d ranks: END_COUNT %v, want %v (defines %v)", c.name, c.ranks, got, c.want, def)
		}
	}
}

// TestClosingSignalRelaxed: the last signal of a rank that writes
// nothing in its peers' memory, to peers whose matching wait ends their
// block, is relaxed (closingSlots); a signal that publishes a write a
// peer reads after its wait stays a release.
func TestClosingSignalRelaxed(t *testing.T) {
	for _, c := range []struct {
		name  string
		ranks int
		want  []bool // the rank-0 kernel's memory signals in order: relaxed?
	}{
		// handshake (first op), after the reduce (peers read the chunk), closing
		{"allreduce_twoshot_pull", 2, []bool{true, false, true}},
		{"allreduce_twoshot_pull", 4, []bool{true, false, true}},
		// the put two-shot writes its peers' scratch and outputs
		{"allreduce_twoshot", 2, []bool{true, false, false}},
		// a quiet rank: every signal (the handshake before its reads and
		// the one after them)
		{"allreduce_oneshot", 2, []bool{true, true}},
		{"allreduce_oneshot", 4, []bool{true, true}},
	} {
		k, err := Generate(build(t, c.name, c.ranks), 0, tensor.BFloat16, reduce.Sum)
		if err != nil {
			t.Fatal(err)
		}
		var got []bool
		for _, line := range strings.Split(k.Source, "\n") {
			line = strings.TrimSpace(line)
			if !strings.HasPrefix(line, "signal_mem(") {
				continue
			}
			got = append(got, strings.Contains(line, ", true, flag);"))
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s, %d ranks: relaxed signals %v, want %v", c.name, c.ranks, got, c.want)
		}
	}
}

// TestArgsStayInConstantBank: no out-of-line function of an inlined
// kernel takes the kernel's arguments by reference. One that does makes
// the parameter's address escape, and then every read of every field,
// on every thread, is a generic load instead of a constant-bank read
// (cuobjdump of the 4-rank one-shot kernel: 189 generic loads of the
// arguments against none, NVRTC 11.8, sm_90). The failure path takes
// the two words it needs by value. Where NVRTC is, the library kernels'
// PTX says the same: no cvta.param (the parameter's generic address).
// Stack frames are TestGeneratedSourceCompilesNVRTC's to refuse.
func TestArgsStayInConstantBank(t *testing.T) {
	noinline := regexp.MustCompile(`__noinline__[^(]*\(([^)]*)\)`)
	for _, m := range noinline.FindAllStringSubmatch(runtimeSource, -1) {
		if strings.Contains(m[1], "Args") {
			t.Errorf("runtime.cuh: %s takes the kernel's arguments: they would be read with generic loads", m[0])
		}
	}
	for _, k := range libraryPTX(t) {
		for _, m := range noinline.FindAllStringSubmatch(k.source, -1) {
			if strings.Contains(m[1], "Args") {
				t.Errorf("%s, %d ranks: %s takes the kernel's arguments by reference", k.plan, k.ranks, m[0])
			}
		}
		if strings.Contains(k.ptx, "cvta.param") {
			t.Errorf("%s, %d ranks: the PTX takes the parameter's generic address (cvta.param): its fields are read with generic loads", k.plan, k.ranks)
		}
	}
}

// TestSignalReleasesOnce: a signal op's threads (one a channel) share
// one system-scope release, so a library plan whose kernel has as many
// signal ops with 4 ranks as with 2 has as many system-scope releases
// and fences in its PTX. A body per channel would run the warp's
// releases one after another: the 4-rank put two-shot took 17.3 us a
// call at 1 KB against 11.2 (under MPS, graph-replayed) when it had 14
// memory barriers where the 2-rank kernel has 6.
func TestSignalReleasesOnce(t *testing.T) {
	release := regexp.MustCompile(`\.release\.sys|fence\.[a-z_]+\.sys`)
	type counts struct {
		sites, releases int
		port            bool
	}
	count := map[string]map[int]counts{}
	for _, k := range libraryPTX(t) {
		if count[k.plan] == nil {
			count[k.plan] = map[int]counts{}
		}
		count[k.plan][k.ranks] = counts{strings.Count(k.source, "signal_mem("), len(release.FindAllString(k.ptx, -1)),
			strings.Contains(k.source, "port_signal(a, ")}
	}
	compared := 0
	for name, c := range count {
		if c[2].sites != c[4].sites || c[2].port || c[4].port {
			// The ring plans signal more often with more ranks; a port
			// signal is a proxy entry a peer, each behind its own fence.
			continue
		}
		compared++
		if c[4].releases != c[2].releases {
			t.Errorf("%s: %d system-scope releases and fences in the 4-rank kernel's PTX, %d in the 2-rank one's (%d signal ops each)",
				name, c[4].releases, c[2].releases, c[2].sites)
		}
	}
	if compared < 3 {
		t.Fatalf("compared %d library plans, want the allreduce plans at least", compared)
	}
}

// ptxKernel is one library plan's kernel (bfloat16 sum) and its PTX.
type ptxKernel struct {
	plan        string
	ranks       int
	source, ptx string
}

var libraryPTXOnce struct {
	sync.Once
	ks  []ptxKernel
	err error
}

// libraryPTX compiles every library plan's kernel for 2 and 4 ranks to
// PTX (compute_90) once for the tests that read it.
func libraryPTX(t *testing.T) []ptxKernel {
	t.Helper()
	c := nvrtctest.Load(t)
	libraryPTXOnce.Do(func() {
		for _, name := range library.Names() {
			for _, n := range []int{2, 4} {
				p, err := library.Build(name, n, library.Options{})
				if err != nil {
					libraryPTXOnce.err = fmt.Errorf("%s, %d ranks: %w", name, n, err)
					return
				}
				k, err := Generate(p, 0, tensor.BFloat16, reduce.Sum)
				if err != nil {
					libraryPTXOnce.err = fmt.Errorf("%s, %d ranks: %w", name, n, err)
					return
				}
				ptx, err := c.PTX("plan.cu", k.Source, "compute_90")
				if err != nil {
					libraryPTXOnce.err = fmt.Errorf("%s, %d ranks: %w", name, n, err)
					return
				}
				libraryPTXOnce.ks = append(libraryPTXOnce.ks, ptxKernel{name, n, k.Source, ptx})
			}
		}
	})
	if libraryPTXOnce.err != nil {
		t.Fatal(libraryPTXOnce.err)
	}
	return libraryPTXOnce.ks
}

// TestPeerScopeOnOneGPU: where every rank runs on one GPU, the library
// plans' kernels define PEER_GPU 1 (runtime.cuh meets the peers with
// GPU-scope accesses); a plan with port channels keeps system scope (its
// proxy is a host thread), and kernels for peers on other GPUs keep it
// too. TestPeerScopePTX reads the instructions.
func TestPeerScopeOnOneGPU(t *testing.T) {
	for _, k := range peerScopeKernels(t) {
		want := !usesPortChannels(k.p)
		if k.one.PeerGPU != want || k.apart.PeerGPU {
			t.Errorf("%s, %d ranks: PeerGPU %v on one GPU (want %v), %v apart (want false)", k.name, k.n, k.one.PeerGPU, want, k.apart.PeerGPU)
		}
		if got := strings.Contains(k.one.Source, "#define PEER_GPU 1\n"); got != want {
			t.Errorf("%s, %d ranks: #define PEER_GPU 1 in the source: %v, want %v", k.name, k.n, got, want)
		}
		if !strings.Contains(k.apart.Source, "#define PEER_GPU 0\n") {
			t.Errorf("%s, %d ranks: the kernel for peers on other GPUs does not define PEER_GPU 0", k.name, k.n)
		}
	}
}

// TestPeerScopePTX: on one GPU the only system-scope instruction left in
// a library kernel's PTX is the failure record's fence (mapped host
// memory), and every system-scope release, acquire and acq_rel fence of
// the kernel for peers on other GPUs became a GPU-scope one.
func TestPeerScopePTX(t *testing.T) {
	c := nvrtctest.Load(t)
	sys := regexp.MustCompile(`[a-z_.]*\.sys[a-z0-9_.]*`)
	gpu := regexp.MustCompile(`\.(release|acquire)\.gpu|fence\.acq_rel\.gpu`)
	rel := regexp.MustCompile(`\.(release|acquire)\.sys|fence\.acq_rel\.sys`)
	checked := 0
	for _, k := range peerScopeKernels(t) {
		if !k.one.PeerGPU {
			continue
		}
		one, err := c.PTX("plan.cu", k.one.Source, "compute_90")
		if err != nil {
			t.Fatalf("%s, %d ranks: %v", k.name, k.n, err)
		}
		apart, err := c.PTX("plan.cu", k.apart.Source, "compute_90")
		if err != nil {
			t.Fatalf("%s, %d ranks: %v", k.name, k.n, err)
		}
		for _, m := range sys.FindAllString(one, -1) {
			if m != "fence.sc.sys" {
				t.Errorf("%s, %d ranks on one GPU: %s in the PTX (want GPU scope)", k.name, k.n, m)
			}
		}
		if got, want := len(gpu.FindAllString(one, -1))-len(gpu.FindAllString(apart, -1)), len(rel.FindAllString(apart, -1)); got != want || want == 0 {
			t.Errorf("%s, %d ranks: %d system-scope releases, acquires and fences apart, %d more GPU-scope ones on one GPU", k.name, k.n, want, got)
		}
		checked++
	}
	if checked < 8 {
		t.Fatalf("checked %d kernels, want the library's allreduce plans at 2 and 4 ranks at least", checked)
	}
}

type peerScopeKernel struct {
	name       string
	n          int
	p          *plan.Plan
	one, apart *Kernel
}

// peerScopeKernels generates rank 0 of every library plan at 2 and 4
// ranks in bfloat16 sum, for every rank on one GPU and apart.
func peerScopeKernels(t *testing.T) []peerScopeKernel {
	t.Helper()
	var ks []peerScopeKernel
	for _, name := range library.Names() {
		for _, n := range []int{2, 4} {
			p, err := library.Build(name, n, library.Options{})
			if err != nil {
				t.Fatalf("%s, %d ranks: %v", name, n, err)
			}
			one, err := GenerateFor(p, 0, tensor.BFloat16, reduce.Sum, Target{OneGPU: true})
			if err != nil {
				t.Fatalf("%s, %d ranks: %v", name, n, err)
			}
			apart, err := Generate(p, 0, tensor.BFloat16, reduce.Sum)
			if err != nil {
				t.Fatalf("%s, %d ranks: %v", name, n, err)
			}
			ks = append(ks, peerScopeKernel{name, n, p, one, apart})
		}
	}
	return ks
}
