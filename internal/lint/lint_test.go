package lint

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "github.com/chorus-rt/chorus"

// folders orders the top-level folders, bottom first: a package may import
// packages of its own folder or of a folder listed before it, never one
// after it, so the tree itself shows the layers. A package belongs to the
// longest folder of this list that holds it. Keep in step with
// docs/architecture.md.
var folders = []string{
	"internal", // OS plumbing (internal/sys), test helpers (internal/testutil), these rules
	"tensor",   // dtypes, shapes, devices, host storage
	"gpu",      // purego bindings: CUDA driver, NVRTC, NCCL, cuBLAS; the Device interface
	"net",      // TLS links, certificates, sealed records
	"ccl",      // collectives: the Comm interface and the cpu, cpu-hier, nccl and ipc backends
	"runtime",  // values, registry, wire, transports, worker, session, trace
	"algo",     // the algorithm language: plans, DSL, verifier, library, executors
	"compiler", // VirtualDevice, IR, passes, VM
	"model",    // safetensors, sharding, loading, tokenizer, chat templates, decoder
	"cluster",  // multi-host controller and node agent
	"cmd",      // the chorus binary and its application-only packages
	"examples", // example programs
}

// layers orders the module's packages; a package may import only packages
// of a strictly lower layer (tests excepted). Keep in step with
// docs/architecture.md.
var layers = map[string]int{
	"internal/sys/dl":            0,
	"internal/sys/pollread":      0, // reads that poll a socket before they park (ccl/hier data links)
	"internal/sys/shmem":         0,
	"internal/sys/segment":       1, // the /dev/shm rendezvous file of ccl/cpu and algo/cpuexec
	"internal/sys/shmarena":      1, // shared tensor arena (memfd); tensor stays below it, worker installs it
	"internal/sys/tsc":           1, // a cheap clock: the time-stamp counter calibrated against an OS clock
	"internal/config":            0, // the one reader of the environment: the table of CHORUS_ variables
	"internal/testutil/leaktest": 0,
	"internal/testutil/loopback": 0, // loopback TCP pairs for tests
	"internal/testutil/gputest":  1, // the GPU tests' gate (CHORUS_REQUIRE_GPU); finds GPUs through internal/sys/dl
	"internal/lint":              7,

	"tensor": 0,

	"gpu/cudasrc":         0,
	"gpu/cuda":            1,
	"gpu/nccl":            1,
	"gpu/nvrtc":           1,
	"gpu/nvrtc/nvrtctest": 2, // the NVRTC-only tests' loader (skips, or fails under CHORUS_REQUIRE_NVRTC)
	"gpu/cublas":          1,
	"gpu/device":          2,

	"net/cert": 0,
	"net/seal": 0, // record layer keyed from a TLS 1.3 exporter; standard library only
	"net/link": 1,

	"ccl/reduce": 1,
	"ccl":        2,
	"ccl/cpu":    3, // imports only ccl, ccl/reduce, internal/sys/shmem, internal/sys/shmarena, tensor; ccl/hier builds on it
	"ccl/hier":   4,
	"ccl/nccl":   4,
	"ccl/ipc":    3, // below runtime/registry, whose IPC capability hands out its allocator

	"runtime/trace":                   2, // events, flight ring, Trace Event Format; imports only internal/sys/tsc and internal/config
	"runtime/value":                   1,
	"runtime/registry":                4, // Env and the worker's capabilities (GPU, Comms, IPC, Tracer): imports gpu/device, ccl, ccl/ipc, runtime/trace
	"runtime/wire":                    2, // codes only: runtime/worker registers the registry's and ccl's sentinels (MatchCode)
	"runtime/transport":               3,
	"runtime/transport/shm":           4,
	"runtime/transport/transporttest": 4,
	"runtime/worker":                  5,
	"runtime/session":                 6,

	"algo/plan":         1,
	"algo/verify":       2,
	"algo/handplan":     2,
	"algo/dsl":          2,
	"algo/library":      3,
	"algo/mscclpptests": 3,
	"algo/cpuexec":      4,
	"algo/gpuexec":      4, // ccl/ipc memory, one generated kernel per rank
	"algo/gpuworker":    5, // a plan's executor on a worker, through registry's capabilities (not runtime/worker)
	"algo/run":          7,

	// The compiler's front half imports only tensor and itself, never the runtime.
	"compiler/vdevice":   1,
	"compiler/ir":        2,
	"compiler/passes":    3,
	"compiler/kernels":   5, // the VM's CPU and GPU kernels and measurement functions: tensor, gpu/*, registry
	"compiler/vm/plans":  5, // plan names of custom_allreduce -> checked plans (library, plan files), for both sides of the VM
	"compiler/vm/interp": 6, // the worker side of the VM: load, translate, fuse, run, capture; registered worker functions
	"compiler/vm":        7, // the controller side: Load/Call/Capture/Replay over a session, Pipeline

	"model/safetensors": 1,
	"model/tokenizer":   0, // tokenizer.json, standard library only
	"model/chat":        0, // chat templates (a Jinja subset), standard library only
	"model/shard":       3,
	"model/shardload":   7,
	"model/decoder":     8, // the tensor-parallel transformer decoder on the VM
	"model/hf":          9, // Hugging Face folders: config.json, names, sharding, loading onto a session

	"cluster/ctrl": 0,
	"cluster":      7, // the controller side: a session driver over node agents
	"cluster/node": 7, // the node agent: session.StartLocal behind a control connection

	"cmd/chorus/internal/plot":     0, // SVG pictures (gonum/plot): benchmark curves, timelines
	"cmd/chorus/internal/progress": 1, // progress line on a terminal's stderr
	"cmd/chorus/internal/gpuprobe": 2, // chorus info: the GPU libraries found (gpu/nvrtc's names)
	"cmd/chorus/internal/demo":     7,
	"cmd/chorus/internal/bench":    7,
	"cmd/chorus/internal/mlp":      8, // the tensor-parallel MLP on the VM (demo, bench)
	"cmd/chorus":                   10,
	"cmd/benchdoc":                 0, // writes docs/benchmarks.md from bench/results; standard library only
	"cmd/confdoc":                  1, // writes docs/configuration.md from internal/config

	"examples/hello": 7, // the getting-started guide's first program: registry, worker, session
}

