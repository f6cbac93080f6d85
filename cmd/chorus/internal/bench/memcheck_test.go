package bench

import (
	"errors"
	"strings"
	"testing"

	"github.com/chorus-rt/chorus/tensor"
)

type fakeMem struct {
	host    int64
	hostErr error
	gpus    map[int]int64
}

func (f fakeMem) HostAvailable() (int64, error) { return f.host, f.hostErr }
func (f fakeMem) DeviceFree(id int) (int64, error) {
	if v, ok := f.gpus[id]; ok {
		return v, nil
	}
	return 0, errors.New("no GPU")
}

func TestParseMemAvailable(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"MemTotal:       24589936 kB\nMemFree:        22016412 kB\nMemAvailable:   22960844 kB\n", 22960844 << 10, true},
		{"MemAvailable: 0 kB\n", 0, true},
		{"MemTotal: 1 kB\n", 0, false},
		{"MemAvailable: x kB\n", 0, false},
		{"MemAvailable: 12 MB\n", 0, false},
		{"", 0, false},
	}
	for _, c := range cases {
		got, err := ParseMemAvailable(strings.NewReader(c.in))
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ParseMemAvailable(%q) = %d, %v; want %d, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}

func TestParseAndFormatSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{{"1K", 1024}, {"64M", 64 << 20}, {"2g", 2 << 30}, {"512", 512}, {"1KB", 1024}, {"100B", 100}} {
		got, err := ParseSize(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
		if back, err := ParseSize(FormatSize(got)); err != nil || back != got {
			t.Errorf("ParseSize(FormatSize(%d) = %q) = %d, %v", got, FormatSize(got), back, err)
		}
	}
	for _, bad := range []string{"1P", "", "K", "-3", "0", "1.5M", "9999999999999G"} {
		if _, err := ParseSize(bad); err == nil || !strings.Contains(err.Error(), "optional suffix K, M or G") {
			t.Errorf("ParseSize(%q): %v; want an error that says what is valid", bad, err)
		}
	}
	if got := FormatSize(1536 << 10); got != "1536K" {
		t.Errorf("FormatSize(1.5 MiB) = %q", got)
	}
}

// The estimate is what chorus.bench_collective takes: 2 threaded
// workers of a 256 MiB float32 allreduce peaked at 3.6 GB resident, 7x
// the size per worker; bfloat16 5.8 GB (11x: the float64 copies weigh
// more for small elements); allgather 2.6 GB.
func TestCollectiveNeed(t *testing.T) {
	const mib256 = 256 << 20
	cases := []struct {
		bench string
		dt    tensor.DType
		gpu   bool
		want  MemNeed
	}{
		{"allreduce", tensor.Float32, false, MemNeed{Host: 7 * mib256}},
		{"allreduce", tensor.BFloat16, false, MemNeed{Host: 11 * mib256}},
		{"allgather", tensor.Float32, false, MemNeed{Host: 5 * mib256}},
		{"reducescatter", tensor.Float32, false, MemNeed{Host: 11 * mib256 / 2}},
		{"allreduce", tensor.Float32, true, MemNeed{Host: 6 * mib256, Device: 2 * mib256}},
	}
	for _, c := range cases {
		if got := CollectiveNeed(c.bench, 2, c.dt, mib256, c.gpu); got != c.want {
			t.Errorf("CollectiveNeed(%s, %s, gpu %v) = %+v; want %+v", c.bench, c.dt, c.gpu, got, c.want)
		}
	}
}

func TestCheckMemory(t *testing.T) {
	machine := fakeMem{host: 24 << 30, gpus: map[int]int64{0: 80 << 30, 1: 900 << 20}}
	cases := []struct {
		name string
		c    MemCheck
		mem  fakeMem
		want string // "" fits
	}{
		{"fits", MemCheck{Bench: "allreduce", Workers: 2, DType: tensor.Float32, Lo: 1 << 10, Hi: 64 << 20, Step: 4}, machine, ""},
		{"64G on 24G", MemCheck{Bench: "allreduce", Workers: 2, DType: tensor.Float32, Lo: 64 << 30, Hi: 64 << 30, Step: 4}, machine,
			"allreduce float32 at 64G needs about 896.0 GiB of host memory (MemAvailable) (448.0 GiB for each of 2 workers), and there is 24.0 GiB; no size of the sweep fits"},
		{"sweep into the wall", MemCheck{Bench: "allreduce", Workers: 2, DType: tensor.Float32, Lo: 1 << 10, Hi: 16 << 30, Step: 4}, machine,
			"the largest size of the sweep that fits is 1G"},
		{"not a power of the step", MemCheck{Bench: "broadcast", Workers: 1, DType: tensor.Float32, Lo: 3 << 30, Hi: 5 << 30, Step: 4}, machine, ""},
		{"GPU 1 short", MemCheck{Bench: "allreduce", Workers: 4, DType: tensor.Float32, Lo: 1 << 20, Hi: 256 << 20, Step: 2, DeviceIDs: []int{0, 1}}, machine,
			"needs about 1.0 GiB of free memory of cuda:1 (0.5 GiB for each of 2 workers), and there is 0.9 GiB; the largest size of the sweep that fits is 128M"},
		{"no /proc/meminfo: not checked", MemCheck{Bench: "allreduce", Workers: 2, DType: tensor.Float32, Lo: 64 << 30, Hi: 64 << 30, Step: 4}, fakeMem{hostErr: errors.New("no meminfo")}, ""},
		{"no driver: not checked", MemCheck{Bench: "allreduce", Workers: 2, DType: tensor.Float32, Lo: 64 << 20, Hi: 64 << 20, Step: 4, DeviceIDs: []int{7}}, machine, ""},
		{"huge, no overflow", MemCheck{Bench: "allreduce", Workers: 4096, DType: tensor.Int8, Lo: 1 << 40, Hi: 1 << 40, Step: 2}, machine, "no size of the sweep fits"},
	}
	for _, c := range cases {
		err := CheckMemory(c.c, c.mem)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v, want it to fit", c.name, err)
		case c.want != "" && (!errors.Is(err, ErrNoMemory) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v; want ErrNoMemory containing %q", c.name, err, c.want)
		}
	}
}

// MinCalls counts what benchCollective runs at least: per size and round
// its timed samples and one warm-up batch.
func TestMinCalls(t *testing.T) {
	cases := []struct {
		cfg  CollectiveConfig
		want int64
	}{
		{CollectiveConfig{MinBytes: 1 << 10, MaxBytes: 4 << 10, Step: 4, Iters: 20, Rounds: 1}, 2 * (20 + 2)},
		{CollectiveConfig{MinBytes: 1 << 10, MaxBytes: 1 << 10, Step: 4, Iters: 20, Rounds: 3, Strategies: []string{"oneshot", "twoshot"}}, 3 * 2 * (20 + 2)},
		{CollectiveConfig{MinBytes: 1 << 10, MaxBytes: 1 << 10, Step: 4}, 3 * (MaxSamples + MaxSamples/10)},
		{CollectiveConfig{MinBytes: 64 << 20, MaxBytes: 64 << 20, Step: 4, Rounds: 1}, MinSamples + 2},
		// graphs: at least MinSamples replays of 100 calls
		{CollectiveConfig{MinBytes: 1 << 10, MaxBytes: 1 << 10, Step: 4, Iters: 250, Rounds: 1, Graph: true}, MinSamples*MaxGraphCalls + 25},
	}
	for _, c := range cases {
		if got := MinCalls(c.cfg); got != c.want {
			t.Errorf("MinCalls(%+v) = %d, want %d", c.cfg, got, c.want)
		}
	}
}
