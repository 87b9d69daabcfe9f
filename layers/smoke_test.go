package layers

import (
	"testing"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func TestSmokeDecoderGrad(t *testing.T) {
	g := G.NewGraph()
	s, _ := NewScope(g, tensor.Float64, 1)
	d, err := NewDecoder(s, StackConfig{Vocab: 5, MaxLen: 4, Dim: 8, Heads: 2, Layers: 1, Hidden: 16, Bias: true})
	if err != nil {
		t.Fatal(err)
	}
	ids, _ := graph.NewIDs(g, 2, 4, 5, "ids")
	logits, _, err := d.Forward(ids, nil)
	if err != nil {
		t.Fatal(err)
	}
	tg, _ := graph.NewTargets(g, tensor.Float64, 8, 5, "targets")
	cost, err := graph.CrossEntropy(logits, tg)
	if err != nil {
		t.Fatal(err)
	}
	if err := ids.Set([]int{1, 2, 3, 4, 0, 1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	if err := tg.Set([]int{2, 3, 4, 0, 1, 2, 3, 4}, []float64{1, 1, 1, 1, 1, 1, 1, 0}); err != nil {
		t.Fatal(err)
	}
	rep, err := graph.GradCheck(cost, d.Params(), nil, graph.GradCheckConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + rep.String())
}
