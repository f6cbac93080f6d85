package ir_test

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	. "github.com/chorus-rt/chorus/compiler/ir"
	"github.com/chorus-rt/chorus/compiler/vdevice"
	"github.com/chorus-rt/chorus/tensor"
)

var update = flag.Bool("update", false, "rewrite golden files")

// TestRoundTrip parses every golden file, verifies it, and checks that
// printing gives the file back byte for byte (golden files are canonical).
func TestRoundTrip(t *testing.T) {
	files, err := filepath.Glob("testdata/*.ir")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			m, err := Parse(string(src))
			if err != nil {
				t.Fatal(err)
			}
			if err := Verify(m); err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if got := m.String(); got != string(src) {
				t.Errorf("printed text differs from the file:\n%s", got)
			}
			if c := m.Clone(); c.String() != m.String() {
				t.Errorf("Clone prints differently")
			}
		})
	}
}

func mustVD(t testing.TB, dt vdevice.DeviceType, id int, scope string) vdevice.VirtualDevice {
	t.Helper()
	v, err := vdevice.New(dt, id, nil, scope)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestBuilderMLPGolden(t *testing.T) {
	f, err := buildMLP(8, 64, 128, tensor.Float16, mustVD(t, vdevice.CUDA, 0, ""))
	if err != nil {
		t.Fatal(err)
	}
	got := (&Module{Name: "tp_mlp", Funcs: []*Function{f}}).String()
	const file = "testdata/mlp.ir"
	if *update {
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("builder output differs from %s:\n%s", file, got)
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, src, want string
	}{
		{"no module", "func @f() { return }", "1:1: expected \"module\""},
		{"bad char", "module @m\n  $", "2:3: unexpected character"},
		{"unknown op", "module @m\nfunc @f() {\n  block {\n    frob(1)\n  }\n  return\n}", "4:5: unknown op: \"frob\""},
		{"missing type", "module @m\nfunc @f() {\n  block {\n    %a = alloc_tensor([1], float32, {}, \"global\")\n  }\n  return\n}", "5:3: expected \": type\""},
		{"type without result", "module @m\nfunc @f() {\n  block {\n    call_packed(\"x\") : object\n  }\n  return\n}", "4:22: a type annotation needs a result"},
		{"unterminated string", "module @m\nfunc @f() {\n  block {\n    call_packed(\"x)\n", "4:17: unterminated string"},
		{"bad dtype", "module @m\nfunc @f(%x: tensor<[1], float17>) {\n  return\n}", "2:25: unknown dtype"},
		{"target mismatch", "module @m\nfunc @f(%x: tensor<[1], float32, {cpu target=cuda}>) {\n  return\n}", "2:34: vdevice: target disagrees"},
		{"unknown target", "module @m\nfunc @f(%x: tensor<[1], float32, {target=rocm}>) {\n  return\n}", "2:42: vdevice: unknown target kind"},
		{"empty scope", "module @m\nfunc @f(%x: tensor<[1], float32, {scope=\"\"}>) {\n  return\n}", "2:41: empty scope"},
		{"question without id", "module @m\nfunc @f(%x: tensor<[1], float32, {?}>) {\n  return\n}", "2:36: expected \":id\""},
		{"negative dim", "module @m\nfunc @f(%x: tensor<[-1], float32>) {\n  return\n}", "2:21: bad dimension"},
		{"big int", "module @m\nfunc @f() {\n  block {\n    call_packed(\"x\", 99999999999999999999)\n  }\n  return\n}", "4:22: integer"},
		{"bad number", "module @m\nfunc @f(%x: tensor<[4x8], float32>) {\n  return\n}", "2:21: bad number"},
		{"missing return", "module @m\nfunc @f() {\n}", "3:1: expected \"block\" or \"return\""},
		{"trailing comma", "module @m\nfunc @f(%a: object) {\n  return %a,\n}", "4:1: expected %value after ','"},
		{"repeated scope", "module @m\nfunc @f(%x: storage<{scope=\"a\" scope=\"b\"}>) {\n  return\n}", "2:32: unexpected or repeated"},
		{"empty name", "module @\n", "1:8: expected a name"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.src)
			if err == nil {
				t.Fatal("parsed")
			}
			if !errors.Is(err, ErrSyntax) {
				t.Errorf("%v is not ErrSyntax", err)
			}
			var pe *ParseError
			if !errors.As(err, &pe) || !pe.Pos.IsValid() {
				t.Errorf("%v has no position", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

// verifySrc wraps bindings in a function with a few parameters.
func verifySrc(body string) string {
	return `module @m
func @f(%x: tensor<[4, 16], float32, {cuda:0}>, %w: tensor<[16, 8], float32>, %c: tensor<[4, 8], float32, {cpu:0}>) {
  block {
` + body + `
  }
  return
}
`
}

// TestMatmulNT: matmul_nt takes b as [n, k] and prints and parses back.
func TestMatmulNT(t *testing.T) {
	src := verifySrc("    %t = alloc_tensor([8, 16], float32, {}, \"global\") : tensor<[8, 16], float32, {scope=\"global\"}>\n" +
		"    %o = alloc_tensor([4, 8], float32, {}, \"global\") : tensor<[4, 8], float32, {scope=\"global\"}>\n" +
		"    matmul_nt(%x, %t, %o)")
	m, err := Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(m); err != nil {
		t.Fatal(err)
	}
	back, err := Parse(m.String())
	if err != nil || back.String() != m.String() {
		t.Fatalf("round trip: %v\n%s", err, m.String())
	}
	if !OpMatmulNT.IsKernel() || !strings.Contains(m.String(), "matmul_nt(%x, %t, %o)") {
		t.Errorf("matmul_nt: kernel %v, printed %s", OpMatmulNT.IsKernel(), m.String())
	}
}

func TestVerifyErrors(t *testing.T) {
	const out = `    %o = alloc_tensor([4, 8], float32, {}, "global") : tensor<[4, 8], float32, {scope="global"}>` + "\n"
	tests := []struct {
		name, body string
		want       error
		msg        string
	}{
		{"undefined", out + "    matmul(%x, %nope, %o)", ErrUndefined, "5:5: func @f: binding 1 (matmul): undefined value: %nope"},
		{"use before def", "    matmul(%x, %w, %o)\n" + out, ErrUseBeforeDef, "use before definition: %o"},
		{"redefined", out + out, ErrRedefined, "redefined: %o"},
		{"redefined param", `    %x = alloc_tensor([1], float32, {}, "global") : tensor<[1], float32, {scope="global"}>`, ErrRedefined, "%x"},
		{"matmul inner", out + "    matmul(%w, %x, %o)", ErrShape, "inner dims differ"},
		{"matmul out", "    %o = alloc_tensor([4, 4], float32, {}, \"global\") : tensor<[4, 4], float32, {scope=\"global\"}>\n    matmul(%x, %w, %o)", ErrShape, "gives (4, 8), out is (4, 4)"},
		{"matmul dtype", "    %o = alloc_tensor([4, 8], float16, {}, \"global\") : tensor<[4, 8], float16, {scope=\"global\"}>\n    matmul(%x, %w, %o)", ErrTypeMismatch, "matmul dtypes"},
		{"matmul_nt inner", out + "    matmul_nt(%x, %w, %o)", ErrShape, "matmul_nt inner dims differ"},
		{"matmul_nt out", "    %t = alloc_tensor([8, 16], float32, {}, \"global\") : tensor<[8, 16], float32, {scope=\"global\"}>\n    %o = alloc_tensor([4, 16], float32, {}, \"global\") : tensor<[4, 16], float32, {scope=\"global\"}>\n    matmul_nt(%x, %t, %o)", ErrShape, "gives (4, 8), out is (4, 16)"},
		{"add shapes", out + "    add(%x, %o, %o)", ErrShape, "do not broadcast"},
		{"arity", out + "    matmul(%x, %w)", ErrArity, "matmul takes 3, got 2"},
		{"arg kind", out + "    allreduce(%o, \"sum\", %o)", ErrBadArg, "argument 2 must be a symbol"},
		{"reduce op", out + "    allreduce(%o, xor, %o)", ErrBadArg, `reduction "xor"`},
		{"strategy", out + "    custom_allreduce(%o, fast, %o)", ErrBadArg, `strategy "fast"`},
		{"strategy kind", out + "    custom_allreduce(%o, 3, %o)", ErrBadArg, "must be a strategy symbol or plan string"},
		{"empty plan", out + "    custom_allreduce(%o, \"\", %o)", ErrBadArg, "empty plan"},
		{"declared type", `    %o = alloc_tensor([4, 8], float32, {}, "global") : tensor<[4, 8], float32>`, ErrTypeMismatch, `declared tensor<[4, 8], float32>, the op gives tensor<[4, 8], float32, {scope="global"}>`},
		{"reshape count", `    %r = reshape(%x, [5, 5]) : tensor<[5, 5], float32, {cuda:0}>`, ErrShape, "64 elements"},
		{"device*", "    %o = alloc_tensor([4, 8], float32, {cuda:1}, \"global\") : tensor<[4, 8], float32, {cuda:1 scope=\"global\"}>\n    matmul(%x, %w, %o)", ErrDevice, "operand 3 is on {cuda:1}"},
		{"device copy src*", "    device_copy(%c, {cuda:0}, {cpu:0}, %c)", ErrDevice, "src says {cuda:0}"},
		{"not a tensor", "    %s = alloc_storage(64, 64, {}, \"global\") : storage<{scope=\"global\"}>\n    gelu(%s, %s)", ErrTypeMismatch, "must be a tensor"},
		{"view too big", "    %s = alloc_storage(64, 64, {}, \"global\") : storage<{scope=\"global\"}>\n    %v = alloc_tensor(%s, 8, [16], float32) : tensor<[16], float32, {scope=\"global\"}>", ErrShape, "does not fit"},
		{"alignment", `    %s = alloc_storage(64, 3, {}, "global") : storage<{scope="global"}>`, ErrBadArg, "power of two"},
		{"scope clash", `    %s = alloc_storage(64, 4, {scope="a"}, "global") : storage<{scope="global"}>`, ErrDevice, "has scope"},
		{"custom allreduce scope", out + "    custom_allreduce(%o, auto, %o)", ErrDevice, "ipc_memory"},
		{"result on no-result op", out + "    %z = gelu(%o, %o) : object", ErrBadArg, "defines no value"},
		{"packed without name", `    call_packed("")`, ErrBadArg, "empty function name"},
		{"allgather multiple", out + "    allgather(%x, %o)", ErrShape, "not a multiple"},
		{"rms_norm weights", out + "    rms_norm(%o, %o, 1e-05, %o)", ErrShape, "needs weights [8]"},
		{"rms_norm eps", out + "    %w8 = alloc_tensor([8], float32, {}, \"global\") : tensor<[8], float32, {scope=\"global\"}>\n    rms_norm(%o, %w8, -1.5, %o)", ErrBadArg, "eps -1.5"},
		{"rms_norm eps kind", out + "    rms_norm(%o, %o, \"1e-5\", %o)", ErrBadArg, "argument 3 must be a number"},
		{"rope rank", out + "    rope(%o, %o, 10000.0, %o)", ErrShape, "[tokens, heads, head_dim]"},
		{"rope table length", ropeSrc("[1.0, 0.5, 0.25]"), ErrBadArg, "rope table has 3 inverse frequencies, head_dim 4 needs 2"},
		{"rope table negative", ropeSrc("[1.0, -0.5]"), ErrBadArg, "rope inverse frequency 1 is -0.5"},
		{"rope table huge", ropeSrc("[1.0, 1e+300]"), ErrBadArg, "rope inverse frequency 1 is 1e+300"},
		{"rope arg kind", ropeSrc(`"x"`), ErrBadArg, "argument 3 must be a number or float list"},
		{"embedding ids", out + "    embedding(%o, %w, %o)", ErrTypeMismatch, "ids must be int32"},
		{"argmax out", out + "    argmax(%o, %o)", ErrTypeMismatch, "out must be int32"},
		{"mul ints", "    %i = alloc_tensor([8], int32, {}, \"global\") : tensor<[8], int32, {scope=\"global\"}>\n    mul(%i, %i, %i)", ErrTypeMismatch, "mul of int32"},
		{"attention groups", "    %q = alloc_tensor([1, 3, 4], float32, {}, \"global\") : tensor<[1, 3, 4], float32, {scope=\"global\"}>\n" +
			"    %k = alloc_tensor([1, 2, 4], float32, {}, \"global\") : tensor<[1, 2, 4], float32, {scope=\"global\"}>\n" +
			"    %c = alloc_tensor([8, 2, 4], float32, {}, \"global\") : tensor<[8, 2, 4], float32, {scope=\"global\"}>\n" +
			"    %p = alloc_tensor([1], int32, {}, \"global\") : tensor<[1], int32, {scope=\"global\"}>\n" +
			"    attention(%q, %k, %k, %c, %c, %p, %q)", ErrShape, "3 query heads are not a multiple of 2 kv heads"},
		{"attention batch runs", "    %q = alloc_tensor([3, 2, 4], float32, {}, \"global\") : tensor<[3, 2, 4], float32, {scope=\"global\"}>\n" +
			"    %k = alloc_tensor([3, 2, 4], float32, {}, \"global\") : tensor<[3, 2, 4], float32, {scope=\"global\"}>\n" +
			"    %kc = alloc_tensor([2, 8, 2, 4], float32, {}, \"global\") : tensor<[2, 8, 2, 4], float32, {scope=\"global\"}>\n" +
			"    %p = alloc_tensor([3], int32, {}, \"global\") : tensor<[3], int32, {scope=\"global\"}>\n" +
			"    attention(%q, %k, %k, %kc, %kc, %p, %q)", ErrShape, "must split evenly over the batch"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Parse(verifySrc(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			// A name ending in * is a planned-device check.
			if strings.HasSuffix(tc.name, "*") {
				if err := Verify(m); err != nil {
					t.Fatalf("Verify (devices unplanned) = %v, want nil", err)
				}
				err = VerifyDevices(m)
			} else {
				err = Verify(m)
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
			var ve *Error
			if !errors.As(err, &ve) {
				t.Errorf("%v is not an *Error", err)
			}
			if !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("error %q does not contain %q", err, tc.msg)
			}
		})
	}
}

// TestVerifyAttentionBatch: caches [batch, max_seq, kv_heads, head_dim]
// take batch equal runs of tokens (a decode step of 2 sequences, a
// prefill of 2 tokens each).
func TestVerifyAttentionBatch(t *testing.T) {
	for _, tok := range []string{"2", "4"} {
		body := "    %q = alloc_tensor([T, 4, 4], float32, {}, \"global\") : tensor<[T, 4, 4], float32, {scope=\"global\"}>\n" +
			"    %k = alloc_tensor([T, 2, 4], float32, {}, \"global\") : tensor<[T, 2, 4], float32, {scope=\"global\"}>\n" +
			"    %kc = alloc_tensor([2, 8, 2, 4], float32, {}, \"global\") : tensor<[2, 8, 2, 4], float32, {scope=\"global\"}>\n" +
			"    %p = alloc_tensor([T], int32, {}, \"global\") : tensor<[T], int32, {scope=\"global\"}>\n" +
			"    attention(%q, %k, %k, %kc, %kc, %p, %q)"
		m, err := Parse(verifySrc(strings.ReplaceAll(body, "T", tok)))
		if err != nil {
			t.Fatal(err)
		}
		if err := Verify(m); err != nil {
			t.Errorf("%s tokens over 2 caches: %v", tok, err)
		}
	}
}

func TestVerifyDevicesUnplanned(t *testing.T) {
	m, err := Parse(verifySrc(`    %o = alloc_tensor([4, 8], float32, {cuda:0}, "global") : tensor<[4, 8], float32, {cuda:0 scope="global"}>`))
	if err != nil {
		t.Fatal(err)
	}
	err = VerifyDevices(m)
	if !errors.Is(err, ErrDevice) || !strings.Contains(err.Error(), "parameter %x: device mismatch: tensor<[4, 16], float32, {cuda:0}> has no planned device") {
		t.Errorf("VerifyDevices = %v", err)
	}
}

func TestVerifyModuleLevel(t *testing.T) {
	m := &Module{Name: "m", Funcs: []*Function{{Name: "f"}, {Name: "f"}}}
	if err := Verify(m); !errors.Is(err, ErrRedefined) {
		t.Errorf("duplicate function: %v", err)
	}
	m = &Module{Name: "m", Funcs: []*Function{{Name: "f", Results: []Ref{"nope"}}}}
	if err := Verify(m); !errors.Is(err, ErrUndefined) {
		t.Errorf("undefined result: %v", err)
	}
	m = &Module{Name: "m", Funcs: []*Function{{Name: "f", Blocks: []*Block{{Bindings: []*Binding{{Op: Op(200)}}}}}}}
	if err := Verify(m); !errors.Is(err, ErrUnknownOp) {
		t.Errorf("unknown op: %v", err)
	}
	if err := Verify(nil); err == nil {
		t.Error("nil module verified")
	}
}

func TestBuilderErrors(t *testing.T) {
	any := vdevice.Unconstrained
	b := NewFunc("f")
	x := b.Param("x", Tensor(tensor.Shape{4, 4}, tensor.Float32, any))
	o := b.AllocTensor("o", tensor.Shape{4, 5}, tensor.Float32, any, "")
	b.Matmul(x, x, o) // out shape wrong: the first error sticks
	b.Gelu(x, "undefined")
	if _, err := b.Finish(); !errors.Is(err, ErrShape) {
		t.Fatalf("Finish = %v, want ErrShape", err)
	}

	b = NewFunc("f")
	x = b.Param("x", Tensor(tensor.Shape{4}, tensor.Float32, any))
	b.Gelu(x, "nope")
	if err := b.Err(); !errors.Is(err, ErrUndefined) {
		t.Errorf("undefined operand: %v", err)
	}
	if _, err := NewFunc("bad name").Finish(); !errors.Is(err, ErrBadArg) {
		t.Errorf("bad function name: %v", err)
	}

	// Name hints are made unique.
	b = NewFunc("f")
	a1 := b.AllocTensor("t", tensor.Shape{1}, tensor.Float32, any, "")
	a2 := b.AllocTensor("t", tensor.Shape{1}, tensor.Float32, any, "")
	if a1 != "t" || a2 != "t.1" {
		t.Errorf("names %q %q", a1, a2)
	}
	b.Return(a1, a2)
	if _, err := b.Finish(); err != nil {
		t.Fatal(err)
	}
	b.Gelu(a1, a2)
	if b.Err() == nil {
		t.Error("Emit after Finish accepted")
	}
}

func TestBindingsWalkAndClone(t *testing.T) {
	src, err := os.ReadFile("testdata/all_ops.ir")
	if err != nil {
		t.Fatal(err)
	}
	m, err := Parse(string(src))
	if err != nil {
		t.Fatal(err)
	}
	f := m.Func("ops")
	n := 0
	for i, b := range f.Bindings() {
		if i != n {
			t.Fatalf("index %d, want %d", i, n)
		}
		n++
		_ = b
	}
	if n != 24 {
		t.Errorf("%d bindings, want 24", n)
	}
	stop := errors.New("stop")
	seen := 0
	if err := f.Walk(func(blk int, b *Binding) error {
		seen++
		if blk == 1 {
			return stop
		}
		return nil
	}); err != stop || seen != 10 {
		t.Errorf("Walk: %v after %d", err, seen)
	}
	c := m.Clone()
	c.Funcs[0].Blocks[0].Bindings[1].Args[2].(ShapeLit)[0] = 99
	c.Funcs[0].Params[0].Type.(TensorType).Shape[0] = 99
	if m.String() != string(src) {
		t.Error("mutating the clone changed the original")
	}
	if f.Defs()["m"].Op != OpAllocTensorView || f.Types()["s"].String() != `storage<{cuda:0 scope="global"}>` {
		t.Error("Defs/Types wrong")
	}
}

func TestBroadcastShapes(t *testing.T) {
	tests := []struct {
		a, b, want tensor.Shape
		ok         bool
	}{
		{tensor.Shape{4, 8}, tensor.Shape{8}, tensor.Shape{4, 8}, true},
		{tensor.Shape{4, 1}, tensor.Shape{1, 8}, tensor.Shape{4, 8}, true},
		{tensor.Shape{}, tensor.Shape{3}, tensor.Shape{3}, true},
		{tensor.Shape{4, 8}, tensor.Shape{4}, nil, false},
	}
	for _, tc := range tests {
		got, err := BroadcastShapes(tc.a, tc.b)
		if (err == nil) != tc.ok || (tc.ok && !got.Equal(tc.want)) {
			t.Errorf("BroadcastShapes(%v, %v) = %v, %v", tc.a, tc.b, got, err)
		}
	}
}

// FuzzParse: Parse never panics, and whatever it accepts prints to text
// that parses back to the same printed text. Verify must not panic either.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.ir")
	for _, file := range files {
		if src, err := os.ReadFile(file); err == nil {
			f.Add(string(src))
		}
	}
	f.Add("module @m\nfunc @f(%a: storage) {\n  block {\n    %b = alias(%a) : storage\n  }\n  return %b\n}\n")
	f.Add(`module @m func @f() { block { %x = call_packed("\x00\u00e9", -0, {?:1 target=cuda(a="b")}) : object } return }`)
	f.Fuzz(func(t *testing.T, src string) {
		m, err := Parse(src)
		if err != nil {
			return
		}
		_ = Verify(m)
		text := m.String()
		m2, err := Parse(text)
		if err != nil {
			t.Fatalf("printed text does not parse: %v\n%s", err, text)
		}
		if text2 := m2.String(); text2 != text {
			t.Fatalf("round trip changed the text:\n%s\n---\n%s", text, text2)
		}
	})
}

func TestParseVirtualDevice(t *testing.T) {
	for _, s := range []string{"{}", "{cuda:0}", "{cpu}", `{?:3 scope="local"}`, `{cuda:1 target=cuda(arch="sm_90", x="y") scope="ipc_memory"}`} {
		v, err := ParseVirtualDevice(s)
		if err != nil || v.String() != s {
			t.Errorf("%s: %v %v", s, v, err)
		}
	}
	for _, s := range []string{"", "{", "{} x", "{gpu:0}", "{cpu target=cuda}"} {
		if _, err := ParseVirtualDevice(s); !errors.Is(err, ErrSyntax) {
			t.Errorf("%q: %v", s, err)
		}
	}
}

// TestFloatArgs: floats print so that they read back as floats (never as
// ints) with the same value, and malformed numbers are syntax errors.
// ropeSrc is a rope over [1, 2, 4] with freq as its third argument.
func ropeSrc(freq string) string {
	return "    %q = alloc_tensor([1, 2, 4], float32, {}, \"global\") : tensor<[1, 2, 4], float32, {scope=\"global\"}>\n" +
		"    %p = alloc_tensor([1], int32, {}, \"global\") : tensor<[1], int32, {scope=\"global\"}>\n" +
		"    rope(%q, %p, " + freq + ", %q)"
}

// TestRopeTable: the table form parses, verifies, prints in Float's form
// (so it reads back as a list, not a shape) and round-trips; the builder
// emits it from float32 values exactly.
func TestRopeTable(t *testing.T) {
	for _, tc := range []struct{ in, printed string }{
		{"[1.0, 0.01]", "[1.0, 0.01]"},
		{"[1, 0.5]", "[1.0, 0.5]"}, // an int element with a float one is a list
		{"[0.0001, 3e-06]", "[0.0001, 3e-06]"},
	} {
		m, err := Parse(verifySrc(ropeSrc(tc.in)))
		if err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if err := Verify(m); err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		text := m.String()
		if !strings.Contains(text, "rope(%q, %p, "+tc.printed+", %q)") {
			t.Errorf("%s prints as\n%s", tc.in, text)
		}
		back, err := Parse(text)
		if err != nil || back.String() != text {
			t.Fatalf("round trip of %s: %v", tc.in, err)
		}
		if _, ok := back.Funcs[0].Blocks[0].Bindings[2].Args[2].(Floats); !ok {
			t.Errorf("%s reads back as %T", tc.in, back.Funcs[0].Blocks[0].Bindings[2].Args[2])
		}
		c := back.Funcs[0].Blocks[0].Bindings[2].Clone()
		c.Args[2].(Floats)[0] = 7
		if back.String() != text {
			t.Errorf("Clone shares the table")
		}
	}
	// All-integer lists stay shapes.
	m, err := Parse(`module @m func @f() { block { call_packed("x", [1, 2]) } return }`)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m.Funcs[0].Blocks[0].Bindings[0].Args[1].(ShapeLit); !ok {
		t.Errorf("[1, 2] parses to %T", m.Funcs[0].Blocks[0].Bindings[0].Args[1])
	}
	b := NewFunc("f")
	x := b.Param("x", Tensor(tensor.Shape{1, 2, 4}, tensor.Float32, vdevice.Unconstrained))
	p := b.Param("p", Tensor(tensor.Shape{1}, tensor.Int32, vdevice.Unconstrained))
	o := b.AllocTensor("o", []int64{1, 2, 4}, tensor.Float32, vdevice.Unconstrained, "")
	third := float32(1) / 3
	b.RopeTable(x, p, []float32{1, third}, o)
	b.Return(o)
	f, err := b.Finish()
	if err != nil {
		t.Fatal(err)
	}
	for _, bd := range f.Blocks[0].Bindings {
		if fs, ok := bd.Args[len(bd.Args)-2].(Floats); ok && bd.Op == OpRope {
			if float32(fs[1]) != third || fs[1] != float64(third) {
				t.Errorf("table element %v, want the float32 %v exactly", fs[1], third)
			}
			return
		}
	}
	t.Fatalf("no rope table in\n%v", f)
}

func TestFloatArgs(t *testing.T) {
	for _, tc := range []struct {
		f    float64
		text string
	}{{1e-5, "1e-05"}, {10000, "10000.0"}, {-0.5, "-0.5"}, {1e300, "1e+300"}, {0.1, "0.1"}, {3, "3.0"}} {
		if got := Float(tc.f).String(); got != tc.text {
			t.Errorf("Float(%v) prints %q, want %q", tc.f, got, tc.text)
		}
		m, err := Parse(`module @m func @f() { block { call_packed("x", ` + tc.text + `) } return }`)
		if err != nil {
			t.Fatalf("%s: %v", tc.text, err)
		}
		if a := m.Funcs[0].Blocks[0].Bindings[0].Args[1]; a != Float(tc.f) {
			t.Errorf("%s parses to %#v", tc.text, a)
		}
	}
	for _, bad := range []string{"1.", "1.e5", "1e", "1e+", "2.5x", "1.5.5"} {
		_, err := Parse(`module @m func @f() { block { call_packed("x", ` + bad + `) } return }`)
		if !errors.Is(err, ErrSyntax) {
			t.Errorf("%q: %v, want a syntax error", bad, err)
		}
	}
}
