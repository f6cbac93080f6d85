package vdevice

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/chorus-rt/chorus/tensor"
)

func tgt(t testing.TB, kind string, kv ...string) *Target {
	t.Helper()
	attrs := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		attrs[kv[i]] = kv[i+1]
	}
	tg, err := NewTarget(kind, attrs)
	if err != nil {
		t.Fatal(err)
	}
	return tg
}

func vd(t testing.TB, dt DeviceType, id int, target *Target, scope string) VirtualDevice {
	t.Helper()
	v, err := New(dt, id, target, scope)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestNew(t *testing.T) {
	llvm := tgt(t, "llvm")
	cuda := tgt(t, "cuda", "arch", "sm_90")
	tests := []struct {
		name    string
		dt      DeviceType
		id      int
		target  *Target
		scope   string
		want    string
		wantErr error
	}{
		{"unconstrained", NoDeviceType, -1, nil, "", "{}", nil},
		{"device", CUDA, 0, nil, "", "{cuda:0}", nil},
		{"type only", CPU, -1, nil, "", "{cpu}", nil},
		{"id only", NoDeviceType, 3, nil, "local", `{?:3 scope="local"}`, nil},
		{"target infers type", NoDeviceType, 1, cuda, "", `{cuda:1 target=cuda(arch="sm_90")}`, nil},
		{"full", CPU, 0, llvm, "global", `{cpu:0 target=llvm scope="global"}`, nil},
		{"mismatch", CPU, 0, cuda, "", "", ErrTargetMismatch},
		{"mismatch cuda", CUDA, -1, llvm, "", "", ErrTargetMismatch},
		{"bad type", DeviceType(7), 0, nil, "", "", ErrBadDeviceType},
		{"bad id", CPU, -2, nil, "", "", ErrBadID},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := New(tc.dt, tc.id, tc.target, tc.scope)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err == nil && v.String() != tc.want {
				t.Errorf("String = %s, want %s", v, tc.want)
			}
		})
	}
}

func TestNewTarget(t *testing.T) {
	if _, err := NewTarget("rocm", nil); !errors.Is(err, ErrUnknownTarget) {
		t.Errorf("rocm: %v", err)
	}
	if _, err := NewTarget("cuda", map[string]string{"a b": "x"}); !errors.Is(err, ErrBadAttr) {
		t.Errorf("bad key: %v", err)
	}
	attrs := map[string]string{"arch": "sm_80"}
	a, _ := NewTarget("cuda", attrs)
	attrs["arch"] = "sm_90" // the target copied the map
	b, _ := NewTarget("cuda", map[string]string{"arch": "sm_80"})
	if !a.Equal(b) || a == b {
		t.Errorf("separately built equal targets must compare equal")
	}
	if a.Equal(tgt(t, "cuda")) || a.Equal(nil) || !(*Target)(nil).Equal(nil) {
		t.Errorf("Equal wrong")
	}
}

func TestConstrainedness(t *testing.T) {
	full := vd(t, CUDA, 0, tgt(t, "cuda"), "global")
	tests := []struct {
		v           VirtualDevice
		full, empty bool
		dev         tensor.Device
		devErr      bool
	}{
		{Unconstrained, false, true, tensor.Device{}, true},
		{full, true, false, tensor.CUDADevice(0), false},
		{vd(t, CUDA, 2, nil, "global"), false, false, tensor.CUDADevice(2), false},
		{vd(t, CUDA, -1, nil, "global"), false, false, tensor.Device{}, true},
		{vd(t, NoDeviceType, 1, nil, ""), false, false, tensor.Device{}, true},
		{ForScope("ipc_memory"), false, false, tensor.Device{}, true},
	}
	for _, tc := range tests {
		if got := tc.v.IsFullyConstrained(); got != tc.full {
			t.Errorf("%v IsFullyConstrained = %v", tc.v, got)
		}
		if got := tc.v.IsFullyUnconstrained(); got != tc.empty {
			t.Errorf("%v IsFullyUnconstrained = %v", tc.v, got)
		}
		d, err := tc.v.ToDevice()
		if (err != nil) != tc.devErr || (err == nil && d != tc.dev) {
			t.Errorf("%v ToDevice = %v, %v", tc.v, d, err)
		}
		if err != nil && !errors.Is(err, ErrNotConstrained) {
			t.Errorf("%v ToDevice error %v is not ErrNotConstrained", tc.v, err)
		}
	}
}

