package explain

import (
	"fmt"
	"math"
	"math/rand"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/layers"
)

// maskSizes are the batch, length, vocabulary and width of the masks' runs.
const maskB, maskS, maskVocab, maskDim = 2, 8, 6, 16

// attendTokens runs tokens (maskB, maskS) through qkv's Embedding and
// MultiHeadAttention layers, their weights drawn from seed 7 every time so
// that two runs differ only in their tokens, under mask, and returns the
// attention output (maskB, maskS, maskDim).
func attendTokens(tokens []int, mask graph.Mask) ([]float64, error) {
	g := G.NewGraph()
	s, err := layers.NewScope(g, tensor.Float64, 7)
	if err != nil {
		return nil, err
	}
	emb, err := layers.NewEmbedding(s.Sub("emb"), layers.EmbeddingConfig{Vocab: maskVocab, Dim: maskDim})
	if err != nil {
		return nil, err
	}
	attn, err := layers.NewMultiHeadAttention(s.Sub("attn"), layers.AttentionConfig{Dim: maskDim, Heads: 2, Bias: true})
	if err != nil {
		return nil, err
	}
	ids, err := graph.NewIDs(g, maskB, maskS, maskVocab, "ids")
	if err != nil {
		return nil, err
	}
	if err := ids.Set(tokens); err != nil {
		return nil, err
	}
	m, err := graph.NewMaskConst(g, tensor.Float64, mask, "mask")
	if err != nil {
		return nil, err
	}
	x, err := emb.Forward(ids)
	if err != nil {
		return nil, err
	}
	h, _, err := attn.Forward(x, x, x, m)
	if err != nil {
		return nil, err
	}
	v, err := run(g, h)
	if err != nil {
		return nil, err
	}
	return v[0], nil
}

// maskedChange runs tokens and a copy with the positions change picks
// changed, under mask, and returns the largest output difference at the
// positions keep picks and at the others.
func maskedChange(rng *rand.Rand, mask graph.Mask, change, keep func(b, i int) bool) (kept, rest float64, err error) {
	a := make([]int, maskB*maskS)
	for i := range a {
		a[i] = rng.Intn(maskVocab)
	}
	b := append([]int(nil), a...)
	for n := 0; n < maskB; n++ {
		for i := 0; i < maskS; i++ {
			if change(n, i) {
				b[n*maskS+i] = (a[n*maskS+i] + 1 + rng.Intn(maskVocab-1)) % maskVocab
			}
		}
	}
	ya, err := attendTokens(a, mask)
	if err != nil {
		return 0, 0, err
	}
	yb, err := attendTokens(b, mask)
	if err != nil {
		return 0, 0, err
	}
	for n := 0; n < maskB; n++ {
		for i := 0; i < maskS; i++ {
			d := 0.0
			for c := 0; c < maskDim; c++ {
				k := (n*maskS+i)*maskDim + c
				d = max(d, math.Abs(ya[k]-yb[k]))
			}
			if keep(n, i) {
				kept = max(kept, d)
			} else {
				rest = max(rest, d)
			}
		}
	}
	return kept, rest, nil
}

// causalMask changes the token at position j = maskS/2 and compares
// outputs before j (which must not move at all) with those from j on
// (which must, or the experiment could not see a leak).
func causalMask(o Options) (Result, error) {
	const j = maskS / 2
	r := Result{
		Statement: "Under the causal mask, changing token j never changes the outputs at positions i < j.",
		Method:    fmt.Sprintf("qkv's Embedding + MultiHeadAttention layers (random weights, D=%d, H=2, B=%d, S=%d), token %d changed; largest output difference before and from position %d", maskDim, maskB, maskS, j, j),
		Measured:  map[string]float64{},
	}
	m, err := graph.Causal(maskB, maskS)
	if err != nil {
		return r, err
	}
	before, after, err := maskedChange(rand.New(rand.NewSource(o.Seed)), m,
		func(_, i int) bool { return i == j }, func(_, i int) bool { return i < j })
	if err != nil {
		return r, err
	}
	r.Measured["max_diff_before_j"] = before
	r.Measured["max_diff_from_j"] = after
	r.Holds, r.Verdict = verdict(before == 0, after > 0)
	r.Why = fmt.Sprintf("outputs before position %d are identical bit for bit (difference %g) while those from %d on move by up to %.3g", j, before, j, after)
	if !r.Holds {
		r.Why = fmt.Sprintf("difference before position %d: %g (want 0); from it: %g (want > 0)", j, before, after)
	}
	return r, nil
}

// paddingMask pads each sequence after its length and changes every
// padded token: the real positions must not move at all, and the padded
// positions' own outputs (which read the changed tokens' queries) must.
func paddingMask(o Options) (Result, error) {
	lengths := []int{5, 3}
	r := Result{
		Statement: "Under a key-padding mask, changing the padded tokens never changes the outputs at the real positions.",
		Method:    fmt.Sprintf("qkv's Embedding + MultiHeadAttention layers (random weights, D=%d, H=2, S=%d) with real lengths %v, every padded token changed; largest output difference at real and padded positions", maskDim, maskS, lengths),
		Measured:  map[string]float64{},
	}
	m, err := graph.KeyPadding(lengths, maskS, maskS)
	if err != nil {
		return r, err
	}
	padded := func(b, i int) bool { return i >= lengths[b] }
	inReal, pads, err := maskedChange(rand.New(rand.NewSource(o.Seed)), m, padded,
		func(b, i int) bool { return !padded(b, i) })
	if err != nil {
		return r, err
	}
	r.Measured["max_diff_real"] = inReal
	r.Measured["max_diff_padded"] = pads
	r.Holds, r.Verdict = verdict(inReal == 0, pads > 0)
	r.Why = fmt.Sprintf("real positions are identical bit for bit (difference %g) while the padded ones move by up to %.3g", inReal, pads)
	if !r.Holds {
		r.Why = fmt.Sprintf("difference at real positions: %g (want 0); at padded ones: %g (want > 0)", inReal, pads)
	}
	return r, nil
}
