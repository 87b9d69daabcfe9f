// Command gomlx is a peer benchmark: it trains qkv's "configuration R" (a
// one-block pre-LayerNorm causal Transformer, 54,224 float32 parameters) with
// GoMLX v0.26.0 on its pure-Go "simplego" backend (no XLA/PJRT, no cgo) and
// times one training step (forward, loss, backward, Adam update), so the
// result can be compared with qkv's and PyTorch's numbers.
//
// Run it from this directory (it is a separate Go module):
//
//	CGO_ENABLED=0 go run . -n 20
//
// It runs 3 untimed warm-up steps and then n timed steps, and prints the median
// milliseconds per step, the parameter count, the loss, and one JSON line.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"time"

	"github.com/gomlx/gomlx/backends"
	"github.com/gomlx/gomlx/backends/simplego"
	"github.com/gomlx/gomlx/pkg/core/dtypes"
	. "github.com/gomlx/gomlx/pkg/core/graph" //nolint:staticcheck // GoMLX's idiomatic graph DSL
	"github.com/gomlx/gomlx/pkg/core/shapes"
	"github.com/gomlx/gomlx/pkg/core/tensors"
	"github.com/gomlx/gomlx/pkg/ml/context"
	"github.com/gomlx/gomlx/pkg/ml/layers"
	"github.com/gomlx/gomlx/pkg/ml/layers/activations"
	"github.com/gomlx/gomlx/pkg/ml/train"
	"github.com/gomlx/gomlx/pkg/ml/train/losses"
	"github.com/gomlx/gomlx/pkg/ml/train/optimizers"
)

// Configuration R.
const (
	V      = 16  // vocabulary
	S      = 32  // sequence length
	B      = 32  // batch
	D      = 64  // model width
	H      = 4   // heads
	Dk     = 16  // D / H
	Hidden = 256 // feed-forward hidden width
	Eps    = 1e-5
	Seed   = 42

	gomlxVersion = "v0.26.0"
	warmup       = 3
)

// layerNorm is GoMLX's own LayerNormalization over the feature axis, with a
// learned gain and offset; only epsilon is changed from GoMLX's default (1e-3)
// to PyTorch's 1e-5.
func layerNorm(ctx *context.Context, x *Node) *Node {
	return layers.LayerNormalization(ctx, x, -1).Epsilon(Eps).LearnedGain(true).LearnedOffset(true).Done()
}

// causalSelfAttention is written by hand from GoMLX graph ops instead of using
// layers.MultiHeadAttention: in v0.26.0 that layer multiplies the projected
// queries by 1/sqrt(d_k) and then divides the scores by sqrt(d_k) again
// (multiheadattention.go, lines 302 and 330), i.e. it scales by 1/d_k, which
// is not configuration R. Here the scores are scaled by 1/sqrt(d_k) exactly
// once. The four projections are GoMLX's layers.Dense, (64,64) plus bias each.
func causalSelfAttention(ctx *context.Context, x *Node) *Node {
	g := x.Graph()
	b, s := x.Shape().Dimensions[0], x.Shape().Dimensions[1]
	split := func(t *Node) *Node { return Reshape(t, b, s, H, Dk) } // [b,s,h,dk]
	q := split(layers.Dense(ctx.In("wq"), x, true, D))
	k := split(layers.Dense(ctx.In("wk"), x, true, D))
	v := split(layers.Dense(ctx.In("wv"), x, true, D))

	scores := Einsum("bqhd,bkhd->bhqk", q, k)              // [b,h,s,s]
	scores = MulScalar(scores, 1.0/math.Sqrt(float64(Dk))) // = 1/4, applied once
	// Causal mask: query i sees keys j <= i. LowerTriangular is [s,s], true for col <= row.
	mask := BroadcastToDims(InsertAxes(LowerTriangular(g, s), 0, 0), b, H, s, s)
	probs := MaskedSoftmax(scores, mask, -1)

	out := Einsum("bhqk,bkhd->bqhd", probs, v) // [b,s,h,dk]
	out = Reshape(out, b, s, D)
	return layers.Dense(ctx.In("wo"), out, true, D)
}

