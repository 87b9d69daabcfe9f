package explain

import (
	"fmt"
	"math/rand"
	"path/filepath"
	"slices"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/internal/plot"
)

// Verdicts a Result may carry.
const (
	Holds       = "holds"
	HoldsInPart = "holds in part"
	DoesNotHold = "does not hold here"
)

// Result is what one claim's experiment measured and concluded.
type Result struct {
	Claim     string             `json:"claim"`
	Statement string             `json:"statement"` // the tutorial's claim, one sentence
	Method    string             `json:"method"`    // what was measured and how
	Measured  map[string]float64 `json:"measured"`  // the numbers, by name
	Holds     bool               `json:"holds"`
	Verdict   string             `json:"verdict"`
	Why       string             `json:"why"` // one line on the verdict
	// Plots are the PNG files the claim wrote, when Options.Plots is set.
	Plots []string `json:"plots,omitempty"`
}

// Options sizes the experiments.
type Options struct {
	Small bool // sizes small enough for a test, not for the figures
	Seed  int64
	// Plots, if not empty, is the directory where each claim writes its
	// figures, named after the claim (softmax-saturation.png).
	Plots string
}

// plotPath returns where claim id writes its figure with the given suffix
// ("" for the main one, "-heads" for a second), or "" without o.Plots.
func (o Options) plotPath(id, suffix string) string {
	if o.Plots == "" {
		return ""
	}
	return filepath.Join(o.Plots, id+suffix+".png")
}

// claim is an experiment and its id.
type claim struct {
	id  string
	run func(Options) (Result, error)
}

// claims lists the experiments in the tutorial's order: why the scores are
// scaled, what softmax does with them, what heads cost, what the masks
// hide, what attention knows of order and of where Q, K and V come from,
// the lookup itself, and where time and memory go.
var claims = []claim{
	{"scores-variance", scoresVariance},
	{"softmax-saturation", softmaxSaturation},
	{"scale-dk-not-dmodel", scaleDKNotDModel},
	{"stable-softmax", stableSoftmax},
	{"rows-sum-to-one", rowsSumToOne},
	{"multihead-cost", multiheadCost},
	{"causal-mask", causalMask},
	{"padding-mask", paddingMask},
	{"permutation-equivariance", permutationEquivariance},
	{"self-vs-cross", selfVsCross},
	{"soft-lookup", softLookup},
	{"quadratic-cost", quadraticCost},
	{"memory-peak", memoryPeak},
	{"linear-cost", linearCost},
	{"recall-vs-state", recallVsState}, {"throughput-vs-recall", throughputVsRecall},
}

// IDs returns the claims' ids in the order qkv explain runs them.
func IDs() []string {
	ids := make([]string, len(claims))
	for i, c := range claims {
		ids[i] = c.id
	}
	return ids
}

// Run runs the claim id.
func Run(id string, o Options) (Result, error) {
	i := slices.IndexFunc(claims, func(c claim) bool { return c.id == id })
	if i < 0 {
		return Result{}, fmt.Errorf("explain: no claim %q", id)
	}
	f := claims[i].run
	r, err := f(o)
	if err != nil {
		return Result{}, fmt.Errorf("explain: %s: %w", id, err)
	}
	r.Claim = id
	return r, nil
}

// draw writes the claim id's figure of panels (suffix as for
// Options.plotPath) when o.Plots is set and records its path in r.Plots.
func (r *Result) draw(o Options, id, suffix, title string, panels []plot.Panel) error {
	path := o.plotPath(id, suffix)
	if path == "" {
		return nil
	}
	if err := plot.Lines(path, title, panels); err != nil {
		return err
	}
	r.Plots = append(r.Plots, path)
	return nil
}

// verdict names the verdict of all parts holding, some, or none.
func verdict(parts ...bool) (bool, string) {
	n := 0
	for _, p := range parts {
		if p {
			n++
		}
	}
	switch n {
	case len(parts):
		return true, Holds
	case 0:
		return false, DoesNotHold
	}
	return false, HoldsInPart
}

// normal returns n standard normal samples.
func normal(rng *rand.Rand, n int) []float64 {
	x := make([]float64, n)
	for i := range x {
		x[i] = rng.NormFloat64()
	}
	return x
}

// constant returns a float64 node of the given shape and data in g.
func constant(g *G.ExprGraph, name string, data []float64, shape ...int) *G.Node {
	return G.NewTensor(g, tensor.Float64, len(shape), G.WithShape(shape...), G.WithName(name),
		G.WithValue(tensor.New(tensor.WithShape(shape...), tensor.WithBacking(data))))
}

// randomScores adds to g the scores q·kᵀ of rows unit-normal queries
// against keys unit-normal keys of width dk, by gorgonia's matmul as the
// composed attention computes them: (rows, keys).
func randomScores(g *G.ExprGraph, rng *rand.Rand, rows, keys, dk int) (*G.Node, error) {
	q := constant(g, "q", normal(rng, rows*dk), rows, dk)
	kt := constant(g, "kT", normal(rng, dk*keys), dk, keys)
	return G.Mul(q, kt)
}

// run runs g once and returns the float64 values of nodes.
func run(g *G.ExprGraph, nodes ...*G.Node) ([][]float64, error) {
	vals := make([]G.Value, len(nodes))
	for i, n := range nodes {
		G.Read(n, &vals[i])
	}
	vm, err := graph.NewMachine(g)
	if err != nil {
		return nil, err
	}
	defer vm.Close()
	if err := vm.RunAll(); err != nil {
		return nil, err
	}
	out := make([][]float64, len(nodes))
	for i, v := range vals {
		if out[i], err = graph.Float64s(v); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// runOne is run for one node.
func runOne(g *G.ExprGraph, n *G.Node) ([]float64, error) {
	v, err := run(g, n)
	if err != nil {
		return nil, err
	}
	return v[0], nil
}

// tokenIDs returns the input "ids" (b, s) over vocab of g, set to tokens.
func tokenIDs(g *G.ExprGraph, b, s, vocab int, tokens []int) (*graph.IDs, error) {
	ids, err := graph.NewIDs(g, b, s, vocab, "ids")
	if err != nil {
		return nil, err
	}
	if err := ids.Set(tokens); err != nil {
		return nil, err
	}
	return ids, nil
}
