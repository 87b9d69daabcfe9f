package graph

import (
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func TestIDsSetErrors(t *testing.T) {
	g := G.NewGraph()
	ids, err := NewIDs(g, 2, 3, 5, "ids")
	if err != nil {
		t.Fatal(err)
	}
	if ids.B != 2 || ids.S != 3 || ids.Vocab != 5 || !ids.Node.Shape().Eq(tensor.Shape{6}) || ids.Node.Dtype() != tensor.Int {
		t.Fatalf("NewIDs(2, 3, 5): B=%d S=%d Vocab=%d node %v %v", ids.B, ids.S, ids.Vocab, ids.Node.Shape(), ids.Node.Dtype())
	}
	for _, test := range []struct {
		name string
		ids  []int
		want string
	}{
		{"too few", []int{0, 1, 2, 3, 4}, "got 5 ids, want B*S = 2*3 = 6"},
		{"too many", []int{0, 1, 2, 3, 4, 0, 1}, "got 7 ids"},
		{"nil", nil, "got 0 ids"},
		{"id = vocab", []int{0, 1, 2, 3, 5, 4}, "id 5 at (b=1, s=1) is outside the vocabulary [0, 5)"},
		{"large id", []int{0, 1, 2, 3, 4, 1 << 40}, "at (b=1, s=2)"},
		{"negative id", []int{0, -1, 2, 3, 4, 0}, "id -1 at (b=0, s=1)"},
	} {
		err := noPanic(t, test.name, func() error { return ids.Set(test.ids) })
		if err == nil {
			t.Errorf("Set(%s): no error", test.name)
		} else if !strings.Contains(err.Error(), test.want) {
			t.Errorf("Set(%s): error %q does not mention %q", test.name, err, test.want)
		}
	}
	if err := ids.Set([]int{0, 4, 1, 3, 2, 0}); err != nil {
		t.Errorf("Set of valid ids: %v", err)
	}
	for _, s := range [][3]int{{0, 1, 1}, {1, 0, 1}, {1, 1, 0}, {-1, 2, 2}} {
		if _, err := NewIDs(g, s[0], s[1], s[2], "bad"); err == nil {
			t.Errorf("NewIDs%v: no error", s)
		}
	}
}

// Embedding lookups through IDs pick the right rows, repeated ids included,
// and a rejected Set leaves the previous ids bound.
func TestIDsLookup(t *testing.T) {
	const b, s, vocab, dim = 2, 3, 4, 3
	table := uniform(newRand(61), vocab*dim, -1, 1)
	g := G.NewGraph()
	emb := G.NewMatrix(g, tensor.Float64, G.WithShape(vocab, dim), G.WithName("emb"),
		G.WithValue(NewDense(tensor.Float64, tensor.Shape{vocab, dim}, table)))
	ids, err := NewIDs(g, b, s, vocab, "ids")
	if err != nil {
		t.Fatal(err)
	}
	out, err := Embed(emb, ids)
	if err != nil {
		t.Fatal(err)
	}
	if want := (tensor.Shape{b, s, dim}); !out.Shape().Eq(want) {
		t.Fatalf("Embed shape %v, want %v", out.Shape(), want)
	}
	var v G.Value
	G.Read(out, &v)
	vm, err := NewMachine(g)
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	for _, test := range []struct {
		set  []int
		want []int // the ids bound after Set
	}{
		{set: []int{3, 0, 0, 2, 1, 3}, want: []int{3, 0, 0, 2, 1, 3}},
		{set: []int{1, 1, 1, 1, 1, 4}, want: []int{3, 0, 0, 2, 1, 3}}, // rejected
		{set: []int{2, 2, 3, 0, 1, 0}, want: []int{2, 2, 3, 0, 1, 0}},
	} {
		err := ids.Set(test.set)
		if valid := test.set[5] < vocab; valid != (err == nil) {
			t.Fatalf("Set(%v): err %v", test.set, err)
		}
		if err := vm.RunAll(); err != nil {
			t.Fatal(err)
		}
		got, err := Float64s(v)
		vm.Reset()
		if err != nil {
			t.Fatal(err)
		}
		want := make([]float64, 0, b*s*dim)
		for _, id := range test.want {
			want = append(want, table[id*dim:(id+1)*dim]...)
		}
		checkClose(t, "Embed after Set", got, want, 0)
	}
}

func TestEmbedErrors(t *testing.T) {
	g := G.NewGraph()
	ids, err := NewIDs(g, 1, 2, 5, "ids")
	if err != nil {
		t.Fatal(err)
	}
	for _, test := range []struct {
		name  string
		table *G.Node
	}{
		{"too few rows", G.NewMatrix(g, tensor.Float64, G.WithShape(4, 3), G.WithName("small"))},
		{"3-D table", input(g, tensor.Float64, tensor.Shape{5, 3, 1}, "cube")},
	} {
		err := noPanic(t, test.name, func() error { _, err := Embed(test.table, ids); return err })
		if err == nil {
			t.Errorf("Embed with %s: no error", test.name)
		}
	}
}
