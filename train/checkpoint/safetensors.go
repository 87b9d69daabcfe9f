package checkpoint

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	"github.com/nlpodyssey/safetensors"
	"gorgonia.org/tensor"
)

// rawView is a safetensors.View over encoded tensor data. It is used instead
// of safetensors.TensorView because NewTensorView counts zero elements for a
// scalar (shape []), while the file format, and the library's own reader,
// count one.
type rawView struct {
	dtype safetensors.DType
	shape []uint64
	data  []byte
}

func (v rawView) DType() safetensors.DType { return v.dtype }
func (v rawView) Shape() []uint64          { return v.shape }
func (v rawView) Data() []byte             { return v.data }
func (v rawView) DataLen() uint64          { return uint64(len(v.data)) }

// tensorViews checks tensors and encodes them as little-endian safetensors
// views, as F64 if allF64, else each in its own DType.
func tensorViews(file string, tensors []NamedTensor, allF64 bool) (map[string]rawView, error) {
	views := make(map[string]rawView, len(tensors))
	for _, t := range tensors {
		if t.Name == "" {
			return nil, fmt.Errorf("checkpoint: %s: tensor with an empty name", file)
		}
		if t.Name == "__metadata__" {
			return nil, fmt.Errorf("checkpoint: %s: tensor %q: the name is reserved by safetensors", file, t.Name)
		}
		if _, dup := views[t.Name]; dup {
			return nil, fmt.Errorf("checkpoint: %s: tensor %q: duplicate name", file, t.Name)
		}
		n, err := numElements(t.Shape)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: %s: tensor %q: %w", file, t.Name, err)
		}
		if n != len(t.Data) {
			return nil, fmt.Errorf("checkpoint: %s: tensor %q: %d values, want %d for shape %v", file, t.Name, len(t.Data), n, t.Shape)
		}
		dt := safetensors.F64
		if !allF64 {
			switch t.DType {
			case tensor.Float64:
			case tensor.Float32:
				dt = safetensors.F32
			default:
				return nil, fmt.Errorf("checkpoint: %s: tensor %q: dtype %v is not supported: use float32 or float64", file, t.Name, t.DType)
			}
		}
		if i := slices.IndexFunc(t.Data, func(v float64) bool { return !isFinite(v) }); i >= 0 {
			return nil, fmt.Errorf("checkpoint: %s: tensor %q: value %d is %v: refusing to save a non-finite tensor", file, t.Name, i, t.Data[i])
		}
		shape := make([]uint64, len(t.Shape)) // never nil: nil is written as null
		for i, d := range t.Shape {
			shape[i] = uint64(d)
		}
		var data []byte
		if dt == safetensors.F32 {
			data = make([]byte, 0, 4*len(t.Data))
			for _, v := range t.Data {
				data = binary.LittleEndian.AppendUint32(data, math.Float32bits(float32(v)))
			}
		} else {
			data = make([]byte, 0, 8*len(t.Data))
			for _, v := range t.Data {
				data = binary.LittleEndian.AppendUint64(data, math.Float64bits(v))
			}
		}
		views[t.Name] = rawView{dtype: dt, shape: shape, data: data}
	}
	return views, nil
}

// isFinite reports whether x is neither NaN nor infinite.
func isFinite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// numElements returns the number of elements of shape, checking that no
// dimension is negative and the product does not overflow.
func numElements(shape []int) (int, error) {
	n := 1
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
		if d != 0 && n > math.MaxInt/d {
			return 0, fmt.Errorf("shape %v is too large", shape)
		}
		n *= d
	}
	return n, nil
}

