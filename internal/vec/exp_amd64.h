// Offsets of the constants in expConsts (exp.go), one row of 32 bytes each:
// the AVX2 kernels read whole rows, the AVX-512 ones broadcast a row's
// first value. Included by exp_amd64.s and exp_avx512_amd64.s.
#define HI 0
#define LO 32
#define LOG2E 64
#define LN2HI 96
#define LN2LO 128
#define P0 160
#define P1 192
#define P2 224
#define P3 256
#define P4 288
#define P5 320
#define ONE 352
#define BIAS 384
