// Package reduce holds the elementwise reduction kernels that every CPU
// collective uses: dst[i] = op(srcs[0][i], ..., srcs[n-1][i]) over raw byte
// slices (the collectives move bytes between shared-memory slots).
//
// # Calling convention
//
// Reduce(op, dt, dst, srcs...) takes n >= 1 sources. All slices have the
// same length, a multiple of dt.Size(), and each starts at an address
// aligned for the element type (unsafe.Alignof of the Go type behind dt);
// Reduce checks this and returns an error otherwise. Elements are in the
// machine's byte order. dst may be the very same memory as any number of
// the sources (in-place reduction) and the result is then bit-for-bit the
// one of the non-aliased call; a dst that partly overlaps a source (a
// different start) is an error. Sources may alias each other freely.
//
// One Reduce call over all n inputs of an element range is the reference
// result. Elements are independent, so any split of the element range
// into chunks (reduce-scatter then all-gather, pipelined chunks, ranks
// owning different slices) gives exactly the same bits as a single call
// (up to the payload of NaN results, see below), as long as each element
// range is reduced by ONE call that gets all n inputs in rank order.
// Chaining calls (Reduce(dst, a, b) then Reduce(dst, dst, c)) gives the
// same bits only for the ops and dtypes marked "chain exactly" below; in
// particular it rounds twice for float16/bfloat16 and must not be used by
// collectives that promise identical results.
//
// # Numeric rules
//
// Accumulation is always in rank order: acc = src0, acc = acc op src1, ...,
// acc = acc op src[n-1].
//
//   - int8, int16, int32, int64, uint8: Sum and Prod wrap around (two's
//     complement, like NCCL); Min and Max are exact. All four chain
//     exactly. Avg accumulates the sum in int64 (also for uint8), divides
//     by n truncating toward zero (so -3 and 0 over 2 ranks give -1) and
//     converts the quotient to the dtype. The int64 accumulator wraps on
//     overflow, which only int64 inputs can reach.
//   - float32: accumulate in float32, float64: in float64, each operation
//     rounded to nearest even (no fused multiply-add). Sum, Prod, Min and
//     Max chain exactly when chained in rank order.
//   - float16, bfloat16: decode each input exactly to float32, accumulate
//     in float32 across all n inputs, round once to the half type at the
//     end of the Reduce call (round to nearest, ties to even, overflowing
//     to ±Inf, as tensor.F16FromFloat32 and tensor.BF16FromFloat32 do).
//     Min and Max are exact and chain exactly; Sum, Prod and Avg do not.
//   - Avg of floats is the sum accumulated as above divided once by n:
//     float32 division for float32, float16 and bfloat16 (then one
//     rounding to the half type), float64 division for float64.
//   - Min and Max propagate NaN: if any input is NaN the result is NaN.
//     They order -0 below +0 (min(-0, +0) = -0, max(-0, +0) = +0). Sums and
//     products follow IEEE 754 (Inf - Inf = NaN, ...). The payload and
//     sign of a NaN result are not specified.
//   - bool (any non-zero byte is true; results are always 0 or 1): Sum
//     and Max are logical OR, Prod and Min logical AND; all chain exactly.
//     Avg is not supported.
//   - With n = 1 the result is a copy of the source (bools are
//     normalised to 0 or 1); Avg divides by 1, which changes nothing.
//
// # Avg
//
// Reduce(Avg, dt, dst, srcs...) returns the FINISHED average of its
// len(srcs) inputs; there is no separate finalisation step (no Scale or
// Finish to call afterwards), because only the fused form can keep the
// int64 accumulator of integer averages (uint8 200 and 200 average to 200,
// not to a wrapped sum halved) and round half types once (float16 60000
// three times averages to 60000, where a float16 sum would be Inf). A
// collective reduces each element range with one Reduce(Avg) call over all
// n inputs and is done. Algorithms that must build a sum in several steps
// (a ring across hosts, a hierarchy) reduce with Sum and call Divide(dt,
// dst, n) once at the end; that equals Reduce(Avg) bit for bit for float32
// and float64 chained in rank order, and for integers whose sum fits the
// dtype, but rounds twice for half types. Never call Divide after
// Reduce(Avg): it would divide twice.
//
// # Performance
//
// Nothing is allocated: scratch space is a stack buffer of 1024
// accumulator elements, small enough for L1, and reductions of more than
// two sources (and all of the half types) run block by block through it,
// so every source byte is read from memory once and dst written once.
// Go does not vectorise, so on amd64 the hottest loops (float32 and
// float64 sums, float32 division for Avg, the float16 and bfloat16
// conversions and sums) are AVX2 assembly (F16C for float16), chosen at
// run time by CPUID; everything else, every other architecture and builds
// with -tags purego use pure-Go loops written for bounds-check
// elimination. Both give the same bits except for NaN payloads.
package reduce
