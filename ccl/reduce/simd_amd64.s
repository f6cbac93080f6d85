//go:build amd64 && !purego

#include "textflag.h"

// AVX2 (and F16C) versions of the hottest loops. Every function handles a
// count n that is a multiple of 8 elements (4 for float64), possibly 0;
// the Go callers do the tail. A destination may be the same memory as a
// source: each step loads all its operands before it stores.

// func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL eaxArg+0(FP), AX
	MOVL ecxArg+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func xgetbv0() (eax uint32)
TEXT ·xgetbv0(SB), NOSPLIT, $0-4
	MOVL $0, CX
	XGETBV
	MOVL AX, eax+0(FP)
	RET

// func addF32AVX2(d, a, b *float32, n int)
TEXT ·addF32AVX2(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX
	CMPQ CX, $16
	JLT  f32tail

f32loop16:
	VMOVUPS (SI)(AX*4), Y0
	VMOVUPS 32(SI)(AX*4), Y1
	VADDPS  (DX)(AX*4), Y0, Y0
	VADDPS  32(DX)(AX*4), Y1, Y1
	VMOVUPS Y0, (DI)(AX*4)
	VMOVUPS Y1, 32(DI)(AX*4)
	ADDQ    $16, AX
	LEAQ    16(AX), BX
	CMPQ    BX, CX
	JLE     f32loop16

f32tail:
	CMPQ    AX, CX
	JGE     f32done
	VMOVUPS (SI)(AX*4), Y0
	VADDPS  (DX)(AX*4), Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)

f32done:
	VZEROUPPER
	RET

