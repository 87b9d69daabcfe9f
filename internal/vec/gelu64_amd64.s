//go:build amd64 && !purego

#include "textflag.h"

#include "gelu64_amd64.h"

// func gelu64AVX2(y, x, dy *float64, n int, k *gelu64Table)
//
// Four lanes a block; each operation rounds as its Go counterpart (see
// gelu64.go), so a fused multiply-add appears only where math.Exp's
// assembly has one. Both branches of tanh are computed in every lane and
// share one division: the small branch's u s P(s) / Q(s), or the large
// one's 2 / (exp(2|u|) + 1), chosen by mask. The large branch is wrong
// where |u| > tanhSat (2^m's bias and shift wrap around beyond 2^1023, and
// u = ±Inf gives NaN); those lanes take ±1, as in math.Tanh. NaN lanes are
// not large and keep the small branch's NaN.
//
// Registers: DI y, SI x, DX dy (nil: GELU), CX blocks left, R9 k; Y0 x;
// Y1 u; Y2 |u|, then 0.5 x and the result; Y3 s = u^2, then 1 + 3a x^2;
// Y4 Q(s), the division's denominator, then t and 1 - t^2; Y5 the
// numerator, the quotient, the large branch's t, then 1 + t; Y6 exp's r
// and result, then 1; Y7 m and 2^m, then the large branch's mask; Y8 exp's
// polynomial, then the saturation mask and u's sign.
TEXT ·gelu64AVX2(SB), NOSPLIT, $0-40
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ dy+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ k+32(FP), R9
	SHRQ $2, CX

loop:
	VMOVUPD (SI), Y0
	VMULPD A(R9), Y0, Y1
	VMULPD Y0, Y1, Y1
	VMULPD Y0, Y1, Y1             // a x^3, as ((a x) x) x
	VADDPD Y0, Y1, Y1
	VMULPD C(R9), Y1, Y1          // u = c (x + a x^3)
	VANDPD ABS(R9), Y1, Y2        // |u|
	VMULPD Y1, Y1, Y3             // s
	VMULPD P0(R9), Y3, Y4
	VADDPD P1(R9), Y4, Y4
	VMULPD Y3, Y4, Y4
	VADDPD P2(R9), Y4, Y4         // P(s)
	VMULPD Y3, Y1, Y5
	VMULPD Y4, Y5, Y5             // u s P(s)
	VADDPD Q0(R9), Y3, Y4
	VMULPD Y3, Y4, Y4
	VADDPD Q1(R9), Y4, Y4
	VMULPD Y3, Y4, Y4
	VADDPD Q2(R9), Y4, Y4         // Q(s)

	VADDPD Y2, Y2, Y6             // v = 2|u|
	VMULPD LOG2E(R9), Y6, Y7
	VROUNDPD $0, Y7, Y7           // m, to nearest even
	VFNMADD231PD LN2U(R9), Y7, Y6
	VFNMADD231PD LN2L(R9), Y7, Y6
	VMULPD SIXTEENTH(R9), Y6, Y6  // r/16
	VMOVUPD E8(R9), Y8
	VFMADD213PD E7(R9), Y6, Y8
	VFMADD213PD E6(R9), Y6, Y8
	VFMADD213PD E5(R9), Y6, Y8
	VFMADD213PD E4(R9), Y6, Y8
	VFMADD213PD E3(R9), Y6, Y8
	VFMADD213PD HALF(R9), Y6, Y8
	VFMADD213PD ONE(R9), Y6, Y8
	VMULPD Y8, Y6, Y6             // e^(r/16) - 1
	VADDPD TWO(R9), Y6, Y8
	VMULPD Y8, Y6, Y6             // e^(r/8) - 1
	VADDPD TWO(R9), Y6, Y8
	VMULPD Y8, Y6, Y6             // e^(r/4) - 1
	VADDPD TWO(R9), Y6, Y8
	VMULPD Y8, Y6, Y6             // e^(r/2) - 1
	VADDPD TWO(R9), Y6, Y8
	VFMADD213PD ONE(R9), Y8, Y6   // e^r
	VADDPD BIAS(R9), Y7, Y7
	VPSLLQ $52, Y7, Y7            // 2^m
	VMULPD Y7, Y6, Y6             // exp(v)
	VADDPD ONE(R9), Y6, Y6        // exp(v) + 1

	VCMPPD $0x1D, SMALL(R9), Y2, Y7 // large: |u| >= 0.625, false for NaN
	VBLENDVPD Y7, TWO(R9), Y5, Y5
	VBLENDVPD Y7, Y6, Y4, Y4
	VDIVPD Y4, Y5, Y5             // u s P(s) / Q(s), or 2 / (exp(v) + 1)
	VADDPD Y5, Y1, Y4             // small: u + u s P(s) / Q(s)
	VMOVUPD ONE(R9), Y6
	VSUBPD Y5, Y6, Y5             // large: 1 - 2 / (exp(v) + 1)
	VCMPPD $0x1E, SAT(R9), Y2, Y8 // |u| > tanhSat
	VBLENDVPD Y8, Y6, Y5, Y5
	VANDPD SIGN(R9), Y1, Y8
	VXORPD Y8, Y5, Y5             // with u's sign
	VBLENDVPD Y7, Y5, Y4, Y4      // t

	VADDPD Y6, Y4, Y5             // 1 + t
	VMULPD HALF(R9), Y0, Y2       // 0.5 x
	TESTQ DX, DX
	JNZ grad
	VMULPD Y5, Y2, Y2
	VMOVUPD Y2, (DI)
	JMP next

grad:
	VMULPD HALF(R9), Y5, Y5       // 0.5 (1 + t)
	VMULPD Y4, Y4, Y4
	VSUBPD Y4, Y6, Y4             // 1 - t^2
	VMULPD Y4, Y2, Y2
	VMULPD C(R9), Y2, Y2          // 0.5 x (1 - t^2) c
	VMULPD A3(R9), Y0, Y3
	VMULPD Y0, Y3, Y3
	VADDPD Y6, Y3, Y3             // 1 + 3a x^2
	VMULPD Y3, Y2, Y2
	VADDPD Y2, Y5, Y5
	VMULPD (DX), Y5, Y5
	VMOVUPD Y5, (DI)
	ADDQ $32, DX

next:
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ loop
	VZEROUPPER
	RET
