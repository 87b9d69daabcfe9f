package layers

import (
	"fmt"
	"slices"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
)

// documents is a user's mask modifier, written without touching qkv: a
// packed batch of documents that start at the given positions, each causal
// and blind to the others.
type documents struct{ starts []int }

// doc returns the document of position i.
func (d documents) doc(i int) int {
	n := 0
	for n+1 < len(d.starts) && d.starts[n+1] <= i {
		n++
	}
	return n
}

func (d documents) Visible(_, _, i, j int) bool { return j <= i && d.doc(i) == d.doc(j) }

func (d documents) Block(_, _, i0, i1, j0, j1 int) graph.Coverage { return graph.Partial }

func (d documents) String() string { return fmt.Sprintf("Documents%v", d.starts) }

// TestUserMaskModifier: a Decoder given a user's document mask
// (AttentionVariants.Mask) never lets one document read another: changing
// a token of the first document leaves every logit of the second the same
// bit for bit, under each implementation, while it does change the first
// document's later logits; and the same decoder without the mask does let
// them mix, so the check can fail.
func TestUserMaskModifier(t *testing.T) {
	const b, seqLen = 2, 7
	docs := documents{starts: []int{0, 3}} // positions 0-2 and 3-6
	for _, impl := range []AttentionImpl{AttentionFused, AttentionComposed, AttentionFlash} {
		for _, masked := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/masked=%v", impl, masked), func(t *testing.T) {
				cfg := StackConfig{Vocab: 7, MaxLen: seqLen, Dim: 8, Heads: 2, Layers: 2, Hidden: 16, BlockOptions: BlockOptions{Bias: true, Attention: impl}}
				if masked {
					cfg.Mask = docs
				}
				rng := newRand(41)
				m := buildModel(t, tensor.Float64, 5, true, cfg, b, seqLen, nil)
				perturb(t, m.params, rng)
				r := newRunner(t, []*G.Node{m.out})
				base := randomIDs(rng, b*seqLen, cfg.Vocab)
				want := r.run(t, func() error { return m.ids.Set(base) })[0]
				changed := slices.Clone(base)
				for n := 0; n < b; n++ {
					changed[n*seqLen+1] = (base[n*seqLen+1] + 1) % cfg.Vocab // in the first document
				}
				got := r.run(t, func() error { return m.ids.Set(changed) })[0]
				v := cfg.Vocab
				for n := 0; n < b; n++ {
					second := true
					for i := 3; i < seqLen; i++ {
						second = second && bitsEqual(row(got, seqLen, v, n, i), row(want, seqLen, v, n, i))
					}
					if second != masked {
						t.Errorf("sequence %d: the second document's logits unchanged: %v, want %v", n, second, masked)
					}
					if bitsEqual(row(got, seqLen, v, n, 2), row(want, seqLen, v, n, 2)) {
						t.Errorf("sequence %d: changing token 1 left position 2 of its own document unchanged", n)
					}
				}
			})
		}
	}
}
