package graph

import (
	"errors"
	"fmt"
	"math"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// maskedBias is the additive bias of a hidden attention entry. It is -Inf,
// not a large finite number such as -1e9, so that the bias is exactly what
// the docs say it is: softmax(scores + bias) gives a hidden entry
// exp(-Inf) = 0 whatever its score or any finite bias added to it, and
// adding two masks (-Inf + -Inf, -Inf + 0) still hides what either hides. A
// finite stand-in is only approximately a mask: a row of -1e9 entries would
// get uniform weights, not zero ones.
var maskedBias = math.Inf(-1)

// Mask says which keys each query may attend to, for a batch of B sequences of
// Sq queries and Sk keys. The one convention of qkv: true means "may attend".
// Allow is laid out row-major as (B, Sq, Sk).
type Mask struct {
	B, Sq, Sk int
	Allow     []bool
}

// NewMask returns a (B, Sq, Sk) mask that allows everything.
func NewMask(b, sq, sk int) (Mask, error) {
	if b <= 0 || sq <= 0 || sk <= 0 {
		return Mask{}, fmt.Errorf("graph: mask: sizes must be positive, got (B, Sq, Sk) = (%d, %d, %d)", b, sq, sk)
	}
	if err := CheckElements(b, sq, sk); err != nil {
		return Mask{}, fmt.Errorf("graph: mask: (B, Sq, Sk): %w", err)
	}
	allow := make([]bool, b*sq*sk)
	for i := range allow {
		allow[i] = true
	}
	return Mask{B: b, Sq: sq, Sk: sk, Allow: allow}, nil
}

// MaskOf returns the (B, Sq, Sk) mask that m allows for head 0 at
// positions 0..Sq-1 and 0..Sk-1: a mask modifier as a tensor, to draw it,
// to combine it with Mask.And or to bind it where a tensor is needed.
// MaskOf(Causal(), b, s, s) lets query i see key j only when j <= i.
func MaskOf(m MaskMod, b, sq, sk int) (Mask, error) {
	if m == nil {
		return Mask{}, errors.New("graph: mask of a nil MaskMod: use NewMask for a mask that allows everything")
	}
	out, err := NewMask(b, sq, sk)
	if err != nil {
		return Mask{}, err
	}
	for n := 0; n < b; n++ {
		for i := 0; i < sq; i++ {
			for j := 0; j < sk; j++ {
				out.Allow[(n*sq+i)*sk+j] = m.Visible(n, 0, i, j)
			}
		}
	}
	return out, nil
}

// KeyPadding returns the (len(lengths), Sq, Sk) mask that hides, in sequence b,
// every key at position j >= lengths[b]: the keys that are padding.
func KeyPadding(lengths []int, sq, sk int) (Mask, error) {
	m, err := NewMask(len(lengths), sq, sk)
	if err != nil {
		return Mask{}, err
	}
	if err := checkKeyLengths(lengths, sk); err != nil {
		return Mask{}, fmt.Errorf("graph: key padding mask: %w", err)
	}
	for n, l := range lengths {
		for i := 0; i < sq; i++ {
			for j := l; j < sk; j++ {
				m.Allow[(n*sq+i)*sk+j] = false
			}
		}
	}
	return m, nil
}

// checkKeyLengths returns an error naming the first of lengths outside
// [0, sk], the keys a sequence may have.
func checkKeyLengths(lengths []int, sk int) error {
	for b, l := range lengths {
		if l < 0 || l > sk {
			return fmt.Errorf("key length %d of sequence %d is outside [0, %d]", l, b, sk)
		}
	}
	return nil
}

// keyLengths writes into out, for each sequence, the number l of keys
// every query of it may see when the sequence's mask is a key-padding mask
// (key j visible to every query exactly when j < l), and -1 when it is not.
func (m Mask) keyLengths(out []int) {
	for b := range m.B {
		rows := m.Allow[b*m.Sq*m.Sk : (b+1)*m.Sq*m.Sk]
		l := 0
		for l < m.Sk && rows[l] {
			l++
		}
		out[b] = l
		for i := range m.Sq {
			for j, ok := range rows[i*m.Sk : (i+1)*m.Sk] {
				if ok != (j < l) {
					out[b] = -1
				}
			}
		}
	}
}

// At reports whether query i of sequence b may attend to key j. Outside the
// mask's (B, Sq, Sk), or for a mask whose Allow does not hold B*Sq*Sk entries
// (a zero value), nothing is allowed: At reports false rather than panic.
func (m Mask) At(b, i, j int) bool {
	if b < 0 || b >= m.B || i < 0 || i >= m.Sq || j < 0 || j >= m.Sk || m.check() != nil {
		return false
	}
	return m.Allow[(b*m.Sq+i)*m.Sk+j]
}

// And returns the mask that allows what both m and o allow.
func (m Mask) And(o Mask) (Mask, error) {
	for _, x := range []Mask{m, o} {
		if err := x.check(); err != nil {
			return Mask{}, err
		}
	}
	if m.B != o.B || m.Sq != o.Sq || m.Sk != o.Sk {
		return Mask{}, fmt.Errorf("graph: mask: cannot combine (B, Sq, Sk) = (%d, %d, %d) with (%d, %d, %d)", m.B, m.Sq, m.Sk, o.B, o.Sq, o.Sk)
	}
	out := Mask{B: m.B, Sq: m.Sq, Sk: m.Sk, Allow: make([]bool, len(m.Allow))}
	for i := range out.Allow {
		out.Allow[i] = m.Allow[i] && o.Allow[i]
	}
	return out, nil
}

// check returns an error unless the sizes are positive, within MaxElements,
// and Allow holds exactly B*Sq*Sk entries.
func (m Mask) check() error {
	if err := CheckElements(m.B, m.Sq, m.Sk); err != nil {
		return fmt.Errorf("graph: mask: (B, Sq, Sk) = (%d, %d, %d) needs positive sizes: %w", m.B, m.Sq, m.Sk, err)
	}
	if len(m.Allow) != m.B*m.Sq*m.Sk {
		return fmt.Errorf("graph: mask: (B, Sq, Sk) = (%d, %d, %d) needs %d entries, has %d", m.B, m.Sq, m.Sk, m.B*m.Sq*m.Sk, len(m.Allow))
	}
	return nil
}

// MaskNode is a Mask in a graph. Bias, a (B, Sq, Sk) node of the graph's
// dtype, is 0 where attention is allowed and -Inf where it is hidden: it is
// added to the scores of every head, so that softmax(scores + Bias) gives a
// hidden key weight exactly 0, and a query with no visible key gets all-zero
// weights and gradients (the softmax of a row of -Inf is taken to be 0, not
// 0/0). It is a constant input, never differentiated.
//
// Bias is added as it is: a finite value bound into it with G.Let shifts the
// scores of every head alike. An additive bias per head (ALiBi, relative
// positions) goes to Spec.Bias instead, beside the mask.
//
// The -Inf entries are real infinities: G.WithInfWatch reports the node
// CombineMasks adds (an op output), though not a mask from NewMaskInput or
// NewMaskConst. To debug a graph with WithInfWatch, combine masks on the Go
// side with Mask.And and bind one mask.
type MaskNode struct {
	Bias      *G.Node
	B, Sq, Sk int

	buf     *tensor.Dense // Set's bias, rewritten in place by every Set
	lengths []int         // KeyLengths, rewritten in place by every Set
}

// KeyLengths returns, for each sequence, the number of keys the last Set
// let every query see when it was a key-padding mask (KeyPadding's: keys
// j < length visible to every query, the others hidden), and -1 for a
// sequence whose mask was anything else. Before the first Set every length
// is 0. The slice is rewritten in place by Set, so that an op holding it
// (linear attention's LinearSpec.KeyLengths, which cannot read a (Sq, Sk)
// mask in linear time) reads each run's lengths; nil for a nil n.
func (n *MaskNode) KeyLengths() []int { return orZero(n).lengths }

// Check returns an error unless n is a usable mask: a nil *MaskNode means "no
// mask" and passes, but a MaskNode with a nil or zero-value Bias, sizes that
// are not positive, or a Bias whose shape is not (B, Sq, Sk) is refused, so
// that functions taking a mask never dereference what is not there.
func (n *MaskNode) Check() error {
	if n == nil {
		return nil
	}
	name := func() string { // only for an error: Check runs at every Set
		if n.Bias != nil && n.Bias.Type() != nil {
			return fmt.Sprintf("mask %q", n.Bias.Name())
		}
		return "mask"
	}
	if err := CheckNode(n.Bias, "bias"); err != nil {
		return fmt.Errorf("graph: %s: %w: make masks with NewMaskInput or NewMaskConst", name(), err)
	}
	if s := n.Bias.Shape(); n.B <= 0 || n.Sq <= 0 || n.Sk <= 0 || len(s) != 3 || s[0] != n.B || s[1] != n.Sq || s[2] != n.Sk {
		return fmt.Errorf("graph: %s: bias shape %v, want (B, Sq, Sk) = (%d, %d, %d) with positive sizes", name(), s, n.B, n.Sq, n.Sk)
	}
	return nil
}

// NewMaskInput returns a mask placeholder of shape (B, Sq, Sk) whose value is
// given each batch with Set. The graph is built once; masks change per batch.
func NewMaskInput(g *G.ExprGraph, dt tensor.Dtype, b, sq, sk int, name string) (*MaskNode, error) {
	if err := CheckFloat(dt); err != nil {
		return nil, fmt.Errorf("graph: mask %q: %w", name, err)
	}
	if b <= 0 || sq <= 0 || sk <= 0 {
		return nil, fmt.Errorf("graph: mask %q: sizes must be positive, got (B, Sq, Sk) = (%d, %d, %d)", name, b, sq, sk)
	}
	if err := CheckElements(b, sq, sk); err != nil {
		return nil, fmt.Errorf("graph: mask %q: (B, Sq, Sk): %w", name, err)
	}
	if g == nil {
		return nil, fmt.Errorf("graph: mask %q: the graph is nil", name)
	}
	return &MaskNode{
		Bias: G.NewTensor(g, dt, 3, G.WithShape(b, sq, sk), G.WithName(name)),
		B:    b, Sq: sq, Sk: sk,
		lengths: make([]int, b),
	}, nil
}

// NewMaskConst returns m as a node bound once to its value.
func NewMaskConst(g *G.ExprGraph, dt tensor.Dtype, m Mask, name string) (*MaskNode, error) {
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("graph: mask %q: %w", name, err)
	}
	n, err := NewMaskInput(g, dt, m.B, m.Sq, m.Sk, name)
	if err != nil {
		return nil, err
	}
	if err := n.Set(m); err != nil {
		return nil, err
	}
	return n, nil
}

