package bench

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"time"
	"unsafe"

	"github.com/chorus-rt/chorus/gpu/cuda"
	"github.com/chorus-rt/chorus/gpu/device"
	"github.com/chorus-rt/chorus/gpu/nvrtc"
)

// hostPollSource: one thread times samples of chain dependent loads (each
// address depends on the value the previous load returned, so they cannot
// overlap), first of mapped host memory, then of device memory, with the
// GPU's nanosecond timer: what one poll of a host word costs a barrier
// (see ccl/ipc, "Stalls"). The timer read after a chain may come before
// its last load returns, so a sample can miss up to one load of chain.
const hostPollSource = `
#define CHAIN 16
__device__ __forceinline__ unsigned long long now() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
extern "C" __global__ void hostpoll(const unsigned* host, const unsigned* dev, long long* out, int n) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  unsigned v = 0;
  for (int k = 0; k < 2; k++) {
    const unsigned* p = k == 0 ? host : dev;
    for (int i = 0; i < n; i++) {
      unsigned long long t0 = now();
      for (int j = 0; j < CHAIN; j++)
        asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p + (v & 1)) : "memory");
      unsigned long long t1 = now();
      out[k * n + i] = (long long)(t1 - t0) + (v & 0x80000000u);  // v is 0: keeps the chain live
    }
  }
}
`

// HostPollChain is CHAIN of hostPollSource.
const HostPollChain = 16

// HostPollResult is the latency of one load, in nanoseconds (each
// sample: a chain of dependent loads timed together, divided by its
// length).
type HostPollResult struct {
	Bench  string  `json:"bench"`
	Memory string  `json:"memory"` // "host-mapped" or "device"
	Host   string  `json:"host"`   // what the host did meanwhile: "sleeping" or "spinning"
	Loads  int     `json:"loads"`
	P50Ns  float64 `json:"p50_ns"`
	P99Ns  float64 `json:"p99_ns"`
	MaxNs  float64 `json:"max_ns"`
}

// HostPoll measures, on GPU ordinal, the latency of loads from mapped
// page-locked host memory and from device memory, once while the host
// thread sleeps until the kernel is done and once while it spins in a
// stream synchronization.
func HostPoll(ordinal, loads int, emit func(HostPollResult)) error {
	d, err := cuda.Load()
	if err != nil {
		return err
	}
	if err := d.Init(); err != nil {
		return err
	}
	comp, err := nvrtc.Load()
	if err != nil {
		return err
	}
	dev, err := device.OpenCUDA(d, ordinal)
	if err != nil {
		return err
	}
	defer dev.Close()
	var (
		fn      cuda.Function
		mod     cuda.Module
		host    unsafe.Pointer
		hostDev cuda.DevicePtr
		devMem  cuda.DevicePtr
		out     cuda.DevicePtr
	)
	err = dev.Do(func(cuda.Stream) error {
		cd, err := d.DeviceGet(ordinal)
		if err != nil {
			return err
		}
		major, err := d.DeviceAttribute(cd, cuda.AttrComputeCapabilityMajor)
		if err != nil {
			return err
		}
		minor, err := d.DeviceAttribute(cd, cuda.AttrComputeCapabilityMinor)
		if err != nil {
			return err
		}
		cubin, _, err := comp.CompileCached("chorus_hostpoll.cu", hostPollSource, fmt.Sprintf("sm_%d%d", major, minor))
		if err != nil {
			return err
		}
		if mod, err = d.ModuleLoadData(cubin); err != nil {
			return err
		}
		if fn, err = d.ModuleGetFunction(mod, "hostpoll"); err != nil {
			return err
		}
		if host, err = d.MemHostAlloc(8, cuda.MemHostAllocPortable|cuda.MemHostAllocDeviceMap); err != nil {
			return err
		}
		if hostDev, err = d.MemHostGetDevicePointer(host); err != nil {
			return err
		}
		if devMem, err = d.MemAlloc(8); err != nil {
			return err
		}
		if err := d.MemsetD8(devMem, 0, 8); err != nil {
			return err
		}
		out, err = d.MemAlloc(int64(16 * loads))
		return err
	})
	defer dev.Do(func(cuda.Stream) error {
		if out != 0 {
			d.MemFree(out)
		}
		if devMem != 0 {
			d.MemFree(devMem)
		}
		if host != nil {
			d.MemFreeHost(host)
		}
		if mod != 0 {
			d.ModuleUnload(mod)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("hostpoll: cuda:%d: %w", ordinal, err)
	}
	clear(unsafe.Slice((*byte)(host), 8))
	n := int32(loads)
	params := []unsafe.Pointer{unsafe.Pointer(&hostDev), unsafe.Pointer(&devMem), unsafe.Pointer(&out), unsafe.Pointer(&n)}
	for _, mode := range []string{"sleeping", "spinning"} {
		err := dev.Do(func(s cuda.Stream) error {
			return d.LaunchKernel(fn, [3]uint32{1, 1, 1}, [3]uint32{32, 1, 1}, 0, s, params)
		})
		if err != nil {
			return err
		}
		if mode == "sleeping" {
			// Long enough for the kernel's loads (a few us each) to run
			// while this process sleeps.
			time.Sleep(time.Duration(loads) * HostPollChain * 5 * time.Microsecond)
		}
		raw := make([]byte, 16*loads)
		if err := dev.CopyOut(raw, device.Wrap(uint64(out), int64(len(raw)), ordinal), 0); err != nil {
			return err
		}
		samples := unsafe.Slice((*int64)(unsafe.Pointer(&raw[0])), 2*loads)
		for k, mem := range []string{"host-mapped", "device"} {
			ns := make([]float64, loads)
			for i := range ns {
				ns[i] = float64(samples[k*loads+i]) / HostPollChain
			}
			slices.Sort(ns)
			emit(HostPollResult{Bench: "hostpoll", Memory: mem, Host: mode, Loads: loads,
				P50Ns: ns[loads/2], P99Ns: ns[min(loads-1, loads*99/100)], MaxNs: ns[loads-1]})
		}
		runtime.KeepAlive(raw)
	}
	return nil
}

// HostPollTable prints HostPoll's rows.
func HostPollTable(w io.Writer, r HostPollResult) {
	fmt.Fprintf(w, " %12s %9s %6d %10.0f %10.0f %10.0f\n", r.Memory, r.Host, r.Loads, r.P50Ns, r.P99Ns, r.MaxNs)
}
