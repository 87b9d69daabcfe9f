// Command classifier is the path a user of qkv follows, end to end, with the
// public API only: build a model of one's own from qkv's layers, train it
// with qkv's AdamW, save its weights, and load them into a fresh model that
// then computes exactly what the trained one does.
//
// The task needs attention: is a sequence of 8 tokens sorted? The unsorted
// ones are sorted sequences with two tokens swapped, so both classes hold
// the same tokens and only their order tells them apart. Each position must
// compare its token with the others', which is what attention does. With
// the Transformer block replaced by a feed-forward layer (each position on
// its own) the same model stops at 78-80% held-out accuracy; with it, it
// reaches 97.7-100% in 1000 steps (seeds 1 to 10), in about 1.5 seconds.
//
//	go run ./classifier            # from examples/
//	go run ./classifier -out dir   # keep the weights file in dir
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/checkpoint"
	"github.com/qkv-dev/qkv/train/optim"
)

const (
	seqLen  = 8  // tokens per sequence
	vocab   = 6  // token ids 0..5
	dim     = 32 // model width
	heads   = 4
	hidden  = 64 // feed-forward width
	batch   = 32 // sequences per step, and per forward pass at evaluation
	classes = 2
)

// options are what a run may change; main reads them from flags.
type options struct {
	Seed  uint64  // fixes the data, the initial weights and so the result
	Steps int     // optimizer steps
	LR    float64 // AdamW's learning rate
	Out   string  // directory of the weights file; "" means a temporary one
}

// model is one compiled graph: inputs bound per batch, logits and loss out.
type model struct {
	ids     *graph.IDs
	targets *graph.Targets
	logits  *G.Node
	loss    *G.Node
	params  []graph.Param
	vm      *graph.Machine
}

// newModel builds embeddings + learned positions → one pre-LN Transformer
// block (self-attention and feed-forward) → final LayerNorm → the mean over
// positions → a Linear head with two logits. seed draws the initial
// weights; train adds the gradients the optimizer reads.
func newModel(seed uint64, train bool) (*model, error) {
	g := G.NewGraph()
	s, err := layers.NewScope(g, tensor.Float64, seed)
	if err != nil {
		return nil, err
	}
	// Each layer lives in a sub-scope, which names its parameters
	// ("block.attn.wq"): the names are the keys of the weights file.
	emb, err1 := layers.NewEmbedding(s.Sub("tok_emb"), layers.EmbeddingConfig{Vocab: vocab, Dim: dim})
	pos, err2 := layers.NewPositions(s.Sub("pos_emb"), layers.PositionsConfig{Kind: layers.PositionsLearned, MaxLen: seqLen, Dim: dim})
	block, err3 := layers.NewBlock(s.Sub("block"), layers.BlockConfig{
		Dim: dim, Heads: heads, Hidden: hidden,
		BlockOptions: layers.BlockOptions{Bias: true, Activation: layers.ActivationGELU},
	})
	norm, err4 := layers.NewLayerNorm(s.Sub("ln_f"), layers.LayerNormConfig{Dim: dim})
	head, err5 := layers.NewLinear(s.Sub("head"), layers.LinearConfig{In: dim, Out: classes, Bias: true})
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return nil, err // each names the layer and the field at fault
	}

	// The inputs are nodes of a fixed shape, built once and bound anew for
	// every batch (ids.Set, targets.Set): one graph, one machine.
	m := &model{}
	if m.ids, err = graph.NewIDs(g, batch, seqLen, vocab, "ids"); err != nil {
		return nil, err
	}
	if m.targets, err = graph.NewTargets(g, tensor.Float64, batch, classes, "labels"); err != nil {
		return nil, err
	}
	x, err := emb.Forward(m.ids) // (B, S, D)
	if err != nil {
		return nil, err
	}
	// Without positions attention is blind to order, and this task is
	// nothing but order.
	if x, err = pos.Forward(x); err != nil {
		return nil, err
	}
	if x, _, err = block.Forward(x, nil); err != nil { // no mask: every token sees every token
		return nil, err
	}
	if x, err = norm.Forward(x); err != nil {
		return nil, err
	}
	pooled, err := G.Mean(x, 1) // (B, D)
	if err != nil {
		return nil, err
	}
	if m.logits, err = head.Forward(pooled); err != nil { // (B, 2)
		return nil, err
	}
	if m.loss, err = graph.CrossEntropy(m.logits, m.targets); err != nil {
		return nil, err
	}

	for _, l := range []interface{ Params() []graph.Param }{emb, pos, block, norm, head} {
		m.params = append(m.params, l.Params()...)
	}
	if train {
		// Gradient nodes of the loss with respect to every parameter; the
		// machine computes them on each run, the optimizer reads them.
		if _, err := G.Grad(m.loss, graph.Nodes(m.params)...); err != nil {
			return nil, err
		}
	}
	if m.vm, err = graph.NewMachine(g); err != nil {
		return nil, err
	}
	return m, nil
}

// run binds one batch and runs the graph. It returns a copy of the logits:
// the machine reuses its tensors at the next run.
func (m *model) run(tokens, labels []int) ([]float64, error) {
	m.vm.Reset()
	if err := m.ids.Set(tokens); err != nil {
		return nil, err
	}
	// Every sequence counts with weight 1; padding would get 0.
	if err := m.targets.Set(labels, slices.Repeat([]float64{1}, len(labels))); err != nil {
		return nil, err
	}
	if err := m.vm.RunAll(); err != nil {
		return nil, err
	}
	return graph.Float64s(m.logits.Value())
}

