package explain

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
)

// recallModel is one sequence mixer of the recall-vs-state experiment: the
// layer kinds a model cycles over its blocks and the options of its linear
// layers. Family groups the models drawn as one line across state sizes.
type recallModel struct {
	// Name names the model; Family the line it is drawn on, Variant what
	// sets it apart on that line ("d'=4", "w=8"), "" for a family of one.
	Name, Family, Variant string
	LayerKinds            string
	FeatureMap            graph.FeatureMap
	FeatureDim            int // d' of the linear layers; 0 is dk
}

// recallPairs is one task of the experiment: MQAR with Pairs pairs of Keys
// keys and Values values, trained Steps steps at most, with Seeds seeds.
type recallPairs struct {
	Pairs, Keys, Values, Steps, Seeds int
}

// recallPlan sizes the experiment: the tasks, the models, their common
// shape and training, and the throughput measurements.
type recallPlan struct {
	Tasks                      []recallPairs
	Models                     []recallModel
	Dim, Heads, Layers, Hidden int
	Batch, TestSize, EvalEvery int
	// GenRepeats is how many timed generations the tokens/s are the median
	// of; LongContext the context of the second throughput measurement
	// (same architectures, random weights), 0 for none.
	GenRepeats, LongContext int
	// Workers is how many models train at once.
	Workers int
}

// recallPlanFor returns the experiment of o: in o.Small a tiny one that
// checks the pipeline in seconds.
func recallPlanFor(o Options) recallPlan {
	taylor := func(d int) recallModel {
		return recallModel{Name: fmt.Sprintf("linear taylor d'=%d", d), Family: "linear taylor", Variant: fmt.Sprintf("d'=%d", d), LayerKinds: "linear", FeatureMap: graph.FeatureTaylor, FeatureDim: d}
	}
	// The hybrid's window block comes first: in two blocks the first can
	// only mix nearby tokens (each value with its key, what Based's short
	// convolution does) and the second must do the lookup over the whole
	// context, which "linear,window:8" would leave to the window.
	hybrid := func(d int) recallModel {
		return recallModel{Name: fmt.Sprintf("hybrid window:8 + taylor d'=%d", d), Family: "Based hybrid: window:8, taylor", Variant: fmt.Sprintf("d'=%d", d), LayerKinds: "window:8,linear", FeatureMap: graph.FeatureTaylor, FeatureDim: d}
	}
	window := func(w int) recallModel {
		return recallModel{Name: fmt.Sprintf("window:%d", w), Family: "sliding window", Variant: fmt.Sprintf("w=%d", w), LayerKinds: fmt.Sprintf("window:%d", w)}
	}
	softmax := recallModel{Name: "softmax", Family: "softmax", LayerKinds: "softmax"}
	if o.Small {
		return recallPlan{
			Tasks:  []recallPairs{{Pairs: 2, Keys: 4, Values: 4, Steps: 6, Seeds: 1}},
			Models: []recallModel{softmax, window(4), taylor(2), hybrid(2)},
			Dim:    16, Heads: 2, Layers: 2, Hidden: 32,
			Batch: 8, TestSize: 8, EvalEvery: 6,
			GenRepeats: 1, LongContext: 64, Workers: 2,
		}
	}
	return recallPlan{
		Tasks: []recallPairs{
			{Pairs: 4, Keys: 8, Values: 16, Steps: 300, Seeds: 3},
			{Pairs: 8, Keys: 16, Values: 16, Steps: 600, Seeds: 3},
			{Pairs: 16, Keys: 26, Values: 16, Steps: 400, Seeds: 1},
		},
		Models: []recallModel{
			softmax, window(4), window(8),
			taylor(4), taylor(8), taylor(16),
			{Name: "linear elu1", Family: "linear elu1 (d'=dk)", LayerKinds: "linear", FeatureMap: graph.FeatureELU1},
			{Name: "linear relu", Family: "linear relu (d'=dk)", LayerKinds: "linear", FeatureMap: graph.FeatureReLU},
			hybrid(4), hybrid(16),
		},
		Dim: 48, Heads: 4, Layers: 2, Hidden: 192,
		Batch: 64, TestSize: 100, EvalEvery: 100,
		GenRepeats: 5, LongContext: 1024, Workers: 2,
	}
}

