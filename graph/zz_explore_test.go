package graph

import (
	"fmt"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func TestExplore2(t *testing.T) {
	shape := tensor.Shape{2, 3, 4, 5}
	xs := make([]float64, shape.TotalSize())
	for i := range xs {
		xs[i] = float64(i)
	}
	for v := 0; v < 4; v++ {
		g := G.NewGraph()
		x := input(g, tensor.Float64, shape, "x")
		var s, m, c *G.Node
		switch v {
		case 0:
			s, _ = Sum(x, 2)
			m, _ = Mean(x, 2)
			c, _ = G.Mul(s, G.NewConstant(1.0))
		case 1:
			m, _ = Mean(x, 2)
			s, _ = Sum(x, 2)
			c, _ = G.Mul(s, G.NewConstant(1.0))
		case 2:
			m, _ = Mean(x, 2)
			s, _ = Sum(x, 2)
			c, _ = G.Exp(s)
			c, _ = G.Log(c)
		case 3:
			s, _ = Sum(x, 2)
			c, _ = G.Mul(s, G.NewConstant(1.0))
			m, _ = Mean(x, 2)
		}
		cm, _ := G.Sum(m)
		cc, _ := G.Sum(c)
		tot, _ := G.Add(cm, cc)
		got := eval(t, map[*G.Node]G.Value{x: NewDense(tensor.Float64, shape, xs)}, tot)
		ws, wm := reduceRef(xs, shape, 2)
		var want float64
		for i := range ws {
			want += ws[i] + wm[i]
		}
		fmt.Println(v, got[0], "want", want)
	}
}
