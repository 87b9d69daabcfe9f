// Command spago trains "configuration R" (a one-block pre-LayerNorm causal
// Transformer language model, 54,224 float32 parameters) with
// github.com/nlpodyssey/spago v1.1.0 and times its training step, so that it
// can be compared with qkv's and PyTorch's.
//
// Configuration R: V=16, S=32, B=32, D=64, H=4 (d_k=16), 1 block, FF 256 with
// ReLU, learned position embedding, LayerNorm eps 1e-5, scores scaled by
// 1/sqrt(d_k), causal mask, final LayerNorm, head 64->16, mean cross-entropy
// over all B*S positions, Adam(lr 1e-3, 0.9, 0.999, 1e-8).
//
// spago builds a dynamic graph of per-token column vectors, so the model is
// written the spago way: linear, layernorm and embedding layers from
// spago/nn, losses.CrossEntropy, and Adam from spago/optimizers. Attention is
// written here from ag primitives (Stack, Slice, Mul, ProdScalar, Add mask,
// Softmax, MulT, Concat) because spago's multiheadattention module deadlocks in
// backward: its project() appends into the same backing array that holds the
// operands of earlier ag.Concat nodes, which turns the graph into a cycle.
//
// Run (from this directory):
//
//	go run . -n 20
//
// It does 3 untimed warm-up steps, then n timed steps (forward, loss,
// backward, Adam update), and prints the median ms/step and a JSON line.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"sort"
	"time"

	"github.com/nlpodyssey/spago/ag"
	"github.com/nlpodyssey/spago/initializers"
	"github.com/nlpodyssey/spago/losses"
	"github.com/nlpodyssey/spago/mat"
	"github.com/nlpodyssey/spago/mat/rand"
	"github.com/nlpodyssey/spago/nn"
	"github.com/nlpodyssey/spago/nn/embedding"
	"github.com/nlpodyssey/spago/nn/linear"
	"github.com/nlpodyssey/spago/nn/normalization/layernorm"
	"github.com/nlpodyssey/spago/optimizers"
	"github.com/nlpodyssey/spago/optimizers/adam"
)

// Configuration R.
const (
	vocab   = 16
	seqLen  = 32
	batch   = 32
	dModel  = 64
	nHeads  = 4
	dK      = dModel / nHeads
	dFF     = 256
	lnEps   = 1e-5
	seed    = 42
	warmup  = 3
	version = "v1.1.0"
)

// T is the floating-point type of all parameters and activations.
type T = float32

// Block is one pre-LayerNorm decoder block.
type Block struct {
	nn.Module
	LN1            *layernorm.Model
	Wq, Wk, Wv, Wo *linear.Model
	LN2            *layernorm.Model
	FF1, FF2       *linear.Model
}

// Model is the whole language model.
type Model struct {
	nn.Module
	Tok   *embedding.Model
	Pos   *embedding.Model
	Block *Block
	LNf   *layernorm.Model
	Head  *linear.Model
}

func newModel(rng *rand.LockedRand) *Model {
	m := &Model{
		Tok: embedding.New[T](vocab, dModel),
		Pos: embedding.New[T](seqLen, dModel),
		Block: &Block{
			LN1: layernorm.New[T](dModel, lnEps),
			Wq:  linear.New[T](dModel, dModel),
			Wk:  linear.New[T](dModel, dModel),
			Wv:  linear.New[T](dModel, dModel),
			Wo:  linear.New[T](dModel, dModel),
			LN2: layernorm.New[T](dModel, lnEps),
			FF1: linear.New[T](dModel, dFF),
			FF2: linear.New[T](dFF, dModel),
		},
		LNf:  layernorm.New[T](dModel, lnEps),
		Head: linear.New[T](dModel, vocab),
	}
	// Embeddings ~ N(0, 1); linear weights Xavier-uniform, biases 0;
	// LayerNorm gains 1, biases 0 (spago's layernorm.New starts the gain at 0).
	for _, e := range []*embedding.Model{m.Tok, m.Pos} {
		for _, w := range e.Weights {
			initializers.Normal(w, 0, 1, rng)
		}
	}
	b := m.Block
	for _, l := range []*linear.Model{b.Wq, b.Wk, b.Wv, b.Wo, b.FF1, b.FF2, m.Head} {
		initializers.XavierUniform(l.W.Value().(mat.Matrix), 1, rng)
	}
	for _, ln := range []*layernorm.Model{b.LN1, b.LN2, m.LNf} {
		initializers.Ones(ln.W)
	}
	return m
}

