//go:build amd64 && !purego

#include "textflag.h"

#include "hmax_amd64.h"

#include "avx512_amd64.h"

// HSUM512 leaves the sum of Z0's sixteen lanes in X0's lowest: halves
// added down to four lanes, then two horizontal additions.
#define HSUM512 \
	VEXTRACTF64X4 $1, Z0, Y1 \
	VADDPS Y1, Y0, Y0 \
	VEXTRACTF128 $1, Y0, X1 \
	VADDPS X1, X0, X0 \
	VHADDPS X0, X0, X0 \
	VHADDPS X0, X0, X0

// func sum32AVX512(x *float32, n int) float32
// Two accumulators, Z0 and Z2, over pairs of full blocks so that
// consecutive additions overlap; the last one or two blocks (the last
// maybe partial, its masked-off lanes loaded as 0) go to Z0.
TEXT ·sum32AVX512(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), BX
	VPXORD Z0, Z0, Z0
	VPXORD Z2, Z2, Z2
	ALL_LANES
	CMPQ BX, $32
	JB sum_loop

sum_pairs:
	VADDPS (SI), Z0, Z0
	VADDPS 64(SI), Z2, Z2
	ADDQ $128, SI
	SUBQ $32, BX
	CMPQ BX, $32
	JAE sum_pairs
	TESTQ BX, BX
	JZ sum_done

sum_loop:
	CMPQ BX, $16
	JAE sum_block
	LAST_BLOCK

sum_block:
	VMOVUPS.Z (SI), K1, Z1
	VADDPS Z1, Z0, Z0
	ADDQ $64, SI
	SUBQ $16, BX
	JHI sum_loop

sum_done:
	VADDPS Z2, Z0, Z0
	HSUM512
	VZEROUPPER
	MOVSS X0, ret+16(FP)
	RET

