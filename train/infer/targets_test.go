package infer_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/infer"
	"github.com/qkv-dev/qkv/train/model"
)

// randomize sets every parameter to a fixed non-trivial value, so that an
// untrained model still tells its inputs apart.
func randomize(ps []graph.Param) {
	for i, p := range ps {
		switch vals := p.Node.Value().Data().(type) {
		case []float64:
			for j := range vals {
				vals[j] = 0.5 * math.Sin(float64(7*i+3*j+1))
			}
		case []float32:
			for j := range vals {
				vals[j] = float32(0.5 * math.Sin(float64(7*i+3*j+1)))
			}
		}
	}
}

// randomModel returns a resolved config of dtype dt and a decoder of it
// whose every parameter is random, so that no zero bias or unit gain hides
// a difference.
func randomModel(t *testing.T, dt config.DType, positions layers.PositionsKind, postLN bool) (config.Config, *model.Model) {
	t.Helper()
	cfg := config.Default()
	cfg.Task = config.TaskSpec{Name: "copy", Params: data.TaskConfig{MinLength: 2, MaxLength: 6, Alphabet: 5}}
	cfg.Model.Dim, cfg.Model.Heads, cfg.Model.Hidden, cfg.Model.Layers = 12, 3, 20, 2
	cfg.Model.Positions, cfg.Model.PostLN, cfg.DType = positions, postLN, dt
	task, err := cfg.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Build(cfg, 3, task.MaxLen()-1, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	randomize(m.Params)
	return cfg, m
}

// multiQuery returns a resolved config of multi-query recall, whose answers
// alternate given queries and target values, and examples of it of two
// pair counts.
func multiQuery(t *testing.T, arch config.Arch) (config.Config, data.Task, []data.Example) {
	t.Helper()
	cfg := config.Default()
	cfg.Arch, cfg.DType = arch, config.Float64
	cfg.Task = config.TaskSpec{Name: "recall", Params: data.TaskConfig{MinPairs: 2, MaxPairs: 3, Keys: 5, Values: 3, Queries: data.QueriesAll}}
	cfg.Model.Dim, cfg.Model.Heads, cfg.Model.Hidden, cfg.Model.Layers = 12, 3, 20, 1
	task, err := cfg.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 0))
	examples := make([]data.Example, 5)
	for i := range examples {
		examples[i] = task.Generate(rng)
	}
	return cfg, task, examples
}

// checkGreedy checks Greedy's answers on examples: the given tokens where
// they are, and at each target the argmax of next logits, which next
// computes from the example's answer decoded so far without the cache.
func checkGreedy(t *testing.T, task data.Task, examples []data.Example, greedy func([][]int) ([][]int, error), next func(e data.Example, answer []int) []float64) {
	t.Helper()
	prompts := make([][]int, len(examples))
	for i, e := range examples {
		prompts[i] = e.Shown()
	}
	got, err := greedy(prompts)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range examples {
		if len(got[i]) != len(e.Answer) {
			t.Fatalf("example %d: answer of %d tokens, want %d", i, len(got[i]), len(e.Answer))
		}
		for j := range e.Answer {
			want := e.Answer[j]
			if !e.IsGiven(j) {
				want = argmaxOf(next(e, got[i][:j]))
			}
			if got[i][j] != want {
				t.Errorf("example %d position %d (given %v): got %d, want %d", i, j, e.IsGiven(j), got[i][j], want)
			}
		}
	}
}

// checkScore checks that Evaluate scores targets only: examples whose
// targets are the model's own answers score 1, and one wrong target of one
// example costs one example and one target, whatever the given tokens.
func checkScore(t *testing.T, examples []data.Example, greedy func([][]int) ([][]int, error), evaluate func([]data.Example) (infer.EvalResult, error)) {
	t.Helper()
	prompts := make([][]int, len(examples))
	for i, e := range examples {
		prompts[i] = e.Shown()
	}
	got, err := greedy(prompts)
	if err != nil {
		t.Fatal(err)
	}
	own := make([]data.Example, len(examples))
	targets := 0
	for i, e := range examples {
		own[i] = data.Example{Prompt: e.Prompt, Answer: got[i], Given: e.Given}
		targets += len(e.Targets())
	}
	r, err := evaluate(own)
	if err != nil || r.ExactMatch != 1 || r.TokenAccuracy != 1 || r.N != len(own) {
		t.Fatalf("Evaluate on the model's own answers = %+v, %v; want all right", r, err)
	}
	own[0].Answer = slices.Clone(own[0].Answer)
	own[0].Answer[1]++ // position 1 is the first value, a target
	r, err = evaluate(own)
	if err != nil {
		t.Fatal(err)
	}
	if wantExact, wantTok := float64(len(own)-1)/float64(len(own)), float64(targets-1)/float64(targets); r.ExactMatch != wantExact || r.TokenAccuracy != wantTok {
		t.Errorf("one wrong target: exact %v token %v, want %v and %v", r.ExactMatch, r.TokenAccuracy, wantExact, wantTok)
	}
}

// TestGreedyMultiTarget: the decoder feeds prompt, SEP and every given
// answer token and decodes each target from all that precedes it, as
// recomputing the prefix without the cache does; Evaluate scores targets
// only.
func TestGreedyMultiTarget(t *testing.T) {
	cfg, task, examples := multiQuery(t, config.ArchDecoder)
	m, err := model.Build(cfg, 2, task.MaxLen()-1, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	randomize(m.Params)
	greedy := func(p [][]int) ([][]int, error) { return infer.Greedy(m, task, p) }
	checkGreedy(t, task, examples, greedy, func(e data.Example, answer []int) []float64 {
		seq := append(append(slices.Clone(e.Prompt), task.Vocab().SEP()), answer...)
		l, err := m.NextLogits(nil, [][]int{seq})
		if err != nil {
			t.Fatal(err)
		}
		return l[0]
	})
	checkScore(t, examples, greedy, func(e []data.Example) (infer.EvalResult, error) { return infer.Evaluate(m, task, e) })
	// The same prompt and values laid out as a single-query example (queries
	// before SEP, no given position) is refused, not scored.
	e := examples[0]
	moved := data.Example{Prompt: e.Shown(), Answer: e.Targets()}
	if _, err := infer.Evaluate(m, task, []data.Example{moved}); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("example 0: the answer has %d tokens, want %d", len(moved.Answer), len(e.Answer))) {
		t.Errorf("Evaluate of a mislaid example: %v, want an error naming it and its layout", err)
	}
}

// TestEncDecGreedyMultiTarget: the encoder reads the pairs, the decoder SEP
// and each given query, and decodes each value as the uncached model does.
func TestEncDecGreedyMultiTarget(t *testing.T) {
	cfg, task, examples := multiQuery(t, config.ArchEncDec)
	m, err := model.Build(cfg, 2, cfg.Model.MaxLen, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	randomize(m.Params)
	greedy := func(p [][]int) ([][]int, error) { return infer.Greedy(m, task, p) }
	checkGreedy(t, task, examples, greedy, func(e data.Example, answer []int) []float64 {
		tgt := append([]int{task.Vocab().SEP()}, answer...)
		l, err := m.NextLogits([][]int{e.Prompt}, [][]int{tgt})
		if err != nil {
			t.Fatal(err)
		}
		return l[0]
	})
	checkScore(t, examples, greedy, func(e []data.Example) (infer.EvalResult, error) { return infer.Evaluate(m, task, e) })
}

// argmaxOf returns the index of the largest of xs, the lowest among ties.
func argmaxOf(xs []float64) int {
	return slices.Index(xs, slices.Max(xs))
}