// config returns the training configuration of model m on task t with seed.
func (p recallPlan) config(m recallModel, t recallPairs, seed int) config.Config {
	cfg := config.Default()
	cfg.Task = config.TaskSpec{Name: "recall", Params: data.TaskConfig{Pairs: t.Pairs, Keys: t.Keys, Values: t.Values, Queries: data.QueriesAll}}
	cfg.Model.Dim, cfg.Model.Heads, cfg.Model.Layers, cfg.Model.Hidden = p.Dim, p.Heads, p.Layers, p.Hidden
	if m.LayerKinds != "softmax" {
		cfg.Model.LayerKinds = m.LayerKinds
	}
	cfg.Model.FeatureMap, cfg.Model.FeatureDim = m.FeatureMap, m.FeatureDim
	cfg.Seed = uint64(seed)
	cfg.Batch, cfg.Steps, cfg.TestSize, cfg.EvalEvery = p.Batch, t.Steps, p.TestSize, p.EvalEvery
	cfg.Warmup = min(50, t.Steps/10)
	cfg.CheckpointEvery = t.Steps
	return cfg
}

// stateBytes is what model m keeps per sequence, summed over its layers,
// while generating at a context of n positions in float32: a softmax
// layer's key/value cache 2·n·D·4; a window layer's 2·min(n, w)·D·4, the
// cache a rolling window needs (qkv's cached decoder keeps all n and masks);
// a linear layer's state S and normaliser z, (H·dφ·dk + H·dφ)·4.
func (p recallPlan) stateBytes(m recallModel, n int) (int, error) {
	kinds, err := layers.ParseLayerKinds(m.LayerKinds)
	if err != nil {
		return 0, err
	}
	const elem = 4
	dk := p.Dim / p.Heads
	total := 0
	for i := range p.Layers {
		k := kinds[i%len(kinds)]
		switch {
		case k.Linear:
			d := m.FeatureDim
			if d == 0 {
				d = dk
			}
			fm := m.FeatureMap
			if fm == "" {
				fm = graph.FeatureTaylor
			}
			phi := fm.Dim(d)
			total += (p.Heads*phi*dk + p.Heads*phi) * elem
		case k.Window > 0:
			total += 2 * min(n, k.Window) * p.Dim * elem
		default:
			total += 2 * n * p.Dim * elem
		}
	}
	return total, nil
}

// recallRun is one trained model of the experiment.
type recallRun struct {
	Model        recallModel
	Task         recallPairs
	Seed         int
	Params       int
	Context      int     // positions the cached decoder holds: the task's longest input
	StateBytes   int     // stateBytes at Context
	CacheBytes   int     // what qkv's cached decoder keeps per row (Cached.CacheBytes / B)
	Accuracy     float64 // held-out token accuracy: the share of queries whose value is right
	Exact        float64 // held-out exact match: every query of the sequence right
	Steps        int
	TrainSeconds float64
	TokensPerS   float64 // cached greedy generation, one row, Context tokens
}

// recallSummary is the runs of one model on one task across seeds.
type recallSummary struct {
	Model                      recallModel
	Task                       recallPairs
	Params, StateBytes         int
	Acc, AccMin, AccMax        float64 // mean and range over seeds
	Exact, Steps               float64 // means over seeds
	PerSeed                    []float64
	TokensPerS                 float64 // mean over seeds
	TokensPerSeed              []float64
	LongTokensPerS, LongStates float64 // at plan.LongContext, random weights
}

// recallExperiment is every run of a plan and its summaries.
type recallExperiment struct {
	Plan    recallPlan
	Runs    []recallRun
	Sums    []recallSummary
	Long    map[string]float64 // tokens/s at Plan.LongContext by model name
	Seconds float64
}

// recallMemo keeps the experiment of each Options, which both claims read:
// `qkv explain` trains the models once.
var recallMemo struct {
	sync.Mutex
	m map[[2]int64]*recallExperiment
}