// func dot32AVX512(x, y *float32, n int) float32
// sum32AVX512's loops with a fused multiply-add of x and y.
TEXT ·dot32AVX512(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ n+16(FP), BX
	VPXORD Z0, Z0, Z0
	VPXORD Z2, Z2, Z2
	ALL_LANES
	CMPQ BX, $32
	JB dot_loop

dot_pairs:
	VMOVUPS (SI), Z1
	VFMADD231PS (DI), Z1, Z0
	VMOVUPS 64(SI), Z3
	VFMADD231PS 64(DI), Z3, Z2
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $32, BX
	CMPQ BX, $32
	JAE dot_pairs
	TESTQ BX, BX
	JZ dot_done

dot_loop:
	CMPQ BX, $16
	JAE dot_block
	LAST_BLOCK

dot_block:
	VMOVUPS.Z (SI), K1, Z1
	VMOVUPS.Z (DI), K1, Z3
	VFMADD231PS Z3, Z1, Z0
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, BX
	JHI dot_loop

dot_done:
	VADDPS Z2, Z0, Z0
	HSUM512
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func lin32AVX512(y, x1, x2 *float32, n int, a, b, c float32)
// Z5, Z6 and Z7 hold a, b and c; the operations are lin32AVX2's.
TEXT ·lin32AVX512(SB), NOSPLIT, $0-44
	MOVQ y+0(FP), DI
	MOVQ x1+8(FP), SI
	MOVQ x2+16(FP), DX
	MOVQ n+24(FP), BX
	VBROADCASTSS a+32(FP), Z5
	VBROADCASTSS b+36(FP), Z6
	VBROADCASTSS c+40(FP), Z7
	ALL_LANES

lin_loop:
	CMPQ BX, $16
	JAE lin_block
	LAST_BLOCK

lin_block:
	VMOVUPS.Z (DX), K1, Z0
	VMOVUPS.Z (SI), K1, Z1
	VFMADD213PS Z7, Z6, Z0     // b x2 + c
	VFMADD231PS Z1, Z5, Z0     // + a x1
	VMOVUPS Z0, K1, (DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	SUBQ $16, BX
	JHI lin_loop
	VZEROUPPER
	RET

// func mulAdd32AVX512(y, p, q, r *float32, n int)
// Z0, Z2 and Z1 hold p, q and r; the operations are mulAdd32AVX2's.
TEXT ·mulAdd32AVX512(SB), NOSPLIT, $0-40
	MOVQ y+0(FP), DI
	MOVQ p+8(FP), SI
	MOVQ q+16(FP), DX
	MOVQ r+24(FP), R8
	MOVQ n+32(FP), BX
	ALL_LANES
	TESTQ R8, R8
	JZ mul_loop

muladd_loop:
	CMPQ BX, $16
	JAE muladd_block
	LAST_BLOCK

muladd_block:
	VMOVUPS.Z (SI), K1, Z0
	VMOVUPS.Z (DX), K1, Z2
	VMOVUPS.Z (R8), K1, Z1
	VFMADD231PS Z2, Z0, Z1     // p q + r
	VMOVUPS Z1, K1, (DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, R8
	ADDQ $64, DI
	SUBQ $16, BX
	JHI muladd_loop
	VZEROUPPER
	RET

mul_loop:
	CMPQ BX, $16
	JAE mul_block
	LAST_BLOCK

mul_block:
	VMOVUPS.Z (SI), K1, Z0
	VMOVUPS.Z (DX), K1, Z2
	VMULPS Z2, Z0, Z0
	VMOVUPS Z0, K1, (DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	SUBQ $16, BX
	JHI mul_loop
	VZEROUPPER
	RET

// func addWiden32AVX512(y *float64, x *float32, n int)
// y += x widened, eight lanes a block, the last block masked.
TEXT ·addWiden32AVX512(SB), NOSPLIT, $0-24
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), BX
	ALL_LANES

widen_loop:
	CMPQ BX, $8
	JAE widen_block
	LAST_BLOCK

widen_block:
	VMOVUPS.Z (SI), K1, Y0
	VCVTPS2PD Y0, Z0
	VMOVUPD.Z (DI), K1, Z1
	VADDPD Z1, Z0, Z0
	VMOVUPD Z0, K1, (DI)
	ADDQ $32, SI
	ADDQ $64, DI
	SUBQ $8, BX
	JHI widen_loop
	VZEROUPPER
	RET

// func scaleWiden32AVX512(x *float32, n int, scale float64)
// x = float32(float64(x) scale), eight lanes a block widened, multiplied
// and narrowed (round to nearest even, as Go converts), the last block
// masked; stored from a ymm register under K1 (AVX512VL), so that no store
// spans the next block.
TEXT ·scaleWiden32AVX512(SB), NOSPLIT, $0-24
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), BX
	VBROADCASTSD scale+16(FP), Z5
	ALL_LANES

scalew_loop:
	CMPQ BX, $8
	JAE scalew_block
	LAST_BLOCK

scalew_block:
	VMOVUPS.Z (SI), K1, Y0
	VCVTPS2PD Y0, Z0
	VMULPD Z5, Z0, Z0
	VCVTPD2PS Z0, Y0
	VMOVUPS Y0, K1, (SI)
	ADDQ $32, SI
	SUBQ $8, BX
	JHI scalew_loop
	VZEROUPPER
	RET

// SUMSQ_ABS_MASK sets Z6 to the mask that clears a float64's sign.
#define SUMSQ_ABS_MASK \
	MOVQ $0x7fffffffffffffff, AX \
	VPBROADCASTQ AX, Z6

// SUMSQ_BLOCK adds Z2's eight float64, times Z5 (scale) and squared, to
// the lane sums in Z0 by fused multiply-adds, and their magnitudes to
// the running maximum in Z1: VMAXPD keeps its second source (Z1) where
// the first is NaN, so NaN elements do not count in the maximum.
#define SUMSQ_BLOCK \
	VPANDQ Z6, Z2, Z3 \
	VMAXPD Z1, Z3, Z1 \
	VMULPD Z5, Z2, Z2 \
	VFMADD231PD Z2, Z2, Z0

// SUMSQ_DONE leaves the largest of Z1's lanes in X1.
#define SUMSQ_DONE \
	VEXTRACTF64X4 $1, Z1, Y3 \
	VMAXPD Y3, Y1, Y1 \
	VEXTRACTF128 $1, Y1, X3 \
	VMAXPD X3, X1, X1 \
	VPERMILPD $1, X1, X3 \
	VMAXPD X3, X1, X1 \
	VZEROUPPER

// func sumSquares32AVX512(x *float32, n int, scale float64) (lanes [8]float64, maxAbs float64)
// lanes[i mod 8] = Σ (x[i]·scale)² (fused, in element order), one block of
// eight elements widened to float64 at a time, the last masked (its lanes
// add +0), and the largest |x[i]|.
TEXT ·sumSquares32AVX512(SB), NOSPLIT, $0-96
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), BX
	VBROADCASTSD scale+16(FP), Z5
	VPXORQ Z0, Z0, Z0
	VPXORQ Z1, Z1, Z1
	SUMSQ_ABS_MASK
	ALL_LANES

sumsq32_loop:
	CMPQ BX, $8
	JAE sumsq32_block
	LAST_BLOCK

sumsq32_block:
	VMOVUPS.Z (SI), K1, Y2
	VCVTPS2PD Y2, Z2
	SUMSQ_BLOCK
	ADDQ $32, SI
	SUBQ $8, BX
	JHI sumsq32_loop
	LEAQ lanes+24(FP), DI
	VMOVUPD Z0, (DI)
	SUMSQ_DONE
	MOVSD X1, maxAbs+88(FP)
	RET

// func sumSquares64AVX512(x *float64, n int, scale float64) (lanes [8]float64, maxAbs float64)
// sumSquares32AVX512 for float64 elements.
TEXT ·sumSquares64AVX512(SB), NOSPLIT, $0-96
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), BX
	VBROADCASTSD scale+16(FP), Z5
	VPXORQ Z0, Z0, Z0
	VPXORQ Z1, Z1, Z1
	SUMSQ_ABS_MASK
	ALL_LANES

