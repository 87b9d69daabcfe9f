//go:build amd64 && !purego

#include "textflag.h"

#include "gelu64_amd64.h"
#include "avx512_amd64.h"

// func gelu64AVX512(y, x, dy *float64, n int, k *gelu64Table)
//
// gelu64AVX2 on 8 lanes, the last block under the mask K1: the same
// operations in the same order, so the same results bit for bit. The
// constants are broadcast from memory operands as AVX2 reads them whole,
// 1 is kept in Z16; 2^m is VSCALEFPD's exact scaling instead of the bias
// and shift, and the masks are K2 (large branch) and K3 (saturated).
// VSCALEFPD overflows to +Inf, and gives +Inf for NaN times 2^+Inf, so
// that t would be ±1 beyond tanhSat without K3 too (the tests cannot tell
// the two apart); K3 keeps the kernel from leaning on those rules.
//
// Registers: DI y, SI x, DX dy (nil: GELU), BX elements left, R9 k; Z0 x;
// Z1 u; Z2 |u|, then 0.5 x and the result; Z3 s = u^2, then 1 + 3a x^2
// and dy; Z4 Q(s), the division's denominator, then t and 1 - t^2; Z5 the
// numerator, the quotient, the large branch's t, then 1 + t; Z6 exp's r
// and result; Z7 m; Z8 exp's polynomial, then u's sign.
TEXT ·gelu64AVX512(SB), NOSPLIT, $0-40
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ dy+16(FP), DX
	MOVQ n+24(FP), BX
	MOVQ k+32(FP), R9
	VBROADCASTSD ONE(R9), Z16
	ALL_LANES

loop:
	CMPQ BX, $8
	JAE block
	LAST_BLOCK

block:
	VMOVUPD.Z (SI), K1, Z0
	VMULPD.BCST A(R9), Z0, Z1
	VMULPD Z0, Z1, Z1
	VMULPD Z0, Z1, Z1                  // a x^3, as ((a x) x) x
	VADDPD Z0, Z1, Z1
	VMULPD.BCST C(R9), Z1, Z1          // u = c (x + a x^3)
	VPANDQ.BCST ABS(R9), Z1, Z2        // |u|
	VMULPD Z1, Z1, Z3                  // s
	VMULPD.BCST P0(R9), Z3, Z4
	VADDPD.BCST P1(R9), Z4, Z4
	VMULPD Z3, Z4, Z4
	VADDPD.BCST P2(R9), Z4, Z4         // P(s)
	VMULPD Z3, Z1, Z5
	VMULPD Z4, Z5, Z5                  // u s P(s)
	VADDPD.BCST Q0(R9), Z3, Z4
	VMULPD Z3, Z4, Z4
	VADDPD.BCST Q1(R9), Z4, Z4
	VMULPD Z3, Z4, Z4
	VADDPD.BCST Q2(R9), Z4, Z4         // Q(s)

	VADDPD Z2, Z2, Z6                  // v = 2|u|
	VMULPD.BCST LOG2E(R9), Z6, Z7
	VRNDSCALEPD $0, Z7, Z7             // m, to nearest even
	VFNMADD231PD.BCST LN2U(R9), Z7, Z6
	VFNMADD231PD.BCST LN2L(R9), Z7, Z6
	VMULPD.BCST SIXTEENTH(R9), Z6, Z6  // r/16
	VBROADCASTSD E8(R9), Z8
	VFMADD213PD.BCST E7(R9), Z6, Z8
	VFMADD213PD.BCST E6(R9), Z6, Z8
	VFMADD213PD.BCST E5(R9), Z6, Z8
	VFMADD213PD.BCST E4(R9), Z6, Z8
	VFMADD213PD.BCST E3(R9), Z6, Z8
	VFMADD213PD.BCST HALF(R9), Z6, Z8
	VFMADD213PD Z16, Z6, Z8
	VMULPD Z8, Z6, Z6                  // e^(r/16) - 1
	VADDPD.BCST TWO(R9), Z6, Z8
	VMULPD Z8, Z6, Z6                  // e^(r/8) - 1
	VADDPD.BCST TWO(R9), Z6, Z8
	VMULPD Z8, Z6, Z6                  // e^(r/4) - 1
	VADDPD.BCST TWO(R9), Z6, Z8
	VMULPD Z8, Z6, Z6                  // e^(r/2) - 1
	VADDPD.BCST TWO(R9), Z6, Z8
	VFMADD213PD Z16, Z8, Z6            // e^r
	VSCALEFPD Z7, Z6, Z6               // exp(v) = e^r 2^m
	VADDPD Z16, Z6, Z6                 // exp(v) + 1

	VCMPPD.BCST $0x1D, SMALL(R9), Z2, K2 // large: |u| >= 0.625, false for NaN
	VBLENDMPD.BCST TWO(R9), Z5, K2, Z5
	VBLENDMPD Z6, Z4, K2, Z4
	VDIVPD Z4, Z5, Z5                  // u s P(s) / Q(s), or 2 / (exp(v) + 1)
	VADDPD Z5, Z1, Z4                  // small: u + u s P(s) / Q(s)
	VSUBPD Z5, Z16, Z5                 // large: 1 - 2 / (exp(v) + 1)
	VCMPPD.BCST $0x1E, SAT(R9), Z2, K3 // |u| > tanhSat
	VMOVAPD Z16, K3, Z5
	VPANDQ.BCST SIGN(R9), Z1, Z8
	VPXORQ Z8, Z5, Z5                  // with u's sign
	VMOVAPD Z5, K2, Z4                 // t

	VADDPD Z16, Z4, Z5                 // 1 + t
	VMULPD.BCST HALF(R9), Z0, Z2       // 0.5 x
	TESTQ DX, DX
	JNZ grad
	VMULPD Z5, Z2, Z2
	VMOVUPD Z2, K1, (DI)
	JMP next

grad:
	VMULPD.BCST HALF(R9), Z5, Z5       // 0.5 (1 + t)
	VMULPD Z4, Z4, Z4
	VSUBPD Z4, Z16, Z4                 // 1 - t^2
	VMULPD Z4, Z2, Z2
	VMULPD.BCST C(R9), Z2, Z2          // 0.5 x (1 - t^2) c
	VMULPD.BCST A3(R9), Z0, Z3
	VMULPD Z0, Z3, Z3
	VADDPD Z16, Z3, Z3                 // 1 + 3a x^2
	VMULPD Z3, Z2, Z2
	VADDPD Z2, Z5, Z5
	VMOVUPD.Z (DX), K1, Z3
	VMULPD Z3, Z5, Z5
	VMOVUPD Z5, K1, (DI)
	ADDQ $64, DX

next:
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $8, BX
	JHI loop
	VZEROUPPER
	RET
