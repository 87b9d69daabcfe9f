package explain

import (
	"fmt"
	"math"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
)

// maskRows is how many held-out examples the trained mask runs change.
const maskRows = 8

// sortConfig is `qkv train` (the default sort model), in o.Small a short
// run on a small held-out set; arch is its architecture.
func sortConfig(o Options, arch config.Arch) config.Config {
	cfg := config.Default()
	cfg.Arch = arch
	if o.Small {
		cfg.Steps, cfg.Warmup, cfg.EvalEvery, cfg.TestSize = 20, 5, 20, 20
	}
	return cfg
}

// sortRun is the default sort model of an architecture, trained and
// loaded for batches of its first maskRows held-out examples.
type sortRun struct {
	run  *trainedRun
	m    *model.Model
	task data.Task
	test []data.Example
}

// trainedSort trains the default sort model of arch and loads it for its
// first maskRows held-out examples; Close removes it.
func trainedSort(o Options, arch config.Arch) (*sortRun, error) {
	cfg := sortConfig(o, arch)
	run, err := trainModel(cfg)
	if err != nil {
		return nil, err
	}
	task, test, err := heldOut(cfg)
	if err != nil {
		run.Close()
		return nil, err
	}
	test = test[:min(maskRows, len(test))]
	m, err := run.load(len(test))
	if err != nil {
		run.Close()
		return nil, err
	}
	return &sortRun{run: run, m: m, task: task, test: test}, nil
}

// sortScore is how far the sort model learned its task.
type sortScore struct {
	Exact float64 // held-out exact match
	Steps int     // steps trained
}

func (s *sortRun) score() sortScore {
	return sortScore{Exact: s.run.Summary.ExactMatch, Steps: s.run.Summary.Steps}
}

// record puts the score into measured.
func (s sortScore) record(measured map[string]float64) {
	measured["trained_exact_match"] = s.Exact
	measured["trained_steps"] = float64(s.Steps)
}

// Close closes the model and removes the run.
func (s *sortRun) Close() error {
	s.m.Close()
	return s.run.Close()
}

// logits runs the model on b and returns its logits.
func (s *sortRun) logits(b model.Batch) ([]float64, error) {
	if err := s.m.SetBatch(b); err != nil {
		return nil, err
	}
	var out []float64
	err := s.m.Run(func() error {
		vals, err := graph.Float64s(s.m.Logits.Value())
		out = vals
		return err
	})
	return out, err
}

// rowDiffs returns, for logits a and b of shape (rows, n, v), the largest
// difference at each (row, position), row-major.
func rowDiffs(a, b []float64, rows, n, v int) []float64 {
	out := make([]float64, rows*n)
	for r := range rows {
		for i := range n {
			d := 0.0
			for c := range v {
				k := (r*n+i)*v + c
				d = max(d, math.Abs(a[k]-b[k]))
			}
			out[r*n+i] = d
		}
	}
	return out
}

// splitDiffs returns the largest of diffs (rows x n) at the positions of
// each row below cut(row) and at the others up to end(row).
func splitDiffs(diffs []float64, rows, n int, cut, end func(r int) int) (below, from float64) {
	for r := range rows {
		for i := 0; i < end(r); i++ {
			if i < cut(r) {
				below = max(below, diffs[r*n+i])
			} else {
				from = max(from, diffs[r*n+i])
			}
		}
	}
	return below, from
}

// nextSymbol returns id's successor among v's task symbols, wrapping.
func nextSymbol(v *data.Vocab, id int) int {
	first, n := v.SEP()+1, v.Size()-v.SEP()-1
	return first + (id-first+1)%n
}

// causalTrained is the causal mask on the trained sort decoder: for every
// position j of maskRows held-out sequences, token j is changed and every
// position's logits compared with the unchanged run's.
type causalTrained struct {
	// MaxBefore is the largest logit difference at a position before the
	// changed one, over every j; MinFrom the smallest over j of the
	// largest difference from j on.
	MaxBefore, MinFrom float64
	// AtMiddle is the largest difference at each position (over the rows)
	// for j = S/2, the figure's.
	AtMiddle []float64
	J, S     int
	sortScore
}

