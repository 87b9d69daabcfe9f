//go:build amd64 && !purego

#include "textflag.h"

#include "avx512_amd64.h"

// adam_amd64.s's kernels on eight float64 lanes: the same operations in
// the same order, without fused multiply-adds, so the results equal the Go
// loop's bit for bit.

// ADAM512_SETUP loads the arguments, n into BX, and broadcasts k's
// constants into Z8-Z15: beta1, 1-beta1, beta2, 1-beta2, StepSize,
// SqrtBC2, Eps, Keep.
#define ADAM512_SETUP \
	MOVQ p+0(FP), DI \
	MOVQ grad+8(FP), SI \
	MOVQ m+16(FP), DX \
	MOVQ v+24(FP), R8 \
	MOVQ n+32(FP), BX \
	MOVQ k+40(FP), R9 \
	VBROADCASTSD 0(R9), Z8 \
	VBROADCASTSD 8(R9), Z9 \
	VBROADCASTSD 16(R9), Z10 \
	VBROADCASTSD 24(R9), Z11 \
	VBROADCASTSD 32(R9), Z12 \
	VBROADCASTSD 40(R9), Z13 \
	VBROADCASTSD 48(R9), Z14 \
	VBROADCASTSD 56(R9), Z15 \
	ALL_LANES

// ADAM512_STEP is ADAM_STEP under the mask K1: it takes the gradient g in
// Z0 and the parameter x in Z5, updates m at (DX) and v at (R8), and leaves
// the new parameter in Z5.
#define ADAM512_STEP \
	VMOVUPD.Z (DX), K1, Z2 \
	VMULPD Z8, Z2, Z2 \
	VMULPD Z9, Z0, Z1 \
	VADDPD Z1, Z2, Z2 \
	VMOVUPD Z2, K1, (DX) \
	VMOVUPD.Z (R8), K1, Z3 \
	VMULPD Z10, Z3, Z3 \
	VMULPD Z11, Z0, Z4 \
	VMULPD Z0, Z4, Z4 \
	VADDPD Z4, Z3, Z3 \
	VMOVUPD Z3, K1, (R8) \
	VMULPD Z15, Z5, Z5 \
	VMULPD Z12, Z2, Z6 \
	VSQRTPD Z3, Z7 \
	VDIVPD Z13, Z7, Z7 \
	VADDPD Z14, Z7, Z7 \
	VDIVPD Z7, Z6, Z6 \
	VSUBPD Z6, Z5, Z5 \
	ADDQ $64, DX \
	ADDQ $64, R8

// func adam32AVX512(p, grad *float32, m, v *float64, n int, k *[8]float64)
// The eight float32 of a block are converted to and from the float64
// lanes and stored from a ymm register under K1 (AVX512VL): a zmm store
// under the same mask writes the same bytes, but it spans the next block's
// parameters, which the next iteration's load then waits for (no store
// forwarding from a masked store), and it made the kernel twice as slow.
TEXT ·adam32AVX512(SB), NOSPLIT, $0-48
	ADAM512_SETUP

adam32_loop:
	CMPQ BX, $8
	JAE adam32_block
	LAST_BLOCK

adam32_block:
	VCVTPS2PD.Z (SI), K1, Z0
	VCVTPS2PD.Z (DI), K1, Z5
	ADAM512_STEP
	VCVTPD2PS Z5, Y5
	VMOVUPS Y5, K1, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	SUBQ $8, BX
	JHI adam32_loop
	VZEROUPPER
	RET

// func adam64AVX512(p, grad *float64, m, v *float64, n int, k *[8]float64)
TEXT ·adam64AVX512(SB), NOSPLIT, $0-48
	ADAM512_SETUP

adam64_loop:
	CMPQ BX, $8
	JAE adam64_block
	LAST_BLOCK

adam64_block:
	VMOVUPD.Z (SI), K1, Z0
	VMOVUPD.Z (DI), K1, Z5
	ADAM512_STEP
	VMOVUPD Z5, K1, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $8, BX
	JHI adam64_loop
	VZEROUPPER
	RET
