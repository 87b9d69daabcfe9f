package optim

import (
	"math"
	"slices"
	"strings"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/train/checkpoint"
)

// Helpers of the optimizer, clipping and schedule tests carry an "opt"
// prefix so that they cannot collide with other test files of the package.
// Expected values are computed in plain Go, never by the code under test.

// optSpec describes one test parameter.
type optSpec struct {
	name  string
	shape []int
	vals  []float64
}

// optParams builds the parameters of specs in dtype dt in a fresh graph with
// a scalar cost reaching all of them, compiles a machine with dual values
// and runs it once, so that every p.Node.Grad() holds a buffer the test can
// overwrite with optSetGrad.
func optParams(t *testing.T, dt tensor.Dtype, specs ...optSpec) []graph.Param {
	t.Helper()
	g := G.NewGraph()
	params := make([]graph.Param, len(specs))
	var cost *G.Node
	for i, s := range specs {
		n := G.NewTensor(g, dt, len(s.shape), G.WithShape(s.shape...), G.WithName(s.name),
			G.WithValue(graph.NewDense(dt, s.shape, s.vals)))
		params[i] = graph.Param{Name: s.name, Node: n, Role: optRole(s.name, len(s.shape))}
		sum, err := G.Sum(n)
		if err != nil {
			t.Fatalf("sum of %q: %v", s.name, err)
		}
		if cost == nil {
			cost = sum
		} else if cost, err = G.Add(cost, sum); err != nil {
			t.Fatalf("add %q: %v", s.name, err)
		}
	}
	nodes := graph.Nodes(params)
	if _, err := G.Grad(cost, nodes...); err != nil {
		t.Fatalf("grad: %v", err)
	}
	vm, err := graph.NewMachine(g)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Close() })
	if err := vm.RunAll(); err != nil {
		t.Fatalf("run: %v", err)
	}
	vm.Reset()
	return params
}

// optRole is the role the layers would give a test parameter of that name
// and rank: embeddings by name, gains by name, matrices weights, vectors
// biases. Tests that need another role set it themselves.
func optRole(name string, dims int) graph.Role {
	switch {
	case strings.Contains(name, "emb"):
		return graph.RoleEmbedding
	case strings.HasSuffix(name, "gain"):
		return graph.RoleGain
	case dims >= 2:
		return graph.RoleWeight
	}
	return graph.RoleBias
}

// optDecayed returns the names of the parameters o decays, in order.
func optDecayed(o *Optimizer) []string { return o.Decayed() }

// optMust returns c, failing on err; for the constructors in test tables.
func optMust(c Config, err error) Config {
	if err != nil {
		panic(err)
	}
	return c
}

// PyTorch's Adam and AdamW (minGPT's decay rule).
var (
	optDefaultAdam  = optMust(NewAdam(DefaultBeta1, DefaultBeta2, DefaultEps))
	optDefaultAdamW = optAdamW(DefaultWeightDecay, DecayWeights)
)

// optAdamW is AdamW with PyTorch's betas and eps and the given decay.
func optAdamW(wd float64, rule DecayRule) Config {
	return optMust(NewAdamW(DefaultBeta1, DefaultBeta2, DefaultEps, wd, rule))
}

// optSetGrad overwrites the gradient of p with vals, in p's dtype.
func optSetGrad(t *testing.T, p graph.Param, vals []float64) {
	t.Helper()
	gv, err := p.Node.Grad()
	if err != nil {
		t.Fatalf("gradient of %q: %v", p.Name, err)
	}
	switch d := gv.Data().(type) {
	case []float64:
		copy(d, vals)
	case []float32:
		for i, v := range vals {
			d[i] = float32(v)
		}
	default:
		t.Fatalf("gradient of %q is %T", p.Name, d)
	}
}

// optValues returns a copy of p's value as float64.
func optValues(t *testing.T, p graph.Param) []float64 {
	t.Helper()
	v, err := graph.Float64s(p.Node.Value())
	if err != nil {
		t.Fatalf("value of %q: %v", p.Name, err)
	}
	return v
}

// optGrads returns a copy of p's gradient as float64.
func optGrads(t *testing.T, p graph.Param) []float64 {
	t.Helper()
	gv, err := p.Node.Grad()
	if err != nil {
		t.Fatalf("gradient of %q: %v", p.Name, err)
	}
	v, err := graph.Float64s(gv)
	if err != nil {
		t.Fatalf("gradient of %q: %v", p.Name, err)
	}
	return v
}

// optGradAt is a deterministic, sign-changing gradient for element j of
// parameter i at step s.
func optGradAt(s, i, j int) float64 {
	return math.Sin(float64(7*s+3*i+j)+0.5) * float64(1+j%3)
}

// optRef is a plain-Go Adam/AdamW written from the paper's formulas
// (bias-corrected mhat, vhat; decoupled decay lr*wd*p on the pre-update p).
type optRef struct {
	b1, b2, eps, wd float64
	p, m, v         []float64
	t               int
}