// countParams counts every scalar parameter. Embedding tables are counted
// row by row because spago's embedding.Model only traverses the rows that
// currently hold a gradient.
func countParams(m *Model) int {
	n := 0
	for _, e := range []*embedding.Model{m.Tok, m.Pos} {
		for _, w := range e.Weights {
			n += w.Size()
		}
	}
	nn.ForEachParam(m.Block, func(p *nn.Param) { n += p.Size() })
	nn.ForEachParam(m.LNf, func(p *nn.Param) { n += p.Size() })
	nn.ForEachParam(m.Head, func(p *nn.Param) { n += p.Size() })
	return n
}

// causalMasks[i] is an (S,1) column added to the scores of query i:
// 0 for keys j <= i, -Inf for j > i.
var causalMasks = func() []mat.Tensor {
	masks := make([]mat.Tensor, seqLen)
	for i := range masks {
		data := make([]T, seqLen)
		for j := i + 1; j < seqLen; j++ {
			data[j] = T(math.Inf(-1))
		}
		masks[i] = mat.NewDense[T](mat.WithShape(seqLen, 1), mat.WithBacking(data))
	}
	return masks
}()

var attnScale = mat.Scalar[T](T(1 / math.Sqrt(dK)))

// attention is causal multi-head self-attention over one sequence of (D,1)
// token vectors, without the output projection. Result: one (D,1) vector per
// token, the heads concatenated.
func (b *Block) attention(xs []mat.Tensor) []mat.Tensor {
	q := b.Wq.Forward(xs...)
	K := ag.Stack(b.Wk.Forward(xs...)...) // (S, D): one row per token
	V := ag.Stack(b.Wv.Forward(xs...)...) // (S, D)

	heads := make([][]mat.Tensor, len(xs)) // heads[i][h] is (d_k,1)
	for i := range heads {
		heads[i] = make([]mat.Tensor, nHeads)
	}
	for h := 0; h < nHeads; h++ {
		Kh := ag.Slice(K, 0, h*dK, len(xs), (h+1)*dK) // (S, d_k)
		Vh := ag.Slice(V, 0, h*dK, len(xs), (h+1)*dK) // (S, d_k)
		for i, qi := range q {
			qih := ag.Slice(qi, h*dK, 0, (h+1)*dK, 1)                                   // (d_k, 1)
			scores := ag.Add(ag.ProdScalar(ag.Mul(Kh, qih), attnScale), causalMasks[i]) // (S, 1)
			heads[i][h] = ag.MulT(Vh, ag.Softmax(scores))                               // Vhᵀ·w: (d_k, 1)
		}
	}
	out := make([]mat.Tensor, len(xs))
	for i := range out {
		out[i] = ag.Concat(heads[i]...) // each token has its own slice
	}
	return out
}

// Forward maps one sequence of token vectors through the block.
func (b *Block) Forward(xs []mat.Tensor) []mat.Tensor {
	a := b.Wo.Forward(b.attention(b.LN1.Forward(xs...))...)
	h := make([]mat.Tensor, len(xs))
	for i := range xs {
		h[i] = ag.Add(xs[i], a[i])
	}
	n2 := b.LN2.Forward(h...)
	out := make([]mat.Tensor, len(xs))
	for i := range h {
		ff := ag.Affine(b.FF2.B, b.FF2.W, ag.ReLU(ag.Affine(b.FF1.B, b.FF1.W, n2[i])))
		out[i] = ag.Add(h[i], ff)
	}
	return out
}

