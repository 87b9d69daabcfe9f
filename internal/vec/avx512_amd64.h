// The AVX-512 kernels run one loop body over blocks of 16 float32 (8
// float64) under the mask K1: all lanes in every block but a last, partial
// one, where K1 holds only its BX elements. Masked loads read and masked
// stores write nothing beyond the slices (masked-off lanes do not fault), so
// the kernels take any n >= 1 without a scalar tail; the loads zero the
// lanes masked off (.Z), which the sums count on. BX counts the elements
// left; AX and CX are scratch. Each loop is
//
//	loop:
//		CMPQ BX, $16
//		JAE block
//		LAST_BLOCK
//	block:
//		... (masked by K1)
//		SUBQ $16, BX
//		JHI loop      // BX was above 16; a partial block ends at once
//
// with 8 for float64 lanes.

// ALL_LANES sets K1 to all 16 lanes, the mask of a full block (8-lane
// operations read its low 8 bits).
#define ALL_LANES \
	MOVL $0xffff, AX \
	KMOVW AX, K1

// LAST_BLOCK sets K1 to the low BX lanes, BX below the block's length.
#define LAST_BLOCK \
	MOVQ BX, CX \
	MOVL $1, AX \
	SHLL CX, AX \
	DECL AX \
	KMOVW AX, K1
