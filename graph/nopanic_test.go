package graph

import (
	"math"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/internal/graphtest"
)

// Bad input never panics (issue 6): every exported function and method of
// graph given a nil or zero-value node, mask, ids, targets, dropout or
// parameter, a size whose element count overflows int or exceeds
// MaxElements, or a nonsensical GradCheck configuration returns an error that
// says what was wrong, and does not panic. A panic inside the engine would
// run in the VM's goroutine, out of the caller's reach, so these checks happen
// while the graph is built.

// errCase is one call that must return an error containing every want.
type errCase struct {
	name string
	run  func() error
	want []string
}

func checkErrCases(t *testing.T, cases []errCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := noPanic(t, tc.name, tc.run)
			graphtest.WantErr(t, err, tc.want...)
		})
	}
}

// node2 drops the first result of a (node, error) call.
func node2(_ *G.Node, err error) error { return err }

// node3 drops the first two results of a (node, node, error) call.
func node3(_, _ *G.Node, err error) error { return err }

func TestNoPanic(t *testing.T) {
	f64 := tensor.Float64
	g := G.NewGraph()
	x := input(g, f64, tensor.Shape{2, 3, 4}, "x")
	zero := &G.Node{}
	w := input(g, f64, tensor.Shape{4, 5}, "w")
	vec4 := G.NewVector(g, f64, G.WithShape(4), G.WithName("vec4"))
	q := input(g, f64, tensor.Shape{2, 3, 4}, "q")
	kv := input(g, f64, tensor.Shape{2, 5, 4}, "kv")
	// Placeholders have no values, so these shapes cost nothing: only what
	// Attention would allocate when run is too large.
	bigQ := input(g, f64, tensor.Shape{2, 1 << 16, 4}, "bigq")
	mask, err := NewMaskInput(g, f64, 2, 3, 5, "mask")
	if err != nil {
		t.Fatal(err)
	}
	good, err := NewMask(2, 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := NewIDs(g, 2, 3, 5, "ids")
	if err != nil {
		t.Fatal(err)
	}
	table := input(g, f64, tensor.Shape{5, 4}, "table")
	targets, err := NewTargets(g, f64, 6, 4, "targets")
	if err != nil {
		t.Fatal(err)
	}
	logits := input(g, f64, tensor.Shape{6, 4}, "logits")

	// A small cost and parameter for GradCheck, in a graph of their own:
	// GradCheck runs the whole graph, and g has unbound placeholders.
	rng := newRand(7)
	p := param(G.NewGraph(), tensor.Shape{2, 3}, uniform(rng, 6, -1, 1), "p")
	cost := weightedSum(t, p.Node, rng)
	gc := func(cfg GradCheckConfig) func() error {
		return func() error { _, err := GradCheck(cost, []Param{p}, nil, cfg); return err }
	}
	big := 1 << 33

	checkErrCases(t, []errCase{
		// The one size check.
		{"CheckElements/overflow", func() error { return CheckElements(big, big) }, []string{"(8589934592, 8589934592)", "overflows int"}},
		{"CheckElements/over the cap", func() error { return CheckElements(1<<16, 1<<16) }, []string{"(65536, 65536)", "4294967296 elements exceed graph.MaxElements"}},
		{"CheckElements/one past the cap", func() error { return CheckElements(MaxElements + 1) }, []string{"2147483648 elements exceed"}},
		{"CheckElements/zero", func() error { return CheckElements(2, 0, 3) }, []string{"(2, 0, 3)", "size 0 of axis 1"}},
		{"CheckElements/negative", func() error { return CheckElements(-4, -4) }, []string{"size -4 of axis 0"}},
		{"CheckNode/nil", func() error { return CheckNode(nil, "query") }, []string{"query is nil"}},
		{"CheckNode/zero value", func() error { return CheckNode(zero, "query") }, []string{"query", "zero-value node"}},

		// Token ids.
		{"NewIDs/overflow", func() error { _, err := NewIDs(g, 1<<40, 1<<40, 5, "ids"); return err }, []string{`ids "ids"`, "overflows int"}},
		{"NewIDs/over the cap", func() error { _, err := NewIDs(g, 1<<20, 1<<12, 5, "ids"); return err }, []string{`ids "ids"`, "exceed graph.MaxElements"}},
		{"NewIDs/nil graph", func() error { _, err := NewIDs(nil, 2, 3, 5, "ids"); return err }, []string{`ids "ids"`, "graph is nil"}},
		{"IDs.Set/nil", func() error { var n *IDs; return n.Set([]int{0}) }, []string{"ids are nil", "NewIDs"}},
		{"IDs.Set/zero value", func() error { return (&IDs{}).Set([]int{0}) }, []string{"zero value", "NewIDs"}},
		{"IDs.Set/sizes changed", func() error { c := *ids; c.B = 4; return c.Set(make([]int, 12)) }, []string{"changed after NewIDs"}},
		{"Embed/nil ids", func() error { return node2(Embed(table, nil)) }, []string{"embed", "ids are nil"}},
		{"Embed/zero ids", func() error { return node2(Embed(table, &IDs{})) }, []string{"embed", "zero value"}},
		{"Embed/output over the cap", func() error {
			many, err := NewIDs(g, 1<<10, 1<<10, 5, "many")
			if err != nil {
				return nil
			}
			return node2(Embed(input(g, f64, tensor.Shape{5, 1 << 12}, "wide_table"), many))
		}, []string{"embed", "(1024, 1024, 4096)", "exceed"}},
		{"Embed/nil table", func() error { return node2(Embed(nil, ids)) }, []string{"embed", "table is nil"}},

		// Targets and the loss.
		{"NewTargets/overflow", func() error { _, err := NewTargets(g, f64, big, big, "t"); return err }, []string{`targets "t"`, "overflows int"}},
		{"NewTargets/over the cap", func() error { _, err := NewTargets(g, f64, 1<<20, 1<<12, "t"); return err }, []string{`targets "t"`, "exceed"}},
		{"NewTargets/nil graph", func() error { _, err := NewTargets(nil, f64, 2, 3, "t"); return err }, []string{`targets "t"`, "graph is nil"}},
		{"Targets.Set/nil", func() error { var tg *Targets; return tg.Set([]int{0}, []float64{1}) }, []string{"targets are nil"}},
		{"Targets.Set/zero value", func() error { return (&Targets{}).Set([]int{0}, []float64{1}) }, []string{"zero value", "NewTargets"}},
		{"CrossEntropy/nil logits", func() error { return node2(CrossEntropy(nil, targets)) }, []string{"cross-entropy", "logits is nil"}},
		{"CrossEntropy/zero logits", func() error { return node2(CrossEntropy(zero, targets)) }, []string{"cross-entropy", "logits is a zero-value node"}},
		{"CrossEntropy/nil targets", func() error { return node2(CrossEntropy(logits, nil)) }, []string{"cross-entropy", "targets are nil"}},
		{"CrossEntropy/zero targets", func() error { return node2(CrossEntropy(logits, &Targets{})) }, []string{"cross-entropy", "zero value"}},
		{"CrossEntropy/scalar logits", func() error {
			one, err := NewTargets(g, f64, 1, 1, "one")
			if err != nil {
				return nil
			}
			return node2(CrossEntropy(G.NewScalar(g, f64, G.WithName("s")), one))
		}, []string{"cross-entropy", "logits shape"}},

		// Masks.
		{"NewMask/overflow", func() error { _, err := NewMask(1<<30, 1<<30, 1<<30); return err }, []string{"mask", "overflows int"}},
		{"NewMask/over the cap", func() error { _, err := NewMask(1<<10, 1<<11, 1<<11); return err }, []string{"mask", "exceed"}},
		{"Causal/overflow", func() error { _, err := MaskOf(Causal(), 1<<20, 1<<30, 1<<30); return err }, []string{"mask", "overflows int"}},
		{"KeyPadding/no sequences", func() error { _, err := KeyPadding(nil, 3, 4); return err }, []string{"mask", "positive"}},
		{"Mask.And/zero value", func() error { _, err := (Mask{}).And(good); return err }, []string{"mask", "needs"}},
		{"Mask.And/zero other", func() error { _, err := good.And(Mask{B: 2, Sq: 3, Sk: 4}); return err }, []string{"needs 24 entries, has 0"}},
		{"NewMaskInput/overflow", func() error { _, err := NewMaskInput(g, f64, 1<<30, 1<<30, 1<<30, "m"); return err }, []string{`mask "m"`, "overflows int"}},
		{"NewMaskInput/nil graph", func() error { _, err := NewMaskInput(nil, f64, 2, 3, 4, "m"); return err }, []string{`mask "m"`, "graph is nil"}},
		{"NewMaskConst/zero mask", func() error { _, err := NewMaskConst(g, f64, Mask{}, "m"); return err }, []string{`mask "m"`, "needs"}},
		{"MaskNode.Set/nil", func() error { var n *MaskNode; return n.Set(good) }, []string{"nil *MaskNode"}},
		{"MaskNode.Set/nil bias", func() error { return (&MaskNode{B: 2, Sq: 3, Sk: 4}).Set(good) }, []string{"mask: bias is nil"}},
		{"MaskNode.Check/zero bias", func() error { return (&MaskNode{Bias: zero, B: 2, Sq: 3, Sk: 4}).Check() }, []string{"zero-value node"}},
		{"MaskNode.Check/bias shape", func() error { return (&MaskNode{Bias: mask.Bias, B: 2, Sq: 3, Sk: 4}).Check() }, []string{`mask "mask"`, "(2, 3, 5)", "(2, 3, 4)"}},
		{"CombineMasks/nil first", func() error { _, err := CombineMasks(nil, mask); return err }, []string{"combine masks", "first mask is nil"}},
		{"CombineMasks/nil second", func() error { _, err := CombineMasks(mask, nil); return err }, []string{"combine masks", "second mask is nil"}},
		{"CombineMasks/zero second", func() error { _, err := CombineMasks(mask, &MaskNode{}); return err }, []string{"combine masks", "second", "bias is nil"}},

		// Attention.
		{"Attention/nil q", func() error { return node3(Attend(nil, kv, kv, Spec{Heads: 2})) }, []string{"attention", "q is nil"}},
		{"Attention/nil k", func() error { return node3(Attend(q, nil, kv, Spec{Heads: 2})) }, []string{"attention", "k is nil"}},
		{"Attention/nil v", func() error { return node3(Attend(q, kv, nil, Spec{Heads: 2})) }, []string{"attention", "v is nil"}},
		{"Attention/zero q", func() error { return node3(Attend(zero, kv, kv, Spec{Heads: 2})) }, []string{"attention", "q is a zero-value node"}},
		{"Attention/mask with nil bias", func() error { return node3(Attend(q, kv, kv, Spec{Heads: 2, Mask: &MaskNode{B: 2, Sq: 3, Sk: 5}})) }, []string{"attention", "bias is nil"}},
		{"Attention/zero keep", func() error { return node3(Attend(q, kv, kv, Spec{Heads: 2, Mask: mask, Keep: zero})) }, []string{"attention", "keep-mask is a zero-value node"}},
		{"Attention/zero heads", func() error { return node3(Attend(q, kv, kv, Spec{Heads: 0})) }, []string{"attention", "0 heads"}},
		{"Attention/weights over the cap", func() error { return node3(Attend(bigQ, bigQ, bigQ, Spec{Heads: 2})) }, []string{"attention", "weights (B, H, Sq, Sk)", "exceed graph.MaxElements"}},

		// LogSoftmax, LayerNorm, Linear and the small ops.
		{"LogSoftmax/zero", func() error { return node2(LogSoftmax(zero)) }, []string{"log-softmax", "zero-value node"}},
		{"LayerNorm/nil input", func() error { return node2(LayerNorm(nil, vec4, vec4, 1e-5)) }, []string{"layernorm", "input is nil"}},
		{"LayerNorm/nil gain", func() error { return node2(LayerNorm(x, nil, vec4, 1e-5)) }, []string{"layernorm", "gain is nil"}},
		// A nil bias is a gain-only LayerNorm (TestLayerNormNoBias); a nil
		// gain is an error with or without one.
		{"LayerNorm/nil gain, no bias", func() error { return node2(LayerNorm(x, nil, nil, 1e-5)) }, []string{"layernorm", "gain is nil"}},
		{"LayerNorm/NaN eps", func() error { return node2(LayerNorm(x, vec4, vec4, math.NaN())) }, []string{"layernorm", "eps", "NaN"}},
		{"LayerNorm/Inf eps", func() error { return node2(LayerNorm(x, vec4, vec4, math.Inf(1))) }, []string{"layernorm", "eps", "+Inf"}},
		{"Linear/nil input", func() error { return node2(Linear(nil, w, nil)) }, []string{"linear", "input is nil"}},
		{"Linear/nil weights", func() error { return node2(Linear(x, nil, nil)) }, []string{"linear", "weights is nil"}},
		{"Linear/output over the cap", func() error {
			return node2(Linear(input(g, f64, tensor.Shape{1 << 20, 2}, "tall"), input(g, f64, tensor.Shape{2, 1 << 12}, "wide"), nil))
		}, []string{"linear", "output", "(1048576, 4096)", "exceed"}},
		{"Linear/zero bias", func() error { return node2(Linear(x, w, zero)) }, []string{"linear", "bias is a zero-value node"}},
		{"Reshape/nil", func() error { return node2(Reshape(nil, tensor.Shape{2})) }, []string{"reshape", "input is nil"}},
		{"Reshape/negative sizes", func() error { return node2(Reshape(x, tensor.Shape{-2, -12})) }, []string{`reshape "x"`, "size -2"}},
		{"GELU/nil", func() error { return node2(GELU(nil)) }, []string{"gelu", "input is nil"}},

		// Dropout.
		{"NewDropout/nil graph", func() error { _, err := NewDropout(nil, f64, tensor.Shape{2, 3}, 0.1, 1, "d"); return err }, []string{`dropout "d"`, "graph is nil"}},
		{"NewDropout/overflow", func() error { _, err := NewDropout(g, f64, tensor.Shape{big, big}, 0.1, 1, "d"); return err }, []string{`dropout "d"`, "overflows int"}},
		{"NewDropout/empty shape", func() error { _, err := NewDropout(g, f64, nil, 0.1, 1, "d"); return err }, []string{`dropout "d"`, "empty"}},
		{"NewDropout/NaN rate", func() error { _, err := NewDropout(g, f64, tensor.Shape{2, 3}, math.NaN(), 1, "d"); return err }, []string{`dropout "d"`, "NaN"}},
		{"Dropout.Apply/nil dropout", func() error { var d *Dropout; return node2(d.Apply(x)) }, []string{"dropout", "NewDropout"}},
		{"Dropout.Resample/zero", func() error { return (&Dropout{}).Resample(1) }, []string{"dropout", "zero-value"}},
		{"Dropout.Eval/nil", func() error { var d *Dropout; return d.Eval() }, []string{"dropout", "nil"}},
		{"Dropout.Apply/nil input", func() error {
			d, err := NewDropout(g, f64, tensor.Shape{2, 3, 4}, 0.1, 1, "drop")
			if err != nil {
				return nil
			}
			return node2(d.Apply(nil))
		}, []string{`dropout "drop.keep"`, "input is nil"}},

		// GradCheck.
		{"GradCheck/nil cost", func() error { _, err := GradCheck(nil, []Param{p}, nil, GradCheckConfig{}); return err }, []string{"gradcheck", "cost is nil"}},
		{"GradCheck/zero cost", func() error { _, err := GradCheck(zero, []Param{p}, nil, GradCheckConfig{}); return err }, []string{"gradcheck", "cost is a zero-value node"}},
		{"GradCheck/nil params", func() error { _, err := GradCheck(cost, nil, nil, GradCheckConfig{}); return err }, []string{"gradcheck", "no parameters"}},
		{"GradCheck/param with a nil node", func() error {
			_, err := GradCheck(cost, []Param{p, {Name: "ghost"}}, nil, GradCheckConfig{})
			return err
		}, []string{"gradcheck", `parameter 1 "ghost" is nil`}},
		{"GradCheck/nil input node", func() error {
			_, err := GradCheck(cost, []Param{p}, map[*G.Node]G.Value{nil: NewDense(f64, tensor.Shape{1}, []float64{1})}, GradCheckConfig{})
			return err
		}, []string{"gradcheck", "input node is nil"}},
		{"GradCheck/nil input value", func() error {
			_, err := GradCheck(cost, []Param{p}, map[*G.Node]G.Value{x: nil}, GradCheckConfig{})
			return err
		}, []string{"gradcheck", `input "x" has a nil value`}},
		{"GradCheck/NaN eps", gc(GradCheckConfig{Eps: math.NaN()}), []string{"gradcheck", "Eps", "NaN"}},
		{"GradCheck/negative eps", gc(GradCheckConfig{Eps: -1e-5}), []string{"gradcheck", "Eps", "-1e-05"}},
		{"GradCheck/Inf eps", gc(GradCheckConfig{Eps: math.Inf(1)}), []string{"gradcheck", "Eps", "+Inf"}},
		{"GradCheck/NaN floor", gc(GradCheckConfig{Floor: math.NaN()}), []string{"gradcheck", "Floor", "NaN"}},
		{"GradCheck/negative floor", gc(GradCheckConfig{Floor: -1}), []string{"gradcheck", "Floor", "-1"}},
		{"GradCheck/-Inf floor", gc(GradCheckConfig{Floor: math.Inf(-1)}), []string{"gradcheck", "Floor", "-Inf"}},
		{"GradCheck/eps so large the cost overflows", gc(GradCheckConfig{Eps: math.MaxFloat64}), []string{"gradcheck", "finite difference of \"p\"[", "is NaN"}},

		// The rest.
		{"NewMachine/nil graph", func() error { _, err := NewMachine(nil); return err }, []string{"compile", "graph is nil"}},
		{"Float64s/nil", func() error { _, err := Float64s(nil); return err }, []string{"nil"}},
		{"Float64s/nil dense", func() error { var d *tensor.Dense; _, err := Float64s(d); return err }, []string{"nil"}},
	})

	// Methods without an error result must not panic either.
	noPanic(t, "Mask.At", func() error {
		if (Mask{}).At(0, 0, 0) || good.At(5, 0, 0) || good.At(0, -1, 0) || !good.At(1, 2, 3) {
			t.Error("Mask.At: want false outside the mask and for a zero value, true inside")
		}
		return nil
	})
	noPanic(t, "Dropout.Keep", func() error {
		var d *Dropout
		if d.Keep() != nil {
			t.Error("nil Dropout: Keep is not nil")
		}
		return nil
	})
}

// TestGradCheckValidEpsStillWorks: the config checks refuse only what is
// wrong; an explicit positive step and floor still check a gradient.
func TestGradCheckValidEpsStillWorks(t *testing.T) {
	g := G.NewGraph()
	rng := newRand(8)
	p := param(g, tensor.Shape{2, 3}, uniform(rng, 6, -1, 1), "p")
	cost := weightedSum(t, p.Node, rng)
	report, err := GradCheck(cost, []Param{p}, nil, GradCheckConfig{Eps: 1e-6, Floor: 1e-4})
	if err != nil {
		t.Fatal(err)
	}
	if w := report.Worst(); !(w.Rel < 1e-6) {
		t.Errorf("worst relative error %v", w.Rel)
	}
}
