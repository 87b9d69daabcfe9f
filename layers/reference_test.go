package layers

import (
	"fmt"
	"math"
	"sort"
	"testing"
)

// This file is an independent implementation of every layer in plain Go
// loops over flat row-major float64 slices: no gorgonia, nothing shared with
// the code under test but the parameter values, read by name from Params().
// It follows the formulas, not the layers' code: weights are (in, out),
// y = x W + b; attention is softmax(Q K^T / sqrt(dk) + mask) V per head with
// dk = D/H, heads concatenated in order, then Wo.

// ref holds a model's parameter values by name.
type ref struct {
	t *testing.T
	p map[string][]float64
}

// w returns the parameter called name, failing the test if there is none.
func (r ref) w(name string) []float64 {
	r.t.Helper()
	v, ok := r.p[name]
	if !ok {
		names := make([]string, 0, len(r.p))
		for n := range r.p {
			names = append(names, n)
		}
		sort.Strings(names)
		r.t.Fatalf("reference: no parameter %q; have %v", name, names)
	}
	return v
}

func join(prefix, name string) string {
	if prefix == "" {
		return name
	}
	return prefix + "." + name
}

// linearRef returns x W + b for x (n, in), W (in, out), b (out) read from the
// parameters wName and, with bias, bName.
func (r ref) linear(x []float64, n, in, out int, wName, bName string, bias bool) []float64 {
	r.t.Helper()
	w := r.w(wName)
	if len(w) != in*out || len(x) != n*in {
		r.t.Fatalf("reference linear %s: W has %d values, want %d*%d; x has %d, want %d*%d", wName, len(w), in, out, len(x), n, in)
	}
	var b []float64
	if bias {
		b = r.w(bName)
	}
	y := make([]float64, n*out)
	for row := 0; row < n; row++ {
		for o := 0; o < out; o++ {
			var acc float64
			for i := 0; i < in; i++ {
				acc += x[row*in+i] * w[i*out+o]
			}
			if bias {
				acc += b[o]
			}
			y[row*out+o] = acc
		}
	}
	return y
}

// layerNorm normalises each of the n rows of x (n, d) with the biased
// variance: (x - mean) / sqrt(var + eps) * gain + bias.
func (r ref) layerNorm(x []float64, n, d int, prefix string, eps float64) []float64 {
	r.t.Helper()
	gain, bias := r.w(join(prefix, "gain")), r.w(join(prefix, "bias"))
	y := make([]float64, len(x))
	for row := 0; row < n; row++ {
		v := x[row*d : (row+1)*d]
		var mean float64
		for _, a := range v {
			mean += a
		}
		mean /= float64(d)
		var variance float64
		for _, a := range v {
			variance += (a - mean) * (a - mean)
		}
		variance /= float64(d)
		for i, a := range v {
			y[row*d+i] = (a-mean)/math.Sqrt(variance+eps)*gain[i] + bias[i]
		}
	}
	return y
}

func geluRef(x float64) float64 {
	return 0.5 * x * (1 + math.Tanh(math.Sqrt(2/math.Pi)*(x+0.044715*x*x*x)))
}

// feedForward returns act(x W1 + b1) W2 + b2 for x (n, d).
func (r ref) feedForward(x []float64, n, d, hidden int, prefix string, act Activation, bias bool) []float64 {
	r.t.Helper()
	h := r.linear(x, n, d, hidden, join(prefix, "w1"), join(prefix, "b1"), bias)
	for i, v := range h {
		switch act {
		case "", ActivationReLU:
			h[i] = math.Max(v, 0)
		case ActivationGELU:
			h[i] = geluRef(v)
		default:
			r.t.Fatalf("reference: activation %q", act)
		}
	}
	return r.linear(h, n, hidden, d, join(prefix, "w2"), join(prefix, "b2"), bias)
}

// attnDims are the sizes of one attention call.
type attnDims struct {
	B, Sq, Sk, Dim, KeyDim, ValueDim, Heads int
}

// attnOut is what the attention reference computes.
type attnOut struct {
	Out      []float64 // (B, Sq, Dim)
	Weights  []float64 // (B, H, Sq, Sk)
	MaxScore float64   // max |score| over allowed entries, after scaling
}