func TestJoin(t *testing.T) {
	llvm := tgt(t, "llvm")
	llvm2 := tgt(t, "llvm") // built separately: structurally equal
	cuda80 := tgt(t, "cuda", "arch", "sm_80")
	cuda90 := tgt(t, "cuda", "arch", "sm_90")
	tests := []struct {
		name string
		a, b VirtualDevice
		want VirtualDevice
		ok   bool
	}{
		{"definition example", vd(t, CPU, -1, llvm, ""), vd(t, NoDeviceType, 3, nil, "global"), vd(t, CPU, 3, llvm, "global"), true},
		{"scope clash", vd(t, CPU, -1, nil, "global"), vd(t, CPU, -1, nil, "local"), Unconstrained, false},
		{"type clash", vd(t, CPU, 0, nil, ""), vd(t, CUDA, 0, nil, ""), Unconstrained, false},
		{"id clash", vd(t, CUDA, 0, nil, ""), vd(t, CUDA, 1, nil, ""), Unconstrained, false},
		{"target clash", vd(t, CUDA, 0, cuda80, ""), vd(t, CUDA, 0, cuda90, ""), Unconstrained, false},
		{"target vs type clash", vd(t, CPU, -1, nil, ""), ForTarget(cuda80), Unconstrained, false},
		{"structural targets", vd(t, CPU, 0, llvm, ""), vd(t, CPU, 0, llvm2, "global"), vd(t, CPU, 0, llvm, "global"), true},
		{"with unconstrained", Unconstrained, vd(t, CUDA, 1, cuda90, "ipc_memory"), vd(t, CUDA, 1, cuda90, "ipc_memory"), true},
		{"target from b", vd(t, CUDA, 1, nil, ""), ForTarget(cuda90), vd(t, CUDA, 1, cuda90, ""), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Join(tc.a, tc.b)
			if ok != tc.ok || !got.Equal(tc.want) {
				t.Errorf("Join(%v, %v) = %v, %v; want %v, %v", tc.a, tc.b, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestJoinPublishedExample documents the one place where chorus departs
// from the reference text: its second Join example says the following
// pair has no join, but the pair agrees on every field both constrain, so
// by the stated definition ("the most constrained device that agrees with
// both") the join exists. We follow the definition.
func TestJoinPublishedExample(t *testing.T) {
	a := vd(t, CPU, -1, tgt(t, "llvm"), "")
	b := vd(t, NoDeviceType, 3, nil, "local")
	got, ok := Join(a, b)
	want := vd(t, CPU, 3, tgt(t, "llvm"), "local")
	if !ok || !got.Equal(want) {
		t.Fatalf("Join(%v, %v) = %v, %v; want %v", a, b, got, ok, want)
	}
	if got.String() != `{cpu:3 target=llvm scope="local"}` {
		t.Errorf("String = %s", got)
	}
}

func TestDefault(t *testing.T) {
	llvm := tgt(t, "llvm")
	cuda := tgt(t, "cuda")
	tests := []struct {
		name    string
		a, b    VirtualDevice
		want    VirtualDevice
		wantStr string
	}{
		// The reference example: a's fields win; b's id fills the gap.
		{"reference example", vd(t, CPU, -1, llvm, "local"), vd(t, CPU, 3, nil, "global"), vd(t, CPU, 3, llvm, "local"), `{cpu:3 target=llvm scope="local"}`},
		{"b's target same type", vd(t, CPU, -1, nil, ""), vd(t, CPU, 0, llvm, "global"), vd(t, CPU, 0, llvm, "global"), ""},
		{"b's target other type dropped", vd(t, CPU, -1, nil, ""), vd(t, CUDA, 0, cuda, "global"), vd(t, CPU, 0, nil, "global"), ""},
		{"clash keeps a", vd(t, CUDA, 1, nil, "ipc_memory"), vd(t, CUDA, 0, cuda, "global"), vd(t, CUDA, 1, cuda, "ipc_memory"), ""},
		{"unconstrained a", Unconstrained, vd(t, CUDA, 0, cuda, "global"), vd(t, CUDA, 0, cuda, "global"), ""},
		{"scope only a", ForScope("ipc_memory"), vd(t, CUDA, 0, nil, "global"), vd(t, CUDA, 0, nil, "ipc_memory"), ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Default(tc.a, tc.b)
			if !got.Equal(tc.want) {
				t.Errorf("Default(%v, %v) = %v; want %v", tc.a, tc.b, got, tc.want)
			}
			if tc.wantStr != "" && got.String() != tc.wantStr {
				t.Errorf("String = %s, want %s", got, tc.wantStr)
			}
		})
	}
}

// randomVD draws from a small universe so that random pairs often agree
// and often clash. Device type and target are drawn independently and a
// mismatching pair is rejected by New, as a user's would be.
func randomVD(t testing.TB, r *rand.Rand, targets []*Target) VirtualDevice {
	for {
		dt := []DeviceType{NoDeviceType, CPU, CUDA}[r.IntN(3)]
		id := r.IntN(4) - 1
		var tg *Target
		if k := r.IntN(len(targets) + 1); k < len(targets) {
			tg = targets[k]
		}
		scope := []string{"", "global", "ipc_memory", "local"}[r.IntN(4)]
		v, err := New(dt, id, tg, scope)
		if errors.Is(err, ErrTargetMismatch) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func invariantHolds(v VirtualDevice) bool {
	return v.Target() == nil || v.Target().DeviceType() == v.DeviceType()
}

func TestAlgebraProperties(t *testing.T) {
	// Targets are rebuilt per draw below, so structural equality (not
	// pointer identity) is what the laws exercise.
	mk := func() []*Target {
		return []*Target{tgt(t, "llvm"), tgt(t, "c"), tgt(t, "cuda"), tgt(t, "cuda", "arch", "sm_90")}
	}
	r := rand.New(rand.NewPCG(1, 2))
	joined := 0
	for i := 0; i < 20000; i++ {
		a, b := randomVD(t, r, mk()), randomVD(t, r, mk())

		// Idempotent.
		if aa, ok := Join(a, a); !ok || !aa.Equal(a) {
			t.Fatalf("Join(a, a) = %v, %v for a = %v", aa, ok, a)
		}
		// Commutative where defined (and defined on both sides or neither).
		ab, ok1 := Join(a, b)
		ba, ok2 := Join(b, a)
		if ok1 != ok2 || (ok1 && !ab.Equal(ba)) {
			t.Fatalf("Join not commutative: %v, %v: %v %v / %v %v", a, b, ab, ok1, ba, ok2)
		}
		if ok1 {
			joined++
			if !invariantHolds(ab) {
				t.Fatalf("Join(%v, %v) = %v breaks the target invariant", a, b, ab)
			}
			// The join agrees with both: joining it with either changes nothing.
			if j, ok := Join(ab, a); !ok || !j.Equal(ab) {
				t.Fatalf("Join(Join(a,b), a) = %v, %v; a=%v b=%v", j, ok, a, b)
			}
		}
		// Default never fails and keeps the invariant.
		d := Default(a, b)
		if !invariantHolds(d) {
			t.Fatalf("Default(%v, %v) = %v breaks the target invariant", a, b, d)
		}
		// Join(a, Default(a, b)) == Default(a, b), for every pair.
		if j, ok := Join(a, d); !ok || !j.Equal(d) {
			t.Fatalf("Join(a, Default(a, b)) = %v, %v; Default = %v (a=%v b=%v)", j, ok, d, a, b)
		}
		// Defaulting with the fully unconstrained device changes nothing.
		if !Default(a, Unconstrained).Equal(a) || !Default(Unconstrained, a).Equal(a) {
			t.Fatalf("Default with Unconstrained changed %v", a)
		}
	}
	if joined < 1000 {
		t.Errorf("only %d of the random pairs joined; the generator is too clash-prone", joined)
	}
}

// TestDefaultMirrorLawFails pins that the law is one-sided: a wins every
// clash, so b need not agree with Default(a, b).
func TestDefaultMirrorLawFails(t *testing.T) {
	a := vd(t, CPU, -1, nil, "")
	b := vd(t, CUDA, 0, nil, "")
	d := Default(a, b) // {cpu:0}
	if _, ok := Join(b, d); ok {
		t.Fatalf("Join(b, Default(a, b)) unexpectedly defined: %v", d)
	}
}

func TestParseDeviceType(t *testing.T) {
	for _, s := range []string{"cpu", "cuda", "?"} {
		dt, err := ParseDeviceType(s)
		if err != nil || dt.String() != s {
			t.Errorf("%s: %v %v", s, dt, err)
		}
	}
	if _, err := ParseDeviceType("gpu"); !errors.Is(err, ErrBadDeviceType) {
		t.Errorf("gpu: %v", err)
	}
}

func TestForDevice(t *testing.T) {
	v, err := ForDevice(tensor.CUDADevice(2))
	if err != nil || v.String() != "{cuda:2}" {
		t.Fatalf("%v %v", v, err)
	}
	if _, err := ForDevice(tensor.Device{}); err == nil {
		t.Fatal("zero device accepted")
	}
}
