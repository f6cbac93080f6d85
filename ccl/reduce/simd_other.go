//go:build !amd64 || purego

package reduce

// Without assembly every loop is the pure-Go one. The stubs below are
// never called (use* are false); they keep the callers portable.

var (
	haveAVX2, haveF16C bool
	useAVX2, useF16C   bool
)

func addF32AVX2(d, a, b *float32, n int)                       { panic("unreachable") }
func addF64AVX2(d, a, b *float64, n int)                       { panic("unreachable") }
func divF32AVX2(d *float32, n int, div float32)                { panic("unreachable") }
func bf16DecodeAVX2(acc *float32, s *uint16, n int)            { panic("unreachable") }
func bf16EncodeAVX2(d *uint16, acc *float32, n int)            { panic("unreachable") }
func bf16Sum2AVX2(d, a, b *uint16, n int)                      { panic("unreachable") }
func bf16Add2AVX2(acc *float32, a, b *uint16, n int)           { panic("unreachable") }
func bf16AddAVX2(acc *float32, s *uint16, n int)               { panic("unreachable") }
func bf16AddEncAVX2(d *uint16, acc *float32, s *uint16, n int) { panic("unreachable") }
func f16DecodeF16C(acc *float32, s *uint16, n int)             { panic("unreachable") }
func f16EncodeF16C(d *uint16, acc *float32, n int)             { panic("unreachable") }
func f16Sum2F16C(d, a, b *uint16, n int)                       { panic("unreachable") }
func f16Add2F16C(acc *float32, a, b *uint16, n int)            { panic("unreachable") }
func f16AddF16C(acc *float32, s *uint16, n int)                { panic("unreachable") }
func f16AddEncF16C(d *uint16, acc *float32, s *uint16, n int)  { panic("unreachable") }
