package decode_test

import (
	"math"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
	"github.com/qkv-dev/qkv/train/model/decode"
)

// variant is a model configuration the fast path supports.
type variant struct {
	name string
	set  func(c *config.Config)
}

// variants: nanoGPT's preset model (shrunk), the default sort model, and
// the other options the fast path runs.
var variants = []variant{
	{"nanogpt", func(c *config.Config) {
		p, _ := config.Preset(config.PresetNanoGPTCPU)
		c.Model = p.Model
		c.Model.Dim, c.Model.Heads, c.Model.Layers, c.Model.Hidden = 32, 4, 2, 128
	}},
	{"nanogpt-full-size", func(c *config.Config) {
		p, _ := config.Preset(config.PresetNanoGPTCPU)
		c.Model = p.Model
	}},
	{"sort-default", func(c *config.Config) {}},
	{"post-ln sinusoidal relu", func(c *config.Config) {
		c.Model.PostLN, c.Model.Positions, c.Model.Activation = true, layers.PositionsSinusoidal, layers.ActivationReLU
	}},
	{"no positions, dmodel scale, odd sizes", func(c *config.Config) {
		c.Model.Positions, c.Model.AttnScale = layers.PositionsNone, layers.ScaleDModel
		c.Model.Dim, c.Model.Heads, c.Model.Hidden, c.Model.Layers = 20, 5, 37, 3
	}},
	{"eight heads in two groups of panels", func(c *config.Config) {
		c.Model.Dim, c.Model.Heads, c.Model.Layers, c.Model.Hidden = 128, 8, 1, 64
	}},
	{"tied with biases, no scale", func(c *config.Config) {
		c.Model.TieEmbeddings, c.Model.AttnScale, c.Model.BiasFreeNorm = true, layers.ScaleNone, true
	}},
}

