package graph

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"

	"gorgonia.org/tensor"
)

// Coverage is what a MaskMod says of a rectangle of (query, key) positions.
type Coverage int

const (
	// Partial: some entries may be visible and some hidden; each entry is
	// asked with Visible. It is the zero value, always a correct answer.
	Partial Coverage = iota
	// AllHidden: no query of the rectangle sees any of its keys, so a tile
	// of flash attention covered by it is skipped, forward and backward.
	AllHidden
	// AllVisible: every query sees every key, so no entry is asked.
	AllVisible
)

// MaskMod hides keys: a mask written as a rule of positions rather than a
// (B, Sq, Sk) tensor, so that flash attention can skip whole tiles.
type MaskMod interface {
	// Visible reports whether query position i of head h of sequence b may
	// see key position j.
	Visible(b, h, i, j int) bool
	// Block describes the rectangle of query positions [i0, i1) by key
	// positions [j0, j1) of head h of sequence b. It must never claim
	// AllHidden or AllVisible for a rectangle where Visible would differ;
	// Partial is always safe.
	Block(b, h, i0, i1, j0, j1 int) Coverage
	// String names the modifier and its parameters: two modifiers that
	// hide differently must have different Strings (the graph merges ops
	// that hash alike).
	String() string
}

// ScoreMod changes each visible score after the 1/sqrt(dk) scale and
// before the softmax.
type ScoreMod interface {
	// Mod returns the new score of query position i and key position j of
	// head h of sequence b, and its derivative with respect to s, which the
	// backward passes multiply the score's gradient by. Both must be
	// finite: the forward pass returns an error naming the modifier and
	// (b, h, i, j) otherwise.
	Mod(s float64, b, h, i, j int) (value, derivative float64)
	// String names the modifier and its parameters, as MaskMod's does.
	String() string
}

// headsChecker is implemented by modifiers that hold one parameter per head
// (ALiBi's slopes), so that a mismatch with the attention's heads is an
// error when the graph is built, not an index out of range when it runs.
type headsChecker interface{ checkHeads(heads int) error }

// Causal returns the mask modifier that hides every key j > i from query
// i, so that no position reads the future: the causal mask, by positions,
// and the one way qkv says causal (MaskOf(Causal(), b, s, s) is its
// tensor). With Sq != Sk query i still sees keys j <= i: give QueryPos
// for queries that sit at the end of a longer sequence (a cached step).
func Causal() MaskMod { return causalMod{} }

type causalMod struct{}

func (causalMod) Visible(_, _, i, j int) bool { return j <= i }

func (causalMod) Block(_, _, i0, i1, j0, j1 int) Coverage {
	switch {
	case j0 > i1-1: // every key after every query
		return AllHidden
	case j1-1 <= i0: // every key at or before every query
		return AllVisible
	}
	return Partial
}

func (causalMod) String() string { return "Causal" }

// Window returns the sliding-window mask modifier of width w: query i sees
// keys i-w < j <= i, w keys counting itself (Mistral, Gemma 2/3 local
// layers, gpt-oss; the convention of Hugging Face since 2025 and of
// mistral-src's rolling cache of w slots, not the w+1 keys of Mistral's
// one-file reference). It is causal; w < 1 is an error.
func Window(w int) (MaskMod, error) {
	if w < 1 {
		return nil, fmt.Errorf("graph: window mask: width %d must be at least 1 (query i sees keys i-w < j <= i)", w)
	}
	return windowMod{w: w}, nil
}

type windowMod struct{ w int }

func (m windowMod) Visible(_, _, i, j int) bool { return j <= i && j > i-m.w }

func (m windowMod) Block(_, _, i0, i1, j0, j1 int) Coverage {
	switch {
	case j0 > i1-1 || j1-1 <= i0-m.w: // after every query, or before every window
		return AllHidden
	case j1-1 <= i0 && j0 > i1-1-m.w: // inside every query's window
		return AllVisible
	}
	return Partial
}

func (m windowMod) String() string { return fmt.Sprintf("Window(%d)", m.w) }

// Band returns the bidirectional sliding window of width w: query i sees
// keys |i-j| < w, w-1 on each side and itself (an encoder's local
// attention, as Longformer's). Window is its causal half; w < 1 is an
// error.
func Band(w int) (MaskMod, error) {
	if w < 1 {
		return nil, fmt.Errorf("graph: band mask: width %d must be at least 1 (query i sees keys |i-j| < w)", w)
	}
	return bandMod{w: w}, nil
}

type bandMod struct{ w int }

func (m bandMod) Visible(_, _, i, j int) bool { return i-j < m.w && j-i < m.w }

