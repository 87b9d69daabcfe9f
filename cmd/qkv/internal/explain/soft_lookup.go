package explain

import (
	"fmt"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/internal/plot"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/infer"
	"github.com/qkv-dev/qkv/train/model"
)

// recallConfig is `qkv train --task recall`, in o.Small a short run on a
// small held-out set.
func recallConfig(o Options) config.Config {
	cfg := config.Default()
	cfg.Task = config.TaskSpec{Name: "recall", Params: data.DefaultConfig("recall")}
	if o.Small {
		cfg.Steps, cfg.Warmup, cfg.EvalEvery, cfg.TestSize = 40, 10, 20, 24
	}
	return cfg
}

// heldOut returns the held-out examples of cfg's task, those the run's
// evaluation scored, with the task.
func heldOut(cfg config.Config) (data.Task, []data.Example, error) {
	task, err := data.New(cfg.Task.Name, cfg.Task.Params)
	if err != nil {
		return nil, nil, err
	}
	stream, err := data.NewStream(task, cfg.Seed, cfg.TestSize)
	if err != nil {
		return nil, nil, err
	}
	return task, stream.Test(), nil
}

// decoderSeq is what a decoder reads of example ex: prompt, SEP and the
// answer but its last token.
func decoderSeq(v *data.Vocab, ex data.Example) []int {
	seq := append(append([]int(nil), ex.Prompt...), v.SEP())
	return append(seq, ex.Answer[:len(ex.Answer)-1]...)
}

// recallAsks returns, for a multi-query recall example read as decoderSeq
// lays it out (k1 v1 … kP vP SEP q1 v1 q2 …), the positions that predict a
// value (those holding a query key) and where the matching pair's key and
// value stand in the prompt: the lookups a head could do, pointing at the
// key or at the value after it.
func recallAsks(ex data.Example) (onKey, onValue []ask) {
	sep := len(ex.Prompt)
	for j, q := range ex.Answer {
		if !ex.IsGiven(j) || j+1 >= len(ex.Answer) {
			continue // a target, read by no position that predicts a value
		}
		for m := 0; m+1 < len(ex.Prompt); m += 2 {
			if ex.Prompt[m] == q {
				at := sep + 1 + j // input position of the query, which predicts its value
				onKey = append(onKey, ask{Query: at, Key: m})
				onValue = append(onValue, ask{Query: at, Key: m + 1})
				break
			}
		}
	}
	return onKey, onValue
}

// lookupChoice is the head chosen to be the lookup and what it points at.
type lookupChoice struct {
	pointing
	OnValue bool // it points at the matching pair's value, not its key
}

// chooseLookup returns the head, and the position of the matching pair
// (key or value), with the largest mean weight on it over the examples'
// asks, and the best head's figures for each of the two positions.
func chooseLookup(maps []infer.Maps, onKey, onValue [][]ask) (choice lookupChoice, bestKey, bestValue pointing) {
	bestKey, bestValue = bestPointer(maps, onKey), bestPointer(maps, onValue)
	if bestValue.MeanRight >= bestKey.MeanRight {
		return lookupChoice{bestValue, true}, bestKey, bestValue
	}
	return lookupChoice{bestKey, false}, bestKey, bestValue
}

// softLookup trains the default recall model and finds the head that looks
// each query's key up: at every position that predicts a value, how much
// of its weight is on the matching pair against the best wrong position.
func softLookup(o Options) (Result, error) {
	cfg := recallConfig(o)
	r := Result{
		Statement: "Attention is a soft lookup: a query matches the keys, and the softmax puts its weight on the position whose key matches, reading that position's value.",
		Method: fmt.Sprintf("the default recall model (MQAR, pairs k1 v1 … kP vP, then each key asked back) trained as `qkv train --task recall` does (max %d steps, stopping at held-out exact match 1); "+
			"at every held-out position that predicts a value (one holding a query key), the weights of each layer and head on the matching pair's key and on its value; "+
			"the lookup head is the head and position (key or value) of largest mean weight on the even-numbered held-out examples, measured on the odd-numbered ones: "+
			"mean weight on the matching position, mean of the largest weight on any other position, and the fraction of answers whose argmax is the matching one", cfg.Steps),
		Measured: map[string]float64{},
	}
	run, err := trainModel(cfg)
	if err != nil {
		return r, err
	}
	defer run.Close()
	task, test, err := heldOut(cfg)
	if err != nil {
		return r, err
	}
	const b = 50
	m, err := run.load(min(b, len(test)))
	if err != nil {
		return r, err
	}
	defer m.Close()
	v := task.Vocab()
	seqs := make([][]int, len(test))
	for i, ex := range test {
		seqs[i] = decoderSeq(v, ex)
	}
	maps, err := decoderMaps(m, seqs)
	if err != nil {
		return r, err
	}
	onKey, onValue := make([][]ask, len(test)), make([][]ask, len(test))
	for i, ex := range test {
		onKey[i], onValue[i] = recallAsks(ex)
	}
	chooseMaps, measureMaps := halves(maps)
	chooseKey, measureKey := halves(onKey)
	chooseValue, measureValue := halves(onValue)
	choice, _, _ := chooseLookup(chooseMaps, chooseKey, chooseValue)
	measureAsks := measureKey
	if choice.OnValue {
		measureAsks = measureValue
	}
	got := pointerStats(measureMaps, measureAsks, choice.Layer, choice.Head)
	// The other position of the matching pair, read by the same head.
	otherAsks := measureValue
	if choice.OnValue {
		otherAsks = measureKey
	}
	other := pointerStats(measureMaps, otherAsks, choice.Layer, choice.Head)

	r.Measured["lookup_layer"] = float64(choice.Layer)
	r.Measured["lookup_head"] = float64(choice.Head)
	r.Measured["lookup_reads_value"] = b2f(choice.OnValue)
	r.Measured["argmax_right_fraction"] = got.ArgmaxRight
	r.Measured["mean_weight_right"] = got.MeanRight
	r.Measured["mean_weight_best_wrong"] = got.MeanBestWrong
	r.Measured["mean_weight_other_pair_position"] = other.MeanRight
	r.Measured["answers_measured"] = float64(got.N)
	r.Measured["exact_match"] = run.Summary.ExactMatch
	r.Measured["train_steps"] = float64(run.Summary.Steps)

	if err := drawLookup(&r, o, task, test, maps, measureMaps, measureKey, measureValue, choice); err != nil {
		return r, err
	}
	where := "key"
	if choice.OnValue {
		where = "value"
	}
	okArgmax, okMargin := got.ArgmaxRight >= 0.95, got.MeanRight >= 2*got.MeanBestWrong
	r.Holds, r.Verdict = verdict(okArgmax, okMargin)
	r.Why = fmt.Sprintf("layer %d head %d puts its largest weight on the matching pair's %s in %.1f%% of %d held-out answers, mean weight %.3f against %.3f on the best wrong position (held-out exact match %.3f after %d steps)",
		choice.Layer, choice.Head, where, 100*got.ArgmaxRight, got.N, got.MeanRight, got.MeanBestWrong, run.Summary.ExactMatch, run.Summary.Steps)
	if !r.Holds {
		r.Why += fmt.Sprintf("; want the argmax right in at least 95%% (%v) and a mean weight at least twice the best wrong one (%v)", okArgmax, okMargin)
	}
	return r, nil
}