// recallExperimentFor runs (or returns the run of) o's experiment.
func recallExperimentFor(o Options) (*recallExperiment, error) {
	recallMemo.Lock()
	defer recallMemo.Unlock()
	key := [2]int64{o.Seed, 0}
	if o.Small {
		key[1] = 1
	}
	if e, ok := recallMemo.m[key]; ok {
		return e, nil
	}
	e, err := runRecallExperiment(recallPlanFor(o), max(o.Seed, 1))
	if err != nil {
		return nil, err
	}
	if recallMemo.m == nil {
		recallMemo.m = map[[2]int64]*recallExperiment{}
	}
	recallMemo.m[key] = e
	return e, nil
}

// runRecallExperiment trains every model of p on every task with seeds
// first, first+1, ..., p.Workers at a time, then, one at a time and with
// no training running, measures each one's generation speed and that of
// each architecture at p.LongContext.
func runRecallExperiment(p recallPlan, first int64) (*recallExperiment, error) {
	start := time.Now()
	e := &recallExperiment{Plan: p, Long: map[string]float64{}}
	type job struct {
		m    recallModel
		t    recallPairs
		seed int
	}
	var jobs []job
	for _, t := range p.Tasks {
		for s := range t.Seeds {
			for _, m := range p.Models {
				jobs = append(jobs, job{m, t, int(first) + s})
			}
		}
	}
	runs := make([]*trainedRun, len(jobs))
	e.Runs = make([]recallRun, len(jobs))
	defer func() {
		for _, r := range runs {
			if r != nil {
				r.Close()
			}
		}
	}()
	errs := make([]error, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range max(p.Workers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				j := jobs[i]
				e.Runs[i] = recallRun{Model: j.m, Task: j.t, Seed: j.seed}
				runs[i], errs[i] = trainModel(p.config(j.m, j.t, j.seed))
			}
		}()
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, j := range jobs {
		if errs[i] != nil {
			return nil, fmt.Errorf("%s, %d pairs, seed %d: %w", j.m.Name, j.t.Pairs, j.seed, errs[i])
		}
		if err := p.measure(&e.Runs[i], runs[i]); err != nil {
			return nil, fmt.Errorf("%s, %d pairs, seed %d: %w", j.m.Name, j.t.Pairs, j.seed, err)
		}
		runs[i].Close()
		runs[i] = nil
	}
	if p.LongContext > 0 {
		last := p.Tasks[len(p.Tasks)-1]
		for _, m := range p.Models {
			tps, err := p.longThroughput(m, last)
			if err != nil {
				return nil, fmt.Errorf("%s at context %d: %w", m.Name, p.LongContext, err)
			}
			e.Long[m.Name] = tps
		}
	}
	e.summarise()
	e.Seconds = time.Since(start).Seconds()
	return e, nil
}

// measure fills r from its trained run: the summary's accuracy, the
// cached decoder's state and the generation speed.
func (p recallPlan) measure(r *recallRun, run *trainedRun) error {
	r.Params, r.Accuracy, r.Exact, r.Steps = run.Summary.Params, run.Summary.TokenAccuracy, run.Summary.ExactMatch, run.Summary.Steps
	r.TrainSeconds = run.Summary.WallSeconds
	net, _, task, err := model.Load(run.Dir, 1, model.LoadOptions{})
	if err != nil {
		return err
	}
	defer net.Close()
	cached, err := net.Cached()
	if err != nil {
		return err
	}
	r.Context, r.CacheBytes = cached.L, cached.CacheBytes()/cached.B
	if r.StateBytes, err = p.stateBytes(r.Model, r.Context); err != nil {
		return err
	}
	first := task.Vocab().SEP() + 1 // any symbol: the time does not depend on it
	r.TokensPerS, err = generationRate(cached, first, cached.L, p.GenRepeats)
	return err
}

// longThroughput is the generation speed of m's architecture (t's
// vocabulary, random weights) at a context of p.LongContext positions:
// every cached step of a softmax layer reads the whole context, a linear
// layer's step its state alone.
func (p recallPlan) longThroughput(m recallModel, t recallPairs) (float64, error) {
	cfg := p.config(m, t, 1)
	task, err := cfg.Resolve()
	if err != nil {
		return 0, err
	}
	cfg.Model.MaxLen = p.LongContext
	net, err := model.Build(cfg, 1, p.LongContext, model.Options{})
	if err != nil {
		return 0, err
	}
	defer net.Close()
	cached, err := net.Cached()
	if err != nil {
		return 0, err
	}
	// Each step attends over the cache of LongContext positions, masked
	// past the row's position, so a few steps time the step at that
	// context.
	return generationRate(cached, task.Vocab().SEP()+1, min(64, p.LongContext), p.GenRepeats)
}

