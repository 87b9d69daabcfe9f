//go:build amd64 && !purego

#include "textflag.h"

#include "gelu_amd64.h"
#include "avx512_amd64.h"

// The AVX-512 GELU kernels are kernels_amd64.s's AVX2 ones on 16 lanes:
// the same operations in the same order, so the same results bit for bit.
// They keep all 21 constants of consts in registers, broadcast once per
// call; Z0-Z9 are the working registers.
#define ZONE Z10
#define ZCA3 Z11
#define ZX2MAX Z12
#define ZABS Z13
#define ZSIGN Z14
#define ZC Z16
#define ZCA Z17
#define ZLIM Z18
#define ZNLIM Z19
#define ZA13 Z20
#define ZA11 Z21
#define ZA9 Z22
#define ZA7 Z23
#define ZA5 Z24
#define ZA3 Z25
#define ZA1 Z26
#define ZB6 Z27
#define ZB4 Z28
#define ZB2 Z29
#define ZB0 Z30
#define ZHALF Z31

// GELU_CONSTS broadcasts consts, at R9, into the registers above.
#define GELU_CONSTS \
	VBROADCASTSS ONE(R9), ZONE \
	VBROADCASTSS CA3(R9), ZCA3 \
	VBROADCASTSS X2MAX(R9), ZX2MAX \
	VBROADCASTSS ABS(R9), ZABS \
	VBROADCASTSS SIGN(R9), ZSIGN \
	VBROADCASTSS C(R9), ZC \
	VBROADCASTSS CA(R9), ZCA \
	VBROADCASTSS LIM(R9), ZLIM \
	VBROADCASTSS NLIM(R9), ZNLIM \
	VBROADCASTSS A13(R9), ZA13 \
	VBROADCASTSS A11(R9), ZA11 \
	VBROADCASTSS A9(R9), ZA9 \
	VBROADCASTSS A7(R9), ZA7 \
	VBROADCASTSS A5(R9), ZA5 \
	VBROADCASTSS A3(R9), ZA3 \
	VBROADCASTSS A1(R9), ZA1 \
	VBROADCASTSS B6(R9), ZB6 \
	VBROADCASTSS B4(R9), ZB4 \
	VBROADCASTSS B2(R9), ZB2 \
	VBROADCASTSS B0(R9), ZB0 \
	VBROADCASTSS HALF(R9), ZHALF

// TANH512 is kernels_amd64.s's TANH: Z4 = tanh(u), u = x (c + c a x^2),
// from x in Z0 and x^2 in Z1, using Z2, Z3, Z5 and K2; where |u| reached
// the limit, the merge-masked move sets t to exactly ±1.
#define TANH512 \
	VMOVAPS ZCA, Z2 \
	VFMADD213PS ZC, Z1, Z2 \
	VMULPS Z0, Z2, Z2 \
	VMINPS ZLIM, Z2, Z2 \
	VMAXPS ZNLIM, Z2, Z2 \
	VMULPS Z2, Z2, Z3 \
	VMOVAPS ZA13, Z4 \
	VFMADD213PS ZA11, Z3, Z4 \
	VFMADD213PS ZA9, Z3, Z4 \
	VFMADD213PS ZA7, Z3, Z4 \
	VFMADD213PS ZA5, Z3, Z4 \
	VFMADD213PS ZA3, Z3, Z4 \
	VFMADD213PS ZA1, Z3, Z4 \
	VMULPS Z2, Z4, Z4 \
	VMOVAPS ZB6, Z5 \
	VFMADD213PS ZB4, Z3, Z5 \
	VFMADD213PS ZB2, Z3, Z5 \
	VFMADD213PS ZB0, Z3, Z5 \
	VDIVPS Z5, Z4, Z4 \
	VPANDD ZABS, Z2, Z5 \
	VCMPPS $0x1D, ZLIM, Z5, K2 \
	VPANDD ZSIGN, Z2, Z3 \
	VPORD ZONE, Z3, Z3 \
	VMOVAPS Z3, K2, Z4

// The GELU kernels fetch their inputs 1 KiB (16 blocks) ahead: in a
// training step x comes from L3 (the forward pass wrote it long before the
// backward reads it), and the hardware's prefetchers left the loads
// waiting: the nanoGPT preset's GELU and its gradient took 1.83 ms a step
// at one core without, 1.64 with (per-op timing, medians of 3; 512 bytes
// ahead 1.75, 2 KiB 1.68).

// func geluAVX512(y, x *float32, n int, k *[21][8]float32)
TEXT ·geluAVX512(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), BX
	MOVQ k+24(FP), R9
	GELU_CONSTS
	ALL_LANES

gelu_loop:
	CMPQ BX, $16
	JAE gelu_block
	LAST_BLOCK

