//go:build amd64 && !purego

#include "textflag.h"

#include "gelu_amd64.h"

// TANH sets Y4 = tanh(u), u = x (c + c a x^2), from x in Y0 and x^2 in Y1,
// using Y2, Y3 and Y5. The rational is evaluated on u clamped to ±limit, and
// where |u| reached the limit t is set to exactly ±1 (VCMPPS $0x1D is >=): the
// rational there is 1 - 2^-24 with fused multiply-adds, and 1 - t^2 would
// then multiply a large factor in the derivative.
#define TANH \
	VMOVUPS CA(R9), Y2 \
	VFMADD213PS C(R9), Y1, Y2 \
	VMULPS Y0, Y2, Y2 \
	VMINPS LIM(R9), Y2, Y2 \
	VMAXPS NLIM(R9), Y2, Y2 \
	VMULPS Y2, Y2, Y3 \
	VMOVUPS A13(R9), Y4 \
	VFMADD213PS A11(R9), Y3, Y4 \
	VFMADD213PS A9(R9), Y3, Y4 \
	VFMADD213PS A7(R9), Y3, Y4 \
	VFMADD213PS A5(R9), Y3, Y4 \
	VFMADD213PS A3(R9), Y3, Y4 \
	VFMADD213PS A1(R9), Y3, Y4 \
	VMULPS Y2, Y4, Y4 \
	VMOVUPS B6(R9), Y5 \
	VFMADD213PS B4(R9), Y3, Y5 \
	VFMADD213PS B2(R9), Y3, Y5 \
	VFMADD213PS B0(R9), Y3, Y5 \
	VDIVPS Y5, Y4, Y4 \
	VANDPS ABS(R9), Y2, Y5 \
	VCMPPS $0x1D, LIM(R9), Y5, Y5 \
	VANDPS SIGN(R9), Y2, Y3 \
	VORPS ONE(R9), Y3, Y3 \
	VBLENDVPS Y5, Y3, Y4, Y4

// func geluAVX2(y, x *float32, n int, k *[21][8]float32)
TEXT ·geluAVX2(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX
	MOVQ k+24(FP), R9
	SHRQ $3, CX

gelu_loop:
	VMOVUPS (SI), Y0
	VMULPS Y0, Y0, Y1
	TANH
	VMULPS HALF(R9), Y0, Y6     // 0.5 x
	VFMADD213PS Y6, Y6, Y4      // 0.5 x t + 0.5 x
	VMOVUPS Y4, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ gelu_loop
	VZEROUPPER
	RET

// func geluGradAVX2(dx, x, dy *float32, n int, k *[21][8]float32)
TEXT ·geluGradAVX2(SB), NOSPLIT, $0-40
	MOVQ dx+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ dy+16(FP), DX
	MOVQ n+24(FP), CX
	MOVQ k+32(FP), R9
	SHRQ $3, CX

grad_loop:
	VMOVUPS (SI), Y0
	VMULPS Y0, Y0, Y1
	TANH
	VMOVUPS HALF(R9), Y6
	VFMADD213PS HALF(R9), Y4, Y6  // 0.5 t + 0.5
	VMOVUPS ONE(R9), Y7
	VFNMADD231PS Y4, Y4, Y7       // 1 - t^2
	VMINPS X2MAX(R9), Y1, Y1      // x^2, bounded (gradX2Max)
	VMOVUPS CA3(R9), Y8
	VFMADD213PS C(R9), Y1, Y8     // c + 3 c a x^2
	VMULPS HALF(R9), Y0, Y9       // 0.5 x
	VMULPS Y7, Y9, Y9
	VMULPS Y8, Y9, Y9
	VADDPS Y9, Y6, Y6
	VMULPS (DX), Y6, Y6
	VMOVUPS Y6, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNZ grad_loop
	VZEROUPPER
	RET

// func relu32AVX2(y, x, dy *float32, n int)
// Forward: VMAXPS takes its second source (x) when either is NaN, so NaN
// passes through. Gradient: the mask x > 0 (VCMPPS $0x1E, false for NaN)
// selects dy.
TEXT ·relu32AVX2(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ dy+16(FP), DX
	MOVQ n+24(FP), CX
	SHRQ $3, CX
	VXORPS Y0, Y0, Y0
	TESTQ DX, DX
	JNZ relu32_grad

relu32_fwd:
	VMOVUPS (SI), Y1
	VMAXPS Y1, Y0, Y1
	VMOVUPS Y1, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ relu32_fwd
	VZEROUPPER
	RET

relu32_grad:
	VMOVUPS (SI), Y1
	VCMPPS $0x1E, Y0, Y1, Y1
	VANDPS (DX), Y1, Y1
	VMOVUPS Y1, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNZ relu32_grad
	VZEROUPPER
	RET

// func relu64AVX2(y, x, dy *float64, n int)
// Forward: VMAXPD takes its second source (x) when either is NaN, so NaN
// passes through. Gradient: the mask x > 0 (VCMPPD $0x1E, false for NaN)
// selects dy.
TEXT ·relu64AVX2(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ dy+16(FP), DX
	MOVQ n+24(FP), CX
	SHRQ $2, CX
	VXORPD Y0, Y0, Y0
	TESTQ DX, DX
	JNZ relu64_grad

relu64_fwd:
	VMOVUPD (SI), Y1
	VMAXPD Y1, Y0, Y1
	VMOVUPD Y1, (DI)
	ADDQ $32, SI
	ADDQ $32, DI
	DECQ CX
	JNZ relu64_fwd
	VZEROUPPER
	RET

relu64_grad:
	VMOVUPD (SI), Y1
	VCMPPD $0x1E, Y0, Y1, Y1
	VANDPD (DX), Y1, Y1
	VMOVUPD Y1, (DI)
	ADDQ $32, SI
	ADDQ $32, DX
	ADDQ $32, DI
	DECQ CX
	JNZ relu64_grad
	VZEROUPPER
	RET
