//go:build amd64 && !purego

#include "textflag.h"

#include "hmax_amd64.h"

// HSUM leaves the sum of Y0's eight lanes in X0's lowest.
#define HSUM \
	VEXTRACTF128 $1, Y0, X1 \
	VADDPS X1, X0, X0 \
	VHADDPS X0, X0, X0 \
	VHADDPS X0, X0, X0

// func sum32AVX2(x *float32, n int) float32
// Two accumulators when n allows, so that consecutive additions overlap.
TEXT ·sum32AVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	SHRQ $3, CX
	VXORPS Y0, Y0, Y0
	VXORPS Y2, Y2, Y2

sum_loop:
	VADDPS (SI), Y0, Y0
	ADDQ $32, SI
	DECQ CX
	JZ sum_done
	VADDPS (SI), Y2, Y2
	ADDQ $32, SI
	DECQ CX
	JNZ sum_loop

sum_done:
	VADDPS Y2, Y0, Y0
	HSUM
	VZEROUPPER
	MOVSS X0, ret+16(FP)
	RET

// func dot32AVX2(x, y *float32, n int) float32
TEXT ·dot32AVX2(SB), NOSPLIT, $0-28
	MOVQ x+0(FP), SI
	MOVQ y+8(FP), DI
	MOVQ n+16(FP), CX
	SHRQ $3, CX
	VXORPS Y0, Y0, Y0
	VXORPS Y2, Y2, Y2

dot_loop:
	VMOVUPS (SI), Y1
	VFMADD231PS (DI), Y1, Y0
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JZ dot_done
	VMOVUPS (SI), Y1
	VFMADD231PS (DI), Y1, Y2
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ dot_loop

dot_done:
	VADDPS Y2, Y0, Y0
	HSUM
	VZEROUPPER
	MOVSS X0, ret+24(FP)
	RET

// func lin32AVX2(y, x1, x2 *float32, n int, a, b, c float32)
TEXT ·lin32AVX2(SB), NOSPLIT, $0-44
	MOVQ y+0(FP), DI
	MOVQ x1+8(FP), SI
	MOVQ x2+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS a+32(FP), Y5
	VBROADCASTSS b+36(FP), Y6
	VBROADCASTSS c+40(FP), Y7
	SHRQ $3, CX

lin_loop:
	VMOVUPS (DX), Y0
	VFMADD213PS Y7, Y6, Y0     // b x2 + c
	VFMADD231PS (SI), Y5, Y0   // + a x1
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNZ lin_loop
	VZEROUPPER
	RET

// func mulAdd32AVX2(y, p, q, r *float32, n int)
TEXT ·mulAdd32AVX2(SB), NOSPLIT, $0-40
	MOVQ y+0(FP), DI
	MOVQ p+8(FP), SI
	MOVQ q+16(FP), DX
	MOVQ r+24(FP), R8
	MOVQ n+32(FP), CX
	SHRQ $3, CX
	TESTQ R8, R8
	JZ mul_loop

muladd_loop:
	VMOVUPS (SI), Y0
	VMOVUPS (R8), Y1
	VFMADD231PS (DX), Y0, Y1   // p q + r
	VMOVUPS Y1, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, R8
	ADDQ $32, DI
	DECQ CX
	JNZ muladd_loop
	VZEROUPPER
	RET

