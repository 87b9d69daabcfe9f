// Offsets of the constants in gelu64Consts (gelu64.go), one row of 32
// bytes each: the AVX2 kernel reads whole rows, the AVX-512 one broadcasts
// a row's first value. Included by gelu64_amd64.s and
// gelu64_avx512_amd64.s.
#define C 0
#define A 32
#define HALF 64
#define ONE 96
#define TWO 128
#define A3 160
#define ABS 192
#define SIGN 224
#define SMALL 256
#define SAT 288
#define P0 320
#define P1 352
#define P2 384
#define Q0 416
#define Q1 448
#define Q2 480
#define LOG2E 512
#define LN2U 544
#define LN2L 576
#define SIXTEENTH 608
#define E8 640
#define E7 672
#define E6 704
#define E5 736
#define E4 768
#define E3 800
#define BIAS 832