// generationRate times greedy cached generation of n tokens from a prompt
// of one token id, one row: the median of repeats runs after one to warm
// up, in tokens per second.
func generationRate(c *model.Cached, id, n, repeats int) (float64, error) {
	prompt := [][]int{{id}}
	gen := func() error { _, err := c.Generate(nil, prompt, []int{n}); return err }
	if err := gen(); err != nil {
		return 0, err
	}
	secs := make([]float64, max(repeats, 1))
	for i := range secs {
		start := time.Now()
		if err := gen(); err != nil {
			return 0, err
		}
		secs[i] = time.Since(start).Seconds()
	}
	slices.Sort(secs)
	return float64(n) / secs[len(secs)/2], nil
}

// summarise fills e.Sums: per task and model, the mean and range over
// seeds.
func (e *recallExperiment) summarise() {
	for _, t := range e.Plan.Tasks {
		for _, m := range e.Plan.Models {
			s := recallSummary{Model: m, Task: t, AccMin: math.Inf(1), AccMax: math.Inf(-1)}
			for _, r := range e.Runs {
				if r.Model.Name != m.Name || r.Task.Pairs != t.Pairs {
					continue
				}
				s.Params, s.StateBytes = r.Params, r.StateBytes
				s.PerSeed = append(s.PerSeed, r.Accuracy)
				s.TokensPerSeed = append(s.TokensPerSeed, r.TokensPerS)
				s.AccMin, s.AccMax = min(s.AccMin, r.Accuracy), max(s.AccMax, r.Accuracy)
				s.Exact += r.Exact
				s.Steps += float64(r.Steps)
			}
			if len(s.PerSeed) == 0 {
				continue
			}
			s.Acc, s.TokensPerS = meanOf(s.PerSeed), meanOf(s.TokensPerSeed)
			s.Exact /= float64(len(s.PerSeed))
			s.Steps /= float64(len(s.PerSeed))
			s.LongTokensPerS = e.Long[m.Name]
			e.Sums = append(e.Sums, s)
		}
	}
}