sumsq64_loop:
	CMPQ BX, $8
	JAE sumsq64_block
	LAST_BLOCK

sumsq64_block:
	VMOVUPD.Z (SI), K1, Z2
	SUMSQ_BLOCK
	ADDQ $64, SI
	SUBQ $8, BX
	JHI sumsq64_loop
	LEAQ lanes+24(FP), DI
	VMOVUPD Z0, (DI)
	SUMSQ_DONE
	MOVSD X1, maxAbs+88(FP)
	RET

// func max32AVX512(x *float32, n int) float32
// The largest of x, or a NaN if x holds one: VMAXPS over the blocks into
// Z0 (a partial block's masked-off lanes are -Inf, Z3's), each block's NaN
// lanes (unordered compares) gathered into K2.
TEXT ·max32AVX512(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), BX
	MOVL $0xff800000, AX
	VPBROADCASTD AX, Z3
	VMOVAPS Z3, Z0
	KXORW K2, K2, K2
	ALL_LANES

max_loop:
	CMPQ BX, $16
	JAE max_block
	LAST_BLOCK

max_block:
	VMOVAPS Z3, Z2
	VMOVUPS (SI), K1, Z2
	VCMPPS $3, Z2, Z2, K3
	KORW K3, K2, K2
	VMAXPS Z2, Z0, Z0
	ADDQ $64, SI
	SUBQ $16, BX
	JHI max_loop
	KORTESTW K2, K2
	JNZ max_nan
	VEXTRACTF64X4 $1, Z0, Y1
	VMAXPS Y1, Y0, Y0
	HMAX8
	VZEROUPPER
	MOVSS X0, ret+16(FP)
	RET

max_nan:
	VZEROUPPER
	MOVL $0x7fc00000, ret+16(FP)
	RET

// func mulDiff32AVX512(y, p, q *float32, n int, c, scale float32)
// y = p·(q − c)·scale, rounded after each operation as the Go loop
// rounds it: a subtraction and two multiplications, no fused one.
TEXT ·mulDiff32AVX512(SB), NOSPLIT, $0-40
	MOVQ y+0(FP), DI
	MOVQ p+8(FP), SI
	MOVQ q+16(FP), DX
	MOVQ n+24(FP), BX
	VBROADCASTSS c+32(FP), Z5
	VBROADCASTSS scale+36(FP), Z6
	ALL_LANES