// attention is multi-head attention from its formula. allow (nil: all)
// says whether query i of sequence b may see key j; a query that may see
// nothing gets zero weights. The scores are divided by sqrt(scaleWidth):
// pass dk = Dim/Heads for the correct layer, anything else for a control.
func (r ref) attention(prefix string, d attnDims, bias bool, xq, xk, xv []float64, allow func(b, i, j int) bool, scaleWidth int) attnOut {
	r.t.Helper()
	q := r.linear(xq, d.B*d.Sq, d.Dim, d.Dim, join(prefix, "wq"), join(prefix, "bq"), bias)
	k := r.linear(xk, d.B*d.Sk, d.KeyDim, d.Dim, join(prefix, "wk"), join(prefix, "bk"), bias)
	v := r.linear(xv, d.B*d.Sk, d.ValueDim, d.Dim, join(prefix, "wv"), join(prefix, "bv"), bias)
	dk := d.Dim / d.Heads
	scale := 1 / math.Sqrt(float64(scaleWidth))
	res := attnOut{Weights: make([]float64, d.B*d.Heads*d.Sq*d.Sk)}
	concat := make([]float64, d.B*d.Sq*d.Dim)
	scores := make([]float64, d.Sk)
	for b := 0; b < d.B; b++ {
		for h := 0; h < d.Heads; h++ {
			for i := 0; i < d.Sq; i++ {
				qi := q[(b*d.Sq+i)*d.Dim+h*dk:][:dk]
				rowMax, seen := math.Inf(-1), false
				for j := 0; j < d.Sk; j++ {
					if allow != nil && !allow(b, i, j) {
						continue
					}
					kj := k[(b*d.Sk+j)*d.Dim+h*dk:][:dk]
					var dot float64
					for c := 0; c < dk; c++ {
						dot += qi[c] * kj[c]
					}
					scores[j] = dot * scale
					rowMax = math.Max(rowMax, scores[j])
					res.MaxScore = math.Max(res.MaxScore, math.Abs(scores[j]))
					seen = true
				}
				if !seen {
					continue // weights and head output stay zero
				}
				w := res.Weights[((b*d.Heads+h)*d.Sq+i)*d.Sk:][:d.Sk]
				var sum float64
				for j := 0; j < d.Sk; j++ {
					if allow != nil && !allow(b, i, j) {
						continue
					}
					w[j] = math.Exp(scores[j] - rowMax)
					sum += w[j]
				}
				for j := range w {
					w[j] /= sum
				}
				out := concat[(b*d.Sq+i)*d.Dim+h*dk:][:dk]
				for j := 0; j < d.Sk; j++ {
					vj := v[(b*d.Sk+j)*d.Dim+h*dk:][:dk]
					for c := 0; c < dk; c++ {
						out[c] += w[j] * vj[c]
					}
				}
			}
		}
	}
	res.Out = r.linear(concat, d.B*d.Sq, d.Dim, d.Dim, join(prefix, "wo"), join(prefix, "bo"), bias)
	return res
}

// block is one Transformer block over x (B, S, D): pre-LN
// x + attn(LN1(x)), then + ff(LN2(.)); post-LN LN1(x + attn(x)), then
// LN2(. + ff(.)). Self-attention takes Q, K and V from the same input.
func (r ref) block(prefix string, cfg BlockConfig, x []float64, b, s int, allow func(b, i, j int) bool) ([]float64, attnOut) {
	r.t.Helper()
	eps := cfg.Eps
	if eps == 0 {
		eps = 1e-5
	}
	if cfg.Causal {
		pad := allow
		allow = func(n, i, j int) bool { return j <= i && (pad == nil || pad(n, i, j)) }
	}
	n, d := b*s, cfg.Dim
	dims := attnDims{B: b, Sq: s, Sk: s, Dim: d, KeyDim: d, ValueDim: d, Heads: cfg.Heads}
	add := func(a, c []float64) []float64 {
		out := make([]float64, len(a))
		for i := range a {
			out[i] = a[i] + c[i]
		}
		return out
	}
	ln1, ln2 := join(prefix, "ln1"), join(prefix, "ln2")
	if cfg.PostLN {
		a := r.attention(join(prefix, "attn"), dims, cfg.Bias, x, x, x, allow, d/cfg.Heads)
		x1 := r.layerNorm(add(x, a.Out), n, d, ln1, eps)
		f := r.feedForward(x1, n, d, cfg.Hidden, join(prefix, "ff"), cfg.Activation, cfg.Bias)
		return r.layerNorm(add(x1, f), n, d, ln2, eps), a
	}
	h := r.layerNorm(x, n, d, ln1, eps)
	a := r.attention(join(prefix, "attn"), dims, cfg.Bias, h, h, h, allow, d/cfg.Heads)
	x1 := add(x, a.Out)
	f := r.feedForward(r.layerNorm(x1, n, d, ln2, eps), n, d, cfg.Hidden, join(prefix, "ff"), cfg.Activation, cfg.Bias)
	return add(x1, f), a
}

// sinusoid is PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(same).
func sinusoid(pos, i, d int) float64 {
	angle := float64(pos) / math.Pow(10000, float64(2*(i/2))/float64(d))
	if i%2 == 0 {
		return math.Sin(angle)
	}
	return math.Cos(angle)
}

// positions returns x (B, S, D) plus the positional encoding of kind.
func (r ref) positions(prefix string, kind PositionsKind, x []float64, b, s, d int) []float64 {
	r.t.Helper()
	out := append([]float64(nil), x...)
	if kind == PositionsNone {
		return out
	}
	var table []float64
	if kind == "" || kind == PositionsLearned {
		table = r.w(join(prefix, "table"))
	}
	for n := 0; n < b; n++ {
		for p := 0; p < s; p++ {
			for i := 0; i < d; i++ {
				if table != nil {
					out[(n*s+p)*d+i] += table[p*d+i]
				} else {
					out[(n*s+p)*d+i] += sinusoid(p, i, d)
				}
			}
		}
	}
	return out
}

// stack is the decoder (causal, with head) or encoder from token ids
// (B, S): token embedding + positions, the blocks, the final LN of pre-LN
// stacks, and for the decoder the head to vocabulary logits.
func (r ref) stack(prefix string, cfg StackConfig, decoder bool, ids []int, b, s int, allow func(b, i, j int) bool) ([]float64, []attnOut) {
	r.t.Helper()
	d := cfg.Dim
	table := r.w(join(prefix, "tok_emb.table"))
	x := make([]float64, b*s*d)
	for n, id := range ids {
		copy(x[n*d:(n+1)*d], table[id*d:(id+1)*d])
	}
	x = r.positions(join(prefix, "pos_emb"), cfg.Positions, x, b, s, d)
	var atts []attnOut
	for l := 0; l < cfg.Layers; l++ {
		var a attnOut
		x, a = r.block(join(prefix, fmt.Sprintf("blocks.%d", l)), BlockConfig{
			Dim:          d,
			Heads:        cfg.Heads,
			Hidden:       cfg.Hidden,
			Causal:       decoder,
			BlockOptions: BlockOptions{Activation: cfg.Activation, PostLN: cfg.PostLN, Bias: cfg.Bias},
		}, x, b, s, allow)
		atts = append(atts, a)
	}
	if !cfg.PostLN {
		x = r.layerNorm(x, b*s, d, join(prefix, "ln_f"), 1e-5)
	}
	if decoder {
		x = r.linear(x, b*s, d, cfg.Vocab, join(prefix, "head.w"), join(prefix, "head.b"), true)
	}
	return x, atts
}

// decoderBlock is one encoder–decoder decoder block over x (B, St, D) and the
// encoder output mem (B, Ss, D): pre-LN x + selfAttn(LN1(x)) with causal
// self-attention, + crossAttn(LN2(.), mem) whose queries are the target
// states and whose keys and values are mem, + ff(LN3(.)); post-LN normalises
// each residual sum with ln1, ln2, ln3 instead. selfAllow (B, St, St) is
// joined with the causal mask here; crossAllow is (B, St, Ss).
func (r ref) decoderBlock(prefix string, cfg BlockConfig, x, mem []float64, b, st, ss int, selfAllow, crossAllow func(b, i, j int) bool) (y []float64, self, cross attnOut) {
	r.t.Helper()
	const eps = 1e-5
	causal := func(n, i, j int) bool { return j <= i && (selfAllow == nil || selfAllow(n, i, j)) }
	n, d := b*st, cfg.Dim
	selfDims := attnDims{B: b, Sq: st, Sk: st, Dim: d, KeyDim: d, ValueDim: d, Heads: cfg.Heads}
	crossDims := attnDims{B: b, Sq: st, Sk: ss, Dim: d, KeyDim: d, ValueDim: d, Heads: cfg.Heads}
	add := func(a, c []float64) []float64 {
		out := make([]float64, len(a))
		for i := range a {
			out[i] = a[i] + c[i]
		}
		return out
	}
	dk := d / cfg.Heads
	ln := func(v []float64, name string) []float64 { return r.layerNorm(v, n, d, join(prefix, name), eps) }
	ff := func(v []float64) []float64 {
		return r.feedForward(v, n, d, cfg.Hidden, join(prefix, "ff"), cfg.Activation, cfg.Bias)
	}
	if cfg.PostLN {
		self = r.attention(join(prefix, "self_attn"), selfDims, cfg.Bias, x, x, x, causal, dk)
		x1 := ln(add(x, self.Out), "ln1")
		cross = r.attention(join(prefix, "cross_attn"), crossDims, cfg.Bias, x1, mem, mem, crossAllow, dk)
		x2 := ln(add(x1, cross.Out), "ln2")
		return ln(add(x2, ff(x2)), "ln3"), self, cross
	}
	h := ln(x, "ln1")
	self = r.attention(join(prefix, "self_attn"), selfDims, cfg.Bias, h, h, h, causal, dk)
	x1 := add(x, self.Out)
	cross = r.attention(join(prefix, "cross_attn"), crossDims, cfg.Bias, ln(x1, "ln2"), mem, mem, crossAllow, dk)
	x2 := add(x1, cross.Out)
	return add(x2, ff(ln(x2, "ln3"))), self, cross
}

// encDecOut is what the encoder–decoder reference computes.
type encDecOut struct {
	Logits                  []float64 // (B, St, TgtVocab)
	Encoder, DecSelf, Cross []attnOut // per layer
}

// encDec is the encoder–decoder model: the encoder stack "enc" over src
// (B, Ss) with srcAllow, then the target embedding "dec.tok_emb" and
// positions "dec.pos_emb" of tgt (B, St), the decoder blocks
// "dec.blocks.<i>" reading the encoder output through crossAllow (B, St, Ss),
// the final LN "dec.ln_f" of pre-LN models and the head "head".
func (r ref) encDec(cfg EncDecConfig, src, tgt []int, b, ss, st int, srcAllow, tgtAllow, crossAllow func(b, i, j int) bool) encDecOut {
	r.t.Helper()
	var out encDecOut
	var mem []float64
	enc := StackConfig{
		Vocab:        cfg.SrcVocab,
		MaxLen:       cfg.SrcMaxLen,
		Dim:          cfg.Dim,
		Heads:        cfg.Heads,
		Layers:       cfg.EncLayers,
		Hidden:       cfg.Hidden,
		BlockOptions: BlockOptions{Activation: cfg.Activation, Positions: cfg.Positions, PostLN: cfg.PostLN, Bias: cfg.Bias},
	}
	mem, out.Encoder = r.stack("enc", enc, false, src, b, ss, srcAllow)
	d := cfg.Dim
	table := r.w("dec.tok_emb.table")
	x := make([]float64, b*st*d)
	for n, id := range tgt {
		copy(x[n*d:(n+1)*d], table[id*d:(id+1)*d])
	}
	x = r.positions("dec.pos_emb", cfg.Positions, x, b, st, d)
	blk := BlockConfig{Dim: d, Heads: cfg.Heads, Hidden: cfg.Hidden, BlockOptions: BlockOptions{Activation: cfg.Activation, PostLN: cfg.PostLN, Bias: cfg.Bias}}
	for l := 0; l < cfg.DecLayers; l++ {
		var self, cross attnOut
		x, self, cross = r.decoderBlock(fmt.Sprintf("dec.blocks.%d", l), blk, x, mem, b, st, ss, tgtAllow, crossAllow)
		out.DecSelf = append(out.DecSelf, self)
		out.Cross = append(out.Cross, cross)
	}
	if !cfg.PostLN {
		x = r.layerNorm(x, b*st, d, "dec.ln_f", 1e-5)
	}
	out.Logits = r.linear(x, b*st, d, cfg.TgtVocab, "head.w", "head.b", true)
	return out
}
