package checkpoint

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nlpodyssey/safetensors"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/internal/graphtest"
)

// rolesModel returns a projection weight (3 in, 2 out), an embedding table
// and a bias in dtype dt, with values from seed.
func rolesModel(t *testing.T, dt tensor.Dtype, seed float64) []graph.Param {
	t.Helper()
	g := G.NewGraph()
	vals := func(n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = seed + float64(i)/8
		}
		return v
	}
	w := ckParam(t, g, dt, "proj.w", []int{3, 2}, vals(6))
	w.Role = graph.RoleWeight
	e := ckParam(t, g, dt, "emb.table", []int{4, 3}, vals(12))
	e.Role = graph.RoleEmbedding
	b := ckParam(t, g, dt, "proj.b", []int{2}, vals(2))
	b.Role = graph.RoleBias
	return []graph.Param{w, e, b}
}

func TestWeightsRoundTrip(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		for _, layout := range []Layout{LayoutQKV, LayoutTorch} {
			t.Run(dt.String()+"/"+layout.String(), func(t *testing.T) {
				path := filepath.Join(t.TempDir(), "w.safetensors")
				saved := rolesModel(t, dt, 1)
				if err := SaveWeights(path, saved, layout); err != nil {
					t.Fatal(err)
				}
				fresh := rolesModel(t, dt, 5)
				if err := LoadWeights(path, fresh, layout); err != nil {
					t.Fatal(err)
				}
				if !slices.EqualFunc(paramBits(t, fresh), paramBits(t, saved), slices.Equal) {
					t.Error("loaded weights differ from the saved ones")
				}

				// The file holds the projection weight (out, in) in the torch
				// layout, every other tensor as qkv holds it.
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				st, err := safetensors.Deserialize(b)
				if err != nil {
					t.Fatal(err)
				}
				want := map[string][]uint64{"proj.w": {3, 2}, "emb.table": {4, 3}, "proj.b": {2}}
				if layout == LayoutTorch {
					want["proj.w"] = []uint64{2, 3}
				}
				for name, shape := range want {
					v, ok := st.Tensor(name)
					if !ok || !slices.Equal(v.Shape(), shape) {
						t.Errorf("%s stored with shape %v, want %v", name, v.Shape(), shape)
					}
				}
				_, tensors, err := parseSafetensors(path, b)
				if err != nil {
					t.Fatal(err)
				}
				w := tensors[slices.IndexFunc(tensors, func(x NamedTensor) bool { return x.Name == "proj.w" })]
				// qkv's w[i][j] (in i, out j) is torch's w[j][i].
				if layout == LayoutTorch && (w.Data[1*3+0] != 1+1.0/8 || w.Data[0*3+1] != 1+2.0/8) {
					t.Errorf("torch layout stores %v, not the transpose of qkv's", w.Data)
				}
			})
		}
	}
}

func TestWeightsErrors(t *testing.T) {
	dir := t.TempDir()
	torch := filepath.Join(dir, "torch.safetensors")
	if err := SaveWeights(torch, rolesModel(t, tensor.Float32, 1), LayoutTorch); err != nil {
		t.Fatal(err)
	}
	small := rolesModel(t, tensor.Float32, 1)[:2]
	for _, c := range []struct {
		name string
		err  error
		want []string
	}{
		{"layout mismatch", LoadWeights(torch, rolesModel(t, tensor.Float32, 2), LayoutQKV), []string{torch, `stores layout "torch", want "qkv"`}},
		{"unknown layout", LoadWeights(torch, rolesModel(t, tensor.Float32, 2), Layout(7)), []string{"unknown Layout(7)"}},
		{"unknown layout save", SaveWeights(torch, small, Layout(-1)), []string{"unknown Layout(-1)"}},
		{"missing file", LoadWeights(filepath.Join(dir, "none"), small, LayoutQKV), []string{"none"}},
		{"extra tensor", LoadWeights(torch, small, LayoutTorch), []string{`tensor "proj.b": unknown to the model`}},
		{"dtype", LoadWeights(torch, rolesModel(t, tensor.Float64, 2), LayoutTorch), []string{`tensor "proj.w": dtype float32, want float64`}},
		{"no file name", SaveWeights(dir+"/", small, LayoutQKV), []string{"no file name"}},
		{"nil node", SaveWeights(torch, []graph.Param{{Name: "x"}}, LayoutQKV), []string{`param "x": nil node`}},
	} {
		t.Run(c.name, func(t *testing.T) { graphtest.WantErr(t, c.err, c.want...) })
	}
	// A file larger than the params can take (a sparse 20 GB one here) is
	// refused before it is read.
	huge := filepath.Join(dir, "huge.safetensors")
	if err := os.WriteFile(huge, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 20<<30); err != nil {
		t.Skipf("no sparse files here: %v", err)
	}
	var err error
	n := graphtest.Allocated(func() { err = LoadWeights(huge, small, LayoutQKV) })
	graphtest.WantErr(t, err, huge, "21474836480 bytes, more than the", "the params' tensors can take")
	if n > maxRefusalAlloc {
		t.Errorf("refusing %s allocated %d bytes", huge, n)
	}
	// A checkpoint's model file is a qkv-layout weights file.
	w, err := ParamTensors(ckModel(t, tensor.Float32, 4, 1))
	if err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	if err := Save(run, &Checkpoint{Step: 1, Weights: w}); err != nil {
		t.Fatal(err)
	}
	fresh := ckModel(t, tensor.Float32, 4, 2)
	if err := LoadWeights(File(run, ModelFile), fresh, LayoutQKV); err != nil {
		t.Fatalf("loading a checkpoint's model file: %v", err)
	}
}