// meanOf is the mean of xs.
func meanOf(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// sum returns the summary of the model named name on pairs, if any.
func (e *recallExperiment) sum(name string, pairs int) (recallSummary, bool) {
	for _, s := range e.Sums {
		if s.Model.Name == name && s.Task.Pairs == pairs {
			return s, true
		}
	}
	return recallSummary{}, false
}

// smallStateLinear returns the summaries on pairs of the linear models of
// the smallest state: every plain linear model whose state is at most the
// smallest Taylor one's.
func (e *recallExperiment) smallStateLinear(pairs int) []recallSummary {
	var lin []recallSummary
	for _, s := range e.Sums {
		if s.Task.Pairs == pairs && s.Model.LayerKinds == "linear" {
			lin = append(lin, s)
		}
	}
	if len(lin) == 0 {
		return nil
	}
	smallest := math.MaxInt
	for _, s := range lin {
		if s.Model.FeatureMap == graph.FeatureTaylor {
			smallest = min(smallest, s.StateBytes)
		}
	}
	var out []recallSummary
	for _, s := range lin {
		if s.StateBytes <= smallest {
			out = append(out, s)
		}
	}
	return out
}

// smallestHybrid is the summary on pairs of the hybrid of the smallest
// linear state.
func (e *recallExperiment) smallestHybrid(pairs int) (recallSummary, bool) {
	var best recallSummary
	ok := false
	for _, s := range e.Sums {
		if s.Task.Pairs == pairs && strings.HasPrefix(s.Model.Name, "hybrid") && (!ok || s.StateBytes < best.StateBytes) {
			best, ok = s, true
		}
	}
	return best, ok
}

// measuredKey turns a model name into a measured-key fragment: "linear taylor
// d'=4" is "linear_taylor_d4".
func measuredKey(name string) string {
	r := strings.NewReplacer(" + ", "_", " ", "_", "'=", "", ":", "", "=", "")
	return r.Replace(name)
}

// recallVsState is Zoology's figure: MQAR accuracy against the state a
// model keeps while generating.
func recallVsState(o Options) (Result, error) {
	e, err := recallExperimentFor(o)
	if err != nil {
		return Result{}, err
	}
	p := e.Plan
	r := Result{
		Statement: "On multi-query associative recall, softmax attention, whose key/value cache grows with the context, recalls nearly every query; linear attention with a small fixed state (small feature dimension) falls short; the Based hybrid (Taylor linear attention alternating with a short sliding window) recovers most of the gap (Zoology, Arora et al. 2023; Based, Arora et al. 2024).",
		Measured:  map[string]float64{},
	}
	var pairs []string
	for _, t := range p.Tasks {
		pairs = append(pairs, fmt.Sprintf("%d pairs (%d keys, %d values, %d steps, %d seed(s))", t.Pairs, t.Keys, t.Values, t.Steps, t.Seeds))
	}
	r.Method = fmt.Sprintf("%d models of equal shape (D=%d, %d heads, %d layers, FF %d; parameters in measured) trained by train.Run on MQAR at %s, batch %d, early stop at held-out exact match 1; accuracy is the task's held-out token accuracy (%d held-out sequences, every query scored) after the last step; state = bytes kept per sequence while generating at the task's context n=4·pairs, summed over the layers (float32): softmax 2nD·4, window 2·min(n,w)·D·4, linear (H·dφ·dk + H·dφ)·4",
		len(p.Models), p.Dim, p.Heads, p.Layers, p.Hidden, strings.Join(pairs, "; "), p.Batch, p.TestSize)
	for _, s := range e.Sums {
		k := fmt.Sprintf("p%d_%s", s.Task.Pairs, measuredKey(s.Model.Name))
		r.Measured[k+"_acc"] = s.Acc
		r.Measured[k+"_acc_spread"] = s.AccMax - s.AccMin
		r.Measured[k+"_state_bytes"] = float64(s.StateBytes)
		r.Measured[k+"_exact"] = s.Exact
		r.Measured[k+"_steps"] = s.Steps
		if s.Task.Pairs == p.Tasks[0].Pairs {
			r.Measured["params_"+measuredKey(s.Model.Name)] = float64(s.Params)
		}
	}
	parts, why := e.recallParts()
	r.Holds, r.Verdict = verdict(parts...)
	r.Why = why
	r.Measured["seconds"] = e.Seconds
	if err := e.drawRecall(&r, o); err != nil {
		return r, err
	}
	return r, nil
}

// judgedPairs is the task both verdicts are judged at: the one of most
// pairs on which softmax recalls (mean accuracy 0.9), or the largest if
// softmax recalls none: a comparison with a softmax model that did not
// learn its task would say nothing about state.
func (e *recallExperiment) judgedPairs() int {
	tasks := e.Plan.Tasks
	for i := len(tasks) - 1; i >= 0; i-- {
		if s, _ := e.sum("softmax", tasks[i].Pairs); s.Acc >= 0.9 {
			return tasks[i].Pairs
		}
	}
	return tasks[len(tasks)-1].Pairs
}

// recallParts are the verdict's three parts, judged at the task of most
// pairs on which softmax recalls (mean accuracy 0.9) or, if none, the
// largest: softmax holds ~100%, the small-state linear models fall at
// least 0.2 below it, the smallest hybrid recovers at least half the gap.
func (e *recallExperiment) recallParts() ([]bool, string) {
	tasks := e.Plan.Tasks
	at := e.judgedPairs()
	softOK := true
	var softAcc []string
	for _, t := range tasks {
		s, _ := e.sum("softmax", t.Pairs)
		softAcc = append(softAcc, fmt.Sprintf("%.2f at %d pairs", s.Acc, t.Pairs))
		if s.Acc < 0.9 {
			softOK = false
		}
	}
	soft, _ := e.sum("softmax", at)
	lin := e.smallStateLinear(at)
	linBest := 0.0
	var linAcc []string
	for _, s := range lin {
		linBest = max(linBest, s.Acc)
		linAcc = append(linAcc, fmt.Sprintf("%s %.2f", s.Model.Name, s.Acc))
	}
	falls := len(lin) > 0 && linBest <= soft.Acc-0.2
	hyb, ok := e.smallestHybrid(at)
	recovers := ok && falls && hyb.Acc >= linBest+0.5*(soft.Acc-linBest)
	why := fmt.Sprintf("softmax %s; at %d pairs the small-state linear models reach %s against softmax's %.2f, and %s %.2f (state %d B against softmax's %d B)",
		strings.Join(softAcc, ", "), at, strings.Join(linAcc, ", "), soft.Acc, hyb.Model.Name, hyb.Acc, hyb.StateBytes, soft.StateBytes)
	return []bool{softOK, falls, recovers}, why
}

// throughputVsRecall is Based's trade-off: generation tokens/s against
// recall, for the same trained models.
func throughputVsRecall(o Options) (Result, error) {
	e, err := recallExperimentFor(o)
	if err != nil {
		return Result{}, err
	}
	p := e.Plan
	at := e.judgedPairs()
	r := Result{
		Statement: "Recall and generation throughput trade off: the models that keep a fixed-size state generate faster than softmax attention once the context is long, and softmax, which keeps every key and value, recalls more (Based, Arora et al. 2024).",
		Method: fmt.Sprintf("greedy generation with the cached decoder (train/model Cached), one row, median of %d timed runs: the trained models at the task's context (n=4·pairs tokens generated from one), and each architecture with random weights at a context of %d (a step of a softmax layer reads its whole cache, a linear layer's its state); recall as in recall-vs-state, at %d pairs (the most on which softmax recalls) for the long-context comparison",
			p.GenRepeats, p.LongContext, at),
		Measured: map[string]float64{},
	}
	for _, s := range e.Sums {
		r.Measured[fmt.Sprintf("p%d_%s_tokens_per_s", s.Task.Pairs, measuredKey(s.Model.Name))] = s.TokensPerS
	}
	for name, v := range e.Long {
		r.Measured[fmt.Sprintf("long%d_%s_tokens_per_s", p.LongContext, measuredKey(name))] = v
	}
	soft, _ := e.sum("softmax", at)
	lin := e.smallStateLinear(at)
	faster, recallsLess := len(lin) > 0, len(lin) > 0
	var linSpeed []string
	for _, s := range lin {
		if s.LongTokensPerS <= soft.LongTokensPerS {
			faster = false
		}
		if s.Acc >= soft.Acc {
			recallsLess = false
		}
		linSpeed = append(linSpeed, fmt.Sprintf("%s %.0f", s.Model.Name, s.LongTokensPerS))
	}
	hyb, _ := e.smallestHybrid(at)
	r.Holds, r.Verdict = verdict(faster, recallsLess)
	last := p.Tasks[len(p.Tasks)-1].Pairs
	r.Why = fmt.Sprintf("at a context of %d, softmax generates %.0f tokens/s, the small-state linear models %s, %s %.0f; recall at %d pairs %.2f (softmax) against %.2f at best (small-state linear) and %.2f (hybrid); at the largest task's own short context (n=%d) the speeds are %s",
		p.LongContext, soft.LongTokensPerS, strings.Join(linSpeed, ", "), hyb.Model.Name, hyb.LongTokensPerS, at, soft.Acc, bestAcc(lin), hyb.Acc, 4*last, e.shortSpeedRange(last))
	if err := e.drawThroughput(&r, o); err != nil {
		return r, err
	}
	return r, nil
}

// bestAcc is the highest mean accuracy of sums.
func bestAcc(sums []recallSummary) float64 {
	b := 0.0
	for _, s := range sums {
		b = max(b, s.Acc)
	}
	return b
}

// shortSpeedRange describes the spread of tokens/s at the task of pairs.
func (e *recallExperiment) shortSpeedRange(pairs int) string {
	var v []float64
	for _, s := range e.Sums {
		if s.Task.Pairs == pairs {
			v = append(v, s.TokensPerS)
		}
	}
	if len(v) == 0 {
		return "unmeasured"
	}
	sort.Float64s(v)
	return fmt.Sprintf("%.0f to %.0f tokens/s", v[0], v[len(v)-1])
}