// Set binds the mask's value for the next run. It checks the shape against the
// node's and returns an error rather than letting the engine fail later.
//
// Set is how a mask's value changes: the fused and flash attention read its
// key lengths (KeyLengths) beside the value it binds, and do not add the
// mask of a sequence whose every key is visible. Writing into the value Set
// bound is therefore not seen; a tensor of one's own bound with G.Let is
// read entry by entry.
func (n *MaskNode) Set(m Mask) error {
	if n == nil {
		return errors.New("graph: mask: Set on a nil *MaskNode: make masks with NewMaskInput")
	}
	if err := n.Check(); err != nil {
		return err
	}
	if err := m.check(); err != nil {
		return err
	}
	if m.B != n.B || m.Sq != n.Sq || m.Sk != n.Sk {
		return fmt.Errorf("graph: mask %q: got (B, Sq, Sk) = (%d, %d, %d), want (%d, %d, %d)", n.Bias.Name(), m.B, m.Sq, m.Sk, n.B, n.Sq, n.Sk)
	}
	if n.buf == nil {
		n.buf = tensor.New(tensor.Of(n.Bias.Dtype()), tensor.WithShape(n.B, n.Sq, n.Sk))
	}
	switch n.buf.Dtype() {
	case tensor.Float64:
		setBias(n.buf.Float64s(), m.Allow)
	case tensor.Float32:
		setBias(n.buf.Float32s(), m.Allow)
	}
	if len(n.lengths) != n.B { // a MaskNode made by hand
		n.lengths = make([]int, n.B)
	}
	m.keyLengths(n.lengths)
	if err := LetOnce(n.Bias, n.buf); err != nil {
		return fmt.Errorf("graph: mask %q: %w", n.Bias.Name(), err)
	}
	return nil
}