mul_loop:
	VMOVUPS (SI), Y0
	VMULPS (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNZ mul_loop
	VZEROUPPER
	RET

// func addWiden32AVX2(y *float64, x *float32, n int)
// y += x widened, eight elements an iteration.
TEXT ·addWiden32AVX2(SB), NOSPLIT, $0-24
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $3, CX

widen_loop:
	VCVTPS2PD (SI), Y0
	VCVTPS2PD 16(SI), Y1
	VADDPD (DI), Y0, Y0
	VADDPD 32(DI), Y1, Y1
	VMOVUPD Y0, (DI)
	VMOVUPD Y1, 32(DI)
	ADDQ $32, SI
	ADDQ $64, DI
	DECQ CX
	JNZ widen_loop
	VZEROUPPER
	RET

// SUMSQ2_ABS_MASK sets Y6 to the mask that clears a float64's sign.
#define SUMSQ2_ABS_MASK \
	MOVQ $0x7fffffffffffffff, AX \
	MOVQ AX, X6 \
	VPBROADCASTQ X6, Y6

// SUMSQ2_HALF adds the four float64 of reg, times Y5 (scale) and
// squared, to the lane sums in acc by fused multiply-adds, and their
// magnitudes to the running maximum in Y1 (VMAXPD keeps its second
// source, Y1, where the first is NaN).
#define SUMSQ2_HALF(reg, acc) \
	VANDPD Y6, reg, Y4 \
	VMAXPD Y1, Y4, Y1 \
	VMULPD Y5, reg, reg \
	VFMADD231PD reg, reg, acc

// SUMSQ2_DONE leaves the largest of Y1's lanes in X1.
#define SUMSQ2_DONE \
	VEXTRACTF128 $1, Y1, X3 \
	VMAXPD X3, X1, X1 \
	VPERMILPD $1, X1, X3 \
	VMAXPD X3, X1, X1 \
	VZEROUPPER

// func sumSquares32AVX2(x *float32, n int, scale float64) (lanes [8]float64, maxAbs float64)
// sumSquares32AVX512 on ymm registers, n a positive multiple of 8: lanes
// 0–3 in Y0, 4–7 in Y7.
TEXT ·sumSquares32AVX2(SB), NOSPLIT, $0-96
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSD scale+16(FP), Y5
	VXORPD Y0, Y0, Y0
	VXORPD Y7, Y7, Y7
	VXORPD Y1, Y1, Y1
	SUMSQ2_ABS_MASK
	SHRQ $3, CX

sumsq32avx2_loop:
	VCVTPS2PD (SI), Y2
	VCVTPS2PD 16(SI), Y3
	SUMSQ2_HALF(Y2, Y0)
	SUMSQ2_HALF(Y3, Y7)
	ADDQ $32, SI
	DECQ CX
	JNZ sumsq32avx2_loop
	LEAQ lanes+24(FP), DI
	VMOVUPD Y0, (DI)
	VMOVUPD Y7, 32(DI)
	SUMSQ2_DONE
	MOVSD X1, maxAbs+88(FP)
	RET

// func sumSquares64AVX2(x *float64, n int, scale float64) (lanes [8]float64, maxAbs float64)
// sumSquares32AVX2 for float64 elements, n a positive multiple of 4: a
// last half block goes to lanes 0–3.
TEXT ·sumSquares64AVX2(SB), NOSPLIT, $0-96
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	VBROADCASTSD scale+16(FP), Y5
	VXORPD Y0, Y0, Y0
	VXORPD Y7, Y7, Y7
	VXORPD Y1, Y1, Y1
	SUMSQ2_ABS_MASK

sumsq64avx2_loop:
	CMPQ CX, $8
	JB sumsq64avx2_half
	VMOVUPD (SI), Y2
	VMOVUPD 32(SI), Y3
	SUMSQ2_HALF(Y2, Y0)
	SUMSQ2_HALF(Y3, Y7)
	ADDQ $64, SI
	SUBQ $8, CX
	JMP sumsq64avx2_loop

sumsq64avx2_half:
	TESTQ CX, CX
	JZ sumsq64avx2_done
	VMOVUPD (SI), Y2
	SUMSQ2_HALF(Y2, Y0)

sumsq64avx2_done:
	LEAQ lanes+24(FP), DI
	VMOVUPD Y0, (DI)
	VMOVUPD Y7, 32(DI)
	SUMSQ2_DONE
	MOVSD X1, maxAbs+88(FP)
	RET

// func max32AVX2(x *float32, n int) float32
// max32AVX512 on ymm registers, n a positive multiple of 8: each block's
// NaN lanes (unordered compares) ORed into Y4.
TEXT ·max32AVX2(SB), NOSPLIT, $0-20
	MOVQ x+0(FP), SI
	MOVQ n+8(FP), CX
	SHRQ $3, CX
	VMOVUPS (SI), Y0
	VCMPPS $3, Y0, Y0, Y4
	ADDQ $32, SI
	DECQ CX
	JZ max2_done

max2_loop:
	VMOVUPS (SI), Y2
	VCMPPS $3, Y2, Y2, Y3
	VORPS Y3, Y4, Y4
	VMAXPS Y2, Y0, Y0
	ADDQ $32, SI
	DECQ CX
	JNZ max2_loop

max2_done:
	VMOVMSKPS Y4, AX
	TESTL AX, AX
	JNZ max2_nan
	HMAX8
	VZEROUPPER
	MOVSS X0, ret+16(FP)
	RET

max2_nan:
	VZEROUPPER
	MOVL $0x7fc00000, ret+16(FP)
	RET

// func mulDiff32AVX2(y, p, q *float32, n int, c, scale float32)
// mulDiff32AVX512 on ymm registers, n a positive multiple of 8.
TEXT ·mulDiff32AVX2(SB), NOSPLIT, $0-40
	MOVQ y+0(FP), DI
	MOVQ p+8(FP), SI
	MOVQ q+16(FP), DX
	MOVQ n+24(FP), CX
	VBROADCASTSS c+32(FP), Y5
	VBROADCASTSS scale+36(FP), Y6
	SHRQ $3, CX

muldiff2_loop:
	VMOVUPS (DX), Y0
	VSUBPS Y5, Y0, Y0
	VMULPS (SI), Y0, Y0
	VMULPS Y6, Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNZ muldiff2_loop
	VZEROUPPER
	RET