// build returns a resolved config of the variant, dtype dt and a context
// of 40 positions, and a model of it with random weights of about the size
// training gives them.
func build(t *testing.T, v variant, dt config.DType) (config.Config, *model.Model) {
	t.Helper()
	cfg := config.Default()
	v.set(&cfg)
	cfg.Task = config.TaskSpec{Name: "copy", Params: data.TaskConfig{MinLength: 2, MaxLength: 19, Alphabet: 9}}
	cfg.DType = dt
	if _, err := cfg.Resolve(); err != nil {
		t.Fatal(err)
	}
	m, err := model.Build(cfg, 1, cfg.Model.MaxLen, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	randomize(m.Params, 0.3*math.Sqrt(32/float64(max(cfg.Model.Dim, 32))), 7)
	return cfg, m
}

// randomize draws every parameter from N(0, std²), gains from
// N(1, 0.2²).
func randomize(ps []graph.Param, std float64, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	for _, p := range ps {
		draw := func() float64 {
			if strings.HasSuffix(p.Name, ".gain") {
				return 1 + 0.2*r.NormFloat64()
			}
			return std * r.NormFloat64()
		}
		switch vals := p.Node.Value().Data().(type) {
		case []float64:
			for j := range vals {
				vals[j] = draw()
			}
		case []float32:
			for j := range vals {
				vals[j] = float32(draw())
			}
		}
	}
}

// TestFastEqualsCached: for every supported configuration, in float64 and
// float32, the fast decoder's logits equal the graph's cached decoder's
// (model.Cached) after every token of three rows fed together, within
// 1e-12 (float64) or 1e-5 relative to the logits' scale (float32), from a
// prompt fed token by token and from one primed as a block, and greedy
// decoding chooses the same tokens.
func TestFastEqualsCached(t *testing.T) {
	for _, v := range variants {
		for _, dt := range []config.DType{config.Float64, config.Float32} {
			t.Run(v.name+"/"+string(dt), func(t *testing.T) {
				cfg, m := build(t, v, dt)
				if err := decode.Supported(cfg); err != nil {
					t.Fatal(err)
				}
				const rows = 3
				c, err := model.NewCached(cfg, rows, m.Params)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				fast, err := decode.New(cfg, rows, m.Params)
				if err != nil {
					t.Fatal(err)
				}
				tol := 1e-12
				if dt == config.Float32 {
					tol = 1e-5
				}
				L, vocab := cfg.Model.MaxLen, cfg.Model.Vocab
				r := rand.New(rand.NewPCG(3, 4))
				worst := 0.0
				check := func(step int, want [][]float64) {
					t.Helper()
					for row := range rows {
						got := fast.Logits(row)
						scale := 1.0
						for _, w := range want[row] {
							scale = max(scale, math.Abs(w))
						}
						for j := range want[row] {
							diff := math.Abs(got[j]-want[row][j]) / scale
							worst = max(worst, diff)
							if !(diff <= tol) {
								t.Fatalf("step %d row %d logit %d: fast %v, cached %v (scaled difference %.3g, tolerance %g)", step, row, j, got[j], want[row][j], diff, tol)
							}
						}
					}
				}
				// Token by token, then greedily, to the context.
				if err := c.Start(nil); err != nil {
					t.Fatal(err)
				}
				ids := make([]int, rows)
				for p := range L {
					for row := range ids {
						if p < 5 {
							ids[row] = r.IntN(vocab)
						}
					}
					want, err := c.Feed(ids, p)
					if err != nil {
						t.Fatal(err)
					}
					if err := fast.Feed(ids); err != nil {
						t.Fatal(err)
					}
					check(p, want)
					for row := range ids { // greedy from the logits of each
						ids[row] = argmax(fast.Logits(row))
						if w := argmax(want[row]); w != ids[row] && dt == config.Float64 {
							t.Fatalf("step %d row %d: fast chooses %d, cached %d", p, row, ids[row], w)
						}
						ids[row] = argmax(want[row])
					}
				}
				if err := fast.Feed(ids); err == nil {
					t.Error("feeding past the context: no error")
				}
				// Primed as one block: the logits after the last token.
				for _, n := range []int{1, 7, L} {
					seqs := make([][]int, rows)
					for row := range seqs {
						for range n {
							seqs[row] = append(seqs[row], r.IntN(vocab))
						}
					}
					if err := fast.Prime(seqs); err != nil {
						t.Fatal(err)
					}
					if err := c.Start(nil); err != nil {
						t.Fatal(err)
					}
					var want [][]float64
					for p := range n {
						for row := range ids {
							ids[row] = seqs[row][p]
						}
						if want, err = c.Feed(ids, p); err != nil {
							t.Fatal(err)
						}
					}
					check(1000+n, want)
					if fast.Len(0) != n {
						t.Errorf("after priming %d tokens, row 0 holds %d", n, fast.Len(0))
					}
				}
				t.Logf("worst difference %.3g", worst)
			})
		}
	}
}

// TestFastGreedy: greedy decoding on the fast path generates the tokens
// the graph's cached decoder generates (Cached.Generate), float64 and
// float32.
func TestFastGreedy(t *testing.T) {
	for _, dt := range []config.DType{config.Float64, config.Float32} {
		for _, v := range variants[:3] {
			cfg, m := build(t, v, dt)
			prefixes := [][]int{{1, 2, 3}, {4, 5, 6}}
			steps := cfg.Model.MaxLen - 3
			c, err := model.NewCached(cfg, 2, m.Params)
			if err != nil {
				t.Fatal(err)
			}
			want, err := c.Generate(nil, prefixes, []int{steps, steps})
			c.Close()
			if err != nil {
				t.Fatal(err)
			}
			fast, err := decode.New(cfg, 2, m.Params)
			if err != nil {
				t.Fatal(err)
			}
			if err := fast.Prime(prefixes); err != nil {
				t.Fatal(err)
			}
			got := make([][]int, 2)
			ids := make([]int, 2)
			for s := range steps {
				for row := range ids {
					ids[row] = argmax(fast.Logits(row))
					got[row] = append(got[row], ids[row])
				}
				if s < steps-1 {
					if err := fast.Feed(ids); err != nil {
						t.Fatal(err)
					}
				}
			}
			for row := range got {
				for i := range got[row] {
					if got[row][i] != want[row][i] {
						t.Fatalf("%s/%s row %d: fast generates %v, cached %v", v.name, dt, row, got[row], want[row])
					}
				}
			}
		}
	}
}

// TestFeedAllocates: a step allocates nothing, one row or several.
func TestFeedAllocates(t *testing.T) {
	for _, rows := range []int{1, 4} {
		cfg, m := build(t, variants[1], config.Float32)
		fast, err := decode.New(cfg, rows, m.Params)
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]int, rows)
		allocs := testing.AllocsPerRun(20, func() {
			if fast.Len(0) >= fast.Context() {
				fast.Reset()
			}
			if err := fast.Feed(ids); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%d rows: a step allocates %v times", rows, allocs)
		}
		seqs := make([][]int, rows)
		for r := range seqs {
			seqs[r] = make([]int, 10)
		}
		if allocs := testing.AllocsPerRun(5, func() { _ = fast.Prime(seqs) }); allocs != 0 {
			t.Errorf("%d rows: Prime allocates %v times", rows, allocs)
		}
	}
}

