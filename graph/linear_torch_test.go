package graph

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os/exec"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/internal/graphtest"
)

// linearScript is the PyTorch reference of linear attention in its naive
// (O(n²) masked) and recurrent forms, relative to this package.
const linearScript = "../tools/torchref/linear_ref.py"

// torchLinear is one result of linear_ref.py.
type torchLinear struct {
	Y    []float64 `json:"y"`           // the naive form
	YRec []float64 `json:"y_recurrent"` // the recurrent form
	DQ   []float64 `json:"dq"`          // gradients of sum(y ⊙ dy), naive form
	DK   []float64 `json:"dk"`
	DV   []float64 `json:"dv"`
}

// TestLinearAttentionTorch holds qkv's feature maps, chunked linear
// attention (outputs and the gradients of q, k and v through the maps) and
// its recurrent step to an independent float64 PyTorch reference, from
// the same inputs: every feature map, causal and not, with and without the
// denominator, a padded and a fully padded sequence.
func TestLinearAttentionTorch(t *testing.T) {
	py := graphtest.TorchPython(t, linearScript)
	const b, s, heads, dq, dv = 3, 7, 2, 3, 4
	lengths := []int{7, 4, 0}
	type lcase struct {
		fm        FeatureMap
		causal    bool
		normalize bool
	}
	var cases []lcase
	for _, fm := range []FeatureMap{FeatureTaylor, FeatureELU1, FeatureReLU, FeatureIdentity} {
		for _, causal := range []bool{true, false} {
			for _, normalize := range []bool{true, false} {
				cases = append(cases, lcase{fm, causal, normalize})
			}
		}
	}
	rng := newRand(61)
	qv, kv, vv := uniform(rng, b*s*heads*dq, -1, 1), uniform(rng, b*s*heads*dq, -1, 1), uniform(rng, b*s*heads*dv, -1, 1)
	dy := uniform(rng, b*s*heads*dv, -1, 1)
	requests := make([]map[string]any, len(cases))
	for i, c := range cases {
		norm := "none"
		if c.normalize {
			norm = "sum"
		}
		requests[i] = map[string]any{"op": "linear_attention", "dtype": "float64", "batch": b, "seq": s, "heads": heads,
			"q": qv, "k": kv, "v": vv, "feature_map": string(c.fm), "causal": c.causal, "normalize": norm, "lengths": lengths, "dy": dy}
	}
	refs := runLinearRef(t, py, requests)
	for i, c := range cases {
		name := fmt.Sprintf("%s causal %v normalize %v", c.fm, c.causal, c.normalize)
		g := G.NewGraph()
		q := valued(g, tensor.Float64, tensor.Shape{b, s, heads * dq}, qv, "q")
		k := valued(g, tensor.Float64, tensor.Shape{b, s, heads * dq}, kv, "k")
		v := valued(g, tensor.Float64, tensor.Shape{b, s, heads * dv}, vv, "v")
		phiQ, err := Features(q, heads, c.fm)
		if err != nil {
			t.Fatal(err)
		}
		phiK, err := Features(k, heads, c.fm)
		if err != nil {
			t.Fatal(err)
		}
		y, err := LinearAttend(phiQ, phiK, v, LinearSpec{Heads: heads, Causal: c.causal, Normalize: c.normalize, Chunk: 3, KeyLengths: lengths})
		if err != nil {
			t.Fatal(err)
		}
		w := valued(g, tensor.Float64, tensor.Shape{b, s, heads * dv}, dy, "dy")
		cost, err := G.Sum(must(G.HadamardProd(y, w)))
		if err != nil {
			t.Fatal(err)
		}
		grads, err := G.Grad(cost, q, k, v)
		if err != nil {
			t.Fatal(err)
		}
		got := eval(t, nil, append(G.Nodes{y}, grads...)...)
		ref := refs[i]
		// Relative to the largest value: unnormalised identity features grow
		// with the number of keys.
		for j, pair := range [][2][]float64{{got[0], ref.Y}, {got[1], ref.DQ}, {got[2], ref.DK}, {got[3], ref.DV}} {
			what := [...]string{"output", "dq", "dk", "dv"}[j]
			scale := 1.0
			for _, x := range pair[1] {
				scale = math.Max(scale, math.Abs(x))
			}
			if d := maxDiff(pair[0], pair[1]); !(d <= 1e-12*scale) {
				t.Errorf("%s: %s differs from PyTorch's by %.3g (scale %.3g)", name, what, d, scale)
			}
		}
		if c.causal {
			checkLinearSteps(t, name, c.fm, c.normalize, qv, kv, vv, lengths, ref.YRec, b, s, heads, dq, dv)
		}
	}
}