// func addF64AVX2(d, a, b *float64, n int)
TEXT ·addF64AVX2(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX
	CMPQ CX, $8
	JLT  f64tail

f64loop8:
	VMOVUPD (SI)(AX*8), Y0
	VMOVUPD 32(SI)(AX*8), Y1
	VADDPD  (DX)(AX*8), Y0, Y0
	VADDPD  32(DX)(AX*8), Y1, Y1
	VMOVUPD Y0, (DI)(AX*8)
	VMOVUPD Y1, 32(DI)(AX*8)
	ADDQ    $8, AX
	LEAQ    8(AX), BX
	CMPQ    BX, CX
	JLE     f64loop8

f64tail:
	CMPQ    AX, CX
	JGE     f64done
	VMOVUPD (SI)(AX*8), Y0
	VADDPD  (DX)(AX*8), Y0, Y0
	VMOVUPD Y0, (DI)(AX*8)

f64done:
	VZEROUPPER
	RET

// func divF32AVX2(d *float32, n int, div float32)
TEXT ·divF32AVX2(SB), NOSPLIT, $0-20
	MOVQ         d+0(FP), DI
	MOVQ         n+8(FP), CX
	VBROADCASTSS div+16(FP), Y15
	XORQ         AX, AX

divloop:
	CMPQ    AX, CX
	JGE     divdone
	VMOVUPS (DI)(AX*4), Y0
	VDIVPS  Y15, Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     divloop

divdone:
	VZEROUPPER
	RET

// bfloat16 helpers. BF16_CONSTS loads Y15 = 1, Y14 = 0x7fff, Y13 = 0x40
// in every dword lane.
#define BF16_CONSTS \
	MOVL         $1, BX          \
	VMOVD        BX, X15         \
	VPBROADCASTD X15, Y15        \
	MOVL         $0x7fff, BX     \
	VMOVD        BX, X14         \
	VPBROADCASTD X14, Y14        \
	MOVL         $0x40, BX       \
	VMOVD        BX, X13         \
	VPBROADCASTD X13, Y13

// BF16_DEC loads 8 bfloat16 at mem into the float32 lanes of y.
#define BF16_DEC(mem, y) \
	VPMOVZXWD mem, y     \
	VPSLLD    $16, y, y

// BF16_ENC rounds the 8 float32 in Y0 to bfloat16 (nearest even; a NaN
// becomes its top half with the quiet bit set) and stores them at mem.
// Clobbers Y1, Y2, Y3.
#define BF16_ENC(mem) \
	VPSRLD       $16, Y0, Y1      \
	VPAND        Y15, Y1, Y2      \
	VPADDD       Y14, Y0, Y3      \
	VPADDD       Y2, Y3, Y3       \
	VPSRLD       $16, Y3, Y3      \
	VPOR         Y13, Y1, Y1      \
	VCMPPS       $3, Y0, Y0, Y2   \
	VPBLENDVB    Y2, Y1, Y3, Y3   \
	VEXTRACTI128 $1, Y3, X1       \
	VPACKUSDW    X1, X3, X3       \
	VMOVDQU      X3, mem

// func bf16DecodeAVX2(acc *float32, s *uint16, n int)
TEXT ·bf16DecodeAVX2(SB), NOSPLIT, $0-24
	MOVQ acc+0(FP), DI
	MOVQ s+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX

bdecloop:
	CMPQ    AX, CX
	JGE     bdecdone
	BF16_DEC((SI)(AX*2), Y0)
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     bdecloop

bdecdone:
	VZEROUPPER
	RET

// func bf16EncodeAVX2(d *uint16, acc *float32, n int)
TEXT ·bf16EncodeAVX2(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ acc+8(FP), SI
	MOVQ n+16(FP), CX
	BF16_CONSTS
	XORQ AX, AX

benc:
	CMPQ    AX, CX
	JGE     bencdone
	VMOVUPS (SI)(AX*4), Y0
	BF16_ENC((DI)(AX*2))
	ADDQ    $8, AX
	JMP     benc

bencdone:
	VZEROUPPER
	RET

// BF16_RND rounds the 8 float32 in yin to bfloat16, leaving each result in
// the low half of a dword of yout. Clobbers Y1, Y2.
#define BF16_RND(yin, yout) \
	VPSRLD    $16, yin, Y1      \
	VPAND     Y15, Y1, Y2       \
	VPADDD    Y14, yin, yout    \
	VPADDD    Y2, yout, yout    \
	VPSRLD    $16, yout, yout   \
	VPOR      Y13, Y1, Y1       \
	VCMPPS    $3, yin, yin, Y2  \
	VPBLENDVB Y2, Y1, yout, yout

// func bf16Sum2AVX2(d, a, b *uint16, n int)
TEXT ·bf16Sum2AVX2(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	BF16_CONSTS
	XORQ AX, AX
	CMPQ CX, $16
	JLT  bsum2tail

	// Unpacking the words of a 32-byte load against zero gives their
	// float32 values, in the order 0-3, 8-11 (low) and 4-7, 12-15 (high);
	// packing the rounded low and high results restores the order.
	VPXOR Y12, Y12, Y12

bsum2loop16:
	VMOVDQU    (SI)(AX*2), Y8
	VMOVDQU    (DX)(AX*2), Y9
	VPUNPCKLWD Y8, Y12, Y0
	VPUNPCKLWD Y9, Y12, Y4
	VPUNPCKHWD Y8, Y12, Y5
	VPUNPCKHWD Y9, Y12, Y6
	VADDPS     Y4, Y0, Y0
	VADDPS     Y6, Y5, Y5
	BF16_RND(Y0, Y3)
	BF16_RND(Y5, Y7)
	VPACKUSDW  Y7, Y3, Y3
	VMOVDQU    Y3, (DI)(AX*2)
	ADDQ       $16, AX
	LEAQ       16(AX), BX
	CMPQ       BX, CX
	JLE        bsum2loop16

bsum2tail:
	CMPQ   AX, CX
	JGE    bsum2done
	BF16_DEC((SI)(AX*2), Y0)
	BF16_DEC((DX)(AX*2), Y4)
	VADDPS Y4, Y0, Y0
	BF16_ENC((DI)(AX*2))

bsum2done:
	VZEROUPPER
	RET

// func bf16Add2AVX2(acc *float32, a, b *uint16, n int)
TEXT ·bf16Add2AVX2(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX

badd2:
	CMPQ    AX, CX
	JGE     badd2done
	BF16_DEC((SI)(AX*2), Y0)
	BF16_DEC((DX)(AX*2), Y4)
	VADDPS  Y4, Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     badd2

badd2done:
	VZEROUPPER
	RET

// func bf16AddAVX2(acc *float32, s *uint16, n int)
TEXT ·bf16AddAVX2(SB), NOSPLIT, $0-24
	MOVQ acc+0(FP), DI
	MOVQ s+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX

badd:
	CMPQ    AX, CX
	JGE     badddone
	BF16_DEC((SI)(AX*2), Y4)
	VMOVUPS (DI)(AX*4), Y0
	VADDPS  Y4, Y0, Y0
	VMOVUPS Y0, (DI)(AX*4)
	ADDQ    $8, AX
	JMP     badd

badddone:
	VZEROUPPER
	RET

// func bf16AddEncAVX2(d *uint16, acc *float32, s *uint16, n int)
TEXT ·bf16AddEncAVX2(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), DI
	MOVQ acc+8(FP), SI
	MOVQ s+16(FP), DX
	MOVQ n+24(FP), CX
	BF16_CONSTS
	XORQ AX, AX

baddenc:
	CMPQ    AX, CX
	JGE     baddencdone
	BF16_DEC((DX)(AX*2), Y4)
	VMOVUPS (SI)(AX*4), Y0
	VADDPS  Y4, Y0, Y0
	BF16_ENC((DI)(AX*2))
	ADDQ    $8, AX
	JMP     baddenc

baddencdone:
	VZEROUPPER
	RET

// float16 via F16C: VCVTPH2PS is exact, VCVTPS2PH with immediate 0 rounds
// to nearest even; NaNs come out quiet with the top payload bits, as in
// package tensor.

// func f16DecodeF16C(acc *float32, s *uint16, n int)
TEXT ·f16DecodeF16C(SB), NOSPLIT, $0-24
	MOVQ acc+0(FP), DI
	MOVQ s+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX

hdec:
	CMPQ      AX, CX
	JGE       hdecdone
	VCVTPH2PS (SI)(AX*2), Y0
	VMOVUPS   Y0, (DI)(AX*4)
	ADDQ      $8, AX
	JMP       hdec

hdecdone:
	VZEROUPPER
	RET

// func f16EncodeF16C(d *uint16, acc *float32, n int)
TEXT ·f16EncodeF16C(SB), NOSPLIT, $0-24
	MOVQ d+0(FP), DI
	MOVQ acc+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX

henc:
	CMPQ      AX, CX
	JGE       hencdone
	VMOVUPS   (SI)(AX*4), Y0
	VCVTPS2PH $0, Y0, (DI)(AX*2)
	ADDQ      $8, AX
	JMP       henc

hencdone:
	VZEROUPPER
	RET

// func f16Sum2F16C(d, a, b *uint16, n int)
TEXT ·f16Sum2F16C(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX

hsum2:
	CMPQ      AX, CX
	JGE       hsum2done
	VCVTPH2PS (SI)(AX*2), Y0
	VCVTPH2PS (DX)(AX*2), Y1
	VADDPS    Y1, Y0, Y0
	VCVTPS2PH $0, Y0, (DI)(AX*2)
	ADDQ      $8, AX
	JMP       hsum2

hsum2done:
	VZEROUPPER
	RET

// func f16Add2F16C(acc *float32, a, b *uint16, n int)
TEXT ·f16Add2F16C(SB), NOSPLIT, $0-32
	MOVQ acc+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX

hadd2:
	CMPQ      AX, CX
	JGE       hadd2done
	VCVTPH2PS (SI)(AX*2), Y0
	VCVTPH2PS (DX)(AX*2), Y1
	VADDPS    Y1, Y0, Y0
	VMOVUPS   Y0, (DI)(AX*4)
	ADDQ      $8, AX
	JMP       hadd2

hadd2done:
	VZEROUPPER
	RET

// func f16AddF16C(acc *float32, s *uint16, n int)
TEXT ·f16AddF16C(SB), NOSPLIT, $0-24
	MOVQ acc+0(FP), DI
	MOVQ s+8(FP), SI
	MOVQ n+16(FP), CX
	XORQ AX, AX

hadd:
	CMPQ      AX, CX
	JGE       hadddone
	VCVTPH2PS (SI)(AX*2), Y1
	VMOVUPS   (DI)(AX*4), Y0
	VADDPS    Y1, Y0, Y0
	VMOVUPS   Y0, (DI)(AX*4)
	ADDQ      $8, AX
	JMP       hadd

hadddone:
	VZEROUPPER
	RET

// func f16AddEncF16C(d *uint16, acc *float32, s *uint16, n int)
TEXT ·f16AddEncF16C(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), DI
	MOVQ acc+8(FP), SI
	MOVQ s+16(FP), DX
	MOVQ n+24(FP), CX
	XORQ AX, AX

haddenc:
	CMPQ      AX, CX
	JGE       haddencdone
	VCVTPH2PS (DX)(AX*2), Y1
	VMOVUPS   (SI)(AX*4), Y0
	VADDPS    Y1, Y0, Y0
	VCVTPS2PH $0, Y0, (DI)(AX*2)
	ADDQ      $8, AX
	JMP       haddenc

haddencdone:
	VZEROUPPER
	RET
