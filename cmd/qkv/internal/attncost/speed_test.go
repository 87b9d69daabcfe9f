package attncost

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/internal/gemm"
	"github.com/qkv-dev/qkv/layers"
)

// The speed targets of linear attention (docs/linear-attention.md): one
// causal layer's training step (forward and backward) at n = 4096 against
// flash attention's, its chunked products' GFLOP/s against the GEMM's, as
// benchmarks:
//
//	go test ./cmd/qkv/internal/attncost -run '^$' -bench Speed -benchtime 5x
//
// Each reports ms/step, the FLOPs its formula counts (GFLOP/step) and the
// rate they give (GFLOP/s).

// speedN, speedHeads and speedHeadDim are the layer the targets are set
// at: n = 4096, D = 64 in 4 heads of 16, as linear-cost measures.
const speedN, speedHeads, speedHeadDim = 4096, 4, 16

// flashFLOPs counts one causal flash attention's forward and backward
// (the projections aside) over its visible (query, key) pairs
// p = n(n+1)/2 per head, 2·dk FLOPs for each product of a pair: forward
// S = QKᵀ and O = PV (2 products), backward S again, dV = PᵀdO,
// dP = dO Vᵀ, dQ = dS K, dK = dSᵀQ (5): 14·dk·p per head, about
// 7·n²·dk, 3.5 times the forward's 2·n²·dk.
func flashFLOPs(n, heads, dk int) float64 {
	p := float64(n) * float64(n+1) / 2
	return 14 * float64(dk) * p * float64(heads)
}

// linearFLOPs counts one causal chunked linear attention's forward and
// backward (graph's linearCausal and linearCausalGrad; the projections
// and the feature map aside): per chunk of C rows, with F = dφ and E = dv,
// the forward's Q S, K_cᵀV_c (2·C·F·E each), Q_cK_cᵀ (2·C²·F) and A V_c
// (2·C²·E); the backward's forward sweep Q S, dnum Sᵀ, K_cᵀV_c (3 of
// 2·C·F·E), A, dA = dnum V_cᵀ, A V_c, dA K_c (2·C²·(2F+2E) in all) and its
// backward sweep V_c Rᵀ, K_c R, Q_cᵀ dnum (3 of 2·C·F·E) and A, dA, dAᵀQ_c,
// Aᵀ dnum (2·C²·(2F+2E)): 16·C·F·E + 10·C²·(F+E) a chunk, so per head
//
//	n · (16·F·E + 10·C·(F+E))
//
// (the chunk's (C, C) products are full: the causal mask zeroes half of
// them after they are computed).
func linearFLOPs(n, heads, f, e, c int) float64 {
	return float64(n) * float64(16*f*e+10*c*(f+e)) * float64(heads)
}

// projectionFLOPs counts the four projections' forward (x Wq, x Wk of
// (D, H·d'), x Wv, y Wo of (D, D)) and backward (the weights' and the
// input's gradients, twice the forward each: an upper count, as x itself
// needs none).
func projectionFLOPs(n, d, qk int) float64 {
	return 3 * 2 * float64(n) * float64(d) * float64(2*qk+2*d)
}

// speedLayers are the layers the training-step target compares.
var speedLayers = []struct {
	name string
	cfg  Config
}{
	{"flash", Config{Impl: layers.AttentionFlash}},
	{"linear_taylor16", Config{Linear: true, LinearOptions: layers.LinearOptions{FeatureMap: graph.FeatureTaylor, FeatureDim: 16}}},
	{"linear_elu1", Config{Linear: true, LinearOptions: layers.LinearOptions{FeatureMap: graph.FeatureELU1}}},
}

// speedFLOPs is the FLOP count of c's pass: attention by flashFLOPs or
// linearFLOPs, and the projections.
func speedFLOPs(c Config) float64 {
	d := c.Heads * c.HeadDim
	if !c.Linear {
		return flashFLOPs(c.Seq, c.Heads, c.HeadDim) + projectionFLOPs(c.Seq, d, d)
	}
	chunk := c.LinearOptions.LinearChunk
	if chunk == 0 {
		chunk = graph.DefaultLinearChunk
	}
	qk := c.Heads * c.LinearOptions.FeatureDim
	if qk == 0 {
		qk = d
	}
	return linearFLOPs(c.Seq, c.Heads, c.Features(), c.HeadDim, chunk) + projectionFLOPs(c.Seq, d, qk)
}

// BenchmarkSpeedTrainStep is target (a)'s step: one causal layer's
// forward and backward at n = 4096 (attncost.New's layer and pass), flash
// and linear attention. The ratio of their ms/step is the speed-up; that
// of their GFLOP/step the one the FLOPs predict.
func BenchmarkSpeedTrainStep(b *testing.B) {
	for _, l := range speedLayers {
		c := l.cfg
		c.Seq, c.Batch, c.Heads, c.HeadDim, c.Causal = speedN, 1, speedHeads, speedHeadDim, true
		b.Run(fmt.Sprintf("%s/n=%d", l.name, c.Seq), func(b *testing.B) {
			layer, err := New(c)
			if err != nil {
				b.Fatal(err)
			}
			defer layer.Close()
			if _, _, err := layer.Pass(); err != nil { // warm-up
				b.Fatal(err)
			}
			cpu := cpuTime()
			for b.Loop() {
				if _, _, err := layer.Pass(); err != nil {
					b.Fatal(err)
				}
			}
			reportFLOPs(b, speedFLOPs(c), cpuTime()-cpu)
		})
	}
}

