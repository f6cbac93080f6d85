package gpuprobe

import (
	"fmt"
	"strings"

	"github.com/ebitengine/purego"
)

type candidate struct {
	name     string
	sonames  []string
	verSym   string // int fn(int*) reporting a version, if any
	decodeFn func(v int32) string
}

var candidates = []candidate{
	{"CUDA driver", []string{"libcuda.so.1", "libcuda.so"}, "cuDriverGetVersion", cudaVersion},
	{"NVRTC", []string{"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}, "", nil},
	{"NCCL", []string{"libnccl.so.2", "libnccl.so"}, "ncclGetVersion", ncclVersion},
}

func cudaVersion(v int32) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) }

func ncclVersion(v int32) string {
	if v >= 10000 {
		return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100)
	}
	return fmt.Sprintf("%d.%d.%d", v/1000, v%1000/100, v%100)
}

// Probe loads each library and asks it for its version. Nothing is kept
// loaded beyond what the process already mapped.
func Probe() Report {
	var r Report
	var cuda uintptr
	for _, c := range candidates {
		l := Lib{Name: c.name}
		var errs []string
		for _, so := range c.sonames {
			h, err := purego.Dlopen(so, purego.RTLD_NOW|purego.RTLD_GLOBAL)
			if err != nil {
				msg := strings.TrimSpace(err.Error())
				if msg == "" {
					msg = so + ": cannot open shared object file"
				}
				errs = append(errs, msg)
				continue
			}
			l.Found, l.Path = true, so
			l.Version = "unknown"
			if c.verSym != "" {
				if sym, err := purego.Dlsym(h, c.verSym); err == nil {
					var v int32
					var fn func(*int32) int32
					purego.RegisterFunc(&fn, sym)
					if rc := fn(&v); rc == 0 {
						l.Version = c.decodeFn(v)
					}
				}
			}
			if c.name == "NVRTC" {
				l.Version = nvrtcVersion(h)
			}
			if c.name == "CUDA driver" {
				cuda = h
			}
			break
		}
		if !l.Found {
			l.Err = firstErr(errs)
		}
		r.Libs = append(r.Libs, l)
	}
	if cuda != 0 {
		r.Devices, r.DevErr = countDevices(cuda)
	}
	return r
}

func firstErr(errs []string) string {
	if len(errs) == 0 {
		return "not searched"
	}
	return strings.TrimSpace(errs[0])
}

func nvrtcVersion(h uintptr) string {
	sym, err := purego.Dlsym(h, "nvrtcVersion")
	if err != nil {
		return "unknown"
	}
	var fn func(*int32, *int32) int32
	purego.RegisterFunc(&fn, sym)
	var major, minor int32
	if fn(&major, &minor) != 0 {
		return "unknown"
	}
	return fmt.Sprintf("%d.%d", major, minor)
}

func countDevices(h uintptr) (int, string) {
	initSym, err := purego.Dlsym(h, "cuInit")
	if err != nil {
		return 0, err.Error()
	}
	cntSym, err := purego.Dlsym(h, "cuDeviceGetCount")
	if err != nil {
		return 0, err.Error()
	}
	var cuInit func(uint32) int32
	var cuDeviceGetCount func(*int32) int32
	purego.RegisterFunc(&cuInit, initSym)
	purego.RegisterFunc(&cuDeviceGetCount, cntSym)
	if rc := cuInit(0); rc != 0 {
		return 0, fmt.Sprintf("cuInit failed with CUresult %d", rc)
	}
	var n int32
	if rc := cuDeviceGetCount(&n); rc != 0 {
		return 0, fmt.Sprintf("cuDeviceGetCount failed with CUresult %d", rc)
	}
	return int(n), ""
}
