//go:build amd64 && !purego

package gemm

// peakLoops returns the FMA loops of each kernel set this CPU runs, the
// active one first, and then the scalar Go loop.
func peakLoops() []peakLoop {
	var loops []peakLoop
	for _, s := range kernelSets() {
		switch s {
		case avx512:
			loops = append(loops, peakLoop{set: s.name, f32: peakAVX512F32, f64: peakAVX512F64, ops32: 512, ops64: 256})
		case avx2:
			loops = append(loops, peakLoop{set: s.name, f32: peakAVX2F32, f64: peakAVX2F64, ops32: 192, ops64: 96})
		}
	}
	return append(loops, scalarLoop)
}

// peakAVX512F32 runs n iterations of 16 independent VFMADD231PS on zmm
// registers, peakAVX512F64 of VFMADD231PD; peakAVX2F32 and peakAVX2F64 of 12
// on ymm registers. They touch no memory.
//
//go:noescape
func peakAVX512F32(n int)

//go:noescape
func peakAVX512F64(n int)

//go:noescape
func peakAVX2F32(n int)

//go:noescape
func peakAVX2F64(n int)
