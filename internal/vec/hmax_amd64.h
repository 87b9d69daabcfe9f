// HMAX8 leaves the largest of Y0's eight float32 lanes in X0's lowest
// (X1 is scratch): halves compared down to one lane. Max's kernels call it
// once their NaN check has passed, so no lane is NaN.
#define HMAX8 \
	VEXTRACTF128 $1, Y0, X1 \
	VMAXPS X1, X0, X0 \
	VPERMILPS $0x4e, X0, X1 \
	VMAXPS X1, X0, X0 \
	VPERMILPS $0xb1, X0, X1 \
	VMAXPS X1, X0, X0
