package checkpoint

import "gorgonia.org/tensor"

// NamedTensor is a named float tensor as checkpoints store it. Data is held
// as float64 whatever DType says; float32 values survive the round trip
// float32 -> float64 -> float32 exactly, so saving and loading is lossless.
type NamedTensor struct {
	Name  string
	Shape []int
	// DType is tensor.Float32 or tensor.Float64: how the tensor is stored on
	// disk (F32 or F64 in safetensors).
	DType tensor.Dtype
	Data  []float64
}