// SetKeyLengths is Set(KeyPadding(lengths, Sq, Sk)) without forming the
// (B, Sq, Sk) Mask: sequence b's keys j < lengths[b] visible to every
// query, the others hidden. It rewrites only the sequences whose length
// differs from the last Set's, so that a training loop whose batches are
// never padded (the chars task) writes nothing after the first batch (at
// 1,024 positions flash's step went from 763 to 753 ms with it). It
// returns an error naming the sequence, and changes nothing, when lengths
// has not B entries in [0, Sk].
func (n *MaskNode) SetKeyLengths(lengths []int) error {
	if n == nil {
		return errors.New("graph: mask: SetKeyLengths on a nil *MaskNode: make masks with NewMaskInput")
	}
	if err := n.Check(); err != nil {
		return err
	}
	if len(lengths) != n.B {
		return fmt.Errorf("graph: mask %q: %d key lengths, want one per sequence (%d)", n.Bias.Name(), len(lengths), n.B)
	}
	if err := checkKeyLengths(lengths, n.Sk); err != nil {
		return fmt.Errorf("graph: mask %q: %w", n.Bias.Name(), err)
	}
	fresh := n.buf == nil
	if fresh {
		n.buf = tensor.New(tensor.Of(n.Bias.Dtype()), tensor.WithShape(n.B, n.Sq, n.Sk))
	}
	if len(n.lengths) != n.B { // a MaskNode made by hand
		n.lengths = make([]int, n.B)
	}
	for b, l := range lengths {
		if !fresh && n.lengths[b] == l {
			continue // Set wrote this sequence's key-padding mask already
		}
		switch n.buf.Dtype() {
		case tensor.Float64:
			setKeyBias(n.buf.Float64s(), b, l, n.Sq, n.Sk)
		case tensor.Float32:
			setKeyBias(n.buf.Float32s(), b, l, n.Sq, n.Sk)
		}
		n.lengths[b] = l
	}
	if err := LetOnce(n.Bias, n.buf); err != nil {
		return fmt.Errorf("graph: mask %q: %w", n.Bias.Name(), err)
	}
	return nil
}

