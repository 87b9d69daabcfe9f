package graph

import (
	"runtime"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Add, Embed and AddPositions against their plain definitions (forward) and
// finite differences (every input's gradient), float64, with repeated ids
// and a position table longer than the sequence.
func TestTableOpsGradients(t *testing.T) {
	const b, s, d, vocab, maxLen = 2, 3, 4, 5, 6
	ids := []int{1, 4, 1, 0, 1, 4} // (B, S); 1 three times, 4 twice, 2 and 3 never
	for _, test := range []struct {
		name  string
		build func(g *G.ExprGraph, rng func(n int) []float64) (out *G.Node, params []Param, want []float64)
	}{
		{"add", func(g *G.ExprGraph, rng func(int) []float64) (*G.Node, []Param, []float64) {
			a := param(g, tensor.Shape{b, s, d}, rng(b*s*d), "a")
			c := param(g, tensor.Shape{b, s, d}, rng(b*s*d), "c")
			want := make([]float64, b*s*d)
			av, cv := a.Node.Value().Data().([]float64), c.Node.Value().Data().([]float64)
			for i := range want {
				want[i] = av[i] + cv[i]
			}
			return G.Must(Add(a.Node, c.Node)), []Param{a, c}, want
		}},
		{"embed", func(g *G.ExprGraph, rng func(int) []float64) (*G.Node, []Param, []float64) {
			table := param(g, tensor.Shape{vocab, d}, rng(vocab*d), "table")
			in, err := NewIDs(g, b, s, vocab, "ids")
			if err != nil {
				t.Fatal(err)
			}
			if err := in.Set(ids); err != nil {
				t.Fatal(err)
			}
			tv := table.Node.Value().Data().([]float64)
			var want []float64
			for _, id := range ids {
				want = append(want, tv[id*d:(id+1)*d]...)
			}
			return G.Must(Embed(table.Node, in)), []Param{table}, want
		}},
		{"positions", func(g *G.ExprGraph, rng func(int) []float64) (*G.Node, []Param, []float64) {
			x := param(g, tensor.Shape{b, s, d}, rng(b*s*d), "x")
			table := param(g, tensor.Shape{maxLen, d}, rng(maxLen*d), "table")
			xv, tv := x.Node.Value().Data().([]float64), table.Node.Value().Data().([]float64)
			want := make([]float64, b*s*d)
			for i := range want {
				want[i] = xv[i] + tv[i%(s*d)]
			}
			return G.Must(AddPositions(x.Node, table.Node)), []Param{x, table}, want
		}},
	} {
		t.Run(test.name, func(t *testing.T) {
			rng := newRand(91)
			g := G.NewGraph()
			out, params, want := test.build(g, func(n int) []float64 { return uniform(rng, n, -1, 1) })
			got := eval(t, nil, out)[0]
			checkClose(t, "forward", got, want, 0)
			rep, err := GradCheck(weightedSum(t, out, rng), params, nil, GradCheckConfig{})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rep {
				t.Logf("%s: relative error %.2g", r.Name, r.Rel)
				if r.Rel > 1e-8 {
					t.Errorf("%s: gradient relative error %.2e against finite differences, want < 1e-8", r.Name, r.Rel)
				}
			}
		})
	}
}

// An id outside the table is an error naming it, not a wrong row.
func TestEmbedRefusesOutOfRangeID(t *testing.T) {
	g := G.NewGraph()
	table := param(g, tensor.Shape{3, 2}, []float64{1, 2, 3, 4, 5, 6}, "table")
	in, err := NewIDs(g, 1, 2, 3, "ids")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Embed(table.Node, in); err != nil {
		t.Fatal(err)
	}
	vm, err := NewMachine(g)
	if err != nil {
		t.Fatal(err)
	}
	// Past IDs.Set's check, as a user binding the node directly would.
	if err := G.Let(in.Node, tensor.New(tensor.WithShape(2), tensor.WithBacking([]int{2, 3}))); err != nil {
		t.Fatal(err)
	}
	err = vm.RunAll()
	if err == nil || !strings.Contains(err.Error(), "id 3 at 1 is outside [0, 3)") {
		t.Errorf("RunAll with id 3 of a 3-row table: got %v, want an error naming the id", err)
	}
}

// WriteSlot equals cache + slot ⊗ row, the broadcast it replaces, in both
// dtypes, with a row written at a different position per sequence and a
// sequence that writes nowhere.
func TestWriteSlot(t *testing.T) {
	const b, l, d = 3, 4, 5
	slot := make([]float64, b*l)
	slot[0*l+2], slot[1*l+0] = 1, 1 // sequence 2 writes nowhere
	for _, dt := range floatTypes {
		rng := newRand(5)
		cache, row := uniform(rng, b*l*d, -1, 1), uniform(rng, b*d, -1, 1)
		g := G.NewGraph()
		cn, sn, rn := input(g, dt, tensor.Shape{b, l, d}, "cache"), input(g, dt, tensor.Shape{b, l, 1}, "slot"), input(g, dt, tensor.Shape{b, 1, d}, "row")
		out, err := WriteSlot(cn, sn, rn)
		if err != nil {
			t.Fatal(err)
		}
		got := eval(t, map[*G.Node]G.Value{
			cn: NewDense(dt, tensor.Shape{b, l, d}, cache),
			sn: NewDense(dt, tensor.Shape{b, l, 1}, slot),
			rn: NewDense(dt, tensor.Shape{b, 1, d}, row),
		}, out)[0]
		cr, rr := roundTo(dt, cache), roundTo(dt, row)
		want := make([]float64, b*l*d)
		for i := range want {
			bi, p, j := i/(l*d), i/d%l, i%d
			want[i] = cr[i] + slot[bi*l+p]*rr[bi*d+j]
		}
		checkClose(t, dt.String(), got, roundTo(dt, want), 0)
	}
	g := G.NewGraph()
	if _, err := WriteSlot(input(g, tensor.Float64, tensor.Shape{b, l, d}, "c"), input(g, tensor.Float64, tensor.Shape{b, l, 2}, "s"), input(g, tensor.Float64, tensor.Shape{b, 1, d}, "r")); err == nil {
		t.Error("a (B, L, 2) slot: got no error")
	}
}

// TestAddInChunks: an add large enough to be shared over the cores gives
// a[i] + b[i] at every element, on one core and on two, in float32 and
// float64 (chunks of activationChunk, a last partial one).
func TestAddInChunks(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	shape := tensor.Shape{3, 65, 130} // 25,350 values: 3 chunks and a part
	rng := newRand(3)
	for _, procs := range []int{1, 2} {
		runtime.GOMAXPROCS(procs)
		for _, dt := range floatTypes {
			av, bv := roundTo(dt, uniform(rng, shape.TotalSize(), -1, 1)), roundTo(dt, uniform(rng, shape.TotalSize(), -1, 1))
			op := addOp{shape: shape, buf: new(output)}
			got, err := op.Do(NewDense(dt, shape, av), NewDense(dt, shape, bv))
			if err != nil {
				t.Fatal(err)
			}
			vals, err := Float64s(got)
			if err != nil {
				t.Fatal(err)
			}
			for i, v := range vals {
				want := av[i] + bv[i]
				if dt == tensor.Float32 {
					want = float64(float32(av[i]) + float32(bv[i]))
				}
				if v != want {
					t.Fatalf("procs=%d %v: y[%d] = %v, want %v", procs, dt, i, v, want)
				}
			}
		}
	}
}