// BenchmarkSpeedLinearOp is target (a)'s products: graph.LinearAttend's
// chunked op alone, forward and backward, on the features of the layers of
// BenchmarkSpeedTrainStep (4 heads of dφ = 273 for Taylor of d' = 16, or
// 16 for elu+1, and dv = 16), its GFLOP/s by linearFLOPs, beside
// BenchmarkSpeedGemm's.
func BenchmarkSpeedLinearOp(b *testing.B) {
	for _, f := range []struct {
		name string
		dim  int
	}{{"taylor16", graph.FeatureTaylor.Dim(16)}, {"elu1", graph.FeatureELU1.Dim(speedHeadDim)}} {
		b.Run(fmt.Sprintf("%s/n=%d", f.name, speedN), func(b *testing.B) {
			n, h, e := speedN, speedHeads, speedHeadDim
			g := G.NewGraph()
			rng := rand.New(rand.NewPCG(3, 4))
			input := func(name string, cols int, positive bool) *G.Node {
				v := make([]float32, n*cols)
				for i := range v {
					x := rng.NormFloat64()
					if positive { // features are positive, as φ's are
						x = 0.1 + x*x
					}
					v[i] = float32(x)
				}
				shape := tensor.Shape{1, n, cols}
				return G.NewTensor(g, tensor.Float32, 3, G.WithShape(shape...), G.WithName(name),
					G.WithValue(tensor.New(tensor.WithShape(shape...), tensor.WithBacking(v))))
			}
			q, k, v := input("phiQ", h*f.dim, true), input("phiK", h*f.dim, true), input("v", h*e, false)
			out, err := graph.LinearAttend(q, k, v, graph.LinearSpec{Heads: h, Causal: true, Normalize: true, Impl: graph.Fused})
			if err != nil {
				b.Fatal(err)
			}
			cost, err := G.Sum(out)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := G.Grad(cost, q, k, v); err != nil {
				b.Fatal(err)
			}
			vm, err := graph.NewMachine(g)
			if err != nil {
				b.Fatal(err)
			}
			defer vm.Close()
			cpu := cpuTime()
			for b.Loop() {
				if err := vm.RunAll(); err != nil {
					b.Fatal(err)
				}
				vm.Reset()
			}
			reportFLOPs(b, linearFLOPs(n, h, f.dim, e, graph.DefaultLinearChunk), cpuTime()-cpu)
		})
	}
}

// BenchmarkSpeedGemm is the GEMM's rate on this machine, on one goroutine
// (a gemm.Workspace, as the linear op calls it, one head a goroutine) and
// on all of them (gemm.Gemm): a large square product, and the chunk
// products of BenchmarkSpeedLinearOp's Taylor layer (C = 64, dφ = 273,
// dv = 16): Q_c S (64×16×273), Q_cK_cᵀ (64×64×273), A V_c (64×16×64),
// K_cᵀV_c (273×16×64).
func BenchmarkSpeedGemm(b *testing.B) {
	f := graph.FeatureTaylor.Dim(16)
	c, e := graph.DefaultLinearChunk, speedHeadDim
	for _, s := range []struct {
		name           string
		transA, transB bool
		m, n, k        int
		all            bool
	}{
		{"square512/all", false, false, 512, 512, 512, true},
		{"square512/one", false, false, 512, 512, 512, false},
		{fmt.Sprintf("QS/%dx%dx%d/one", c, e, f), false, false, c, e, f, false},
		{fmt.Sprintf("QKt/%dx%dx%d/one", c, c, f), false, true, c, c, f, false},
		{fmt.Sprintf("AV/%dx%dx%d/one", c, e, c), false, false, c, e, c, false},
		{fmt.Sprintf("KtV/%dx%dx%d/one", f, e, c), true, false, f, e, c, false},
	} {
		b.Run(s.name, func(b *testing.B) {
			rng := rand.New(rand.NewPCG(5, 6))
			rnd := func(size int) []float32 {
				x := make([]float32, size)
				for i := range x {
					x[i] = float32(rng.NormFloat64())
				}
				return x
			}
			lda, ldb := s.k, s.n
			if s.transA {
				lda = s.m
			}
			if s.transB {
				ldb = s.k
			}
			a, bm, out := rnd(s.m*s.k), rnd(s.k*s.n), make([]float32, s.m*s.n)
			var ws gemm.Workspace[float32]
			cpu := cpuTime()
			for b.Loop() {
				if s.all {
					gemm.Gemm(s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bm, ldb, 0, out, s.n)
				} else {
					ws.Gemm(s.transA, s.transB, s.m, s.n, s.k, 1, a, lda, bm, ldb, 0, out, s.n)
				}
			}
			reportFLOPs(b, 2*float64(s.m*s.n*s.k), cpuTime()-cpu)
		})
	}
	b.Logf("GOMAXPROCS %d", runtime.GOMAXPROCS(0))
}

// reportFLOPs reports flops a run as GFLOP/step, ms/step, the rate in wall
// time (GFLOP/s) and in the process's CPU time, cpu over all the runs
// (GFLOP/cpu-s: the rate a core gives, which other programs on a shared
// machine change less).
func reportFLOPs(b *testing.B, flops float64, cpu time.Duration) {
	sec := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(sec*1e3, "ms/step")
	b.ReportMetric(float64(cpu.Microseconds())/1e3/float64(b.N), "cpu-ms/step")
	b.ReportMetric(flops/1e9, "GFLOP/step")
	b.ReportMetric(flops/sec/1e9, "GFLOP/s")
	if cpu > 0 {
		b.ReportMetric(flops*float64(b.N)/cpu.Seconds()/1e9, "GFLOP/cpu-s")
	}
}