func (r *optRef) step(lr float64, g []float64) {
	r.t++
	for j := range r.p {
		r.m[j] = r.b1*r.m[j] + (1-r.b1)*g[j]
		r.v[j] = r.b2*r.v[j] + (1-r.b2)*g[j]*g[j]
		mhat := r.m[j] / (1 - math.Pow(r.b1, float64(r.t)))
		vhat := r.v[j] / (1 - math.Pow(r.b2, float64(r.t)))
		r.p[j] = r.p[j] - lr*r.wd*r.p[j] - lr*mhat/(math.Sqrt(vhat)+r.eps)
	}
}

// optClose reports whether got and want agree within rel, relative to
// max(|want|, 1e-3).
func optClose(got, want, rel float64) bool {
	return math.Abs(got-want) <= rel*math.Max(math.Abs(want), 1e-3)
}

func TestAdamMatchesReference(t *testing.T) {
	specs := []optSpec{
		{"blocks.0.w", []int{2, 3}, []float64{0.5, -0.25, 1, 0.125, -2, 0.75}},
		{"blocks.0.b", []int{3}, []float64{0.1, -0.2, 0.3}},
	}
	cases := []struct {
		name    string
		cfg     Config
		b1, b2  float64
		eps     float64
		wd      []float64 // effective decay per parameter
		dt      tensor.Dtype
		rel     float64
		lrSteps []float64
	}{
		{"adam defaults", optDefaultAdam, 0.9, 0.999, 1e-8, []float64{0, 0}, tensor.Float64, 1e-12,
			[]float64{0.1, 0.05, 0.02, 0.1, 0.01}},
		{"adamw defaults decays the matrix only", optDefaultAdamW, 0.9, 0.999, 1e-8, []float64{0.01, 0}, tensor.Float64, 1e-12,
			[]float64{0.1, 0.05, 0.02, 0.1, 0.01}},
		{"adamw custom", optMust(NewAdamW(0.8, 0.95, 1e-3, 0.5, DecayWeights)), 0.8, 0.95, 1e-3, []float64{0.5, 0}, tensor.Float64, 1e-12,
			[]float64{0.3, 0.2, 0.1, 0.05, 0.3, 0.01}},
		{"adamw float32", optAdamW(0.1, DecayWeights), 0.9, 0.999, 1e-8, []float64{0.1, 0}, tensor.Float32, 1e-6,
			[]float64{0.1, 0.05, 0.02, 0.1, 0.01}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			params := optParams(t, tc.dt, specs...)
			opt, err := New(tc.cfg, params)
			if err != nil {
				t.Fatal(err)
			}
			refs := make([]*optRef, len(specs))
			for i, s := range specs {
				n := len(s.vals)
				p := make([]float64, n)
				for j, v := range s.vals {
					p[j] = v
					if tc.dt == tensor.Float32 {
						p[j] = float64(float32(v))
					}
				}
				refs[i] = &optRef{b1: tc.b1, b2: tc.b2, eps: tc.eps, wd: tc.wd[i], p: p, m: make([]float64, n), v: make([]float64, n)}
			}
			for s, lr := range tc.lrSteps {
				for i, p := range params {
					g := make([]float64, len(specs[i].vals))
					for j := range g {
						g[j] = optGradAt(s, i, j)
						if tc.dt == tensor.Float32 {
							g[j] = float64(float32(g[j]))
						}
					}
					optSetGrad(t, p, g)
					refs[i].step(lr, g)
					if tc.dt == tensor.Float32 { // the parameter is stored in float32
						for j, x := range refs[i].p {
							refs[i].p[j] = float64(float32(x))
						}
					}
				}
				if err := opt.Step(lr); err != nil {
					t.Fatalf("step %d: %v", s, err)
				}
				for i, p := range params {
					got := optValues(t, p)
					for j := range got {
						if !optClose(got[j], refs[i].p[j], tc.rel) {
							t.Fatalf("step %d %s[%d] = %.17g, reference %.17g", s, p.Name, j, got[j], refs[i].p[j])
						}
					}
				}
			}
			if opt.StepCount() != len(tc.lrSteps) {
				t.Errorf("StepCount = %d, want %d", opt.StepCount(), len(tc.lrSteps))
			}
			if dt := params[0].Node.Value().Dtype(); dt != tc.dt {
				t.Errorf("parameter dtype became %v, want %v", dt, tc.dt)
			}
			// The moments match the reference's, in float64 for both dtypes.
			for _, st := range opt.State() {
				var i int
				var want []float64
				name, isV := strings.CutPrefix(st.Name, "adam.v.")
				if !isV {
					name = strings.TrimPrefix(st.Name, "adam.m.")
				}
				i = slices.IndexFunc(specs, func(s optSpec) bool { return s.name == name })
				if i < 0 {
					t.Fatalf("state tensor %q names no parameter", st.Name)
				}
				if want = refs[i].m; isV {
					want = refs[i].v
				}
				for j := range want {
					if !optClose(st.Data[j], want[j], 1e-12) {
						t.Fatalf("%s[%d] = %.17g, reference %.17g", st.Name, j, st.Data[j], want[j])
					}
				}
			}
		})
	}
}

