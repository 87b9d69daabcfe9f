//go:build amd64 && !purego

#include "textflag.h"

// Four parameters an iteration, in float64, the operations of adam.go's Go
// loop in its order and without fused multiply-adds, so that the results
// are the same bit for bit. Y8-Y15 hold the constants of k.

// func adam32(p, grad *float32, m, v *float64, n int, k *[8]float64)
TEXT ·adam32(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ m+16(FP), DX
	MOVQ v+24(FP), R8
	MOVQ n+32(FP), CX
	MOVQ k+40(FP), R9
	SHRQ $2, CX
	VBROADCASTSD 0(R9), Y8
	VBROADCASTSD 8(R9), Y9
	VBROADCASTSD 16(R9), Y10
	VBROADCASTSD 24(R9), Y11
	VBROADCASTSD 32(R9), Y12
	VBROADCASTSD 40(R9), Y13
	VBROADCASTSD 48(R9), Y14
	VBROADCASTSD 56(R9), Y15
adam32_loop:
	VCVTPS2PD (SI), Y0            // g
	VMOVUPD (DX), Y2
	VMULPD Y8, Y2, Y2         // beta1 m
	VMULPD Y9, Y0, Y1         // (1 - beta1) g
	VADDPD Y1, Y2, Y2         // m
	VMOVUPD Y2, (DX)
	VMOVUPD (R8), Y3
	VMULPD Y10, Y3, Y3        // beta2 v
	VMULPD Y11, Y0, Y4        // (1 - beta2) g
	VMULPD Y0, Y4, Y4         // ... g
	VADDPD Y4, Y3, Y3         // v
	VMOVUPD Y3, (R8)
	VCVTPS2PD (DI), Y5            // x
	VMULPD Y15, Y5, Y5        // x Keep
	VMULPD Y12, Y2, Y6        // StepSize m
	VSQRTPD Y3, Y7
	VDIVPD Y13, Y7, Y7        // sqrt(v) / SqrtBC2
	VADDPD Y14, Y7, Y7        // + Eps
	VDIVPD Y7, Y6, Y6
	VSUBPD Y6, Y5, Y5
	VCVTPD2PSY Y5, X5
	VMOVUPS X5, (DI)
	ADDQ $16, SI
	ADDQ $16, DI
	ADDQ $32, DX
	ADDQ $32, R8
	DECQ CX
	JNZ adam32_loop
	VZEROUPPER
	RET

// func adam64(p, grad *float64, m, v *float64, n int, k *[8]float64)
TEXT ·adam64(SB), NOSPLIT, $0-48
	MOVQ p+0(FP), DI
	MOVQ grad+8(FP), SI
	MOVQ m+16(FP), DX
	MOVQ v+24(FP), R8
	MOVQ n+32(FP), CX
	MOVQ k+40(FP), R9
	SHRQ $2, CX
	VBROADCASTSD 0(R9), Y8
	VBROADCASTSD 8(R9), Y9
	VBROADCASTSD 16(R9), Y10
	VBROADCASTSD 24(R9), Y11
	VBROADCASTSD 32(R9), Y12
	VBROADCASTSD 40(R9), Y13
	VBROADCASTSD 48(R9), Y14
	VBROADCASTSD 56(R9), Y15
adam64_loop:
	VMOVUPD (SI), Y0            // g
	VMOVUPD (DX), Y2
	VMULPD Y8, Y2, Y2         // beta1 m
	VMULPD Y9, Y0, Y1         // (1 - beta1) g
	VADDPD Y1, Y2, Y2         // m
	VMOVUPD Y2, (DX)
	VMOVUPD (R8), Y3
	VMULPD Y10, Y3, Y3        // beta2 v
	VMULPD Y11, Y0, Y4        // (1 - beta2) g
	VMULPD Y0, Y4, Y4         // ... g
	VADDPD Y4, Y3, Y3         // v
	VMOVUPD Y3, (R8)
	VMOVUPD (DI), Y5            // x
	VMULPD Y15, Y5, Y5        // x Keep
	VMULPD Y12, Y2, Y6        // StepSize m
	VSQRTPD Y3, Y7
	VDIVPD Y13, Y7, Y7        // sqrt(v) / SqrtBC2
	VADDPD Y14, Y7, Y7        // + Eps
	VDIVPD Y7, Y6, Y6
	VSUBPD Y6, Y5, Y5
	VMOVUPD Y5, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	ADDQ $32, DX
	ADDQ $32, R8
	DECQ CX
	JNZ adam64_loop
	VZEROUPPER
	RET
