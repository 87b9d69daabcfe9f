package main

import (
	"fmt"

	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
	"github.com/qkv-dev/qkv/train/model/decode"
)

// Past the context, `qkv sample` goes on in one of two ways.
const (
	// overflowCrop is nanoGPT's: every further token is predicted from
	// BOS and the last context-1 tokens, all recomputed.
	overflowCrop = "crop"
	// overflowSlide re-primes the cache from BOS and the last half of the
	// context, then extends it a token per step until it is full again.
	overflowSlide = "slide"
)

// Which decoder `qkv sample` runs.
const (
	decoderAuto  = "auto"
	decoderFast  = "fast"
	decoderGraph = "graph"
)

// rowsLM is a decoder of rows sequences extended in lockstep: the fast
// path (decode.Decoder) or the graph's cached step (model.Cached).
type rowsLM interface {
	// prime empties every row and feeds it seqs[r] (all of one length).
	prime(seqs [][]int) error
	// recompute leaves in logits the logits after each of seqs (one
	// length, up to the context), however it likes: the crop.
	recompute(seqs [][]int) error
	// feed appends ids[r] to row r.
	feed(ids []int) error
	logits(r int) []float64
	close()
}

// fastLM is the fast path.
type fastLM struct{ d *decode.Decoder }

func (f fastLM) prime(seqs [][]int) error     { return f.d.Prime(seqs) }
func (f fastLM) recompute(seqs [][]int) error { return f.d.Prime(seqs) }
func (f fastLM) feed(ids []int) error         { return f.d.Feed(ids) }
func (f fastLM) logits(r int) []float64       { return f.d.Logits(r) }
func (f fastLM) close()                       {}

// graphLM is the graph's cached step for the rows, and the model itself
// (one row) for a crop's recomputation, as infer.Stream does it.
type graphLM struct {
	c    *model.Cached
	m    *model.Model
	pos  int
	rows [][]float64
}

func (g *graphLM) prime(seqs [][]int) error {
	if err := g.c.Start(nil); err != nil {
		return err
	}
	g.pos = 0
	ids := make([]int, len(seqs))
	for p := range seqs[0] {
		for r := range seqs {
			ids[r] = seqs[r][p]
		}
		if err := g.feed(ids); err != nil {
			return err
		}
	}
	return nil
}

func (g *graphLM) recompute(seqs [][]int) error {
	for r, s := range seqs {
		out, err := g.m.NextLogits(nil, [][]int{s})
		if err != nil {
			return err
		}
		g.rows[r] = out[0]
	}
	return nil
}

func (g *graphLM) feed(ids []int) error {
	rows, err := g.c.Feed(ids, g.pos)
	if err != nil {
		return err
	}
	g.pos++
	g.rows = rows
	return nil
}

func (g *graphLM) logits(r int) []float64 { return g.rows[r] }
func (g *graphLM) close()                 { g.c.Close() }

// newRowsLM returns the decoder `which` names (auto: the fast path where
// it runs the model, the graph's otherwise) for rows sequences of the
// model m of configuration cfg, and a phrase saying which it is.
func newRowsLM(which string, cfg config.Config, m *model.Model, rows int) (rowsLM, string, error) {
	why := decode.Supported(cfg)
	switch {
	case which == decoderFast && why != nil:
		return nil, "", fmt.Errorf("%w: --decoder fast: %v", errUsage, why)
	case which == decoderFast || (which == decoderAuto && why == nil):
		d, err := decode.New(cfg, rows, m.Params)
		if err != nil {
			return nil, "", err
		}
		return fastLM{d}, fmt.Sprintf("fast path, %s, %s kernels", d.DType(), decode.Kernels()), nil
	}
	c, err := model.NewCached(cfg, rows, m.Params)
	if err != nil {
		return nil, "", err
	}
	how := "graph path (the cached step through gorgonia)"
	if which == decoderAuto {
		how += "; the fast path does not run this model: " + why.Error()
	}
	return &graphLM{c: c, m: m, rows: make([][]float64, rows)}, how, nil
}

// generate extends every row of lm, primed with prefix, by n tokens,
// choose(r, logits) picking row r's next token and emit(r, tok) receiving
// it. The context holds ctx positions; past it, overflow says how the rows
// go on (overflowCrop or overflowSlide); the first keep tokens (BOS) start
// every window. It returns how many times the rows were re-primed.
func generate(lm rowsLM, rows int, prefix []int, n, ctx, keep int, overflow string, choose func(r int, logits []float64) int, emit func(r, tok int) error) (int, error) {
	seqs := make([][]int, rows)
	for r := range seqs {
		seqs[r] = append(make([]int, 0, len(prefix)+n), prefix...)
	}
	if err := lm.prime(seqs); err != nil {
		return 0, err
	}
	held := len(prefix) // positions in the cache
	ids := make([]int, rows)
	windows := make([][]int, rows)
	reprimes := 0
	for t := range n {
		for r := range rows {
			ids[r] = choose(r, lm.logits(r))
			seqs[r] = append(seqs[r], ids[r])
			if err := emit(r, ids[r]); err != nil {
				return reprimes, err
			}
		}
		if t == n-1 {
			break
		}
		if held < ctx {
			if err := lm.feed(ids); err != nil {
				return reprimes, err
			}
			held++
			continue
		}
		// Past the context: a window of BOS and the last tokens.
		last := ctx - keep // crop: as many as fit
		if overflow == overflowSlide {
			last = (ctx - keep) / 2
		}
		for r, s := range seqs {
			windows[r] = append(append(windows[r][:0], s[:keep]...), s[len(s)-last:]...)
		}
		reprimes++
		var err error
		if overflow == overflowSlide {
			err = lm.prime(windows)
			held = keep + last
		} else {
			err = lm.recompute(windows)
		}
		if err != nil {
			return reprimes, err
		}
	}
	return reprimes, nil
}
