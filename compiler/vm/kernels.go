package vm

import "github.com/chorus-rt/chorus/compiler/kernels"

// The kernels' settings and measurement functions (package
// compiler/kernels), under the names the VM's callers use.
const (
	// GemvMaxM is the most rows of x the skinny-matrix kernels take.
	GemvMaxM = kernels.GemvMaxM
	// GemvDefaultRows is the default threshold of the skinny-matrix
	// kernels (kernels.GemvDefaultRows says why).
	GemvDefaultRows = kernels.GemvDefaultRows
	// GemvFunc (max_rows int) -> the previous value: the threshold of
	// the worker's process.
	GemvFunc = kernels.GemvFunc

	FillUniformFunc   = kernels.FillUniformFunc
	BenchStreamFunc   = kernels.BenchStreamFunc
	BenchGemmFunc     = kernels.BenchGemmFunc
	BenchMatmulNTFunc = kernels.BenchMatmulNTFunc
	BenchLaunchFunc   = kernels.BenchLaunchFunc
)

// Gelu is the tanh approximation the VM's gelu computes (kernels.Gelu).
func Gelu(x float64) float64 { return kernels.Gelu(x) }