// Adam's first step moves every element by lr·g/(|g|+eps), about lr against
// the gradient's sign, whatever the gradient's scale.
func TestAdamFirstStepIsSignStep(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		t.Run(dt.String(), func(t *testing.T) {
			init := []float64{1, 2, 3, 4}
			grad := []float64{1e-3, -5, 1e4, -0.25}
			params := optParams(t, dt, optSpec{"w", []int{4}, init})
			opt, err := New(optDefaultAdam, params)
			if err != nil {
				t.Fatal(err)
			}
			optSetGrad(t, params[0], grad)
			if err := opt.Step(0.1); err != nil {
				t.Fatal(err)
			}
			got := optValues(t, params[0])
			for j := range got {
				want := init[j] - 0.1*math.Copysign(1, grad[j])
				if math.Abs(got[j]-want) > 1e-6 {
					t.Errorf("w[%d] = %v, want %v", j, got[j], want)
				}
			}
		})
	}
}

// Adam minimizes sum((w - c)^2) through a real gorgonia graph: gradients
// come from G.Grad and BindDualValues, and Step's in-place writes are what
// the next RunAll sees.
func TestAdamMinimizesQuadratic(t *testing.T) {
	target := []float64{1, -2, 0.5, 3, -0.75, 0}
	cases := []struct {
		name  string
		dt    tensor.Dtype
		kind  Kind
		clip  float64 // ClipGradNorm before each step when > 0
		sched Schedule
		tol   float64
	}{
		{"adam float64", tensor.Float64, "adam", 0, Schedule{Peak: 0.1, Min: 0.1, Total: 200}, 1e-2},
		{"adam float32", tensor.Float32, "adam", 0, Schedule{Peak: 0.1, Min: 0.1, Total: 200}, 1e-2},
		{"adam cosine schedule clipped", tensor.Float64, "adam", 1, Schedule{Peak: 0.2, Min: 1e-3, Warmup: 10, Total: 200}, 1e-3},
		// Decay pulls the optimum towards 0: Adam's normalized step near the
		// optimum balances lr·wd·w at a visible distance (about 0.02 at w = 3).
		{"adamw float32 cosine", tensor.Float32, "adamw", 0, Schedule{Peak: 0.2, Min: 1e-3, Warmup: 10, Total: 200}, 5e-2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := G.NewGraph()
			shape := []int{2, 3}
			w := G.NewTensor(g, tc.dt, 2, G.WithShape(shape...), G.WithName("w"),
				G.WithValue(graph.NewDense(tc.dt, shape, make([]float64, 6))))
			c := G.NewConstant(graph.NewDense(tc.dt, shape, target), G.WithName("c"))
			cost := G.Must(G.Sum(G.Must(G.Square(G.Must(G.Sub(w, c))))))
			if _, err := G.Grad(cost, w); err != nil {
				t.Fatal(err)
			}
			vm, err := graph.NewMachine(g)
			if err != nil {
				t.Fatal(err)
			}
			defer vm.Close()
			params := []graph.Param{{Name: "w", Node: w}}
			opt, err := New(map[Kind]Config{Adam: optDefaultAdam, AdamW: optDefaultAdamW}[tc.kind], params)
			if err != nil {
				t.Fatal(err)
			}
			var first, last float64
			for step := 0; step < 200; step++ {
				if err := vm.RunAll(); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				f, err := graph.Float64s(cost.Value())
				if err != nil {
					t.Fatal(err)
				}
				if step == 0 {
					first = f[0]
				}
				last = f[0]
				if tc.clip > 0 {
					if _, err := ClipGradNorm(params, tc.clip); err != nil {
						t.Fatal(err)
					}
				}
				if err := opt.Step(tc.sched.LR(step)); err != nil {
					t.Fatalf("step %d: %v", step, err)
				}
				vm.Reset()
			}
			got := optValues(t, params[0])
			for j := range got {
				if math.Abs(got[j]-target[j]) > tc.tol {
					t.Errorf("w[%d] = %v after 200 steps, want %v ± %v (cost %v -> %v)", j, got[j], target[j], tc.tol, first, last)
				}
			}
			if !(last < first/100) {
				t.Errorf("cost went from %v to %v", first, last)
			}
		})
	}
}

