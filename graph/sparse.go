package graph

import "fmt"

// Sparse attention patterns beyond the sliding window, as mask modifiers
// whose Block is exact, so that flash attention visits only the tiles the
// pattern touches: Longformer's and BigBird's global tokens beside a
// window, and block-local attention.

// GlobalWindow returns the mask modifier of Longformer's and BigBird's
// pattern: the first global positions are global tokens, and every other
// entry is a sliding window of w keys.
//
// Non-causal (an encoder): query i sees key j if j < global (every query
// sees the global tokens), i < global (a global token sees every key), or
// |i-j| < w (Band(w)).
//
// Causal: query i sees key j <= i if j < global or i-w < j (Window(w)): the
// global tokens are seen by every later query, and no query sees the
// future, a global one included.
//
// Flash computes O(n (w + global)) entries instead of O(n^2). global 0 is
// Band(w) or Window(w); global < 0 or w < 1 is an error.
func GlobalWindow(global, w int, causal bool) (MaskMod, error) {
	if global < 0 {
		return nil, fmt.Errorf("graph: global-window mask: %d global tokens, want 0 or more", global)
	}
	if w < 1 {
		return nil, fmt.Errorf("graph: global-window mask: width %d must be at least 1 (the window beside the global tokens)", w)
	}
	return globalWindowMod{global: global, w: w, causal: causal}, nil
}

type globalWindowMod struct {
	global, w int
	causal    bool
}

func (m globalWindowMod) Visible(_, _, i, j int) bool {
	if m.causal {
		return j <= i && (j < m.global || j > i-m.w)
	}
	return j < m.global || i < m.global || (i-j < m.w && j-i < m.w)
}

// Block is exact: the rectangle is cut into the parts where one rule
// decides, each of which Window, Band and Causal describe exactly.
func (m globalWindowMod) Block(b, h, i0, i1, j0, j1 int) Coverage {
	g := m.global
	if m.causal {
		// Visible = Window(w) or (j < g and j <= i).
		win := windowMod{w: m.w}
		switch {
		case win.Block(b, h, i0, i1, j0, j1) == AllHidden && (j0 >= g || j0 > i1-1):
			return AllHidden
		case j0 < g && min(j1, g)-1 > i0:
			// A global key after the first query is hidden from it.
			return Partial
		case j1 <= g || win.Block(b, h, i0, i1, max(j0, g), j1) == AllVisible:
			// Global keys at or before every query, the rest in every window.
			return AllVisible
		}
		return Partial
	}
	// Visible = (i < g) or (j < g) or Band(w).
	band := bandMod{w: m.w}
	switch {
	case i0 >= g && j0 >= g && band.Block(b, h, i0, i1, j0, j1) == AllHidden:
		return AllHidden
	case i1 <= g || j1 <= g || band.Block(b, h, max(i0, g), i1, max(j0, g), j1) == AllVisible:
		// Outside the global rows and columns, every entry in the band.
		return AllVisible
	}
	return Partial
}

func (m globalWindowMod) String() string {
	if m.causal {
		return fmt.Sprintf("GlobalWindow(%d, %d, causal)", m.global, m.w)
	}
	return fmt.Sprintf("GlobalWindow(%d, %d)", m.global, m.w)
}

// BlockLocal returns the mask modifier of block-local attention (BigBird's
// and Longformer's "block local"): positions fall in blocks of block,
// [0, block), [block, 2 block), ..., and query i sees the keys of its own
// block only; with causal, only those j <= i. Flash visits only the tiles
// that meet a diagonal block. block < 1 is an error.
func BlockLocal(block int, causal bool) (MaskMod, error) {
	if block < 1 {
		return nil, fmt.Errorf("graph: block-local mask: block %d must be at least 1 (query i sees the keys of its block of that many positions)", block)
	}
	return blockLocalMod{block: block, causal: causal}, nil
}

type blockLocalMod struct {
	block  int
	causal bool
}

// of is the block of position p, rounding down (negative positions too).
func (m blockLocalMod) of(p int) int {
	k := p / m.block
	if p%m.block < 0 {
		k--
	}
	return k
}

func (m blockLocalMod) Visible(_, _, i, j int) bool {
	return m.of(i) == m.of(j) && (!m.causal || j <= i)
}

// Block is exact: the queries span blocks [qa, qb] and the keys [ka, kb];
// every block between holds some of each (they are intervals). With
// causal, a block both span holds a key j <= i of a query i whenever
// j0 <= i1-1, since the first key of a shared block is not after its last
// query.
func (m blockLocalMod) Block(_, _, i0, i1, j0, j1 int) Coverage {
	qa, qb, ka, kb := m.of(i0), m.of(i1-1), m.of(j0), m.of(j1-1)
	switch {
	case max(qa, ka) > min(qb, kb) || (m.causal && j0 > i1-1):
		return AllHidden
	case qa == qb && ka == kb && qa == ka && (!m.causal || j1-1 <= i0):
		return AllVisible
	}
	return Partial
}

func (m blockLocalMod) String() string {
	if m.causal {
		return fmt.Sprintf("BlockLocal(%d, causal)", m.block)
	}
	return fmt.Sprintf("BlockLocal(%d)", m.block)
}

// FlashTiles returns how many (query tile, key tile) pairs flash attention
// has computed in this process so far, forward and backward passes
// together: the difference across a run is the work a mask modifier left
// it, what tiles it skipped having cost nothing. Safe to call while
// attention runs.
func FlashTiles() int64 { return flashTiles.Load() }