// checkLinearSteps feeds LinearStep the positions of each sequence below
// its length, one at a time from a zero state, and compares its outputs with
// the reference's recurrent form.
func checkLinearSteps(t *testing.T, name string, fm FeatureMap, normalize bool, qv, kv, vv []float64, lengths []int, yRec []float64, b, s, heads, dq, dv int) {
	t.Helper()
	g := G.NewGraph()
	f := heads * fm.Dim(dq)
	q := input(g, tensor.Float64, tensor.Shape{b, 1, heads * dq}, "q")
	k := input(g, tensor.Float64, tensor.Shape{b, 1, heads * dq}, "k")
	v := input(g, tensor.Float64, tensor.Shape{b, 1, heads * dv}, "v")
	state := input(g, tensor.Float64, tensor.Shape{b, f, dv}, "S")
	z := input(g, tensor.Float64, tensor.Shape{b, 1, f}, "z")
	phiQ, err := Features(q, heads, fm)
	if err != nil {
		t.Fatal(err)
	}
	phiK, err := Features(k, heads, fm)
	if err != nil {
		t.Fatal(err)
	}
	out, nextS, nextZ, err := LinearStep(phiQ, phiK, v, state, z, LinearSpec{Heads: heads, Causal: true, Normalize: normalize})
	if err != nil {
		t.Fatal(err)
	}
	sv, zv := make([]float64, b*f*dv), make([]float64, b*f)
	row := func(x []float64, width, pos int) []float64 {
		r := make([]float64, 0, b*width)
		for n := range b {
			r = append(r, x[(n*s+pos)*width:][:width]...)
		}
		return r
	}
	for pos := range s {
		got := eval(t, map[*G.Node]G.Value{
			q:     NewDense(tensor.Float64, tensor.Shape{b, 1, heads * dq}, row(qv, heads*dq, pos)),
			k:     NewDense(tensor.Float64, tensor.Shape{b, 1, heads * dq}, row(kv, heads*dq, pos)),
			v:     NewDense(tensor.Float64, tensor.Shape{b, 1, heads * dv}, row(vv, heads*dv, pos)),
			state: NewDense(tensor.Float64, tensor.Shape{b, f, dv}, sv),
			z:     NewDense(tensor.Float64, tensor.Shape{b, 1, f}, zv),
		}, out, nextS, nextZ)
		sv, zv = got[1], got[2]
		for n := range b {
			if pos >= lengths[n] {
				continue // the reference does not feed padding to the state
			}
			for c := range heads * dv {
				want, have := yRec[(n*s+pos)*heads*dv+c], got[0][n*heads*dv+c]
				if math.Abs(want-have) > 1e-12*math.Max(1, math.Abs(want)) {
					t.Fatalf("%s: step at position %d, row %d, feature %d: %v, PyTorch's recurrent form %v", name, pos, n, c, have, want)
				}
			}
		}
	}
}

// runLinearRef runs linear_ref.py with interpreter py on requests.
func runLinearRef(t *testing.T, py string, requests []map[string]any) []torchLinear {
	t.Helper()
	in, err := json.Marshal(map[string]any{"cases": requests})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, linearScript)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", py, linearScript, err, stderr.Bytes())
	}
	var resp struct {
		Torch   string        `json:"torch"`
		Results []torchLinear `json:"results"`
	}
	if err := json.Unmarshal(out, &resp); err != nil {
		t.Fatalf("reading the reference's output: %v", err)
	}
	if len(resp.Results) != len(requests) {
		t.Fatalf("the reference returned %d results for %d cases", len(resp.Results), len(requests))
	}
	t.Logf("reference: %s, torch %s", py, resp.Torch)
	return resp.Results
}