// evaluate returns the logits of every held-out batch and the accuracy.
func (m *model) evaluate(tokens, labels [][]int) ([][]float64, float64, error) {
	var all [][]float64
	correct, total := 0, 0
	for i := range tokens {
		logits, err := m.run(tokens[i], labels[i])
		if err != nil {
			return nil, 0, err
		}
		for b, label := range labels[i] {
			if (logits[2*b+1] > logits[2*b]) == (label == 1) {
				correct++
			}
			total++
		}
		all = append(all, logits)
	}
	return all, float64(correct) / float64(total), nil
}

// sample draws one batch: half the sequences sorted (non-decreasing), half
// sorted and then with two different tokens swapped. Both halves draw their
// tokens alike, so counting tokens says nothing: only order does.
func sample(rng *rand.Rand) (tokens, labels []int) {
	tokens, labels = make([]int, batch*seqLen), make([]int, batch)
	for b := range labels {
		row := tokens[b*seqLen : (b+1)*seqLen]
		// Drawn until not every token is the same (the row starts all 0):
		// no swap could unsort a constant sequence.
		for row[0] == row[seqLen-1] {
			for i := range row {
				row[i] = rng.IntN(vocab)
			}
			slices.Sort(row)
		}
		if rng.IntN(2) == 0 {
			labels[b] = 1
			continue
		}
		for { // a swap of equal tokens would leave it sorted
			i, j := rng.IntN(seqLen), rng.IntN(seqLen)
			if row[i] != row[j] {
				row[i], row[j] = row[j], row[i]
				break
			}
		}
	}
	return tokens, labels
}

// train trains a model, reports its held-out accuracy, saves it, and loads
// it into a fresh model; an error if the two do not agree bit for bit.
func train(opts options, w io.Writer) (float64, error) {
	// Two streams: the held-out sequences are drawn apart from the training
	// ones, and a fresh training batch is drawn at every step.
	trainRNG := rand.New(rand.NewPCG(opts.Seed, 1))
	testRNG := rand.New(rand.NewPCG(opts.Seed, 2))
	var testTokens, testLabels [][]int
	for range 16 { // 512 held-out sequences
		t, l := sample(testRNG)
		testTokens, testLabels = append(testTokens, t), append(testLabels, l)
	}

	m, err := newModel(opts.Seed, true)
	if err != nil {
		return 0, err
	}
	defer m.vm.Close()
	// AdamW decays the projection weights only (DecayWeights), not the
	// embeddings, gains and biases.
	adamw, err := optim.NewAdamW(optim.DefaultBeta1, optim.DefaultBeta2, optim.DefaultEps, optim.DefaultWeightDecay, optim.DecayWeights)
	if err != nil {
		return 0, err
	}
	opt, err := optim.New(adamw, m.params)
	if err != nil {
		return 0, err
	}
	for step := 1; step <= opts.Steps; step++ {
		if _, err := m.run(sample(trainRNG)); err != nil {
			return 0, err
		}
		// Clipping the global gradient norm keeps an early large step from
		// throwing the weights far off.
		if _, err := optim.ClipGradNorm(m.params, 1); err != nil {
			return 0, err
		}
		if err := opt.Step(opts.LR); err != nil { // updates, then zeroes the gradients
			return 0, err
		}
		if step%100 == 0 || step == opts.Steps {
			loss, err := graph.Float64s(m.loss.Value()) // this batch's, before the step
			if err != nil {
				return 0, err
			}
			fmt.Fprintf(w, "step %4d  loss %.4f\n", step, loss[0])
		}
	}
	// Running the training graph without an optimizer step only evaluates.
	want, acc, err := m.evaluate(testTokens, testLabels)
	if err != nil {
		return 0, err
	}
	fmt.Fprintf(w, "held-out accuracy: %.1f%% (chance is 50%%)\n", 100*acc)

	dir := opts.Out
	if dir == "" {
		if dir, err = os.MkdirTemp("", "qkv-classifier-"); err != nil {
			return 0, err
		}
		defer os.RemoveAll(dir)
	}
	path := filepath.Join(dir, "classifier.safetensors")
	if err := checkpoint.SaveWeights(path, m.params, checkpoint.LayoutQKV); err != nil {
		return 0, err
	}
	fmt.Fprintf(w, "saved %d tensors to %s\n", len(m.params), path)

	// A fresh model, as another program would build it: other initial
	// weights (seed+1) and no gradients, only the forward pass. Loading
	// checks every name, shape and dtype, and replaces all the weights.
	fresh, err := newModel(opts.Seed+1, false)
	if err != nil {
		return 0, err
	}
	defer fresh.vm.Close()
	if err := checkpoint.LoadWeights(path, fresh.params, checkpoint.LayoutQKV); err != nil {
		return 0, err
	}
	got, _, err := fresh.evaluate(testTokens, testLabels)
	if err != nil {
		return 0, err
	}
	if !slices.EqualFunc(got, want, slices.Equal) {
		return 0, errors.New("reloaded: logits differ from the trained model's")
	}
	fmt.Fprintln(w, "reloaded: logits identical")
	return acc, nil
}

func main() {
	var opts options
	flag.Uint64Var(&opts.Seed, "seed", 1, "seed of the data and the initial weights")
	flag.IntVar(&opts.Steps, "steps", 1000, "optimizer steps")
	flag.Float64Var(&opts.LR, "lr", 3e-3, "learning rate")
	flag.StringVar(&opts.Out, "out", "", "directory to write classifier.safetensors to (default: a temporary one, removed)")
	flag.Parse()
	if _, err := train(opts, os.Stdout); err != nil {
		log.Fatal(err)
	}
}
