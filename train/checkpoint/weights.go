package checkpoint

import (
	"fmt"
	"io"

	"github.com/nlpodyssey/safetensors"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/internal/fsx"
)

// Layout is how a weights file stores the weight matrix of a projection
// (a param of role graph.RoleWeight).
type Layout int

const (
	// LayoutQKV stores every tensor as qkv holds it: a projection's weight
	// is (in, out), y = x @ w + b.
	LayoutQKV Layout = iota
	// LayoutTorch stores a projection's weight (out, in), as PyTorch's
	// nn.Linear.weight holds it (y = x @ w.T + b). Every other tensor is
	// stored as qkv holds it, which is also PyTorch's layout: embedding
	// tables are (rows, dim) like nn.Embedding.weight, and vectors are
	// vectors.
	LayoutTorch
)

// String names the layout as the "layout" metadata of a weights file does.
func (l Layout) String() string {
	switch l {
	case LayoutQKV:
		return "qkv"
	case LayoutTorch:
		return "torch"
	}
	return fmt.Sprintf("Layout(%d)", int(l))
}

// weightsFormat is the "format" metadata of a weights file.
const weightsFormat = "qkv-weights"

// SaveWeights writes params (a whole model, one layer, or any params of
// one's own) to the safetensors file path, whose name must end in
// .safetensors, replacing it atomically as every output file (see
// fsx.WriteFiles: a device or FIFO is refused, a link written through): every
// param under its name and in its dtype (F32 or F64), projection weights in
// layout, with metadata {"format": "qkv-weights", "layout": "qkv" or
// "torch"}. The values are copied first, so the params may change while the
// file is written. Non-finite values are refused, naming the tensor.
func SaveWeights(path string, params []graph.Param, layout Layout) error {
	if err := checkLayout(path, layout); err != nil {
		return err
	}
	tensors, err := ParamTensors(params)
	if err != nil {
		return fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	if layout == LayoutTorch {
		for i, p := range params {
			if p.Role == graph.RoleWeight {
				tensors[i] = transposed(tensors[i])
			}
		}
	}
	views, err := tensorViews(path, tensors, false)
	if err != nil {
		return err
	}
	b, err := safetensors.Serialize(views, map[string]string{"format": weightsFormat, "layout": layout.String()})
	if err != nil {
		return fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	if err := fsx.WriteFile(path, ".safetensors", func(w io.Writer) error { _, err := w.Write(b); return err }); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// LoadWeights reads the safetensors file path into params, in place: a file
// SaveWeights wrote, a checkpoint's model.safetensors (layout qkv), or one
// another program wrote under qkv's names. Projection weights are read in
// layout, and a file whose "layout" metadata names another layout is
// refused. As with LoadParams, every param must find a tensor of its name,
// shape and dtype and every tensor a param, or nothing changes and the
// error lists the mismatches, naming the file and tensor.
func LoadWeights(path string, params []graph.Param, layout Layout) error {
	if err := checkLayout(path, layout); err != nil {
		return err
	}
	b, err := readBounded(path, weightsBound(params), "the params' tensors can take")
	if err != nil {
		return err
	}
	meta, tensors, err := parseSafetensors(path, b)
	if err != nil {
		return err
	}
	if saved, ok := meta["layout"]; ok && saved != layout.String() {
		return fmt.Errorf("checkpoint: %s: the file stores layout %q, want %q", path, saved, layout)
	}
	if layout == LayoutTorch {
		byName := make(map[string]int, len(tensors))
		for i, t := range tensors {
			byName[t.Name] = i
		}
		for _, p := range params {
			if i, ok := byName[p.Name]; ok && p.Role == graph.RoleWeight {
				tensors[i] = transposed(tensors[i])
			}
		}
	}
	return LoadParams(params, tensors, path)
}

// weightsBound is the largest weights file params can be loaded from:
// every tensor in F64, and a header of up to 256 bytes a tensor and 1 MiB
// of metadata (another program's included). A larger file is refused before
// it is read.
func weightsBound(params []graph.Param) int64 {
	n := int64(1 << 20)
	for _, p := range params {
		n += 256
		if p.Node != nil {
			n += 8 * int64(p.Node.Shape().TotalSize())
		}
	}
	return n
}

// checkLayout refuses a Layout that is none of the constants.
func checkLayout(path string, l Layout) error {
	if l != LayoutQKV && l != LayoutTorch {
		return fmt.Errorf("checkpoint: %s: unknown %v: want LayoutQKV or LayoutTorch", path, l)
	}
	return nil
}

// transposed returns the transpose of a matrix; other tensors as they are,
// for LoadParams to report if a matrix was expected.
func transposed(t NamedTensor) NamedTensor {
	if len(t.Shape) != 2 {
		return t
	}
	r, c := t.Shape[0], t.Shape[1]
	out := NamedTensor{Name: t.Name, Shape: []int{c, r}, DType: t.DType, Data: make([]float64, len(t.Data))}
	for i := 0; i < r; i++ {
		for j := 0; j < c; j++ {
			out.Data[j*r+i] = t.Data[i*c+j]
		}
	}
	return out
}