func TestAdamWDecaysMatricesOnly(t *testing.T) {
	specs := []optSpec{
		{"blocks.0.attn.wq", []int{2, 3}, []float64{1, -2, 3, -4, 5, -6}},
		{"blocks.0.attn.bq", []int{3}, []float64{1, 2, 3}},
		{"blocks.0.ln1.gain", []int{3}, []float64{1, 1, 1}},
		{"tok_emb.table", []int{4, 2}, []float64{1, 2, 3, 4, 5, 6, 7, 8}},
		{"pos_emb.table", []int{3, 2}, []float64{-1, -2, -3, -4, -5, -6}},
		{"head.w", []int{2, 2, 2}, []float64{1, 2, 3, 4, 5, 6, 7, 8}},
	}
	cases := []struct {
		name    string
		cfg     Config
		factor  float64 // expected scale of a decayed parameter after one step at lr 0.1
		decayed []string
	}{
		{"adamw", optAdamW(0.5, DecayWeights), 1 - 0.1*0.5, []string{"blocks.0.attn.wq", "head.w"}},
		{"adamw default decay", optDefaultAdamW, 1 - 0.1*0.01, []string{"blocks.0.attn.wq", "head.w"}},
		{"adam", optDefaultAdam, 1, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			params := optParams(t, tensor.Float64, specs...)
			opt, err := New(tc.cfg, params)
			if err != nil {
				t.Fatal(err)
			}
			if got := optDecayed(opt); !slices.Equal(got, tc.decayed) {
				t.Errorf("decayed %q, want %q", got, tc.decayed)
			}
			// Zero gradients: the Adam part of the update is exactly 0, so
			// only the decay moves the weights.
			for i, p := range params {
				optSetGrad(t, p, make([]float64, len(specs[i].vals)))
			}
			if err := opt.Step(0.1); err != nil {
				t.Fatal(err)
			}
			for i, p := range params {
				factor := 1.0
				if slices.Contains(tc.decayed, p.Name) {
					factor = tc.factor
				}
				got := optValues(t, p)
				for j, x := range specs[i].vals {
					if want := x * factor; math.Abs(got[j]-want) > 1e-15*math.Abs(want) {
						t.Errorf("%s[%d] = %.17g, want %.17g", p.Name, j, got[j], want)
					}
				}
			}
		})
	}
}

// optSnapshot copies every parameter value and gradient.
func optSnapshot(t *testing.T, params []graph.Param) [][]float64 {
	t.Helper()
	var out [][]float64
	for _, p := range params {
		out = append(out, optValues(t, p), optGrads(t, p))
	}
	return out
}

func TestStepRejectsNonFiniteGradient(t *testing.T) {
	cases := []struct {
		name string
		dt   tensor.Dtype
		bad  float64
	}{
		{"NaN float64", tensor.Float64, math.NaN()},
		{"+Inf float64", tensor.Float64, math.Inf(1)},
		{"-Inf float64", tensor.Float64, math.Inf(-1)},
		{"NaN float32", tensor.Float32, math.NaN()},
		{"+Inf float32", tensor.Float32, math.Inf(1)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			params := optParams(t, tc.dt,
				optSpec{"a.w", []int{2, 2}, []float64{1, 2, 3, 4}},
				optSpec{"b.w", []int{2, 2}, []float64{5, 6, 7, 8}})
			opt, err := New(optDefaultAdamW, params)
			if err != nil {
				t.Fatal(err)
			}
			// One good step first, so that the moments are not zero.
			optSetGrad(t, params[0], []float64{1, -1, 2, -2})
			optSetGrad(t, params[1], []float64{0.5, 0.5, -0.5, 3})
			if err := opt.Step(0.01); err != nil {
				t.Fatal(err)
			}
			optSetGrad(t, params[1], []float64{0.5, tc.bad, -0.5, 3})
			before, state := optSnapshot(t, params), opt.State()

			err = opt.Step(0.01)
			if err == nil || !strings.Contains(err.Error(), `"b.w"`) || !strings.HasPrefix(err.Error(), "optim:") {
				t.Fatalf("Step error = %v, want one naming \"b.w\"", err)
			}
			after := optSnapshot(t, params)
			for k := range before {
				for j := range before[k] {
					if math.Float64bits(before[k][j]) != math.Float64bits(after[k][j]) {
						t.Fatalf("snapshot %d element %d changed from %v to %v", k, j, before[k][j], after[k][j])
					}
				}
			}
			if opt.StepCount() != 1 {
				t.Errorf("StepCount = %d after the failed step, want 1", opt.StepCount())
			}
			if !slices.EqualFunc(state, opt.State(), func(a, b checkpoint.NamedTensor) bool { return slices.Equal(a.Data, b.Data) }) {
				t.Error("moments changed on the failed step")
			}
			// The caller can skip the batch and go on.
			if err := ZeroGrads(params); err != nil {
				t.Fatal(err)
			}
			for _, p := range params {
				if g := optGrads(t, p); slices.ContainsFunc(g, func(x float64) bool { return x != 0 }) {
					t.Fatalf("gradient of %q = %v after ZeroGrads", p.Name, g)
				}
			}
			optSetGrad(t, params[1], []float64{0.5, 1, -0.5, 3})
			if err := opt.Step(0.01); err != nil || opt.StepCount() != 2 {
				t.Errorf("next step: %v, StepCount %d", err, opt.StepCount())
			}
		})
	}
}

