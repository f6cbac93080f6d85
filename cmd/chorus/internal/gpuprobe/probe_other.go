//go:build !linux

package gpuprobe

// Probe reports that GPU libraries are only looked for on Linux.
func Probe() Report {
	return Report{Libs: []Lib{{Name: "CUDA driver", Err: "GPU support needs linux"}}}
}