var positions = func() []int {
	p := make([]int, seqLen)
	for i := range p {
		p[i] = i
	}
	return p
}()

// Forward returns the (V,1) logits for each position of one sequence.
func (m *Model) Forward(ids []int) []mat.Tensor {
	tok := m.Tok.MustEncode(ids)
	pos := m.Pos.MustEncode(positions[:len(ids)])
	xs := make([]mat.Tensor, len(ids))
	for i := range xs {
		xs[i] = ag.Add(tok[i], pos[i])
	}
	return m.Head.Forward(m.LNf.Forward(m.Block.Forward(xs)...)...)
}

// loss is the mean cross-entropy over all B*S positions.
func (m *Model) loss(inputs, targets [][]int) mat.Tensor {
	ces := make([]mat.Tensor, 0, batch*seqLen)
	for b := range inputs {
		for i, logits := range m.Forward(inputs[b]) {
			ces = append(ces, losses.CrossEntropy(logits, targets[b][i]))
		}
	}
	return ag.ReduceMean(ag.Stack(ces...))
}

func main() {
	n := flag.Int("n", 20, "number of timed training steps")
	flag.Parse()
	if *n < 1 {
		log.Fatal("-n must be >= 1")
	}

	rng := rand.NewLockedRand(seed)
	model := newModel(rng)
	params := countParams(model)

	dataRng := rand.NewLockedRand(seed + 1)
	inputs := make([][]int, batch)
	targets := make([][]int, batch)
	for b := 0; b < batch; b++ {
		inputs[b] = make([]int, seqLen)
		targets[b] = make([]int, seqLen)
		for i := 0; i < seqLen; i++ {
			inputs[b][i] = dataRng.Intn(vocab)
			targets[b][i] = dataRng.Intn(vocab)
		}
	}

	strategy := adam.New(adam.NewConfig(1e-3, 0.9, 0.999, 1e-8))
	optimizer := optimizers.New(nn.Parameters(model), strategy)

	step := func() float64 {
		loss := model.loss(inputs, targets)
		if err := ag.Backward(loss); err != nil {
			log.Fatal(err)
		}
		if err := optimizer.Optimize(); err != nil { // also zeroes the grads
			log.Fatal(err)
		}
		strategy.IncExample() // advance Adam's bias-correction time step
		return loss.Value().Item().F64()
	}

	fmt.Printf("params: %d\n", params)
	var first, last float64
	for s := 0; s < warmup; s++ {
		l := step()
		if s == 0 {
			first = l
		}
		fmt.Printf("warm-up step %d: loss %.4f\n", s+1, l)
	}
	times := make([]float64, *n)
	for s := 0; s < *n; s++ {
		t0 := time.Now()
		last = step()
		times[s] = float64(time.Since(t0).Microseconds()) / 1000
		fmt.Printf("step %d: loss %.4f  %.1f ms\n", s+1, last, times[s])
	}
	sort.Float64s(times)
	med := times[len(times)/2]
	if len(times)%2 == 0 {
		med = (times[len(times)/2-1] + times[len(times)/2]) / 2
	}

	fmt.Printf("spago %s (pure Go): %.1f ms/step (median of %d), %d params, loss first %.4f last %.4f\n",
		version, med, *n, params, first, last)
	out, err := json.Marshal(struct {
		Framework string  `json:"framework"`
		Version   string  `json:"version"`
		MsPerStep float64 `json:"ms_per_step"`
		Params    int     `json:"params"`
		Steps     int     `json:"steps"`
	}{"spago", version, math.Round(med*100) / 100, params, *n})
	if err != nil {
		log.Fatal(err)
	}
	os.Stdout.Write(append(out, '\n'))
}
