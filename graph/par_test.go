package graph

import (
	"runtime"
	"slices"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestOpsAllocateNothing: once an op has run, running it again allocates
// nothing, in float32 and float64, on one core and on two: its output, its
// inputs' slices, its job for the worker pool and the scratch of each
// worker are kept from run to run. Every op of everyOp's graph whose kind
// is listed in allocFree is run again on the values it received. (Its
// shapes are small enough that the ops run on the caller alone, below
// par.WorkersFor's threshold; the pool and the split GEMM have allocation
// tests of their own.)
func TestOpsAllocateNothing(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 2} {
		runtime.GOMAXPROCS(procs)
		for _, dt := range floatTypes {
			g := G.NewGraph()
			cost, wrt := everyOp(t, g, dt)
			cost, wrt = withActivations(t, g, dt, cost, wrt)
			if _, err := G.Grad(cost, wrt...); err != nil {
				t.Fatal(err)
			}
			vm, err := NewMachine(g)
			if err != nil {
				t.Fatal(err)
			}
			if err := vm.RunAll(); err != nil {
				t.Fatalf("%v: run: %v", dt, err)
			}
			seen := map[string]bool{}
			for _, n := range g.AllNodes() {
				if !isCustomOp(n.Op()) || !slices.Contains(allocFree, opKind(n.Op())) {
					continue
				}
				seen[opKind(n.Op())] = true
				var in []G.Value
				for it := g.From(n.ID()); it.Next(); {
					in = append(in, it.Node().(*G.Node).Value())
				}
				var runErr error
				allocs := testing.AllocsPerRun(5, func() { _, runErr = n.Op().Do(in...) })
				if runErr != nil {
					t.Fatalf("%v %v: %v", dt, n.Op(), runErr)
				}
				if allocs != 0 {
					t.Errorf("GOMAXPROCS %d, %v: %v allocates %v times per run, want 0", procs, dt, n.Op(), allocs)
				}
			}
			vm.Close()
			for _, k := range allocFree {
				if !seen[k] {
					t.Errorf("%v: op %s is not in the graph: the test no longer covers it", dt, k)
				}
			}
		}
	}
}

// withActivations adds to cost a weighted sum of GELU and of ReLU of a
// new input, which it adds to wrt: everyOp has no activation.
func withActivations(t *testing.T, g *G.ExprGraph, dt tensor.Dtype, cost *G.Node, wrt G.Nodes) (*G.Node, G.Nodes) {
	t.Helper()
	rng := newRand(6)
	shape := tensor.Shape{2, 3, 5}
	x := valued(g, dt, shape, roundTo(dt, uniform(rng, shape.TotalSize(), -2, 2)), "activation input")
	for _, act := range []func(*G.Node) (*G.Node, error){GELU, ReLU} {
		y, err := act(x)
		if err != nil {
			t.Fatal(err)
		}
		if cost, err = G.Add(cost, weightedSum(t, y, rng)); err != nil {
			t.Fatal(err)
		}
	}
	return cost, append(wrt, x)
}

// allocFree are the kinds of op that must not allocate once they have
// run: those of the models' training path. The others (flash attention,
// RoPE, RMSNorm, the composed attention's score modifiers, Reshape) still
// allocate their closures or scratch at every run.
var allocFree = []string{
	"qkv.AttentionWeights", "qkv.AttentionMix",
	"qkv.AttentionGradQ", "qkv.AttentionGradK", "qkv.AttentionGradP", "qkv.AttentionGradV", "qkv.AttentionGradBias",
	"qkv.AttentionModDeriv", "qkv.AttentionGradSinks",
	"qkv.Linear", "qkv.LinearGradX", "qkv.LinearGradW", "qkv.LinearGradB",
	"qkv.LayerNorm", "qkv.LayerNormGradX", "qkv.LayerNormGradGain", "qkv.LayerNormGradBias",
	"qkv.gelu", "qkv.geluGrad", "qkv.relu", "qkv.reluGrad",
	// Linear attention: the features, the chunked op and its gradient
	// steps, the recurrent step (the composed form's mask is a reference,
	// not held to it).
	"qkv.Features", "qkv.FeaturesGrad", "qkv.LinearAttention", "qkv.LinearAttentionGrad",
	"qkv.LinearAttentionGradQ", "qkv.LinearAttentionGradK", "qkv.LinearAttentionGradV",
	"qkv.LinearStepState", "qkv.LinearStepZ", "qkv.LinearStepOut",
}