func (m bandMod) Block(_, _, i0, i1, j0, j1 int) Coverage {
	// The nearest and farthest |i-j| of the rectangle.
	near := max(j0-(i1-1), i0-(j1-1), 0)
	far := max(i1-1-j0, j1-1-i0)
	switch {
	case near >= m.w:
		return AllHidden
	case far < m.w:
		return AllVisible
	}
	return Partial
}

func (m bandMod) String() string { return fmt.Sprintf("Band(%d)", m.w) }

// And returns the mask modifier that shows a key only where every one of
// masks shows it. nil entries are skipped (nil is "no mask"); And of no
// mask is nil.
func And(masks ...MaskMod) MaskMod {
	return joined(masks, func(all []MaskMod) MaskMod { return andMod(all) })
}

// joined returns the one non-nil entry of xs, the non-nil entries made one
// by join when there are several, and nil when there are none.
func joined[T comparable](xs []T, join func([]T) T) T {
	var none T
	var all []T
	for _, x := range xs {
		if x != none {
			all = append(all, x)
		}
	}
	switch len(all) {
	case 0:
		return none
	case 1:
		return all[0]
	}
	return join(all)
}

type andMod []MaskMod

func (a andMod) Visible(b, h, i, j int) bool {
	for _, m := range a {
		if !m.Visible(b, h, i, j) {
			return false
		}
	}
	return true
}

func (a andMod) Block(b, h, i0, i1, j0, j1 int) Coverage {
	all := AllVisible
	for _, m := range a {
		switch m.Block(b, h, i0, i1, j0, j1) {
		case AllHidden:
			return AllHidden
		case Partial:
			all = Partial
		}
	}
	return all
}

func (a andMod) String() string { return "And(" + joinStrings(a) + ")" }

func (a andMod) checkHeads(heads int) error { return checkEachHeads(a, heads) }

// ALiBi returns the score modifier of ALiBi (Press et al. 2022, BLOOM,
// MPT): s - m_h (i - j), the slopes m_h of the paper's get_slopes: for a
// power of two H, m_h = 2^(-8(h+1)/H); otherwise the slopes of the power of
// two below H followed by every other slope of twice that power. The form
// -m_h (i - j), not fairseq's +m_h j: the two agree under a plain softmax
// but not once a sink joins it. heads < 1 is an error, and so is an
// attention whose heads differ.
func ALiBi(heads int) (ScoreMod, error) {
	if heads < 1 {
		return nil, fmt.Errorf("graph: ALiBi: %d heads, want at least 1", heads)
	}
	return alibiMod{slopes: alibiSlopes(heads)}, nil
}

// alibiSlopes is get_slopes of the ALiBi paper's code.
func alibiSlopes(n int) []float64 {
	pow2 := func(n int) []float64 {
		start := math.Pow(2, -8/float64(n)) // 2^(-2^-(log2 n - 3))
		s := make([]float64, n)
		for i := range s {
			s[i] = math.Pow(start, float64(i+1))
		}
		return s
	}
	p := 1
	for p*2 <= n {
		p *= 2
	}
	if p == n {
		return pow2(n)
	}
	extra := alibiSlopes(2 * p)
	s := pow2(p)
	for i := 0; len(s) < n; i += 2 {
		s = append(s, extra[i])
	}
	return s
}

// alibiMod is ALiBi, or with both its bidirectional form.
type alibiMod struct {
	slopes []float64
	both   bool
}

func (m alibiMod) Mod(s float64, _, h, i, j int) (float64, float64) {
	d := i - j
	if m.both && d < 0 {
		d = -d
	}
	return s - m.slopes[h]*float64(d), 1
}

func (m alibiMod) String() string {
	if m.both {
		return fmt.Sprintf("BidirectionalALiBi(%d)", len(m.slopes))
	}
	return fmt.Sprintf("ALiBi(%d)", len(m.slopes))
}

func (m alibiMod) checkHeads(heads int) error {
	if heads != len(m.slopes) {
		return fmt.Errorf("%v has %d slopes, the attention %d heads", m, len(m.slopes), heads)
	}
	return nil
}

// BidirectionalALiBi returns ALiBi for attention that looks both ways (an
// encoder): s - m_h |i - j|, the slopes of ALiBi, as MosaicBERT does. With
// a causal mask it equals ALiBi. heads < 1 is an error, and so is an
// attention whose heads differ.
func BidirectionalALiBi(heads int) (ScoreMod, error) {
	if heads < 1 {
		return nil, fmt.Errorf("graph: bidirectional ALiBi: %d heads, want at least 1", heads)
	}
	return alibiMod{slopes: alibiSlopes(heads), both: true}, nil
}

// Softcap returns the score modifier of logit softcapping (Gemma 2, c = 50
// for attention): c tanh(s / c), which keeps every score in (-c, c) and has
// derivative 1 - tanh(s/c)^2. c <= 0 (or NaN, or infinite) is an error.
func Softcap(c float64) (ScoreMod, error) {
	if !(c > 0) || math.IsInf(c, 1) {
		return nil, fmt.Errorf("graph: softcap: cap %v must be positive and finite", c)
	}
	return softcapMod{c: c}, nil
}

