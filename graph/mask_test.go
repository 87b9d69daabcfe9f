package graph

import (
	"math"
	"slices"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

func TestCausal(t *testing.T) {
	for _, test := range []struct{ b, s int }{{1, 1}, {1, 4}, {3, 5}} {
		m, err := MaskOf(Causal(), test.b, test.s, test.s)
		if err != nil {
			t.Fatalf("Causal(%d, %d): %v", test.b, test.s, err)
		}
		if m.B != test.b || m.Sq != test.s || m.Sk != test.s || len(m.Allow) != test.b*test.s*test.s {
			t.Fatalf("Causal(%d, %d): got (B, Sq, Sk) = (%d, %d, %d) with %d entries", test.b, test.s, m.B, m.Sq, m.Sk, len(m.Allow))
		}
		for n := 0; n < test.b; n++ {
			for i := 0; i < test.s; i++ {
				for j := 0; j < test.s; j++ {
					if got, want := m.At(n, i, j), j <= i; got != want {
						t.Errorf("Causal(%d, %d).At(%d, %d, %d) = %v, want %v", test.b, test.s, n, i, j, got, want)
					}
				}
			}
		}
	}
	for _, bad := range [][2]int{{0, 3}, {2, 0}, {-1, 2}} {
		if _, err := MaskOf(Causal(), bad[0], bad[1], bad[1]); err == nil {
			t.Errorf("Causal(%d, %d): no error", bad[0], bad[1])
		}
	}
}

func TestKeyPadding(t *testing.T) {
	lengths := []int{3, 0, 5, 1}
	const sq, sk = 2, 5
	m, err := KeyPadding(lengths, sq, sk)
	if err != nil {
		t.Fatal(err)
	}
	if m.B != len(lengths) || m.Sq != sq || m.Sk != sk {
		t.Fatalf("shape (%d, %d, %d), want (%d, %d, %d)", m.B, m.Sq, m.Sk, len(lengths), sq, sk)
	}
	for n, l := range lengths {
		for i := 0; i < sq; i++ {
			for j := 0; j < sk; j++ {
				if got, want := m.At(n, i, j), j < l; got != want {
					t.Errorf("KeyPadding: At(%d, %d, %d) with length %d = %v, want %v", n, i, j, l, got, want)
				}
			}
		}
	}
	for _, test := range []struct {
		lengths []int
		sq, sk  int
	}{
		{[]int{3, -1}, 2, 5},
		{[]int{6}, 2, 5},
		{nil, 2, 5},
		{[]int{1}, 0, 5},
		{[]int{1}, 2, 0},
	} {
		if _, err := KeyPadding(test.lengths, test.sq, test.sk); err == nil {
			t.Errorf("KeyPadding(%v, %d, %d): no error", test.lengths, test.sq, test.sk)
		}
	}
}

func TestNewMask(t *testing.T) {
	m, err := NewMask(2, 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Allow) != 24 {
		t.Fatalf("NewMask(2, 3, 4) has %d entries, want 24", len(m.Allow))
	}
	for i, a := range m.Allow {
		if !a {
			t.Errorf("NewMask entry %d hides", i)
		}
	}
	for _, s := range [][3]int{{0, 1, 1}, {1, 0, 1}, {1, 1, 0}, {-2, 1, 1}} {
		if _, err := NewMask(s[0], s[1], s[2]); err == nil {
			t.Errorf("NewMask%v: no error", s)
		}
	}
}

func TestMaskAnd(t *testing.T) {
	causal, err := MaskOf(Causal(), 2, 4, 4)
	if err != nil {
		t.Fatal(err)
	}
	pad, err := KeyPadding([]int{2, 4}, 4, 4)
	if err != nil {
		t.Fatal(err)
	}
	both, err := causal.And(pad)
	if err != nil {
		t.Fatal(err)
	}
	for n := 0; n < 2; n++ {
		for i := 0; i < 4; i++ {
			for j := 0; j < 4; j++ {
				want := j <= i && j < []int{2, 4}[n]
				if got := both.At(n, i, j); got != want {
					t.Errorf("And: At(%d, %d, %d) = %v, want %v", n, i, j, got, want)
				}
			}
		}
	}
	// And does not modify its operands.
	if !causal.At(0, 3, 3) || !pad.At(1, 0, 3) {
		t.Error("And modified an operand")
	}
	other, err := NewMask(2, 4, 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := causal.And(other); err == nil {
		t.Error("And of (2, 4, 4) and (2, 4, 5): no error")
	}
}

func checkMaskValues(t *testing.T, what string, n *MaskNode, m Mask) {
	t.Helper()
	bias := eval(t, nil, n.Bias)[0]
	for i, ok := range m.Allow {
		switch {
		case ok && bias[i] != 0:
			t.Errorf("%s: allowed entry %d has bias %v, want 0", what, i, bias[i])
		case !ok && !math.IsInf(bias[i], -1):
			t.Errorf("%s: hidden entry %d has bias %v, want -Inf", what, i, bias[i])
		}
	}
}

func TestNewMaskConst(t *testing.T) {
	causal, err := MaskOf(Causal(), 2, 3, 3)
	if err != nil {
		t.Fatal(err)
	}
	open, err := NewMask(2, 3, 3)
	if err != nil {
		t.Fatal(err)
	}
	pad, err := KeyPadding([]int{3, 1}, 3, 3)
	if err != nil {
		t.Fatal(err)
	}
	causalPad, err := causal.And(pad)
	if err != nil {
		t.Fatal(err)
	}
	// Hides the future except one entry.
	leaky := causal
	leaky.Allow = append([]bool(nil), causal.Allow...)
	leaky.Allow[(1*3+0)*3+2] = true
	single, err := NewMask(1, 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	for _, test := range []struct {
		name string
		m    Mask
	}{
		{"causal", causal},
		{"open", open},
		{"padding", pad},
		{"causal and padding", causalPad},
		{"leaky", leaky},
		{"single", single},
	} {
		for _, dt := range floatTypes {
			g := G.NewGraph()
			n, err := NewMaskConst(g, dt, test.m, "mask")
			if err != nil {
				t.Fatalf("%s: %v", test.name, err)
			}
			if n.B != test.m.B || n.Sq != test.m.Sq || n.Sk != test.m.Sk {
				t.Errorf("%s: node sizes (%d, %d, %d)", test.name, n.B, n.Sq, n.Sk)
			}
			if n.Bias.Dtype() != dt {
				t.Errorf("%s: dtype %v, want %v", test.name, n.Bias.Dtype(), dt)
			}
			checkMaskValues(t, test.name, n, test.m)
		}
	}
	g := G.NewGraph()
	if _, err := NewMaskConst(g, tensor.Float64, Mask{B: 1, Sq: 2, Sk: 2, Allow: []bool{true}}, "bad"); err == nil {
		t.Error("NewMaskConst of a mask with too few entries: no error")
	}
	if _, err := NewMaskConst(g, tensor.Int, causal, "ints"); err == nil {
		t.Error("NewMaskConst of dtype int: no error")
	}
}

func TestMaskNodeSet(t *testing.T) {
	g := G.NewGraph()
	n, err := NewMaskInput(g, tensor.Float32, 2, 3, 4, "mask")
	if err != nil {
		t.Fatal(err)
	}
	good := testMask()
	if err := n.Set(good); err != nil {
		t.Fatal(err)
	}
	checkMaskValues(t, "Set", n, good)

	wrongSq, err := NewMask(2, 4, 4)
	if err != nil {
		t.Fatal(err)
	}
	wrongB, err := NewMask(1, 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	short := good
	short.Allow = good.Allow[:len(good.Allow)-1]
	for _, test := range []struct {
		name string
		m    Mask
		want string
	}{
		{"wrong Sq", wrongSq, "want (2, 3, 4)"},
		{"wrong B", wrongB, "want (2, 3, 4)"},
		{"too few entries", short, "needs 24 entries"},
		{"zero", Mask{}, "needs"},
	} {
		err := noPanic(t, test.name, func() error { return n.Set(test.m) })
		if err == nil {
			t.Errorf("Set(%s): no error", test.name)
		} else if !strings.Contains(err.Error(), test.want) {
			t.Errorf("Set(%s): error %q does not mention %q", test.name, err, test.want)
		}
	}
	// A rejected Set leaves the previous value bound.
	checkMaskValues(t, "after rejected Set", n, good)

	for _, test := range []struct {
		dt        tensor.Dtype
		b, sq, sk int
	}{
		{tensor.Int, 1, 1, 1},
		{tensor.Float64, 0, 1, 1},
		{tensor.Float64, 1, 0, 1},
		{tensor.Float64, 1, 1, -1},
	} {
		if _, err := NewMaskInput(g, test.dt, test.b, test.sq, test.sk, "bad"); err == nil {
			t.Errorf("NewMaskInput(%v, %d, %d, %d): no error", test.dt, test.b, test.sq, test.sk)
		}
	}
}

func TestCombineMasks(t *testing.T) {
	const b, s = 2, 4
	causal, err := MaskOf(Causal(), b, s, s)
	if err != nil {
		t.Fatal(err)
	}
	lengths := []int{4, 2}
	pad, err := KeyPadding(lengths, s, s)
	if err != nil {
		t.Fatal(err)
	}
	want, err := causal.And(pad)
	if err != nil {
		t.Fatal(err)
	}
	for _, dt := range floatTypes {
		g := G.NewGraph()
		cn, err := NewMaskConst(g, dt, causal, "causal")
		if err != nil {
			t.Fatal(err)
		}
		pn, err := NewMaskInput(g, dt, b, s, s, "pad")
		if err != nil {
			t.Fatal(err)
		}
		if err := pn.Set(pad); err != nil {
			t.Fatal(err)
		}
		both, err := CombineMasks(cn, pn)
		if err != nil {
			t.Fatal(err)
		}
		if both.B != b || both.Sq != s || both.Sk != s {
			t.Errorf("combined sizes (%d, %d, %d)", both.B, both.Sq, both.Sk)
		}
		scores := input(g, dt, tensor.Shape{b, s, s}, "scores")
		out, err := maskedSoftmaxOf(scores, both)
		if err != nil {
			t.Fatal(err)
		}
		xs := roundTo(dt, uniform(newRand(9), b*s*s, -2, 2))
		got := eval(t, map[*G.Node]G.Value{scores: NewDense(dt, tensor.Shape{b, s, s}, xs)}, out, both.Bias)
		for i, ok := range want.Allow {
			if ok != (got[1][i] == 0) {
				t.Errorf("%v: combined entry %d: bias %v, want allowed = %v", dt, i, got[1][i], ok)
			}
		}
		checkClose(t, "softmax under combined mask", got[0], maskedSoftmaxRef(xs, want.Allow, s), tolFor(dt))
		for i, ok := range want.Allow {
			if !ok && got[0][i] != 0 {
				t.Errorf("%v: hidden entry %d has weight %v", dt, i, got[0][i])
			}
		}

		other, err := NewMaskInput(g, dt, b, s, s+1, "other")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := CombineMasks(cn, other); err == nil {
			t.Error("CombineMasks of (2, 4, 4) and (2, 4, 5): no error")
		}
	}
}

// TestMaskNodeKeyLengths: a key-padding mask's lengths are read off it at
// every Set, in place, and any other mask gives -1 for the sequences it
// does not pad.
func TestMaskNodeKeyLengths(t *testing.T) {
	g := G.NewGraph()
	n, err := NewMaskInput(g, tensor.Float64, 3, 2, 4, "pad")
	if err != nil {
		t.Fatal(err)
	}
	lengths := n.KeyLengths()
	if !slices.Equal(lengths, []int{0, 0, 0}) {
		t.Errorf("before Set: %v, want zeros", lengths)
	}
	pad, err := KeyPadding([]int{4, 0, 2}, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Set(pad); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(lengths, []int{4, 0, 2}) {
		t.Errorf("after Set of KeyPadding(4, 0, 2): %v", lengths)
	}
	causal, err := MaskOf(Causal(), 3, 2, 4)
	if err != nil {
		t.Fatal(err)
	}
	pad.Allow[(2*2+1)*4+0] = false // sequence 2, query 1 loses key 0: no longer padding
	for _, c := range []struct {
		m    Mask
		want []int
	}{{causal, []int{-1, -1, -1}}, {pad, []int{4, 0, -1}}} {
		if err := n.Set(c.m); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(n.KeyLengths(), c.want) {
			t.Errorf("lengths %v, want %v", n.KeyLengths(), c.want)
		}
	}
	if (*MaskNode)(nil).KeyLengths() != nil {
		t.Error("a nil mask has lengths")
	}
}

// TestAttentionSkipsVisibleSequences: fused and flash attention skip adding
// the mask of a sequence that Set's key lengths say hides nothing
// (MaskNode.setLengths), with the bits of adding its zeros, forward and
// backward; they trust those lengths only while the mask holds the value
// Set bound: a hidden key written into that value is not seen (the
// documented contract), the same values bound with G.Let are read, and a
// Set with a padded sequence reads that sequence's mask again.
func TestAttentionSkipsVisibleSequences(t *testing.T) {
	const b, s, d, heads = 2, 6, 4, 2
	for _, impl := range []Impl{Fused, Flash} {
		t.Run(string(impl), func(t *testing.T) {
			rng := newRand(5)
			dt := tensor.Float64
			g := G.NewGraph()
			q, k, v := input(g, dt, tensor.Shape{b, s, d}, "q"), input(g, dt, tensor.Shape{b, s, d}, "k"), input(g, dt, tensor.Shape{b, s, d}, "v")
			lets := map[*G.Node]G.Value{}
			for _, n := range []*G.Node{q, k, v} {
				lets[n] = NewDense(dt, n.Shape(), uniform(rng, b*s*d, -2, 2))
			}
			mask, err := NewMaskInput(g, dt, b, s, s, "pad")
			if err != nil {
				t.Fatal(err)
			}
			out, _, err := Attend(q, k, v, Spec{Impl: impl, Heads: heads, Mask: mask, MaskMod: Causal()})
			if err != nil {
				t.Fatal(err)
			}
			grads, err := G.Grad(weightedSum(t, out, rng), q, k, v)
			if err != nil {
				t.Fatal(err)
			}
			nodes := append(G.Nodes{out}, grads...)
			set := func(lengths ...int) {
				t.Helper()
				m, err := KeyPadding(lengths, s, s)
				if err != nil {
					t.Fatal(err)
				}
				if err := mask.Set(m); err != nil {
					t.Fatal(err)
				}
			}
			// let binds the mask's current values as a tensor of its own.
			let := func() {
				t.Helper()
				if err := G.Let(mask.Bias, mask.Bias.Value().(*tensor.Dense).Clone().(*tensor.Dense)); err != nil {
					t.Fatal(err)
				}
			}
			same := func(what string, got, want [][]float64) {
				t.Helper()
				for i := range want {
					for j := range want[i] {
						if math.Float64bits(got[i][j]) != math.Float64bits(want[i][j]) {
							t.Fatalf("%s: value %d[%d] = %v, want %v", what, i, j, got[i][j], want[i][j])
						}
					}
				}
			}

			set(s, s)
			skipped := eval(t, lets, nodes...)
			let()
			same("all visible, the mask bound with G.Let (read)", eval(t, lets, nodes...), skipped)

			set(s, s)
			hidden := mask.Bias.Value().(*tensor.Dense).Float64s()
			hidden[(0*s+s-1)*s] = math.Inf(-1) // key 0 from sequence 0's last query
			same("a key hidden by writing into the value Set bound", eval(t, lets, nodes...), skipped)
			let()
			read := eval(t, lets, nodes...)
			row := read[0][(0*s+s-1)*d : (0*s+s)*d]
			if want := skipped[0][(0*s+s-1)*d : (0*s+s)*d]; slices.Equal(row, want) {
				t.Fatalf("a key hidden in a mask bound with G.Let changed nothing: output row %v", row)
			}

			set(s, s-2)
			padded := eval(t, lets, nodes...)
			let()
			same("sequence 1 padded, the mask bound with G.Let", eval(t, lets, nodes...), padded)
			if slices.Equal(padded[0], skipped[0]) {
				t.Fatal("padding sequence 1 changed nothing")
			}
		})
	}
}

// TestSetKeyLengths: SetKeyLengths binds the bias and key lengths that Set
// of KeyPadding's mask binds, call after call (lengths that change, stay,
// or follow a Set of a mask that is not a key padding), in both dtypes; and
// bad lengths return an error naming them and change nothing.
func TestSetKeyLengths(t *testing.T) {
	const b, sq, sk = 3, 4, 5
	causal, err := MaskOf(Causal(), b, sq, sk)
	if err != nil {
		t.Fatal(err)
	}
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		g := G.NewGraph()
		got, err := NewMaskInput(g, dt, b, sq, sk, "got")
		if err != nil {
			t.Fatal(err)
		}
		want, err := NewMaskInput(g, dt, b, sq, sk, "want")
		if err != nil {
			t.Fatal(err)
		}
		for step, lengths := range [][]int{{3, 0, 5}, {3, 2, 5}, {3, 2, 5}, nil, {5, 5, 5}, {0, 1, 4}} {
			if lengths == nil { // a mask Set that is not a key padding
				if err := got.Set(causal); err != nil {
					t.Fatal(err)
				}
				continue
			}
			if err := got.SetKeyLengths(lengths); err != nil {
				t.Fatalf("%v step %d: %v", dt, step, err)
			}
			m, err := KeyPadding(lengths, sq, sk)
			if err != nil {
				t.Fatal(err)
			}
			if err := want.Set(m); err != nil {
				t.Fatal(err)
			}
			gv, _ := Float64s(got.Bias.Value())
			wv, _ := Float64s(want.Bias.Value())
			if !slices.Equal(gv, wv) || !slices.Equal(got.KeyLengths(), want.KeyLengths()) {
				t.Fatalf("%v step %d, lengths %v: bias %v, key lengths %v; Set(KeyPadding) binds %v, %v", dt, step, lengths, gv, got.KeyLengths(), wv, want.KeyLengths())
			}
		}
		before, _ := Float64s(got.Bias.Value())
		for _, bad := range []struct {
			lengths []int
			msg     string
		}{{[]int{1, 2}, "2 key lengths"}, {[]int{1, -1, 2}, "key length -1 of sequence 1"}, {[]int{1, 2, 6}, "key length 6 of sequence 2"}} {
			if err := got.SetKeyLengths(bad.lengths); err == nil || !strings.Contains(err.Error(), bad.msg) {
				t.Errorf("SetKeyLengths(%v) = %v, want an error saying %q", bad.lengths, err, bad.msg)
			}
		}
		if after, _ := Float64s(got.Bias.Value()); !slices.Equal(after, before) || !slices.Equal(got.KeyLengths(), []int{0, 1, 4}) {
			t.Errorf("refused lengths changed the mask: %v, key lengths %v", after, got.KeyLengths())
		}
	}
	var nilMask *MaskNode
	if err := nilMask.SetKeyLengths([]int{1}); err == nil {
		t.Error("SetKeyLengths on a nil mask: no error")
	}
}