// modelFn builds configuration R: token + learned position embedding, one
// pre-LN decoder block, final LayerNorm, and a 64->16 head. It returns logits
// shaped [B,S,V].
func modelFn(ctx *context.Context, _ any, inputs []*Node) []*Node {
	tokens := inputs[0] // [B,S] int32
	g := tokens.Graph()
	x := layers.Embedding(ctx.In("tok_emb"), tokens, dtypes.Float32, V, D) // [B,S,D]
	pos := ctx.In("pos_emb").VariableWithShape("embeddings", shapes.Make(dtypes.Float32, S, D)).ValueGraph(g)
	x = Add(x, InsertAxes(pos, 0)) // broadcast over the batch

	blk := ctx.In("block0")
	h := Add(x, causalSelfAttention(blk.In("attn"), layerNorm(blk.In("ln1"), x)))
	ff := layers.Dense(blk.In("ff1"), layerNorm(blk.In("ln2"), h), true, Hidden)
	ff = layers.Dense(blk.In("ff2"), activations.Relu(ff), true, D)
	h = Add(h, ff)

	logits := layers.Dense(ctx.In("head"), layerNorm(ctx.In("ln_f"), h), true, V)
	return []*Node{logits}
}

func main() {
	n := flag.Int("n", 20, "number of timed training steps")
	flag.Parse()
	if *n < 1 {
		fmt.Fprintln(os.Stderr, "-n must be >= 1")
		os.Exit(2)
	}

	// Select the pure-Go backend explicitly. Only simplego is imported (no XLA),
	// and the name is given here, so $GOMLX_BACKEND cannot switch it.
	backend, err := backends.NewWithConfig(simplego.BackendName)
	must(err)
	if backend.String() != simplego.BackendName {
		panic(fmt.Sprintf("expected the simplego backend, got %q", backend.String()))
	}
	fmt.Printf("backend: %s (%s)\n", backend.Name(), backend.Description())

	ctx := context.New()
	must(ctx.SetRNGStateFromSeed(Seed)) // fixed-seed initialisation (GoMLX's default He-normal)

	// Fixed random token ids and targets.
	rng := rand.New(rand.NewPCG(Seed, Seed))
	tokens := make([]int32, B*S)
	targets := make([]int32, B*S)
	for i := range tokens {
		tokens[i] = int32(rng.IntN(V))
		targets[i] = int32(rng.IntN(V))
	}
	inputs := []*tensors.Tensor{tensors.FromFlatDataAndDimensions(tokens, B, S)}
	labels := []*tensors.Tensor{tensors.FromFlatDataAndDimensions(targets, B, S, 1)}

	// SparseCategoricalCrossEntropyLogits averages over all B*S positions.
	opt := optimizers.Adam().LearningRate(1e-3).Betas(0.9, 0.999).Epsilon(1e-8).WeightDecay(0).Done()
	trainer := train.NewTrainer(backend, ctx, modelFn, losses.SparseCategoricalCrossEntropyLogits, opt, nil, nil)

	// step runs one full training step and returns the batch loss (computed
	// before this step's update). Reading the scalar waits for the result.
	step := func() float32 {
		metrics, err := trainer.TrainStep(nil, inputs, labels)
		must(err)
		loss := tensors.ToScalar[float32](metrics[0])
		for _, m := range metrics {
			m.MustFinalizeAll()
		}
		return loss
	}

	var losses []float32
	for range warmup { // also builds and compiles the graph and creates the variables
		losses = append(losses, step())
	}

	params := 0
	for v := range ctx.IterVariables() {
		if v.Trainable {
			params += v.Shape().Size()
		}
	}

	times := make([]float64, *n)
	for i := range *n {
		t0 := time.Now()
		losses = append(losses, step())
		times[i] = float64(time.Since(t0).Microseconds()) / 1000
	}

	fmt.Print("loss per step (3 warm-up, then timed):")
	for i, l := range losses {
		if i%10 == 0 {
			fmt.Print("\n ")
		}
		fmt.Printf(" %.4f", l)
	}
	fmt.Println()

	slices.Sort(times)
	median := times[len(times)/2]
	if len(times)%2 == 0 {
		median = (times[len(times)/2-1] + times[len(times)/2]) / 2
	}
	median = math.Round(median*1000) / 1000
	first, last := losses[0], losses[len(losses)-1]
	fmt.Printf("GoMLX %s (pure-Go simplego backend): %.3f ms/step (median of %d), %d params, loss first %.4f last %.4f\n",
		gomlxVersion, median, *n, params, first, last)
	if !(last < first) {
		fmt.Fprintln(os.Stderr, "warning: loss did not decrease")
	}
	line, err := json.Marshal(struct {
		Framework string  `json:"framework"`
		Version   string  `json:"version"`
		Backend   string  `json:"backend"`
		MsPerStep float64 `json:"ms_per_step"`
		Params    int     `json:"params"`
		Steps     int     `json:"steps"`
	}{"gomlx", gomlxVersion, "simplego", median, params, *n})
	must(err)
	fmt.Println(string(line))
}

func must(err error) {
	if err != nil {
		panic(err)
	}
}
