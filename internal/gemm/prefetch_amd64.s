//go:build amd64 && !purego

#include "textflag.h"

// func prefetchRows(p unsafe.Pointer, stride, rows, bytes int, write bool)
TEXT ·prefetchRows(SB), NOSPLIT, $0-33
	MOVQ p+0(FP), SI
	MOVQ stride+8(FP), R8
	MOVQ rows+16(FP), CX
	MOVQ bytes+24(FP), DX
	MOVBLZX write+32(FP), BX
	TESTQ CX, CX
	JLE done
row:
	XORQ R9, R9
line:
	LEAQ (SI)(R9*1), AX
	TESTQ BX, BX
	JNZ forwrite
	PREFETCHT0 (AX)
	JMP next
forwrite:
	// PREFETCHW (AX), which Go's assembler does not know: 0F 0D /1.
	BYTE $0x0F; BYTE $0x0D; BYTE $0x08
next:
	ADDQ $64, R9
	CMPQ R9, DX
	JLT line
	// The row's last byte, whose line the steps of 64 miss when the row
	// does not start on a line.
	TESTQ $63, SI
	JZ aligned
	LEAQ -1(SI)(DX*1), AX
	PREFETCHT0 (AX)
aligned:
	ADDQ R8, SI
	DECQ CX
	JNZ row
done:
	RET
