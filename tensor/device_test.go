package tensor_test

import (
	"testing"

	"github.com/chorus-rt/chorus/tensor"
)

func TestParseDevice(t *testing.T) {
	good := []struct {
		in   string
		want tensor.Device
	}{
		{"cpu", tensor.CPUDevice},
		{" CPU ", tensor.CPUDevice},
		{"cuda", tensor.CUDADevice(0)},
		{"cuda:0", tensor.CUDADevice(0)},
		{"cuda:3", tensor.CUDADevice(3)},
		{"CUDA:12", tensor.CUDADevice(12)},
		{"gpu", tensor.CUDADevice(0)},
		{"gpu:1", tensor.CUDADevice(1)},
		{"Gpu:7\n", tensor.CUDADevice(7)},
	}
	for _, tc := range good {
		got, err := tensor.ParseDevice(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseDevice(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, s := range []string{
		"", "tpu", "cpu:0", "cpu:1", "cuda:", "cuda:-1", "cuda:x", "cuda:1:2", "cuda: 1",
		"cuda:99999999999999999999", "gpu:-0x1", "cuda0", ":3",
	} {
		if got, err := tensor.ParseDevice(s); err == nil {
			t.Errorf("ParseDevice(%q) = %v, want an error", s, got)
		}
	}
}

func TestDevice(t *testing.T) {
	tests := []struct {
		d     tensor.Device
		valid bool
		str   string
	}{
		{tensor.CPUDevice, true, "cpu"},
		{tensor.CUDADevice(0), true, "cuda:0"},
		{tensor.CUDADevice(5), true, "cuda:5"},
		{tensor.Device{}, false, "device(0:0)"},
		{tensor.Device{Kind: tensor.CPU, ID: 1}, false, "cpu"},
		{tensor.Device{Kind: tensor.CUDA, ID: -1}, false, "cuda:-1"},
		{tensor.Device{Kind: 9, ID: 2}, false, "device(9:2)"},
	}
	for _, tc := range tests {
		if got := tc.d.Valid(); got != tc.valid {
			t.Errorf("%#v.Valid() = %v", tc.d, got)
		}
		if got := tc.d.String(); got != tc.str {
			t.Errorf("%#v.String() = %q, want %q", tc.d, got, tc.str)
		}
		if tc.valid {
			if back, err := tensor.ParseDevice(tc.d.String()); err != nil || back != tc.d {
				t.Errorf("ParseDevice(%q) = %v, %v", tc.d.String(), back, err)
			}
		}
	}
	if tensor.CPU != 1 || tensor.CUDA != 2 {
		t.Errorf("wire values changed: CPU %d, CUDA %d", tensor.CPU, tensor.CUDA)
	}
}

func FuzzParseDevice(f *testing.F) {
	for _, s := range []string{"cpu", "cuda", "cuda:0", "cuda:3", "gpu:1", " GPU:12 ", "cuda:", "cuda:-1", "tpu", "", "cuda:+4", "cuda:1:2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := tensor.ParseDevice(s)
		if err != nil {
			if d != (tensor.Device{}) {
				t.Fatalf("ParseDevice(%q) failed but returned %#v", s, d)
			}
			return
		}
		if !d.Valid() {
			t.Fatalf("ParseDevice(%q) = invalid %#v", s, d)
		}
		back, err := tensor.ParseDevice(d.String())
		if err != nil || back != d {
			t.Fatalf("ParseDevice(%q) = %v, but ParseDevice(%q) = %v, %v", s, d, d.String(), back, err)
		}
	})
}