// decoderMaps runs seqs through m, m.B at a time, and returns their
// attention weights.
func decoderMaps(m *model.Model, seqs [][]int) ([]infer.Maps, error) {
	var out []infer.Maps
	for start := 0; start < len(seqs); start += m.B {
		got, err := infer.Attention(m, nil, seqs[start:min(start+m.B, len(seqs))])
		if err != nil {
			return nil, err
		}
		for _, g := range got {
			out = append(out, g.Self)
		}
	}
	return out, nil
}

// drawLookup draws one held-out example's attention, every layer and head,
// and every head's mean weight on the matching key and value against the
// best wrong position.
func drawLookup(r *Result, o Options, task data.Task, test []data.Example, maps, measureMaps []infer.Maps, onKey, onValue [][]ask, choice lookupChoice) error {
	path := o.plotPath("soft-lookup", "")
	if path == "" {
		return nil
	}
	v := task.Vocab()
	i := 1 + 2*int(uint64(o.Seed)%uint64(max(1, len(test)/2))) // a measured (odd) example
	i = min(i, len(test)-1)
	seq := decoderSeq(v, test[i])
	hidden := plot.CausalHidden(len(seq))
	title := fmt.Sprintf("soft-lookup: recall %s -> %s (lookup: layer %d head %d)", v.Decode(test[i].Shown()), v.Decode(test[i].Targets()), choice.Layer, choice.Head)
	if err := plot.Attention(path, title, v.Labels(seq), plot.Heatmaps(maps[i], hidden)); err != nil {
		return err
	}
	r.Plots = append(r.Plots, path)
	key := plot.Series{Name: "on the matching key"}
	val := plot.Series{Name: "on the matching value"}
	wrong := plot.Series{Name: "best wrong (vs the value)"}
	frac := plot.Series{Name: "argmax on the value"}
	fracKey := plot.Series{Name: "argmax on the key"}
	n := 0
	var names []string
	for layer := range measureMaps[0] {
		for head := range measureMaps[0][layer] {
			names = append(names, fmt.Sprintf("L%d H%d", layer, head))
			k := pointerStats(measureMaps, onKey, layer, head)
			w := pointerStats(measureMaps, onValue, layer, head)
			x := float64(n)
			key.X, key.Y = append(key.X, x), append(key.Y, k.MeanRight)
			val.X, val.Y = append(val.X, x), append(val.Y, w.MeanRight)
			wrong.X, wrong.Y = append(wrong.X, x), append(wrong.Y, w.MeanBestWrong)
			frac.X, frac.Y = append(frac.X, x), append(frac.Y, w.ArgmaxRight)
			fracKey.X, fracKey.Y = append(fracKey.X, x), append(fracKey.Y, k.ArgmaxRight)
			n++
		}
	}
	xl := "layer L, head H"
	return r.draw(o, "soft-lookup", "-heads", "soft-lookup: each head's weight at the positions that predict a value (held-out)", []plot.Panel{
		{Title: "mean attention weight", XLabel: xl, YLabel: "weight", Categories: names, Series: []plot.Series{val, key, wrong}},
		{Title: "fraction of answers with the argmax there", XLabel: xl, YLabel: "fraction", Categories: names, Series: []plot.Series{frac, fracKey}},
	})
}

// b2f is 1 for true, 0 for false.
func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