type softcapMod struct{ c float64 }

func (m softcapMod) Mod(s float64, _, _, _, _ int) (float64, float64) {
	t := math.Tanh(s / m.c)
	return m.c * t, 1 - t*t
}

func (m softcapMod) String() string { return fmt.Sprintf("Softcap(%v)", m.c) }

// Chain returns the score modifier that applies mods in order, the
// derivative by the chain rule: Chain(ALiBi, Softcap) caps the biased
// score. nil entries are skipped; Chain of nothing is nil.
func Chain(mods ...ScoreMod) ScoreMod {
	return joined(mods, func(all []ScoreMod) ScoreMod { return chainMod(all) })
}

type chainMod []ScoreMod

func (c chainMod) Mod(s float64, b, h, i, j int) (float64, float64) {
	d := 1.0
	for _, m := range c {
		var dm float64
		s, dm = m.Mod(s, b, h, i, j)
		d *= dm
	}
	return s, d
}

func (c chainMod) String() string { return "Chain(" + joinStrings(c) + ")" }

func (c chainMod) checkHeads(heads int) error { return checkEachHeads(c, heads) }

func joinStrings[M fmt.Stringer](ms []M) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = m.String()
	}
	return strings.Join(s, ", ")
}

func checkEachHeads[M any](ms []M, heads int) error {
	for _, m := range ms {
		if c, ok := any(m).(headsChecker); ok {
			if err := c.checkHeads(heads); err != nil {
				return err
			}
		}
	}
	return nil
}

// active reports whether a kernel must call a modifier or read positions.
func (s Spec) active() bool { return s.MaskMod != nil || s.ScoreMod != nil }

// key is what the ops hash of the modifiers besides their inputs: the
// modifiers' Strings and which position tables they read.
func (m Spec) key() string {
	str := func(s fmt.Stringer) string {
		if s == nil {
			return "-"
		}
		return s.String()
	}
	return fmt.Sprintf("mask=%s score=%s qpos=%p/%d kpos=%p/%d", str(m.MaskMod), str(m.ScoreMod), m.QueryPos, len(m.QueryPos), m.KeyPos, len(m.KeyPos))
}

// kvHeads is the number of KV heads for heads query heads.
func (m Spec) kvHeads(heads int) int {
	if m.KVHeads == 0 {
		return heads
	}
	return m.KVHeads
}

// checkMods validates m's modifiers for an attention of heads heads over b
// sequences of sq queries and sk keys in dtype dt; the shapes of k and v
// are attentionDims'.
func (m Spec) checkMods(heads, b, sq, sk int, dt tensor.Dtype) error {
	if m.KVHeads < 0 || (m.KVHeads > 0 && heads%m.KVHeads != 0) {
		return fmt.Errorf("Spec.KVHeads %d does not divide %d heads (0 means one KV head per query head)", m.KVHeads, heads)
	}
	for _, c := range []any{m.MaskMod, m.ScoreMod} {
		if hc, ok := c.(headsChecker); ok {
			if err := hc.checkHeads(heads); err != nil {
				return err
			}
		}
	}
	if m.Sinks != nil {
		if err := CheckNode(m.Sinks, "Spec.Sinks"); err != nil {
			return err
		}
		if !m.Sinks.Shape().Eq(tensor.Shape{heads}) || m.Sinks.Dtype() != dt {
			return fmt.Errorf("Spec.Sinks %q is %v %v, want %v (%d), one logit per head", m.Sinks.Name(), m.Sinks.Dtype(), m.Sinks.Shape(), dt, heads)
		}
	}
	for _, p := range []struct {
		name string
		pos  []int
		n    int
	}{{"QueryPos", m.QueryPos, b * sq}, {"KeyPos", m.KeyPos, b * sk}} {
		if p.pos != nil && len(p.pos) != p.n {
			return fmt.Errorf("Spec.%s has %d positions, want B*S = %d (nil for 0..S-1)", p.name, len(p.pos), p.n)
		}
	}
	return nil
}

// modRun is what a kernel needs of a Spec's modifiers while it runs, and where it reports
// a modifier's non-finite result.
type modRun struct {
	mask       MaskMod
	score      ScoreMod
	qpos, kpos []int
	sq, sk     int
	key        string // Spec.key, for the ops' hashes
	fail       *modFailure
}

func newModRun(m Spec, sq, sk int) *modRun {
	return &modRun{mask: m.MaskMod, score: m.ScoreMod, qpos: m.QueryPos, kpos: m.KeyPos, sq: sq, sk: sk, key: m.key(), fail: new(modFailure)}
}