// TestSupported: the variants the fast path does not run are refused by
// name, and New refuses them too.
func TestSupported(t *testing.T) {
	for _, c := range []struct {
		want string
		set  func(c *config.Config)
	}{
		{"rope", func(c *config.Config) { c.Model.Positions = layers.PositionsRoPE }},
		{"alibi", func(c *config.Config) { c.Model.Positions = layers.PositionsALiBi }},
		{"grouped-query", func(c *config.Config) { c.Model.KVHeads = 2 }},
		{"sliding window", func(c *config.Config) { c.Model.Window = 4 }},
		{"sinks", func(c *config.Config) { c.Model.Sinks = true }},
		{"softcap", func(c *config.Config) { c.Model.Softcap = 30 }},
		{"QK-norm", func(c *config.Config) { c.Model.QKNorm = true }},
		{"head temperature", func(c *config.Config) { c.Model.HeadTemperature = true }},
		{"linear attention", func(c *config.Config) { c.Model.LayerKinds = "linear" }},
		{"encoder-decoder", func(c *config.Config) { c.Arch = config.ArchEncDec }},
	} {
		cfg := config.Default()
		c.set(&cfg)
		err := decode.Supported(cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Supported = %v", c.want, err)
		}
		if _, err := decode.New(cfg, 1, nil); err == nil {
			t.Errorf("%s: New: no error", c.want)
		}
	}
	cfg := config.Default()
	if _, err := cfg.Resolve(); err != nil {
		t.Fatal(err)
	}
	if _, err := decode.New(cfg, 1, nil); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("no params: %v", err)
	}
}

func argmax(xs []float64) int {
	best := 0
	for i, x := range xs {
		if x > xs[best] {
			best = i
		}
	}
	return best
}

// TestSplitIdentical: split between two cores, the decoder computes the
// same logits, bit for bit, as on one (GOMAXPROCS 1, where it does not
// split), at GOMAXPROCS 1, 2 and 8, for every variant and dtype: three
// rows primed with a block, then fed to the context.
func TestSplitIdentical(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, v := range variants {
		for _, dt := range []config.DType{config.Float64, config.Float32} {
			t.Run(v.name+"/"+string(dt), func(t *testing.T) {
				cfg, m := build(t, v, dt)
				const rows = 3
				// steps runs a decoder and returns the logits after every
				// step.
				steps := func(split bool, procs int) [][]float64 {
					runtime.GOMAXPROCS(procs)
					fast, err := decode.New(cfg, rows, m.Params)
					if err != nil {
						t.Fatal(err)
					}
					if split {
						decode.SplitAlways(fast)
					}
					r := rand.New(rand.NewPCG(5, 6))
					seqs := make([][]int, rows)
					for row := range seqs {
						for range 7 {
							seqs[row] = append(seqs[row], r.IntN(cfg.Model.Vocab))
						}
					}
					if err := fast.Prime(seqs); err != nil {
						t.Fatal(err)
					}
					var out [][]float64
					ids := make([]int, rows)
					for {
						for row := range rows {
							out = append(out, append([]float64(nil), fast.Logits(row)...))
						}
						if fast.Len(0) == fast.Context() {
							return out
						}
						for row := range ids {
							ids[row] = r.IntN(cfg.Model.Vocab)
						}
						if err := fast.Feed(ids); err != nil {
							t.Fatal(err)
						}
					}
				}
				want := steps(false, 1)
				for _, run := range []struct {
					split bool
					procs int
				}{{true, 1}, {true, 2}, {true, 8}, {false, 2}} {
					got := steps(run.split, run.procs)
					for i := range want {
						for j := range want[i] {
							if math.Float64bits(got[i][j]) != math.Float64bits(want[i][j]) {
								t.Fatalf("split %v, GOMAXPROCS %d: step %d row %d logit %d: %v, on one core %v",
									run.split, run.procs, i/rows, i%rows, j, got[i][j], want[i][j])
							}
						}
					}
				}
			})
		}
	}
}