// TestStepAfterNorm: after the norm of its own parameters, finite, the
// update is Step's bit for bit and the gradients are not checked (a NaN
// planted after the norm was taken goes through, which is why the norm
// must be of the gradients as they are); a non-finite norm, or the norm of
// other parameters, and the check runs and refuses a NaN as Step does.
func TestStepAfterNorm(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		specs := []optSpec{{"a.w", []int{2, 2}, []float64{1, 2, 3, 4}}, {"b.w", []int{2, 2}, []float64{5, 6, 7, 8}}}
		grads := [][]float64{{1, -1, 2, -2}, {0.5, 0.5, -0.5, 3}}
		var runs [2][][]float64
		for i := range runs { // Step, then StepAfterNorm
			params := optParams(t, dt, specs...)
			opt, err := New(optDefaultAdamW, params)
			if err != nil {
				t.Fatal(err)
			}
			for range 3 {
				for j, p := range params {
					optSetGrad(t, p, grads[j])
				}
				norm, err := ClipGradNorm(params, 2)
				if err == nil && i == 0 {
					err = opt.Step(0.01)
				} else if err == nil {
					err = opt.StepAfterNorm(0.01, params, norm)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			runs[i] = optSnapshot(t, params)
			for _, m := range opt.State() {
				runs[i] = append(runs[i], m.Data)
			}
		}
		for k := range runs[0] {
			for j := range runs[0][k] {
				if math.Float64bits(runs[0][k][j]) != math.Float64bits(runs[1][k][j]) {
					t.Fatalf("%v: snapshot %d element %d: %v after Step, %v after StepAfterNorm", dt, k, j, runs[0][k][j], runs[1][k][j])
				}
			}
		}

		params := optParams(t, dt, specs...)
		other := optParams(t, dt, specs...)
		opt, err := New(optDefaultAdamW, params)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			name  string
			of    []graph.Param
			norm  float64
			check bool
		}{
			{"a NaN norm", params, math.NaN(), true},
			{"an infinite norm", params, math.Inf(1), true},
			{"another model's norm", other, 1, true},
			{"fewer parameters' norm", params[:1], 1, true},
			{"its own finite norm", params, 1, false},
		} {
			optSetGrad(t, params[0], grads[0])
			optSetGrad(t, params[1], []float64{0.5, math.NaN(), -0.5, 3})
			err := opt.StepAfterNorm(0.01, c.of, c.norm)
			if checked := err != nil; checked != c.check {
				t.Errorf("%v, %s: error %v, want the gradients checked: %v", dt, c.name, err, c.check)
			}
		}
	}
}

// Stopping after k steps, saving State, StepCount and the parameters, and
// restoring them into a new graph and optimizer continues bit for bit.
func TestRestoreContinuesBitForBit(t *testing.T) {
	specs := []optSpec{
		{"blocks.0.w", []int{3, 2}, []float64{0.3, -0.1, 0.7, 0.2, -0.9, 0.05}},
		{"blocks.0.b", []int{2}, []float64{0.01, -0.02}},
		{"tok_emb.table", []int{2, 2}, []float64{1, -1, 0.5, -0.5}},
	}
	lr := func(s int) float64 { return 0.05 / float64(1+s) }
	const total, stop = 10, 4
	run := func(t *testing.T, opt *Optimizer, params []graph.Param, from, to int) {
		for s := from; s < to; s++ {
			for i, p := range params {
				g := make([]float64, len(specs[i].vals))
				for j := range g {
					g[j] = optGradAt(s, i, j)
				}
				optSetGrad(t, p, g)
			}
			if err := opt.Step(lr(s)); err != nil {
				t.Fatalf("step %d: %v", s, err)
			}
		}
	}
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		t.Run(dt.String(), func(t *testing.T) {
			cfg := optAdamW(0.1, DecayWeights)
			// Uninterrupted run.
			ref := optParams(t, dt, specs...)
			refOpt, err := New(cfg, ref)
			if err != nil {
				t.Fatal(err)
			}
			run(t, refOpt, ref, 0, total)

			// Interrupted run: stop, save, load into a fresh graph.
			first := optParams(t, dt, specs...)
			firstOpt, err := New(cfg, first)
			if err != nil {
				t.Fatal(err)
			}
			run(t, firstOpt, first, 0, stop)
			step, state := firstOpt.StepCount(), firstOpt.State()
			if step != stop {
				t.Fatalf("StepCount = %d, want %d", step, stop)
			}
			if len(state) != 2*len(specs) {
				t.Fatalf("State has %d tensors, want %d", len(state), 2*len(specs))
			}
			resumedSpecs := slices.Clone(specs)
			for i, s := range specs {
				for k, name := range []string{"adam.m." + s.name, "adam.v." + s.name} {
					st := state[2*i+k]
					if st.Name != name || !slices.Equal(st.Shape, s.shape) || st.DType != tensor.Float64 || len(st.Data) != len(s.vals) {
						t.Fatalf("state tensor %d = %q %v %v (%d values), want %q %v float64", 2*i+k, st.Name, st.Shape, st.DType, len(st.Data), name, s.shape)
					}
				}
				resumedSpecs[i].vals = optValues(t, first[i]) // float32 -> float64 is exact
			}
			slices.Reverse(state) // order must not matter

			resumed := optParams(t, dt, resumedSpecs...)
			resumedOpt, err := New(cfg, resumed)
			if err != nil {
				t.Fatal(err)
			}
			if err := resumedOpt.Restore(step, state); err != nil {
				t.Fatal(err)
			}
			run(t, resumedOpt, resumed, stop, total)

			for i := range specs {
				want, got := optValues(t, ref[i]), optValues(t, resumed[i])
				for j := range want {
					if math.Float64bits(got[j]) != math.Float64bits(want[j]) {
						t.Errorf("%s[%d] = %.17g after resuming, %.17g uninterrupted", specs[i].name, j, got[j], want[j])
					}
				}
			}
			a, b := refOpt.State(), resumedOpt.State()
			for k := range a {
				for j := range a[k].Data {
					if math.Float64bits(a[k].Data[j]) != math.Float64bits(b[k].Data[j]) {
						t.Fatalf("%s[%d] differs after resuming", a[k].Name, j)
					}
				}
			}
			if resumedOpt.StepCount() != total {
				t.Errorf("StepCount = %d, want %d", resumedOpt.StepCount(), total)
			}
		})
	}
}

