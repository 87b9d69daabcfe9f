// Offsets of the constants in consts (gelu.go), one row of 32 bytes each:
// the AVX2 kernels read whole rows, the AVX-512 ones broadcast a row's
// first value. Included by kernels_amd64.s and kernels_avx512_amd64.s.
#define C 0
#define CA 32
#define LIM 64
#define NLIM 96
#define A13 128
#define A11 160
#define A9 192
#define A7 224
#define A5 256
#define A3 288
#define A1 320
#define B6 352
#define B4 384
#define B2 416
#define B0 448
#define HALF 480
#define ONE 512
#define CA3 544
#define X2MAX 576
#define ABS 608
#define SIGN 640