// forOp returns r with a failure record of its own, for another op (a
// gradient) over the same modifiers: an op reports only what its own
// kernel found, so the op an error names does not depend on which of two
// ops running at once took the other's failure. nil for a nil r.
func (r *modRun) forOp() *modRun {
	if r == nil {
		return nil
	}
	c := *r
	c.fail = new(modFailure)
	return &c
}

// causalOnly reports whether r hides exactly what Causal hides at the
// default positions (query i sees keys j <= i) and changes no score, so
// that a kernel may bound each row's keys instead of asking r (nil: false).
func (r *modRun) causalOnly() bool {
	if r == nil || r.score != nil || r.qpos != nil || r.kpos != nil {
		return false
	}
	_, ok := r.mask.(causalMod)
	return ok
}

// qp and kp are the positions of query i and key j of sequence b.
func (r *modRun) qp(b, i int) int {
	if r.qpos == nil {
		return i
	}
	return r.qpos[b*r.sq+i]
}

func (r *modRun) kp(b, j int) int {
	if r.kpos == nil {
		return j
	}
	return r.kpos[b*r.sk+j]
}

// coverage is what the mask modifier says of queries [i0, i1) and keys
// [j0, j1) of head h of sequence b, asked for the smallest rectangle of
// positions that holds them.
func (r *modRun) coverage(b, h, i0, i1, j0, j1 int) Coverage {
	if r.mask == nil {
		return AllVisible
	}
	// span is the rectangle's side: [i0, i1) itself for default positions.
	span := func(pos []int, n, i0, i1 int) (lo, hi int) {
		if pos == nil {
			return i0, i1
		}
		lo, hi = math.MaxInt, math.MinInt
		for _, p := range pos[b*n+i0 : b*n+i1] {
			lo, hi = min(lo, p), max(hi, p)
		}
		return lo, hi + 1
	}
	qi0, qi1 := span(r.qpos, r.sq, i0, i1)
	kj0, kj1 := span(r.kpos, r.sk, j0, j1)
	return r.mask.Block(b, h, qi0, qi1, kj0, kj1)
}

// row applies the modifiers to scores s of query i and keys j0, j0+1, ...
// of head h of sequence b, in place: an entry at -Inf (hidden by the mask
// tensor) or hidden by the mask modifier becomes -Inf with derivative 0, any
// other gets the score modifier's value and derivative. der, if not nil,
// receives the derivatives; cov AllVisible skips the mask modifier. A
// non-finite value or derivative is reported to r.fail and the entry hidden.
func modRow[T float32 | float64](r *modRun, s, der []T, b, h, i, j0 int, cov Coverage) {
	qi := r.qp(b, i)
	for c, v := range s {
		j := r.kp(b, j0+c)
		if math.IsInf(float64(v), -1) || (cov != AllVisible && !r.mask.Visible(b, h, qi, j)) {
			s[c] = T(math.Inf(-1))
			if der != nil {
				der[c] = 0
			}
			continue
		}
		d := 1.0
		if r.score != nil {
			var val float64
			val, d = r.score.Mod(float64(v), b, h, qi, j)
			if !isFinite(val) || !isFinite(d) {
				r.fail.report(r.score, b, h, qi, j, val, d)
				val, d = math.Inf(-1), 0
			}
			s[c] = T(val)
		}
		if der != nil {
			der[c] = T(d)
		}
	}
}

func isFinite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// modFailure keeps the first non-finite result of a score modifier, first
// in (b, h, i, j) order whatever goroutine found it, so the error is the
// same from run to run.
type modFailure struct {
	mu       sync.Mutex
	err      error
	at       [4]int
	mod      string
	val, der float64
}

func (f *modFailure) report(m ScoreMod, b, h, i, j int, val, der float64) {
	at := [4]int{b, h, i, j}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil && !lessAt(at, f.at) {
		return
	}
	f.at, f.mod, f.val, f.der = at, m.String(), val, der
	f.err = errors.New("score modifier failed")
}

func lessAt(a, b [4]int) bool {
	for k := range a {
		if a[k] != b[k] {
			return a[k] < b[k]
		}
	}
	return false
}

// pending reports whether a failure was kept since the last take: callers
// ask before take, whose argument would allocate at every run.
func (f *modFailure) pending() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err != nil
}

// take returns the failure kept since the last take, as an error naming op,
// and forgets it.
func (f *modFailure) take(op fmt.Stringer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		return nil
	}
	err := fmt.Errorf("graph: %v: score modifier %s returned value %v, derivative %v at (b, h, i, j) = (%d, %d, %d, %d): both must be finite",
		op, f.mod, f.val, f.der, f.at[0], f.at[1], f.at[2], f.at[3])
	f.err = nil
	return err
}