// trainedCausal trains the default sort decoder and measures causalTrained.
func trainedCausal(o Options) (causalTrained, error) {
	var c causalTrained
	sr, err := trainedSort(o, config.ArchDecoder)
	if err != nil {
		return c, err
	}
	defer sr.Close()
	c.sortScore = sr.score()
	test, rows := sr.test, len(sr.test)
	v := sr.task.Vocab()
	s, vocab := sr.m.S, sr.m.Logits.Shape()[2]
	ids, lengths := make([]int, rows*s), make([]int, rows)
	for r := range rows {
		seq := decoderSeq(v, test[r])
		copy(ids[r*s:], seq)
		lengths[r] = len(seq)
	}
	logits := func(ids []int) ([]float64, error) {
		return sr.logits(model.Batch{Batch: data.Batch{B: rows, S: s, Inputs: ids, Lengths: lengths}})
	}
	base, err := logits(ids)
	if err != nil {
		return c, err
	}
	c.S, c.J, c.MinFrom = s, s/2, math.Inf(1)
	for j := 1; j < s; j++ {
		alt := append([]int(nil), ids...)
		for r := range rows {
			if j < lengths[r] {
				alt[r*s+j] = nextSymbol(v, alt[r*s+j])
			}
		}
		got, err := logits(alt)
		if err != nil {
			return c, err
		}
		diffs := rowDiffs(base, got, rows, s, vocab)
		before, from := splitDiffs(diffs, rows, s, func(int) int { return j }, func(r int) int { return lengths[r] })
		c.MaxBefore, c.MinFrom = max(c.MaxBefore, before), min(c.MinFrom, from)
		if j == c.J {
			c.AtMiddle = make([]float64, s)
			for r := range rows {
				for i := range s {
					c.AtMiddle[i] = max(c.AtMiddle[i], diffs[r*s+i])
				}
			}
		}
	}
	return c, nil
}

// paddingTrained is the key-padding mask on the trained sort
// encoder–decoder, whose encoder is bidirectional so that its padding mask
// alone hides the padded source tokens: for every real source length L
// below the prompt's n, the prompt's tokens from L on are changed and the
// decoder's logits compared, with those tokens padded (they must not move)
// and with them real (they must: the control).
type paddingTrained struct {
	MaxMasked, MinUnmasked float64
	// Masked and Unmasked are the largest differences by real length,
	// lengths 1 to N-1.
	Masked, Unmasked []float64
	N                int // the prompts' length
	sortScore
}

// trainedPadding trains the default sort encoder–decoder and measures
// paddingTrained.
func trainedPadding(o Options) (paddingTrained, error) {
	var p paddingTrained
	sr, err := trainedSort(o, config.ArchEncDec)
	if err != nil {
		return p, err
	}
	defer sr.Close()
	p.sortScore = sr.score()
	test, rows := sr.test, len(sr.test)
	v := sr.task.Vocab()
	ss, st, vocab := sr.m.SourceLen, sr.m.S, sr.m.Logits.Shape()[2]
	p.N, p.MinUnmasked = len(test[0].Prompt), math.Inf(1)
	src, tgt := make([]int, rows*ss), make([]int, rows*st)
	tgtLen := make([]int, rows)
	for r := range rows {
		s, t := encDecPair(v, test[r])
		if len(s) != p.N {
			return p, fmt.Errorf("held-out prompts of %d and %d tokens: the padding runs want one length", p.N, len(s))
		}
		copy(src[r*ss:], s)
		copy(tgt[r*st:], t)
		tgtLen[r] = len(t)
	}
	logits := func(src []int, srcLen []int) ([]float64, error) {
		return sr.logits(model.Batch{Batch: data.Batch{B: rows, S: st, Inputs: tgt, Lengths: tgtLen}, Source: &model.Source{S: ss, IDs: src, Lengths: srcLen}})
	}
	full := make([]int, rows)
	for r := range full {
		full[r] = p.N
	}
	for l := 1; l < p.N; l++ {
		alt := append([]int(nil), src...)
		short := make([]int, rows)
		for r := range rows {
			short[r] = l
			for i := l; i < p.N; i++ {
				alt[r*ss+i] = nextSymbol(v, alt[r*ss+i])
			}
		}
		var d [2]float64
		for k, lengths := range [][]int{short, full} {
			a, err := logits(src, lengths)
			if err != nil {
				return p, err
			}
			b, err := logits(alt, lengths)
			if err != nil {
				return p, err
			}
			// Every target position is real: all must keep their logits.
			_, d[k] = splitDiffs(rowDiffs(a, b, rows, st, vocab), rows, st, func(int) int { return 0 }, func(r int) int { return tgtLen[r] })
		}
		p.Masked, p.Unmasked = append(p.Masked, d[0]), append(p.Unmasked, d[1])
		p.MaxMasked, p.MinUnmasked = max(p.MaxMasked, d[0]), min(p.MinUnmasked, d[1])
	}
	return p, nil
}