// setKeyBias writes sequence b's (sq, sk) block of a key-padding mask's
// bias: 0 for keys j < l, maskedBias for the others.
func setKeyBias[T float32 | float64](bias []T, b, l, sq, sk int) {
	for i := range sq {
		row := bias[(b*sq+i)*sk:][:sk]
		clear(row[:l])
		for j := l; j < sk; j++ {
			row[j] = T(maskedBias)
		}
	}
}

// setBias writes a mask's additive bias: 0 where allow is true, maskedBias
// where it is false.
func setBias[T float32 | float64](bias []T, allow []bool) {
	for i, ok := range allow {
		bias[i] = 0
		if !ok {
			bias[i] = T(maskedBias)
		}
	}
}

// CombineMasks returns, in the graph, the mask that allows what both a and b
// allow. Use it to join a constant causal mask with a per-batch padding mask.
func CombineMasks(a, b *MaskNode) (*MaskNode, error) {
	for _, m := range []struct {
		n    *MaskNode
		name string
	}{{a, "first"}, {b, "second"}} {
		if m.n == nil {
			return nil, fmt.Errorf("graph: combine masks: the %s mask is nil", m.name)
		}
		if err := m.n.Check(); err != nil {
			return nil, fmt.Errorf("graph: combine masks: %s: %w", m.name, err)
		}
	}
	if a.B != b.B || a.Sq != b.Sq || a.Sk != b.Sk {
		return nil, fmt.Errorf("graph: combine masks: (B, Sq, Sk) = (%d, %d, %d) and (%d, %d, %d) differ", a.B, a.Sq, a.Sk, b.B, b.Sq, b.Sk)
	}
	// The sum of the biases is -Inf wherever either mask hides, 0 elsewhere.
	bias, err := Add(a.Bias, b.Bias)
	if err != nil {
		return nil, fmt.Errorf("graph: combine masks: %w", err)
	}
	return &MaskNode{Bias: bias, B: a.B, Sq: a.Sq, Sk: a.Sk}, nil
}

// setLengths returns the key lengths of n's last Set (KeyLengths) when v,
// a run's value of n.Bias, is the value that Set bound, and nil otherwise:
// a value bound with G.Let, or one the graph computes (CombineMasks), says
// nothing of them. The attention ops take a sequence whose length is Sk as
// one whose mask hides nothing and skip adding its zeros, a pass over
// (Sq, Sk) scores a head (a fifth of flash's step at 1,024 positions, where
// the decoder's key-padding mask of a batch without padding hides
// nothing). So Set, which writes the value and the lengths together, is
// how a mask changes; writing into the value Set bound is not seen.
func (n *MaskNode) setLengths(v G.Value) []int {
	if n == nil || n.buf == nil || v != G.Value(n.buf) {
		return nil
	}
	return n.lengths
}

// maskLengths is n's setLengths for the mask among vals, an op's inputs in
// the order of l; nil where the op has no mask.
func maskLengths(n *MaskNode, l roleList, vals []G.Value) []int {
	if i := l.index(roleMask); i >= 0 && i < len(vals) {
		return n.setLengths(vals[i])
	}
	return nil
}

// seqMask returns sequence b's (sq, sk) block of mask (B, sq, sk), or nil
// when there is no mask or lengths (setLengths') say that the sequence's
// every key is visible.
func seqMask[T float32 | float64](mask []T, lengths []int, b, sq, sk int) []T {
	if mask == nil || lengths != nil && lengths[b] == sk {
		return nil
	}
	return mask[b*sq*sk:][:sq*sk]
}

// bias returns the mask's Bias node, nil for no mask: an optional input of
// the attention ops.
func (n *MaskNode) bias() *G.Node { return orZero(n).Bias }
