//go:build amd64 && !purego

#include "textflag.h"

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
