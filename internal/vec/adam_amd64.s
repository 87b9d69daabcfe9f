//go:build amd64 && !purego

#include "textflag.h"

// Four parameters an iteration, in float64, the operations of adam.go's Go
// loop in its order and without fused multiply-adds, so that the results
// are the same bit for bit. adam32 and adam64 differ only in how they load
// and store the parameters and gradients.

// ADAM_SETUP loads the arguments and broadcasts k's constants into Y8-Y15:
// beta1, 1-beta1, beta2, 1-beta2, StepSize, SqrtBC2, Eps, Keep.
#define ADAM_SETUP \
	MOVQ p+0(FP), DI \
	MOVQ grad+8(FP), SI \
	MOVQ m+16(FP), DX \
	MOVQ v+24(FP), R8 \
	MOVQ n+32(FP), CX \
	MOVQ k+40(FP), R9 \
	SHRQ $2, CX \
	VBROADCASTSD 0(R9), Y8 \
	VBROADCASTSD 8(R9), Y9 \
	VBROADCASTSD 16(R9), Y10 \
	VBROADCASTSD 24(R9), Y11 \
	VBROADCASTSD 32(R9), Y12 \
	VBROADCASTSD 40(R9), Y13 \
	VBROADCASTSD 48(R9), Y14 \
	VBROADCASTSD 56(R9), Y15

// ADAM_STEP takes the gradient g in Y0 and the parameter x in Y5, updates
// m at (DX) and v at (R8), and leaves the new parameter in Y5:
// m = beta1 m + (1-beta1) g; v = beta2 v + ((1-beta2) g) g;
// x = x Keep - (StepSize m) / (sqrt(v) / SqrtBC2 + Eps).
#define ADAM_STEP \
	VMOVUPD (DX), Y2 \
	VMULPD Y8, Y2, Y2 \
	VMULPD Y9, Y0, Y1 \
	VADDPD Y1, Y2, Y2 \
	VMOVUPD Y2, (DX) \
	VMOVUPD (R8), Y3 \
	VMULPD Y10, Y3, Y3 \
	VMULPD Y11, Y0, Y4 \
	VMULPD Y0, Y4, Y4 \
	VADDPD Y4, Y3, Y3 \
	VMOVUPD Y3, (R8) \
	VMULPD Y15, Y5, Y5 \
	VMULPD Y12, Y2, Y6 \
	VSQRTPD Y3, Y7 \
	VDIVPD Y13, Y7, Y7 \
	VADDPD Y14, Y7, Y7 \
	VDIVPD Y7, Y6, Y6 \
	VSUBPD Y6, Y5, Y5 \
	ADDQ $32, DX \
	ADDQ $32, R8

// func adam32AVX2(p, grad *float32, m, v *float64, n int, k *[8]float64)
TEXT ·adam32AVX2(SB), NOSPLIT, $0-48
	ADAM_SETUP

adam32_loop:
	VCVTPS2PD (SI), Y0
	VCVTPS2PD (DI), Y5
	ADAM_STEP
	VCVTPD2PSY Y5, X5
	VMOVUPS X5, (DI)
	ADDQ $16, SI
	ADDQ $16, DI
	DECQ CX
	JNZ adam32_loop
	VZEROUPPER
	RET

// func adam64AVX2(p, grad *float64, m, v *float64, n int, k *[8]float64)
TEXT ·adam64AVX2(SB), NOSPLIT, $0-48
	ADAM_SETUP

adam64_loop:
	VMOVUPD (SI), Y0
	VMOVUPD (DI), Y5
	ADAM_STEP
	VMOVUPD Y5, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ adam64_loop
	VZEROUPPER
	RET
