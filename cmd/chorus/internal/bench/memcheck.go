package bench

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/tensor"
)

// A sweep's largest size is checked against the memory there is before
// any session starts: a size that cannot fit would otherwise end every
// worker in the Go runtime's out-of-memory crash (hundreds of lines of
// goroutine dumps, interleaved), or in a CUDA allocation failure.

// MemProbe tells how much memory there is to take.
type MemProbe interface {
	// HostAvailable is the host memory a program can take without
	// swapping (Linux: MemAvailable of /proc/meminfo).
	HostAvailable() (int64, error)
	// DeviceFree is the free memory of GPU ordinal.
	DeviceFree(ordinal int) (int64, error)
}

// SystemMem probes this machine: /proc/meminfo and, for GPUs, the CUDA
// driver through gpu/device (a context is made and released per call).
type SystemMem struct{}

// HostAvailable reads MemAvailable from /proc/meminfo.
func (SystemMem) HostAvailable() (int64, error) {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return ParseMemAvailable(f)
}

// ParseMemAvailable reads the MemAvailable line of /proc/meminfo's
// format ("MemAvailable:   22960844 kB") and returns bytes.
func ParseMemAvailable(r io.Reader) (int64, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemAvailable:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("meminfo: MemAvailable line %q: want a number of kB", sc.Text())
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 {
			return 0, fmt.Errorf("meminfo: MemAvailable %q: want a number of kB", f[0])
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("meminfo: no MemAvailable line")
}

// DeviceFree opens GPU ordinal and asks for its free memory.
func (SystemMem) DeviceFree(ordinal int) (int64, error) {
	d, err := cuda.Load()
	if err != nil {
		return 0, err
	}
	if err := d.Init(); err != nil {
		return 0, err
	}
	dev, err := device.OpenCUDA(d, ordinal)
	if err != nil {
		return 0, err
	}
	defer dev.Close()
	free, _, err := dev.MemInfo()
	return free, err
}

// MemNeed is what one worker of a sweep takes at one size, in bytes:
// Host on the host, Device on its GPU (0 for host workers).
type MemNeed struct{ Host, Device int64 }

// CollectiveNeed is the memory one worker of bench (allreduce,
// allgather, reducescatter, broadcast, peercopy; a plan's collective
// likewise) takes at size bytes of dt on n workers, as
// chorus.bench_collective allocates it: the send and receive buffers on
// the worker's device, the send data staged on the host, and the
// expected values and the result as float64 (8 bytes an element). For
// float32 allreduce on host workers that is 7x the size per worker
// (measured: 2 threaded workers at 256 MiB peaked at 3.6 GB resident).
func CollectiveNeed(bench string, n int, dt tensor.DType, bytes int64, gpu bool) MemNeed {
	es := int64(max(1, dt.Size()))
	count := bytes / es
	sendN, recvN := count, count
	switch bench {
	case "allgather":
		sendN = count / int64(max(n, 1))
	case "reducescatter":
		recvN = count / int64(max(n, 1))
	}
	bufs := (sendN + recvN) * es
	host := sendN*es + 8*(sendN+recvN) // staged input, expected values, result
	if !gpu {
		return MemNeed{Host: bufs + host}
	}
	return MemNeed{Host: host + recvN*es, Device: bufs} // the result comes back to the host
}

// MemCheck is a sweep to check: workers on deviceIDs (none: host
// workers; worker i on deviceIDs[i mod len]), sizes lo, lo*step, ... up
// to hi.
type MemCheck struct {
	Bench     string
	Workers   int
	DType     tensor.DType
	Lo, Hi    int64
	Step      int64
	DeviceIDs []int
}

// ErrNoMemory: a sweep's largest size does not fit the memory there is.
var ErrNoMemory = errors.New("not enough memory")

// CheckMemory refuses a sweep whose largest size needs more memory than
// probe reports: the host's for all workers together, each GPU's for the
// workers on it. The error names the size, what it needs, what there is
// and the largest size of the sweep that fits. Where a probe fails (no
// /proc/meminfo, no CUDA driver) that part is not checked.
func CheckMemory(c MemCheck, probe MemProbe) error {
	step := max(c.Step, 2)
	var sizes []int64
	for b := c.Lo; b > 0 && b <= c.Hi; b *= step {
		sizes = append(sizes, b)
		if b > c.Hi/step {
			break
		}
	}
	if len(sizes) == 0 {
		return nil
	}
	gpu := len(c.DeviceIDs) > 0
	type place struct {
		name    string
		workers int
		have    int64
		need    func(MemNeed) int64
	}
	var places []place
	if have, err := probe.HostAvailable(); err == nil {
		places = append(places, place{"host memory (MemAvailable)", c.Workers, have, func(m MemNeed) int64 { return m.Host }})
	}
	if gpu {
		on := map[int]int{}
		for i := range c.Workers {
			on[c.DeviceIDs[i%len(c.DeviceIDs)]]++
		}
		ids := make([]int, 0, len(on))
		for id := range on {
			ids = append(ids, id)
		}
		sort.Ints(ids)
		for _, id := range ids {
			if have, err := probe.DeviceFree(id); err == nil {
				places = append(places, place{fmt.Sprintf("free memory of cuda:%d", id), on[id], have, func(m MemNeed) int64 { return m.Device }})
			}
		}
	}
	total := func(p place, b int64) int64 {
		need := p.need(CollectiveNeed(c.Bench, c.Workers, c.DType, b, gpu))
		if need > 0 && int64(p.workers) > (1<<62)/need {
			return 1 << 62
		}
		return need * int64(p.workers)
	}
	largest := sizes[len(sizes)-1]
	for _, p := range places {
		need := total(p, largest)
		if need <= p.have {
			continue
		}
		fit := "no size of the sweep fits"
		for i := len(sizes) - 1; i >= 0; i-- {
			if total(p, sizes[i]) <= p.have {
				fit = "the largest size of the sweep that fits is " + FormatSize(sizes[i])
				break
			}
		}
		who := "its 1 worker"
		if p.workers > 1 {
			who = fmt.Sprintf("each of %d workers", p.workers)
		}
		return fmt.Errorf("%w: %s %s at %s needs about %s of %s (%s for %s), and there is %s; %s",
			ErrNoMemory, c.Bench, c.DType, FormatSize(largest), gib(need), p.name, gib(need/int64(p.workers)), who, gib(p.have), fit)
	}
	return nil
}

// FormatSize writes bytes as ParseSize reads them: 64M, 3G, 1536K, 100.
func FormatSize(b int64) string {
	for _, u := range []struct {
		shift  uint
		suffix string
	}{{30, "G"}, {20, "M"}, {10, "K"}} {
		if b >= 1<<u.shift && b%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d%s", b>>u.shift, u.suffix)
		}
	}
	return strconv.FormatInt(b, 10)
}

func gib(b int64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }
