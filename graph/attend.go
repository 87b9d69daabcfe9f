package graph

import (
	"fmt"

	G "gorgonia.org/gorgonia"
)

// Impl is how Attend computes attention. The three compute the same
// function of the same inputs, tested equal outputs and gradients; they
// differ in what they keep and how fast they are. Its string form is the
// name config.json and the CLI use; "" means Fused.
type Impl string

// The implementations of attention.
const (
	// Fused is qkv's custom op (attention.go), the default: the scores
	// and weights of each head in plain loops on the GEMM, and a
	// hand-written backward pass. It forms the weights (B, H, Sq, Sk) and
	// keeps them for the backward pass.
	Fused Impl = "fused"
	// Composed builds attention from gorgonia's own graph ops
	// (composed.go), so that gorgonia derives the backward pass: the
	// formula as a learner reads it, and the reference the others are
	// tested against. It keeps every intermediate (B*H, Sq, Sk) tensor.
	Composed Impl = "composed"
	// Flash tiles the keys (flash.go) and never forms the (Sq, Sk)
	// weights: memory O((Sq + Sk) D), the scores computed twice. It
	// returns no weights, and takes no score bias and no dropout, which
	// would need (Sq, Sk) values per head.
	Flash Impl = "flash"
)

// Valid reports whether i is a known implementation or "" (Fused).
func (i Impl) Valid() bool { return i == "" || i == Fused || i == Composed || i == Flash }

// String returns the implementation's name, "fused" for "".
func (i Impl) String() string {
	if i == "" {
		return string(Fused)
	}
	return string(i)
}

// DefaultFlashTile is the number of keys (and of queries) per tile of
// flash attention when Spec.Tile is 0. A tile's scratch is a few tiles of
// dk values, so the size trades loop overhead against cache use; it does
// not change the results beyond rounding.
const DefaultFlashTile = 64

// MaxFlashTile is the largest Spec.Tile: each worker keeps two (tile, tile)
// scratch matrices, so a larger tile would buy nothing in speed and could
// ask for more memory than the machine has.
const MaxFlashTile = 1024

// Spec is everything about one attention besides its queries, keys and
// values: how many heads, how it is computed, what is hidden and how the
// scores are changed. The zero value but for Heads is the 2017 formula,
// computed by the fused op, with nothing hidden.
//
// For sequence b, query head h, query position i and key position j, every
// implementation computes
//
//	s_ij = q_i · k_j / sqrt(dk) + mask_ij        mask_ij Mask's 0 or -Inf
//	s_ij = -Inf                  if s_ij = -Inf or !MaskMod.Visible(b, h, i, j)
//	s_ij = ScoreMod.Mod(s_ij, b, h, i, j)        else (ALiBi, softcapping, ...)
//	s_ij = s_ij + bias_hij                       Bias, if any
//	P_i  = exp(s_i) / (exp(sink_h) + sum_j exp(s_ij))
//	out_i = sum_j (P_ij keep_ij) v_j             v_j of KV head h / (Heads/KVHeads)
//
// So the score modifier comes after the scale and before the softmax, and
// is never applied to a hidden entry: a hidden entry stays hidden (capping
// after -Inf would turn it into -c and leak weight).
//
// Causality is a mask modifier like any other: Spec{Heads: h, MaskMod:
// Causal()}. Every implementation lowers it: flash never visits the tiles
// above the diagonal, the fused op hides the rows' runs of future keys
// without a call per entry, and the composed graph hides them in one
// element-wise op.
//
// Modifiers are called from several goroutines at once and must be safe for
// that (the built-in ones hold no mutable state). They are called when the
// graph runs, so positions and modifiers may be changed between runs of a
// graph built once; the ops' hashes include each modifier's String().
type Spec struct {
	// Heads is H, the number of query heads: dk = D/H, head h reads columns
	// [h*dk, (h+1)*dk) of q.
	Heads int
	// KVHeads is the number G of key/value heads of grouped-query attention:
	// 0 means one per query head (multi-head attention); otherwise it must
	// divide Heads, k and v are (B, Sk, G*dk), and query head h reads KV
	// head h / (Heads/G), the map of PyTorch's repeat_interleave and of
	// Llama's repeat_kv (not h % G). G = 1 is multi-query attention. The
	// gradients of k and v sum over the query heads of each group.
	KVHeads int
	// Impl is the implementation: Fused for "".
	Impl Impl
	// Mask, nil or (B, Sq, Sk), hides keys by a tensor: 0 where a query
	// may see a key, -Inf where it may not, shared by the heads (padding,
	// or the rows of a key/value cache a step may read). It is a constant
	// input: nothing is differentiated through it.
	Mask *MaskNode
	// MaskMod hides keys by a rule of positions, beside what Mask hides:
	// Causal(), Window(w), Band(w), And(...) of them, or one of your own.
	// nil hides nothing.
	MaskMod MaskMod
	// ScoreMod changes each visible score: ALiBi, Softcap, Chain(...) of
	// them, or one of your own. nil leaves the scores alone.
	ScoreMod ScoreMod
	// Bias, nil, (H, Sq, Sk) shared by the batch, or (B, H, Sq, Sk), is
	// added to the scores after the score modifier (a learned
	// relative-position bias). It is differentiable, summed over the batch
	// for an (H, Sq, Sk) bias; its values should be finite (the masks, not
	// the bias, say what is hidden). Not with Flash.
	Bias *G.Node
	// Sinks is nil or a (Heads) node of q's dtype: one learnable logit per
	// query head that joins every row's softmax denominator and carries no
	// value (gpt-oss), so a row's weights sum to 1 - p_sink. A row with no
	// visible key then puts all its weight on the sink: output 0. It is
	// differentiable.
	Sinks *G.Node
	// Keep, nil or (B, H, Sq, Sk), is attention dropout's keep-mask scaled
	// by 1/(1-p): the output uses P * Keep in place of P, and the returned
	// weights are P before dropout. Not with Flash.
	Keep *G.Node
	// QueryPos and KeyPos, nil or (B*Sq) and (B*Sk) long, are the positions
	// the modifiers see for each query and key of each sequence: nil means
	// 0..Sq-1 and 0..Sk-1. A KV-cache step gives its one query position t
	// and the keys their cache positions. They are read when the graph
	// runs, so they may be updated in place between runs. Tiles are skipped
	// by the smallest rectangle of positions that covers them, so any order
	// of positions is correct; increasing positions make the rectangle tight.
	QueryPos, KeyPos []int
	// Tile is flash attention's number of keys per tile, and of queries
	// per block of its forward pass; 0 means DefaultFlashTile. A tile
	// longer than the sequences is cut to their length. Only with Flash.
	Tile int
}

// Attend returns scaled dot-product attention of s.Heads heads over
// projected queries q (B, Sq, D), keys k (B, Sk, G*dk) and values v
// (B, Sk, G*dk), dk = D/H and G = s.KVHeads (H for 0):
//
//	P_h = softmax(mods(Q_h K_h^T / sqrt(dk) + mask) + bias_h)   weights (B, H, Sq, Sk)
//	out = Concat(P_1 V_1, ..., P_H V_H)                         (B, Sq, D)
//
// The scale is 1/sqrt(dk), each head's width, not 1/sqrt(D). The softmax
// subtracts each row's own max; a query that may see no key gets all-zero
// weights, output and gradients, not NaN. Spec gives the order of the
// modifiers.
//
// weights is nil with Flash, which never forms them. Every input is
// checked here, while the graph is built: an error names what is wrong
// (nil or zero-value nodes, shapes, dtypes, a bias or dropout with flash, a
// modifier with a parameter per head for another number of heads), and
// matches ErrShape where shapes disagree.
func Attend(q, k, v *G.Node, s Spec) (out, weights *G.Node, err error) {
	name := "graph: " + s.Impl.String() + " attention"
	d, err := s.check(q, k, v)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	switch s.Impl {
	case Composed:
		out, weights, err = composedAttention(q, k, v, s, d)
	case Flash:
		out, err = flashAttention(q, k, v, s, d)
	default:
		out, weights, err = fusedAttention(q, k, v, s, d)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", name, err)
	}
	return out, weights, nil
}

// check validates the spec against q, k and v and returns their sizes.
func (s Spec) check(q, k, v *G.Node) (attnDims, error) {
	if err := checkNodes([]*G.Node{q, k, v}, "q", "k", "v"); err != nil {
		return attnDims{}, err
	}
	if !s.Impl.Valid() {
		return attnDims{}, fmt.Errorf("unknown Spec.Impl %q, want %q, %q or %q", string(s.Impl), Fused, Composed, Flash)
	}
	if err := s.Mask.Check(); err != nil {
		return attnDims{}, err
	}
	for _, n := range []struct {
		node *G.Node
		name string
	}{{s.Bias, "score bias"}, {s.Keep, "dropout keep-mask"}} {
		if n.node == nil {
			continue
		}
		if s.Impl == Flash {
			return attnDims{}, fmt.Errorf("flash attention takes no %s: it never forms the (Sq, Sk) values per head that it would need; use %q or %q, or write the bias as a ScoreMod", n.name, Fused, Composed)
		}
		if err := CheckNode(n.node, n.name); err != nil {
			return attnDims{}, err
		}
	}
	if s.Tile != 0 && s.Impl != Flash {
		return attnDims{}, fmt.Errorf("Spec.Tile %d is flash attention's, and Impl is %q", s.Tile, s.Impl.String())
	}
	if s.Tile < 0 || s.Tile > MaxFlashTile {
		return attnDims{}, fmt.Errorf("Spec.Tile %d is out of range: use 0 for the default (%d) or a size from 1 to MaxFlashTile = %d", s.Tile, DefaultFlashTile, MaxFlashTile)
	}
	return attentionDims(q, k, v, s)
}
