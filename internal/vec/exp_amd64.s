//go:build amd64 && !purego

#include "textflag.h"

#include "exp_amd64.h"

// func expShiftSumAVX2(y, x *float32, n int, shift float32, k *[13][8]float32) float32
//
// exp(v) = 2^m e^r with m = round(v log2 e) and r = v - m ln 2, e^r by the
// polynomial, 2^m built in the exponent bits. The clamps keep 2^m a normal
// float32; VMINPS and VMAXPS take v as their second source so that a NaN
// passes through them, and lanes with v < lo are set to 0 at the end.
TEXT ·expShiftSumAVX2(SB), NOSPLIT, $0-44
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	VBROADCASTSS shift+24(FP), Y15
	MOVQ k+32(FP), R9
	SHRQ $3, CX
	VXORPS Y14, Y14, Y14  // the sum, eight lanes
	VMOVUPS HI(R9), Y12
	VMOVUPS LO(R9), Y13

loop:
	VMOVUPS (SI), Y0
	VSUBPS Y15, Y0, Y0            // v = x - shift
	VCMPPS $0x11, Y13, Y0, Y1     // v < lo (false for NaN)
	VMINPS Y0, Y12, Y0
	VMAXPS Y0, Y13, Y0
	VMULPS LOG2E(R9), Y0, Y2
	VROUNDPS $0, Y2, Y2           // m
	VFNMADD231PS LN2HI(R9), Y2, Y0
	VFNMADD231PS LN2LO(R9), Y2, Y0 // r
	VMULPS Y0, Y0, Y3             // r^2
	VMOVUPS P0(R9), Y4
	VFMADD213PS P1(R9), Y0, Y4
	VFMADD213PS P2(R9), Y0, Y4
	VFMADD213PS P3(R9), Y0, Y4
	VFMADD213PS P4(R9), Y0, Y4
	VFMADD213PS P5(R9), Y0, Y4
	VFMADD213PS Y0, Y3, Y4        // r^2 p(r) + r
	VADDPS ONE(R9), Y4, Y4        // e^r
	VCVTPS2DQ Y2, Y2
	VPADDD BIAS(R9), Y2, Y2
	VPSLLD $23, Y2, Y2            // 2^m
	VMULPS Y2, Y4, Y4
	VANDNPS Y4, Y1, Y4            // 0 where v < lo
	VMOVUPS Y4, (DI)
	VADDPS Y4, Y14, Y14
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ loop

	VEXTRACTF128 $1, Y14, X0
	VADDPS X14, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+40(FP)
	RET