// parseSafetensors decodes the safetensors bytes b of the file path into
// its metadata and its tensors, sorted by name. Only F32 and F64 tensors
// are accepted. It never panics.
func parseSafetensors(path string, b []byte) (meta map[string]string, out []NamedTensor, err error) {
	defer func() {
		if r := recover(); r != nil {
			meta, out = nil, nil
			err = fmt.Errorf("checkpoint: %s: corrupt safetensors file: %v", path, r)
		}
	}()
	fail := func(format string, args ...any) error {
		return fmt.Errorf("checkpoint: %s: "+format, append([]any{path}, args...)...)
	}
	if len(b) < 8 {
		return nil, nil, fail("truncated: %d bytes, shorter than the 8-byte header length", len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > uint64(len(b)-8) {
		return nil, nil, fail("truncated: header length %d, but only %d bytes follow it", n, len(b)-8)
	}
	// Decode the header first to report problems by tensor; Deserialize
	// below checks the layout as a whole.
	var md safetensors.Metadata
	if err := json.Unmarshal(b[8:8+n], &md); err != nil {
		return nil, nil, fail("corrupt header: %v", err)
	}
	infos := md.Tensors()
	names := make([]string, 0, len(infos))
	for name := range infos {
		names = append(names, name)
	}
	slices.Sort(names)
	dataLen := uint64(len(b)) - 8 - n
	for _, name := range names {
		info := infos[name]
		if name == "" {
			return nil, nil, fail("tensor with an empty name")
		}
		if info.DType != safetensors.F32 && info.DType != safetensors.F64 {
			return nil, nil, fail("tensor %q: unsupported dtype %v: want F32 or F64", name, info.DType)
		}
		want := info.DType.Size()
		for _, d := range info.Shape {
			if d > math.MaxInt {
				return nil, nil, fail("tensor %q: dimension %d of shape %v is too large", name, d, info.Shape)
			}
			if d != 0 && want > math.MaxInt64/d {
				return nil, nil, fail("tensor %q: shape %v is too large", name, info.Shape)
			}
			want *= d
		}
		s, e := info.DataOffsets[0], info.DataOffsets[1]
		if e < s {
			return nil, nil, fail("tensor %q: data offsets [%d %d] are reversed", name, s, e)
		}
		if e-s != want {
			return nil, nil, fail("tensor %q: data length %d bytes, want %d for shape %v and dtype %v", name, e-s, want, info.Shape, info.DType)
		}
		if e > dataLen {
			return nil, nil, fail("truncated: tensor %q ends at data byte %d, but the data is %d bytes", name, e, dataLen)
		}
	}
	st, err := safetensors.Deserialize(b)
	if err != nil {
		return nil, nil, fail("corrupt safetensors file: %v", err)
	}
	out = make([]NamedTensor, 0, len(names))
	for _, name := range names {
		v, ok := st.Tensor(name)
		if !ok {
			return nil, nil, fail("tensor %q: listed in the header but not found", name)
		}
		t := NamedTensor{Name: name, Shape: make([]int, len(v.Shape()))}
		for i, d := range v.Shape() {
			t.Shape[i] = int(d)
		}
		data := v.Data()
		switch v.DType() {
		case safetensors.F32:
			t.DType = tensor.Float32
			t.Data = make([]float64, len(data)/4)
			for i := range t.Data {
				t.Data[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:])))
			}
		case safetensors.F64:
			t.DType = tensor.Float64
			t.Data = make([]float64, len(data)/8)
			for i := range t.Data {
				t.Data[i] = math.Float64frombits(binary.LittleEndian.Uint64(data[8*i:]))
			}
		}
		if i := slices.IndexFunc(t.Data, func(v float64) bool { return !isFinite(v) }); i >= 0 {
			return nil, nil, fail("tensor %q: value %d is %v: a checkpoint never holds non-finite values (corrupt, or written by something else)", name, i, t.Data[i])
		}
		if n, err := numElements(t.Shape); err != nil || n != len(t.Data) {
			return nil, nil, fail("tensor %q: %d values do not fill shape %v", name, len(t.Data), t.Shape)
		}
		out = append(out, t)
	}
	return md.Metadata(), out, nil
}