gelu_block:
	PREFETCHT0 1024(SI)
	VMOVUPS.Z (SI), K1, Z0
	VMULPS Z0, Z0, Z1
	TANH512
	VMULPS ZHALF, Z0, Z6        // 0.5 x
	VFMADD213PS Z6, Z6, Z4      // 0.5 x t + 0.5 x
	VMOVUPS Z4, K1, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, BX
	JHI gelu_loop
	VZEROUPPER
	RET

// func geluGradAVX512(dx, x, dy *float32, n int, k *[21][8]float32)
TEXT ·geluGradAVX512(SB), NOSPLIT, $0-40
	MOVQ dx+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ dy+16(FP), DX
	MOVQ n+24(FP), BX
	MOVQ k+32(FP), R9
	GELU_CONSTS
	ALL_LANES

grad_loop:
	CMPQ BX, $16
	JAE grad_block
	LAST_BLOCK

grad_block:
	PREFETCHT0 1024(SI)
	PREFETCHT0 1024(DX)
	VMOVUPS.Z (SI), K1, Z0
	VMULPS Z0, Z0, Z1
	TANH512
	VMOVAPS ZHALF, Z6
	VFMADD213PS ZHALF, Z4, Z6     // 0.5 t + 0.5
	VMOVAPS ZONE, Z7
	VFNMADD231PS Z4, Z4, Z7       // 1 - t^2
	VMINPS ZX2MAX, Z1, Z1         // x^2, bounded (gradX2Max)
	VMOVAPS ZCA3, Z8
	VFMADD213PS ZC, Z1, Z8        // c + 3 c a x^2
	VMULPS ZHALF, Z0, Z9          // 0.5 x
	VMULPS Z7, Z9, Z9
	VMULPS Z8, Z9, Z9
	VADDPS Z9, Z6, Z6
	VMOVUPS.Z (DX), K1, Z7        // dy
	VMULPS Z7, Z6, Z6
	VMOVUPS Z6, K1, (DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	SUBQ $16, BX
	JHI grad_loop
	VZEROUPPER
	RET

// func relu32AVX512(y, x, dy *float32, n int)
// As relu32AVX2: VMAXPS takes x, its second source, when either is NaN;
// the gradient loads dy under the mask x > 0 (false for NaN and for the
// zeros a partial block loads past n), 0 elsewhere.
TEXT ·relu32AVX512(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ dy+16(FP), DX
	MOVQ n+24(FP), BX
	VPXORD Z0, Z0, Z0
	ALL_LANES
	TESTQ DX, DX
	JNZ relu32_grad

relu32_fwd:
	CMPQ BX, $16
	JAE relu32_fwd_block
	LAST_BLOCK

relu32_fwd_block:
	VMOVUPS.Z (SI), K1, Z1
	VMAXPS Z1, Z0, Z1
	VMOVUPS Z1, K1, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $16, BX
	JHI relu32_fwd
	VZEROUPPER
	RET

relu32_grad:
	CMPQ BX, $16
	JAE relu32_grad_block
	LAST_BLOCK

relu32_grad_block:
	VMOVUPS.Z (SI), K1, Z1
	VCMPPS $0x1E, Z0, Z1, K2
	VMOVUPS.Z (DX), K2, Z1
	VMOVUPS Z1, K1, (DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	SUBQ $16, BX
	JHI relu32_grad
	VZEROUPPER
	RET

// func relu64AVX512(y, x, dy *float64, n int)
// relu32AVX512 for float64, 8 lanes.
TEXT ·relu64AVX512(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ dy+16(FP), DX
	MOVQ n+24(FP), BX
	VPXORQ Z0, Z0, Z0
	ALL_LANES
	TESTQ DX, DX
	JNZ relu64_grad

relu64_fwd:
	CMPQ BX, $8
	JAE relu64_fwd_block
	LAST_BLOCK

relu64_fwd_block:
	VMOVUPD.Z (SI), K1, Z1
	VMAXPD Z1, Z0, Z1
	VMOVUPD Z1, K1, (DI)
	ADDQ $64, SI
	ADDQ $64, DI
	SUBQ $8, BX
	JHI relu64_fwd
	VZEROUPPER
	RET

relu64_grad:
	CMPQ BX, $8
	JAE relu64_grad_block
	LAST_BLOCK

relu64_grad_block:
	VMOVUPD.Z (SI), K1, Z1
	VCMPPD $0x1E, Z0, Z1, K2
	VMOVUPD.Z (DX), K2, Z1
	VMOVUPD Z1, K1, (DI)
	ADDQ $64, SI
	ADDQ $64, DX
	ADDQ $64, DI
	SUBQ $8, BX
	JHI relu64_grad
	VZEROUPPER
	RET
