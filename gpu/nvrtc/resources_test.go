package nvrtc_test

import (
	"errors"
	"maps"
	"testing"

	"github.com/chorus-rt/chorus/gpu/nvrtc"
)

func TestParseResources(t *testing.T) {
	for _, c := range []struct {
		name string
		log  string
		want map[string]nvrtc.Resources
		err  error
	}{
		{"empty", "", map[string]nvrtc.Resources{}, nil},
		{"two entries and a callee", `k.cu(652): warning #128-D: loop is not reachable
ptxas info    : 160 bytes gmem
ptxas info    : Compiling entry function 'dec_rope' for 'sm_90'
ptxas info    : Function properties for dec_rope
ptxas         .     48 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 156 registers, 14352 bytes smem, 400 bytes cmem[0]
ptxas info    : Function properties for __internal_trig_reduction_slowpathd
ptxas         .     40 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'add_one' for 'sm_90'
ptxas info    : Function properties for add_one
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 8 registers, 368 bytes cmem[0]
`, map[string]nvrtc.Resources{
			"dec_rope": {Registers: 156, Shared: 14352, StackFrame: 48, SpillStores: 8, SpillLoads: 12},
			"add_one":  {Registers: 8},
		}, nil},
		{"registers before an entry", "ptxas info    : Used 8 registers, 368 bytes cmem[0]\n", nil, nvrtc.ErrReport},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := nvrtc.ParseResources(c.log)
			if !errors.Is(err, c.err) {
				t.Fatalf("err %v, want %v", err, c.err)
			}
			if err == nil && !maps.Equal(got, c.want) {
				t.Fatalf("got %v, want %v", got, c.want)
			}

		})
	}
}

func TestSpills(t *testing.T) {
	for _, c := range []struct {
		r    nvrtc.Resources
		want bool
	}{
		{nvrtc.Resources{Registers: 200, StackFrame: 48}, false}, // a frame without spills
		{nvrtc.Resources{SpillStores: 4}, true},
		{nvrtc.Resources{SpillLoads: 4}, true},
	} {
		if got := c.r.Spills(); got != c.want {
			t.Errorf("%+v: Spills %v, want %v", c.r, got, c.want)
		}
	}
}

func FuzzParseResources(f *testing.F) {
	f.Add("ptxas info    : Compiling entry function 'k' for 'sm_90'\nptxas info    : Function properties for k\nptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\nptxas info    : Used 8 registers, 368 bytes cmem[0]\n")
	f.Add("ptxas info    : Used 99999999999999999999 registers\n")
	f.Fuzz(func(t *testing.T, log string) {
		rep, err := nvrtc.ParseResources(log)
		if err != nil && !errors.Is(err, nvrtc.ErrReport) {
			t.Fatalf("error %v does not wrap ErrReport", err)
		}
		for name := range rep {
			if name == "" {
				t.Fatal("an entry without a name")
			}
		}
	})
}

// TestReport compiles a kernel with a resource report (NVRTC, no GPU).
func TestReport(t *testing.T) {
	c := load(t)
	rep, err := c.Report("add_one.cu", addOne, "sm_90")
	if err != nil {
		t.Fatal(err)
	}
	r, ok := rep["add_one"]
	if !ok || r.Registers <= 0 || r.SpillStores != 0 {
		t.Fatalf("report %v: want add_one with registers and no spills", rep)
	}
}

func TestBlocksByRegisters(t *testing.T) {
	cases := []struct{ regs, threads, want int }{
		{32, 1024, 2},
		{33, 1024, 1}, // 40 a thread after rounding
		{64, 1024, 1},
		{65, 1024, 0}, // does not fit: ptxas caps a 1024-thread kernel at 64
		{168, 128, 3},
		{248, 128, 2},
		{0, 256, 32}, // at least 8 a thread
		{10, 0, 0},
	}
	for _, c := range cases {
		if got := (nvrtc.Resources{Registers: c.regs}).BlocksByRegisters(c.threads); got != c.want {
			t.Errorf("%d registers, %d threads: %d blocks, want %d", c.regs, c.threads, got, c.want)
		}
	}
}
