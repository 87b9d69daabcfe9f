//go:build amd64 && !purego

#include "textflag.h"

#include "exp_amd64.h"
#include "avx512_amd64.h"

// Register roles: the constants of expConsts, broadcast once per call.
#define ZHI Z16
#define ZLO Z17
#define ZLOG2E Z18
#define ZLN2HI Z19
#define ZLN2LO Z20
#define ZP0 Z21
#define ZP1 Z22
#define ZP2 Z23
#define ZP3 Z24
#define ZP4 Z25
#define ZP5 Z26
#define ZONE Z27
#define ZBIAS Z28
#define ZSHIFT Z29
#define ZSUM Z30

// func expShiftSumAVX512(y, x *float32, n int, shift float32, k *[13][8]float32) float32
//
// expShiftSumAVX2 on 16 lanes, its operations in its order, so each y is
// the same bit for bit; the sum's lanes are added in another order. K2 is
// the lanes to keep: v >= lo or NaN (VCMPPS $0x15 is not-less-than,
// unordered true), within the block; the multiplication by 2^m zeroes the
// others, so that hidden keys and the lanes past n add exactly 0.
TEXT ·expShiftSumAVX512(SB), NOSPLIT, $0-44
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), BX
	VBROADCASTSS shift+24(FP), ZSHIFT
	MOVQ k+32(FP), R9
	VBROADCASTSS HI(R9), ZHI
	VBROADCASTSS LO(R9), ZLO
	VBROADCASTSS LOG2E(R9), ZLOG2E
	VBROADCASTSS LN2HI(R9), ZLN2HI
	VBROADCASTSS LN2LO(R9), ZLN2LO
	VBROADCASTSS P0(R9), ZP0
	VBROADCASTSS P1(R9), ZP1
	VBROADCASTSS P2(R9), ZP2
	VBROADCASTSS P3(R9), ZP3
	VBROADCASTSS P4(R9), ZP4
	VBROADCASTSS P5(R9), ZP5
	VBROADCASTSS ONE(R9), ZONE
	VPBROADCASTD BIAS(R9), ZBIAS
	VPXORD ZSUM, ZSUM, ZSUM
	ALL_LANES

loop:
	CMPQ BX, $16
	JAE block
	LAST_BLOCK

block:
	VMOVUPS.Z (SI), K1, Z0
	VSUBPS ZSHIFT, Z0, Z0         // v = x - shift
	VCMPPS $0x15, ZLO, Z0, K1, K2 // keep: !(v < lo), in the block
	VMINPS Z0, ZHI, Z0
	VMAXPS Z0, ZLO, Z0
	VMULPS ZLOG2E, Z0, Z2
	VRNDSCALEPS $0, Z2, Z2        // m, to nearest even
	VFNMADD231PS ZLN2HI, Z2, Z0
	VFNMADD231PS ZLN2LO, Z2, Z0   // r
	VMULPS Z0, Z0, Z3             // r^2
	VMOVAPS ZP0, Z4
	VFMADD213PS ZP1, Z0, Z4
	VFMADD213PS ZP2, Z0, Z4
	VFMADD213PS ZP3, Z0, Z4
	VFMADD213PS ZP4, Z0, Z4
	VFMADD213PS ZP5, Z0, Z4
	VFMADD213PS Z0, Z3, Z4        // r^2 p(r) + r
	VADDPS ZONE, Z4, Z4           // e^r
	VCVTPS2DQ Z2, Z2
	VPADDD ZBIAS, Z2, Z2
	VPSLLD $23, Z2, Z2            // 2^m
	VMULPS.Z Z2, Z4, K2, Z4       // 0 in the lanes not kept
	VMOVUPS Z4, K1, (DI)
	VADDPS Z4, ZSUM, ZSUM
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, BX
	JHI loop

	VEXTRACTF64X4 $1, ZSUM, Y0
	VADDPS Y30, Y0, Y0
	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VHADDPS X0, X0, X0
	VHADDPS X0, X0, X0
	VZEROUPPER
	MOVSS X0, ret+40(FP)
	RET