func TestRestoreErrors(t *testing.T) {
	params := optParams(t, tensor.Float64,
		optSpec{"w", []int{2, 2}, []float64{1, 2, 3, 4}},
		optSpec{"b", []int{2}, []float64{1, 2}})
	opt, err := New(optDefaultAdam, params)
	if err != nil {
		t.Fatal(err)
	}
	optSetGrad(t, params[0], []float64{1, 2, 3, 4})
	optSetGrad(t, params[1], []float64{-1, 1})
	if err := opt.Step(0.1); err != nil {
		t.Fatal(err)
	}
	good := opt.State()
	edit := func(f func([]checkpoint.NamedTensor) []checkpoint.NamedTensor) []checkpoint.NamedTensor {
		s := make([]checkpoint.NamedTensor, len(good))
		for i, nt := range good {
			nt.Shape, nt.Data = slices.Clone(nt.Shape), slices.Clone(nt.Data)
			s[i] = nt
		}
		return f(s)
	}
	cases := []struct {
		name  string
		step  int
		state []checkpoint.NamedTensor
		want  string // in the error
	}{
		{"missing", 1, edit(func(s []checkpoint.NamedTensor) []checkpoint.NamedTensor { return s[:3] }), `"adam.v.b" is missing`},
		{"unknown", 1, edit(func(s []checkpoint.NamedTensor) []checkpoint.NamedTensor {
			return append(s, checkpoint.NamedTensor{Name: "adam.m.x", Shape: []int{1}, Data: []float64{0}})
		}), `unknown state tensor "adam.m.x"`},
		{"duplicate", 1, edit(func(s []checkpoint.NamedTensor) []checkpoint.NamedTensor { return append(s, s[0]) }), `"adam.m.w" appears twice`},
		{"wrong shape", 1, edit(func(s []checkpoint.NamedTensor) []checkpoint.NamedTensor { s[0].Shape = []int{4}; return s }), `"adam.m.w" has shape [4]`},
		{"wrong length", 1, edit(func(s []checkpoint.NamedTensor) []checkpoint.NamedTensor { s[3].Data = s[3].Data[:1]; return s }), `"adam.v.b" has 1 values`},
		{"NaN moment", 1, edit(func(s []checkpoint.NamedTensor) []checkpoint.NamedTensor { s[2].Data[1] = math.NaN(); return s }), `"adam.m.b": element 1 is NaN`},
		{"negative second moment", 1, edit(func(s []checkpoint.NamedTensor) []checkpoint.NamedTensor { s[1].Data[0] = -1; return s }), `"adam.v.w": element 0 is -1`},
		{"negative step", -1, good, "step count -1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := opt.Restore(tc.step, tc.state)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "optim: restore:") {
				t.Fatalf("Restore error = %v, want one containing %s", err, tc.want)
			}
			if opt.StepCount() != 1 || !slices.EqualFunc(good, opt.State(), func(a, b checkpoint.NamedTensor) bool { return slices.Equal(a.Data, b.Data) }) {
				t.Error("a failed Restore changed the optimizer")
			}
		})
	}
	t.Run("valid", func(t *testing.T) {
		zero := edit(func(s []checkpoint.NamedTensor) []checkpoint.NamedTensor {
			for i := range s {
				clear(s[i].Data)
			}
			return s
		})
		if err := opt.Restore(7, zero); err != nil {
			t.Fatal(err)
		}
		if opt.StepCount() != 7 || opt.State()[0].Data[0] != 0 {
			t.Errorf("after Restore: step %d, m[0] %v", opt.StepCount(), opt.State()[0].Data[0])
		}
	})
}