// Only these packages may load GPU libraries: the GPU bindings call
// through dl.Caller.
var mayImportPurego = map[string]bool{"internal/sys/dl": true, "cmd/chorus/internal/gpuprobe": true}

func repoRoot(t *testing.T) string {
	dir, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		t.Fatalf("repository root not found at %s", dir)
	}
	return dir
}

// packages maps each package directory (relative) to its non-test files.
func packages(t *testing.T, root string) map[string][]string {
	out := map[string][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			rel, _ := filepath.Rel(root, p)
			top := p != root && filepath.Dir(rel) == "."
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || (top && (name == "bench" || name == "docs" || name == "scripts"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			rel, _ := filepath.Rel(root, filepath.Dir(p))
			out[filepath.ToSlash(rel)] = append(out[filepath.ToSlash(rel)], p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestEveryPackageHasDocGo(t *testing.T) {
	root := repoRoot(t)
	for dir, files := range packages(t, root) {
		has := false
		for _, f := range files {
			if filepath.Base(f) != "doc.go" {
				continue
			}
			af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			has = af.Doc != nil && len(strings.TrimSpace(af.Doc.Text())) > 20
		}
		if !has {
			t.Errorf("package %s: no doc.go with a package comment", dir)
		}
	}
}

func TestImportLayers(t *testing.T) {
	root := repoRoot(t)
	pkgs := packages(t, root)
	var dirs []string
	for d := range pkgs {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		layer, ok := layers[dir]
		if !ok {
			t.Errorf("package %s has no layer in internal/lint; add it (and to docs/architecture.md)", dir)
			continue
		}
		for _, f := range pkgs[dir] {
			af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range af.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				if strings.HasPrefix(path, "github.com/ebitengine/purego") && !mayImportPurego[dir] {
					t.Errorf("%s imports purego; GPU libraries load only in the binding packages", f)
				}
				rel, ok := strings.CutPrefix(path, module+"/")
				if !ok {
					continue
				}
				il, known := layers[rel]
				if known && il >= layer {
					t.Errorf("%s (layer %d) imports %s (layer %d): imports must go down the layers", dir, layer, rel, il)
				}
			}
		}
	}
}

// folderOf returns the index in folders of the folder that holds dir.
func folderOf(dir string) (int, bool) {
	best, bestLen := -1, -1
	for i, f := range folders {
		if (dir == f || strings.HasPrefix(dir, f+"/")) && len(f) > bestLen {
			best, bestLen = i, len(f)
		}
	}
	return best, best >= 0
}

func TestFolderOrder(t *testing.T) {
	root := repoRoot(t)
	pkgs := packages(t, root)
	var dirs []string
	for d := range pkgs {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		fi, ok := folderOf(dir)
		if !ok {
			t.Errorf("package %s is in no folder of internal/lint's folders; add the folder (and to docs/architecture.md)", dir)
			continue
		}
		for _, f := range pkgs[dir] {
			af, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
			if err != nil {
				t.Fatal(err)
			}
			for _, imp := range af.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				rel, ok := strings.CutPrefix(path, module+"/")
				if !ok {
					continue
				}
				if ii, ok := folderOf(rel); ok && ii > fi {
					t.Errorf("%s (folder %s) imports %s (folder %s, above it): folders import only their own or lower folders", dir, folders[fi], rel, folders[ii])
				}
			}
		}
	}
}

// TestFolderOfTable checks the folder lookup on hand cases, so that the
// folder rule cannot pass by matching nothing.
func TestFolderOfTable(t *testing.T) {
	for _, c := range []struct {
		dir  string
		want string
	}{
		{"runtime/session", "runtime"},
		{"cmd/chorus/internal/bench", "cmd"},
		{"internal/sys/dl", "internal"},
		{"ccl", "ccl"},
		{"cclx", ""},
	} {
		i, ok := folderOf(c.dir)
		got := ""
		if ok {
			got = folders[i]
		}
		if got != c.want {
			t.Errorf("folderOf(%q) = %q, want %q", c.dir, got, c.want)
		}
	}
}
