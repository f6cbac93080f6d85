//go:build amd64 && !purego

package reduce

// Declarations of the assembly in simd_amd64.s, and CPU feature detection.
// Build with -tags purego to use the pure-Go loops only.

// haveAVX2 and haveF16C report CPU (and OS) support; useAVX2 and useF16C
// select the assembly loops (tests switch them off to check the Go loops).
var (
	haveAVX2, haveF16C = detect()
	useAVX2, useF16C   = haveAVX2, haveF16C
)

func detect() (avx2, f16c bool) {
	maxID, _, _, _ := cpuid(0, 0)
	if maxID < 7 {
		return false, false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const (
		osxsave = 1 << 27
		avx     = 1 << 28
		f16cBit = 1 << 29
	)
	if ecx1&osxsave == 0 || ecx1&avx == 0 {
		return false, false
	}
	// The OS must save the SSE and AVX register state (XCR0 bits 1 and 2).
	if xgetbv0()&6 != 6 {
		return false, false
	}
	_, ebx7, _, _ := cpuid(7, 0)
	avx2 = ebx7&(1<<5) != 0
	return avx2, avx2 && ecx1&f16cBit != 0
}

func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
func xgetbv0() (eax uint32)

//go:noescape
func addF32AVX2(d, a, b *float32, n int)

//go:noescape
func addF64AVX2(d, a, b *float64, n int)

//go:noescape
func divF32AVX2(d *float32, n int, div float32)

//go:noescape
func bf16DecodeAVX2(acc *float32, s *uint16, n int)

//go:noescape
func bf16EncodeAVX2(d *uint16, acc *float32, n int)

//go:noescape
func bf16Sum2AVX2(d, a, b *uint16, n int)

//go:noescape
func bf16Add2AVX2(acc *float32, a, b *uint16, n int)

//go:noescape
func bf16AddAVX2(acc *float32, s *uint16, n int)

//go:noescape
func bf16AddEncAVX2(d *uint16, acc *float32, s *uint16, n int)

//go:noescape
func f16DecodeF16C(acc *float32, s *uint16, n int)

//go:noescape
func f16EncodeF16C(d *uint16, acc *float32, n int)

//go:noescape
func f16Sum2F16C(d, a, b *uint16, n int)

//go:noescape
func f16Add2F16C(acc *float32, a, b *uint16, n int)

//go:noescape
func f16AddF16C(acc *float32, s *uint16, n int)

//go:noescape
func f16AddEncF16C(d *uint16, acc *float32, s *uint16, n int)