// Every setting reaches the Config, every constructor validates, and the
// zero Config, all a hand-built value can be, is refused: no field can be
// dropped on the way to New.
func TestConfig(t *testing.T) {
	type want struct {
		kind            Kind
		b1, b2, eps, wd float64
		decay           DecayRule
	}
	cases := []struct {
		name string
		make func() (Config, error)
		want want   // when valid
		err  string // else
	}{
		{"adam", func() (Config, error) { return NewAdam(0.9, 0.999, 1e-8) }, want{Adam, 0.9, 0.999, 1e-8, 0, ""}, ""},
		{"adamw", func() (Config, error) { return NewAdamW(0.5, 0.95, 1e-6, 0.1, DecayMatrices) }, want{AdamW, 0.5, 0.95, 1e-6, 0.1, DecayMatrices}, ""},
		{"adamw weights", func() (Config, error) { return NewAdamW(0.8, 0.99, 1e-3, 0.5, DecayWeights) }, want{AdamW, 0.8, 0.99, 1e-3, 0.5, DecayWeights}, ""},
		{"zero Config", func() (Config, error) { return Config{}, Config{}.Validate() }, want{}, "the optimizer config is empty"},
		{"beta1 zero", func() (Config, error) { return NewAdam(0, 0.999, 1e-8) }, want{}, "beta1 0 is outside (0, 1)"},
		{"beta1 one", func() (Config, error) { return NewAdam(1, 0.999, 1e-8) }, want{}, "beta1 1 is outside (0, 1)"},
		{"beta1 negative", func() (Config, error) { return NewAdam(-0.1, 0.999, 1e-8) }, want{}, "beta1 -0.1"},
		{"beta2 zero", func() (Config, error) { return NewAdamW(0.9, 0, 1e-8, 0.1, DecayWeights) }, want{}, "beta2 0 is outside (0, 1)"},
		{"beta2 above one", func() (Config, error) { return NewAdam(0.9, 1.5, 1e-8) }, want{}, "beta2 1.5"},
		{"beta2 NaN", func() (Config, error) { return NewAdam(0.9, math.NaN(), 1e-8) }, want{}, "beta2 NaN"},
		{"zero eps", func() (Config, error) { return NewAdam(0.9, 0.999, 0) }, want{}, "eps 0"},
		{"negative eps", func() (Config, error) { return NewAdam(0.9, 0.999, -1e-8) }, want{}, "eps -1e-08"},
		{"zero decay", func() (Config, error) { return NewAdamW(0.9, 0.999, 1e-8, 0, DecayWeights) }, want{}, "weight decay 0"},
		{"negative decay", func() (Config, error) { return NewAdamW(0.9, 0.999, 1e-8, -0.1, DecayWeights) }, want{}, "weight decay -0.1"},
		{"infinite decay", func() (Config, error) { return NewAdamW(0.9, 0.999, 1e-8, math.Inf(1), DecayWeights) }, want{}, "weight decay +Inf"},
		{"no decay rule", func() (Config, error) { return NewAdamW(0.9, 0.999, 1e-8, 0.1, "") }, want{}, `decay rule ""`},
	}
	params := optParams(t, tensor.Float64, optSpec{"w", []int{2}, []float64{1, 2}})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tc.make()
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) || !strings.HasPrefix(err.Error(), "optim:") {
					t.Fatalf("error = %v, want one containing %q", err, tc.err)
				}
				if cfg != (Config{}) {
					t.Errorf("an invalid config came back as %v", cfg)
				}
				if _, err := New(cfg, params); err == nil {
					t.Fatal("New accepted the invalid config")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := want{cfg.Kind(), cfg.Beta1(), cfg.Beta2(), cfg.Eps(), cfg.WeightDecay(), cfg.Decay()}
			if got != tc.want {
				t.Errorf("settings %+v, want %+v", got, tc.want)
			}
			opt, err := New(cfg, params)
			if err != nil {
				t.Fatal(err)
			}
			if opt.Config() != cfg {
				t.Errorf("Config = %v, want %v", opt.Config(), cfg)
			}
		})
	}
}

func TestOptimizerErrors(t *testing.T) {
	g := G.NewGraph()
	unbound := G.NewTensor(g, tensor.Float64, 1, G.WithShape(2), G.WithName("u"),
		G.WithValue(graph.NewDense(tensor.Float64, []int{2}, []float64{1, 2})))
	ints := G.NewTensor(g, tensor.Int, 1, G.WithShape(2), G.WithName("i"),
		G.WithValue(tensor.New(tensor.WithShape(2), tensor.WithBacking([]int{1, 2}))))
	params := optParams(t, tensor.Float64, optSpec{"w", []int{2}, []float64{1, 2}})
	adam := optDefaultAdam

	newCases := []struct {
		name   string
		params []graph.Param
		want   string
	}{
		{"no params", nil, "no parameters"},
		{"duplicate name", []graph.Param{params[0], params[0]}, `"w" is used twice`},
		{"empty name", []graph.Param{{Node: params[0].Node}}, "parameter 0 has no name"},
		{"nil node", []graph.Param{{Name: "x"}}, `"x" has no node`},
		{"int dtype", []graph.Param{{Name: "i", Node: ints}}, `"i": dtype int`},
	}
	for _, tc := range newCases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(adam, tc.params)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "optim:") {
				t.Fatalf("NewOptimizer error = %v, want one containing %s", err, tc.want)
			}
		})
	}

	stepCases := []struct {
		name   string
		params []graph.Param
		lr     float64
		want   string
	}{
		{"negative lr", params, -0.1, "learning rate -0.1"},
		{"NaN lr", params, math.NaN(), "learning rate NaN"},
		{"infinite lr", params, math.Inf(1), "learning rate +Inf"},
		{"no gradient", []graph.Param{{Name: "u", Node: unbound}}, 0.1, `"u": no gradient`},
	}
	for _, tc := range stepCases {
		t.Run(tc.name, func(t *testing.T) {
			opt, err := New(adam, tc.params)
			if err != nil {
				t.Fatal(err)
			}
			err = opt.Step(tc.lr)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "optim:") {
				t.Fatalf("Step error = %v, want one containing %s", err, tc.want)
			}
			if opt.StepCount() != 0 {
				t.Errorf("StepCount = %d after a failed step", opt.StepCount())
			}
		})
	}
}

