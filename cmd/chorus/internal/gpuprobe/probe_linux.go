package gpuprobe

import (
	"fmt"

	"github.com/chorus-rt/chorus/gpu/nvrtc"
	"github.com/chorus-rt/chorus/internal/sys/dl"
	"github.com/ebitengine/purego"
)

type candidate struct {
	name    string
	sonames []string
	version func(l *dl.Lib) string
}

var candidates = []candidate{
	{"CUDA driver", []string{"libcuda.so.1", "libcuda.so"}, func(l *dl.Lib) string {
		return intVersion(l.Sym("cuDriverGetVersion"), func(v int32) string { return fmt.Sprintf("%d.%d", v/1000, v%1000/10) })
	}},
	{"NVRTC", nvrtc.Sonames(), nvrtcVersion},
	{"NCCL", []string{"libnccl.so.2", "libnccl.so"}, func(l *dl.Lib) string {
		return intVersion(l.Sym("ncclGetVersion"), func(v int32) string {
			if v >= 10000 {
				return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100)
			}
			return fmt.Sprintf("%d.%d.%d", v/1000, v%1000/100, v%100)
		})
	}},
	{"cuBLAS", []string{"libcublas.so.13", "libcublas.so.12", "libcublas.so",
		"/usr/local/cuda/lib64/libcublas.so.13", "/usr/local/cuda/lib64/libcublas.so.12"}, cublasVersion},
}

var versionSyms = map[string][]string{
	"CUDA driver": {"cuDriverGetVersion", "cuInit", "cuDeviceGetCount"},
	"NVRTC":       {"nvrtcVersion"},
	"NCCL":        {"ncclGetVersion"},
	"cuBLAS":      {"cublasGetProperty"},
}

// Probe loads each library and asks it for its version.
func Probe() Report {
	var r Report
	for _, c := range candidates {
		l := Lib{Name: c.name}
		lib, err := dl.Open(c.name, c.sonames, versionSyms[c.name])
		if err != nil {
			l.Err = err.Error()
			r.Libs = append(r.Libs, l)
			continue
		}
		l.Found, l.Path, l.Version = true, lib.Name, c.version(lib)
		r.Libs = append(r.Libs, l)
		if c.name == "CUDA driver" {
			r.Devices, r.DevErr = countDevices(lib)
		}
	}
	return r
}

// intVersion calls an int fn(int*) version query.
func intVersion(sym uintptr, format func(int32) string) string {
	var fn func(*int32) int32
	purego.RegisterFunc(&fn, sym)
	var v int32
	if fn(&v) != 0 {
		return "unknown"
	}
	return format(v)
}

func nvrtcVersion(l *dl.Lib) string {
	var fn func(*int32, *int32) int32
	purego.RegisterFunc(&fn, l.Sym("nvrtcVersion"))
	var major, minor int32
	if fn(&major, &minor) != 0 {
		return "unknown"
	}
	return fmt.Sprintf("%d.%d", major, minor)
}

// cublasVersion asks cublasGetProperty for MAJOR_VERSION, MINOR_VERSION
// and PATCH_LEVEL (libraryPropertyType 0, 1, 2).
func cublasVersion(l *dl.Lib) string {
	var fn func(int32, *int32) int32
	purego.RegisterFunc(&fn, l.Sym("cublasGetProperty"))
	var v [3]int32
	for i := range v {
		if fn(int32(i), &v[i]) != 0 {
			return "unknown"
		}
	}
	return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2])
}

func countDevices(l *dl.Lib) (int, string) {
	var cuInit func(uint32) int32
	var cuDeviceGetCount func(*int32) int32
	purego.RegisterFunc(&cuInit, l.Sym("cuInit"))
	purego.RegisterFunc(&cuDeviceGetCount, l.Sym("cuDeviceGetCount"))
	if rc := cuInit(0); rc != 0 {
		return 0, fmt.Sprintf("cuInit failed with CUresult %d", rc)
	}
	var n int32
	if rc := cuDeviceGetCount(&n); rc != 0 {
		return 0, fmt.Sprintf("cuDeviceGetCount failed with CUresult %d", rc)
	}
	return int(n), ""
}