muldiff_loop:
	CMPQ BX, $16
	JAE muldiff_block
	LAST_BLOCK

muldiff_block:
	VMOVUPS.Z (DX), K1, Z0
	VSUBPS Z5, Z0, Z0
	VMOVUPS.Z (SI), K1, Z1
	VMULPS Z0, Z1, Z0
	VMULPS Z6, Z0, Z0
	VMOVUPS Z0, K1, (DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	SUBQ $16, BX
	JHI muldiff_loop
	VZEROUPPER
	RET

// normalise32AVX512's and normGradSums32AVX512's first passes fetch the
// rows 1 KiB further (two of the preset's 128 values) as GELU's kernels
// do: a LayerNorm's gradient reads x from L3, where the forward pass left
// it (the preset's LayerNorm ops 1.63 -> 1.56 ms a step at one core,
// per-op timing, medians of 3; 2 KiB ahead the same).

// func normalise32AVX512(x, xhat *float32, n int, eps float64) float32
// Normalise in one call: the sum as sum32AVX512 adds it (Z0 even blocks
// of pairs, Z2 odd ones, the rest into Z0, HSUM512), c = -(sum/n) in
// float32; xhat = 1·x + (0·x + c) as lin32AVX512 computes it, stored,
// and its dot product with itself as dot32AVX512 adds it, in the same
// pass; rstd = 1/sqrt(float64(dot/n) + eps) rounded to float32, returned;
// then xhat = rstd·xhat + (0·xhat + 0) as lin32AVX512. Each value is the
// composed calls' bit for bit, without four calls and their set-ups per
// row (a row of LayerNorm is often 64 values).
TEXT ·normalise32AVX512(SB), NOSPLIT, $0-36
	MOVQ x+0(FP), SI
	MOVQ xhat+8(FP), DI
	MOVQ n+16(FP), BX
	MOVQ SI, R8
	MOVQ DI, R9
	MOVQ BX, R10
	VPXORD Z0, Z0, Z0
	VPXORD Z2, Z2, Z2
	ALL_LANES
	CMPQ BX, $32
	JB norm_sum_loop

norm_sum_pairs:
	PREFETCHT0 1024(SI)
	PREFETCHT0 1088(SI)
	VADDPS (SI), Z0, Z0
	VADDPS 64(SI), Z2, Z2
	ADDQ $128, SI
	SUBQ $32, BX
	CMPQ BX, $32
	JAE norm_sum_pairs
	TESTQ BX, BX
	JZ norm_sum_done

norm_sum_loop:
	CMPQ BX, $16
	JAE norm_sum_block
	LAST_BLOCK

norm_sum_block:
	VMOVUPS.Z (SI), K1, Z1
	VADDPS Z1, Z0, Z0
	ADDQ $64, SI
	SUBQ $16, BX
	JHI norm_sum_loop

norm_sum_done:
	VADDPS Z2, Z0, Z0
	HSUM512
	VCVTSI2SSQ R10, X4, X4      // n as float32
	VDIVSS X4, X0, X0           // sum/n
	MOVL $0x80000000, AX
	VMOVD AX, X1
	VXORPS X1, X0, X0           // c = -(sum/n), which is (-sum)/n
	VBROADCASTSS X0, Z7
	MOVL $0x3f800000, AX
	VPBROADCASTD AX, Z5         // 1
	VPXORD Z6, Z6, Z6           // 0
	MOVQ R8, SI
	MOVQ R9, DI
	MOVQ R10, BX
	VPXORD Z0, Z0, Z0
	VPXORD Z2, Z2, Z2
	ALL_LANES
	CMPQ BX, $32
	JB norm_dot_loop

norm_dot_pairs:
	VMOVUPS (SI), Z1
	VMOVAPS Z1, Z3
	VFMADD213PS Z7, Z6, Z3      // 0 x + c
	VFMADD231PS Z1, Z5, Z3      // + 1 x
	VMOVUPS Z3, (DI)
	VFMADD231PS Z3, Z3, Z0
	VMOVUPS 64(SI), Z1
	VMOVAPS Z1, Z9
	VFMADD213PS Z7, Z6, Z9
	VFMADD231PS Z1, Z5, Z9
	VMOVUPS Z9, 64(DI)
	VFMADD231PS Z9, Z9, Z2
	ADDQ $128, SI
	ADDQ $128, DI
	SUBQ $32, BX
	CMPQ BX, $32
	JAE norm_dot_pairs
	TESTQ BX, BX
	JZ norm_dot_done

norm_dot_loop:
	CMPQ BX, $16
	JAE norm_dot_block
	LAST_BLOCK

norm_dot_block:
	VMOVUPS.Z (SI), K1, Z1
	VMOVAPS Z1, Z3
	VFMADD213PS Z7, Z6, Z3
	VFMADD231PS Z1, Z5, Z3
	VMOVUPS Z3, K1, (DI)
	VMOVAPS.Z Z3, K1, Z3        // the lanes past the row add 0, as dot32's zero loads
	VFMADD231PS Z3, Z3, Z0
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, BX
	JHI norm_dot_loop

norm_dot_done:
	VADDPS Z2, Z0, Z0
	HSUM512
	VDIVSS X4, X0, X0           // dot/n, float32
	VCVTSS2SD X0, X0, X0
	VADDSD eps+24(FP), X0, X0
	VSQRTSD X0, X0, X0
	MOVQ $0x3ff0000000000000, AX
	VMOVQ AX, X1
	VDIVSD X0, X1, X0           // 1/sqrt(...)
	VCVTSD2SS X0, X0, X0
	MOVSS X0, ret+32(FP)
	VBROADCASTSS X0, Z8         // rstd
	MOVQ R9, DI
	MOVQ R10, BX
	ALL_LANES

norm_scale_loop:
	CMPQ BX, $16
	JAE norm_scale_block
	LAST_BLOCK

norm_scale_block:
	VMOVUPS.Z (DI), K1, Z0
	VMOVAPS Z0, Z1
	VFMADD213PS Z6, Z6, Z0      // 0 xhat + 0
	VFMADD231PS Z1, Z8, Z0      // + rstd xhat
	VMOVUPS Z0, K1, (DI)
	ADDQ $64, DI
	SUBQ $16, BX
	JHI norm_scale_loop
	VZEROUPPER
	RET

// func normGradSums32AVX512(dy, gain, xhat *float32, n int) (sum, dot float32)
// NormGrad's first pass: g = dy·gain (mulAdd32AVX512's product), its sum as
// sum32AVX512 adds it (Z0 even blocks of pairs, Z2 odd ones, the rest into
// Z0) and its dot product with xhat as dot32AVX512 adds it (Z4, Z6), so
// both are the composed calls' bits without g stored and read back.
TEXT ·normGradSums32AVX512(SB), NOSPLIT, $0-40
	MOVQ dy+0(FP), SI
	MOVQ gain+8(FP), DX
	MOVQ xhat+16(FP), DI
	MOVQ n+24(FP), BX
	VPXORD Z0, Z0, Z0
	VPXORD Z2, Z2, Z2
	VPXORD Z4, Z4, Z4
	VPXORD Z6, Z6, Z6
	ALL_LANES
	CMPQ BX, $32
	JB ngs_loop

ngs_pairs:
	PREFETCHT0 1024(SI)
	PREFETCHT0 1088(SI)
	VMOVUPS (SI), Z1
	VMULPS (DX), Z1, Z1         // g = dy gain
	VADDPS Z1, Z0, Z0
	VFMADD231PS (DI), Z1, Z4    // + g xhat
	VMOVUPS 64(SI), Z3
	VMULPS 64(DX), Z3, Z3
	VADDPS Z3, Z2, Z2
	VFMADD231PS 64(DI), Z3, Z6
	ADDQ $128, SI
	ADDQ $128, DX
	ADDQ $128, DI
	SUBQ $32, BX
	CMPQ BX, $32
	JAE ngs_pairs
	TESTQ BX, BX
	JZ ngs_done

ngs_loop:
	CMPQ BX, $16
	JAE ngs_block
	LAST_BLOCK

ngs_block:
	VMOVUPS.Z (SI), K1, Z1
	VMOVUPS.Z (DX), K1, Z3
	VMULPS Z3, Z1, Z1
	VADDPS Z1, Z0, Z0
	VMOVUPS.Z (DI), K1, Z3
	VFMADD231PS Z3, Z1, Z4
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	SUBQ $16, BX
	JHI ngs_loop

ngs_done:
	VADDPS Z6, Z4, Z4
	VADDPS Z2, Z0, Z0
	HSUM512
	MOVSS X0, sum+32(FP)
	VMOVAPS Z4, Z0
	HSUM512
	VZEROUPPER
	MOVSS X0, dot+36(FP)
	RET

// ADD_WIDENED adds the sixteen float32 of z (y its low half), widened, to
// the float64 at sums as addWiden32AVX512 adds them, the low eight under
// K1 and the high eight under K2, and moves sums on; it overwrites y.
#define ADD_WIDENED(z, y, sums) \
	VCVTPS2PD y, Z10 \
	VMOVUPD.Z (sums), K1, Z11 \
	VADDPD Z11, Z10, Z10 \
	VMOVUPD Z10, K1, (sums) \
	VEXTRACTF64X4 $1, z, y \
	VCVTPS2PD y, Z10 \
	VMOVUPD.Z 64(sums), K2, Z11 \
	VADDPD Z11, Z10, Z10 \
	VMOVUPD Z10, K2, 64(sums) \
	ADDQ $128, sums

// func normGradApply32AVX512(dx, dy, gain, xhat, addend *float32, sumGain, sumBias *float64, n int, a, b, c float32)
// NormGrad's second pass, a block of sixteen at a time: g = dy·gain again;
// dx = a·g + (b·xhat + c) as lin32AVX512 computes it; with addend, dx =
// 1·dx + (1·addend + 0), lin32AVX512's sum of the two; with sumGain, it
// gets dy·xhat widened added, and sumBias dy, as addWiden32AVX512 adds
// them, eight lanes (K1's low and K2's high half of the block) at a time.
TEXT ·normGradApply32AVX512(SB), NOSPLIT, $0-76
	MOVQ dx+0(FP), DI
	MOVQ dy+8(FP), SI
	MOVQ gain+16(FP), DX
	MOVQ xhat+24(FP), R8
	MOVQ addend+32(FP), R9
	MOVQ sumGain+40(FP), R10
	MOVQ sumBias+48(FP), R11
	MOVQ n+56(FP), BX
	VBROADCASTSS a+64(FP), Z5
	VBROADCASTSS b+68(FP), Z6
	VBROADCASTSS c+72(FP), Z7
	MOVL $0x3f800000, AX
	VPBROADCASTD AX, Z8         // 1
	VPXORD Z9, Z9, Z9           // 0
	ALL_LANES

nga_loop:
	CMPQ BX, $16
	JAE nga_block
	LAST_BLOCK

nga_block:
	VMOVUPS.Z (SI), K1, Z1      // dy
	VMOVUPS.Z (DX), K1, Z2
	VMULPS Z2, Z1, Z2           // g = dy gain
	VMOVUPS.Z (R8), K1, Z3      // xhat
	VMOVAPS Z3, Z0
	VFMADD213PS Z7, Z6, Z0      // b xhat + c
	VFMADD231PS Z2, Z5, Z0      // + a g
	TESTQ R9, R9
	JZ nga_store
	VMOVUPS.Z (R9), K1, Z4
	VFMADD213PS Z9, Z8, Z4      // 1 addend + 0
	VFMADD231PS Z0, Z8, Z4      // + 1 dx
	VMOVAPS Z4, Z0
	ADDQ $64, R9

nga_store:
	VMOVUPS Z0, K1, (DI)
	TESTQ R10, R10
	JZ nga_next
	KSHIFTRW $8, K1, K2
	VMULPS Z3, Z1, Z3           // dy xhat
	ADD_WIDENED(Z3, Y3, R10)
	TESTQ R11, R11
	JZ nga_next
	ADD_WIDENED(Z1, Y1, R11)

nga_next:
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, R8
	ADDQ $64, DI
	SUBQ $16, BX
	JHI nga_loop
	VZEROUPPER
	RET