// gorgonia's tape machine made with BindDualValues adds each run's gradient
// to the dual value (gorgonia's solvers zero it after updating): a user who
// runs qkv's layers on that machine relies on Step zeroing the gradients so
// that the next run starts from the new batch's gradient only. This pins
// both. (qkv's own graph.Machine does not accumulate.)
func TestStepZeroesAccumulatedGradients(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float64, tensor.Float32} {
		t.Run(dt.String(), func(t *testing.T) {
			g := G.NewGraph()
			w := G.NewTensor(g, dt, 1, G.WithShape(3), G.WithName("w"),
				G.WithValue(graph.NewDense(dt, []int{3}, []float64{0, 1, 2})))
			c := G.NewConstant(graph.NewDense(dt, []int{3}, []float64{1, -1, 0.5}))
			cost := G.Must(G.Sum(G.Must(G.Square(G.Must(G.Sub(w, c))))))
			if _, err := G.Grad(cost, w); err != nil {
				t.Fatal(err)
			}
			vm := G.NewTapeMachine(g, G.BindDualValues(w))
			defer vm.Close()
			params := []graph.Param{{Name: "w", Node: w}}
			run := func() {
				t.Helper()
				if err := vm.RunAll(); err != nil {
					t.Fatal(err)
				}
				vm.Reset()
			}
			// grad = 2 (w - c), expected computed from the current w.
			wantGrad := func(times float64) []float64 {
				cur := optValues(t, params[0])
				out := make([]float64, len(cur))
				for j, x := range cur {
					out[j] = times * 2 * (x - []float64{1, -1, 0.5}[j])
				}
				return out
			}
			check := func(what string, want []float64) {
				t.Helper()
				got := optGrads(t, params[0])
				for j := range want {
					if math.Abs(got[j]-want[j]) > 1e-6 {
						t.Fatalf("%s: gradient %v, want %v", what, got, want)
					}
				}
			}
			run()
			run()
			check("two runs without a step (gorgonia accumulates)", wantGrad(2))

			opt, err := New(optDefaultAdam, params)
			if err != nil {
				t.Fatal(err)
			}
			if err := opt.Step(0.1); err != nil {
				t.Fatal(err)
			}
			check("after Step", []float64{0, 0, 0})
			run()
			check("one run after Step", wantGrad(1))
			if err := ZeroGrads(params); err != nil {
				t.Fatal(err)
			}
			check("after ZeroGrads", []float64{0, 0, 0})
		})
	}
}

// AdamW decays by role: a weight whose name says "emb" is decayed, an
// embedding whose name does not is not, and a parameter without a role is
// not decayed whatever its rank.
func TestAdamWDecaysByRole(t *testing.T) {
	params := optParams(t, tensor.Float64,
		optSpec{"emb_proj.w", []int{2, 2}, []float64{1, 2, 3, 4}},
		optSpec{"lookup", []int{2, 2}, []float64{1, 2, 3, 4}},
		optSpec{"mine", []int{2, 2}, []float64{1, 2, 3, 4}},
		optSpec{"scale", []int{2}, []float64{1, 2}})
	params[0].Role, params[1].Role, params[2].Role, params[3].Role = graph.RoleWeight, graph.RoleEmbedding, graph.RoleNone, graph.RoleGain
	opt, err := New(optAdamW(0.1, DecayWeights), params)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := optDecayed(opt), []string{"emb_proj.w"}; !slices.Equal(got, want) {
		t.Errorf("decayed %q, want %q", got, want)
	}
}

// nanoGPT's rule decays by rank alone: the embedding and the role-less
// matrix too, never a vector; the default rule, tested above, on the same
// parameters decays the weight alone.
func TestAdamWDecayMatrices(t *testing.T) {
	params := optParams(t, tensor.Float64,
		optSpec{"emb_proj.w", []int{2, 2}, []float64{1, 2, 3, 4}},
		optSpec{"lookup", []int{2, 2}, []float64{1, 2, 3, 4}},
		optSpec{"mine", []int{2, 2}, []float64{1, 2, 3, 4}},
		optSpec{"scale", []int{2}, []float64{1, 2}})
	params[0].Role, params[1].Role, params[2].Role, params[3].Role = graph.RoleWeight, graph.RoleEmbedding, graph.RoleNone, graph.RoleGain
	opt, err := New(optAdamW(0.1, DecayMatrices), params)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := optDecayed(opt), []string{"emb_proj.w", "lookup", "mine"}; !slices.Equal(got, want) {
		t.Errorf("decayed %q, want %q", got, want)
	}
	if _, err := NewAdamW(0.9, 0.999, 1e-8, 0.1, "all"); err == nil || !strings.Contains(err.Error(), `decay rule "all"`) {
		t.Errorf("decay rule all: error %v, want one naming it", err)
	}
}
