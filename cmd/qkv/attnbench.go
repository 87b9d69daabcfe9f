package main

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/cmd/qkv/internal/attncost"
	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/internal/plot"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
)

// attnResult is the JSON line `qkv bench --seq` ends with: one forward and
// backward pass of one attention layer.
type attnResult struct {
	Impl    layers.AttentionImpl `json:"impl"`
	Seq     int                  `json:"seq"`
	Batch   int                  `json:"batch"`
	Heads   int                  `json:"heads"`
	HeadDim int                  `json:"head_dim"`
	DType   string               `json:"dtype"`
	Causal  bool                 `json:"causal"`
	// Window is the sliding window, 0 for none.
	Window int `json:"window,omitempty"`
	// Global is the number of global tokens beside the window
	// (graph.GlobalWindow), 0 for none.
	Global int `json:"global,omitempty"`
	// BlockLocal is the block of block-local attention (graph.BlockLocal),
	// 0 for none.
	BlockLocal int `json:"block_local,omitempty"`
	// FeatureMap and FeatureDim are linear attention's (Impl "linear"):
	// the map and each head's width of queries and keys before it (0 for
	// head_dim).
	FeatureMap graph.FeatureMap `json:"feature_map,omitempty"`
	FeatureDim int              `json:"feature_dim,omitempty"`
	// FlashTiles is, for flash, the number of (query tile, key tile)
	// pairs it computed in one forward and backward pass (graph.FlashTiles),
	// summed over the batch and heads: the work the mask left it.
	FlashTiles int64 `json:"flash_tiles_per_pass,omitempty"`
	// MsPerStep is the median over the timed repeats.
	MsPerStep float64 `json:"ms_per_step"`
	// PeakBytes is the Go heap's high-water mark while the layer was built
	// and run, above what the process held before.
	PeakBytes int64 `json:"peak_bytes"`
	// PeakRSS is the process's peak resident set size (getrusage).
	PeakRSS int64 `json:"peak_rss_bytes"`
	// Skipped, when set, says why the configuration was not run.
	Skipped string `json:"skipped,omitempty"`
}

// attnLinear is the choice of --attention that times linear attention
// (layers.LinearAttention, in its chunked form) in place of softmax
// attention, with the model's --feature-map, --feature-dim, --linear-norm
// and --linear-chunk.
const attnLinear layers.AttentionImpl = "linear"

// parseAttnImpl reads one choice of --attention in --seq mode: a softmax
// implementation or attnLinear.
func parseAttnImpl(name string) (layers.AttentionImpl, error) {
	if name == string(attnLinear) {
		return attnLinear, nil
	}
	impl, err := layers.ParseAttentionImpl(name)
	if err != nil {
		return "", fmt.Errorf("%w (or %q, linear attention)", err, attnLinear)
	}
	return impl, nil
}

// attnBench is the configuration of an attention-layer benchmark.
type attnBench struct {
	impls   []layers.AttentionImpl
	seqs    []int
	batch   int
	heads   int
	headDim int
	causal  bool
	// window, if positive, is timed beside no window, for each
	// implementation: what the window saves.
	window int
	// global, if positive, makes the first global positions global tokens
	// beside the window (graph.GlobalWindow; it needs window); blockLocal,
	// if positive, is block-local attention in blocks of that many
	// positions (graph.BlockLocal). Either is timed beside no pattern.
	global, blockLocal int
	// linear are the options of linear attention (attnLinear).
	linear  layers.LinearOptions
	dtype   config.DType
	repeats int
	plot    string
	// mem is the memory limit every size is estimated against before it
	// runs.
	mem *memoryFlag
}

// checkSparse refuses sparse patterns that cannot be built.
func (b attnBench) checkSparse() error {
	switch {
	case b.global < 0:
		return fmt.Errorf("%w: --global-tokens: want 0 or more global tokens, got %d", errUsage, b.global)
	case b.blockLocal < 0:
		return fmt.Errorf("%w: --block-local: want a block of at least 1 position, got %d", errUsage, b.blockLocal)
	case b.global > 0 && b.blockLocal > 0:
		return fmt.Errorf("%w: --global-tokens and --block-local are two patterns: give one", errUsage)
	case b.global > 0 && b.window == 0:
		return fmt.Errorf("%w: --global-tokens needs --window: the global tokens are seen beside a sliding window", errUsage)
	case b.blockLocal > 0 && b.window > 0:
		return fmt.Errorf("%w: --block-local and --window are two patterns: give one (--global-tokens works with --window)", errUsage)
	}
	return nil
}

// mask is the mask modifier of b's sparse pattern beside Causal, and the
// window the layer itself applies: GlobalWindow holds the window.
func (b attnBench) mask() (graph.MaskMod, int, error) {
	switch {
	case b.global > 0:
		m, err := graph.GlobalWindow(b.global, b.window, b.causal)
		return m, 0, err
	case b.blockLocal > 0:
		m, err := graph.BlockLocal(b.blockLocal, b.causal)
		return m, b.window, err
	}
	return nil, b.window, nil
}

// plain is b without its window or sparse pattern.
func (b attnBench) plain() attnBench {
	b.window, b.global, b.blockLocal = 0, 0, 0
	return b
}

// parseInts parses a comma-separated list of positive integers.
func parseInts(flagName, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%w: --%s: want positive integers separated by commas, got %q", errUsage, flagName, s)
		}
		out = append(out, n)
	}
	return out, nil
}

// runAttnBench times one attention layer: run in this process for one
// implementation and length, or, for several, each in a child process of
// its own, so that every peak memory figure is that run's alone. A size
// estimated to need more than the memory limit is not run; the others
// run, and then the command fails naming the sizes refused (a usage error)
// and those whose run failed.
func runAttnBench(b attnBench, stdout, stderr io.Writer) error {
	if err := b.checkSparse(); err != nil {
		return err
	}
	single := len(b.impls) == 1 && len(b.seqs) == 1 && b.plot == ""
	exe, err := os.Executable()
	if err != nil && !single {
		return err
	}
	limit, from := b.mem.limit()
	var results []attnResult
	var tooLarge, failed []string
	patterns := []attnBench{b}
	if (b.window > 0 || b.blockLocal > 0) && !single {
		patterns = []attnBench{b.plain(), b} // what the window or pattern saves, side by side
	}
	for _, impl := range b.impls {
		pats := patterns
		if impl == attnLinear {
			pats = []attnBench{b.plain()} // linear attention has no window or pattern
		}
		for _, bw := range pats {
			for _, n := range b.seqs {
				res := bw.result(impl, n)
				if est := attnMemoryEstimate(bw, impl, n); est > float64(limit) {
					res.Skipped = fmt.Sprintf("needs about %s, more than %s of %s", config.FormatBytes(est), from, config.FormatBytes(float64(limit)))
					tooLarge = append(tooLarge, fmt.Sprintf("%s n=%d (about %s)", res.name(), n, config.FormatBytes(est)))
				} else if single {
					if res, err = measureAttention(bw, impl, n); err != nil {
						return err
					}
				} else if res, err = runAttnChild(exe, bw, impl, n, stderr); err != nil { // e.g. killed for memory: the sweep goes on
					res.Skipped = fmt.Sprintf("the run failed: %v", err)
					failed = append(failed, fmt.Sprintf("%s n=%d (%v)", res.name(), n, err))
				}
				printAttn(stdout, res)
				results = append(results, res)
			}
		}
	}
	for _, res := range results {
		line, _ := json.Marshal(res)
		fmt.Fprintln(stdout, string(line))
	}
	if b.plot != "" && len(tooLarge)+len(failed) < len(results) {
		if err := plotScaling(b.plot, results); err != nil {
			return err
		}
	}
	var errs []error
	if len(tooLarge) > 0 {
		errs = append(errs, fmt.Errorf("%w: --max-memory: one attention layer at %s needs more than %s, %s (lower --seq, --batch, --heads or --head-dim, or raise --max-memory)",
			errUsage, strings.Join(tooLarge, ", "), config.FormatBytes(float64(limit)), from))
	}
	if len(failed) > 0 {
		errs = append(errs, fmt.Errorf("the run of %s failed", strings.Join(failed, ", ")))
	}
	return errors.Join(errs...)
}

// runAttnChild times impl at length n in a child process of its own and
// returns its result, the last JSON line it prints.
func runAttnChild(exe string, b attnBench, impl layers.AttentionImpl, n int, stderr io.Writer) (attnResult, error) {
	args := []string{"bench", "--attention", string(impl), "--seq", strconv.Itoa(n), "--batch", strconv.Itoa(b.batch),
		"--heads", strconv.Itoa(b.heads), "--head-dim", strconv.Itoa(b.headDim), "--dtype", string(b.dtype),
		"--causal=" + strconv.FormatBool(b.causal), "--window", strconv.Itoa(b.window), "-n", strconv.Itoa(b.repeats),
		"--global-tokens", strconv.Itoa(b.global), "--block-local", strconv.Itoa(b.blockLocal)}
	if impl == attnLinear {
		o := b.linear
		args = append(args, "--feature-map", string(cmp.Or(o.FeatureMap, graph.FeatureTaylor)), "--feature-dim", strconv.Itoa(o.FeatureDim),
			"--linear-norm", string(cmp.Or(o.LinearNorm, layers.LinearNormSum)), "--linear-chunk", strconv.Itoa(cmp.Or(o.LinearChunk, graph.DefaultLinearChunk)))
	}
	if b.mem.n > 0 {
		args = append(args, "--max-memory", strconv.FormatInt(b.mem.n, 10))
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), runMainEnvVar+"=1")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, stderr
	if err := cmd.Run(); err != nil {
		return b.result(impl, n), err
	}
	res, err := lastJSON(out.Bytes())
	if err != nil {
		return b.result(impl, n), err
	}
	return res, nil
}

// result is the attnResult of impl at length n, before it is measured.
func (b attnBench) result(impl layers.AttentionImpl, n int) attnResult {
	r := attnResult{Impl: impl, Seq: n, Batch: b.batch, Heads: b.heads, HeadDim: b.headDim, DType: string(b.dtype), Causal: b.causal, Window: b.window,
		Global: b.global, BlockLocal: b.blockLocal}
	if impl == attnLinear {
		r.FeatureMap, r.FeatureDim = cmp.Or(b.linear.FeatureMap, graph.FeatureTaylor), b.linear.FeatureDim
	}
	return r
}

// name names the result's implementation and window or sparse pattern,
// e.g. "flash, window 256", "flash, global 16 + window 256" or "flash,
// block-local 256", in printed lines and a plot's legend.
func (r attnResult) name() string {
	switch {
	case r.Impl == attnLinear && r.FeatureDim > 0:
		return fmt.Sprintf("linear, %s %d", r.FeatureMap, r.FeatureDim)
	case r.Impl == attnLinear:
		return fmt.Sprintf("linear, %s", r.FeatureMap)
	case r.Global > 0:
		return fmt.Sprintf("%s, global %d + window %d", r.Impl, r.Global, r.Window)
	case r.BlockLocal > 0:
		return fmt.Sprintf("%s, block-local %d", r.Impl, r.BlockLocal)
	case r.Window > 0:
		return fmt.Sprintf("%s, window %d", r.Impl, r.Window)
	}
	return string(r.Impl)
}

// runMainEnvVar, set in a child's environment, makes a test binary run
// qkv's main (see TestMain); the qkv binary ignores it.
const runMainEnvVar = "QKV_TEST_RUN_MAIN"

// lastJSON returns the last JSON line of out as an attnResult.
func lastJSON(out []byte) (attnResult, error) {
	var last string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if t := strings.TrimSpace(sc.Text()); strings.HasPrefix(t, "{") {
			last = t
		}
	}
	var res attnResult
	if last == "" {
		return res, errors.New("no JSON result line")
	}
	return res, json.Unmarshal([]byte(last), &res)
}

func printAttn(w io.Writer, r attnResult) {
	if r.Skipped != "" {
		fmt.Fprintf(w, "%-17s n=%-6d skipped: %s\n", r.name(), r.Seq, r.Skipped)
		return
	}
	tiles := ""
	if r.FlashTiles > 0 {
		tiles = fmt.Sprintf("  flash tiles/pass %d", r.FlashTiles)
	}
	fmt.Fprintf(w, "%-17s n=%-6d %10.2f ms/step  peak heap %10s  peak RSS %10s%s\n", r.name(), r.Seq, r.MsPerStep,
		config.FormatBytes(float64(r.PeakBytes)), config.FormatBytes(float64(r.PeakRSS)), tiles)
}

// attnMemoryEstimate is attncost.EstimateBytes of impl at length n with
// b's sizes: a generous estimate of what one forward and backward pass
// keeps.
func attnMemoryEstimate(b attnBench, impl layers.AttentionImpl, n int) float64 {
	dt := tensor.Float32
	if b.dtype == config.Float64 {
		dt = tensor.Float64
	}
	c, _ := b.config(impl, n, dt)
	return attncost.EstimateBytes(c)
}

// config is the attncost.Config of impl at length n with b's sizes.
func (b attnBench) config(impl layers.AttentionImpl, n int, dt tensor.Dtype) (attncost.Config, error) {
	c := attncost.Config{Impl: impl, Seq: n, Batch: b.batch, Heads: b.heads, HeadDim: b.headDim, DType: dt, Causal: b.causal, Repeats: b.repeats}
	if impl == attnLinear {
		c.Impl, c.Linear, c.LinearOptions = layers.AttentionFused, true, b.linear
		return c, nil
	}
	var err error
	c.Mask, c.Window, err = b.mask()
	return c, err
}

// measureAttention measures one attention layer of b's sizes with
// attncost.Measure, and this process's peak resident set size.
func measureAttention(b attnBench, impl layers.AttentionImpl, n int) (attnResult, error) {
	res := b.result(impl, n)
	dt, err := b.dtype.Tensor()
	if err != nil {
		return res, fmt.Errorf("%w: --dtype: %v", errUsage, err)
	}
	c, err := b.config(impl, n, dt)
	if err != nil {
		return res, fmt.Errorf("%w: %v", errUsage, err)
	}
	tiles := graph.FlashTiles()
	m, err := attncost.Measure(c)
	if impl == layers.AttentionFlash {
		// Measure runs one untimed pass and b.repeats timed ones.
		res.FlashTiles = (graph.FlashTiles() - tiles) / int64(b.repeats+1)
	}
	if errors.Is(err, attncost.ErrConfig) {
		return res, fmt.Errorf("%w: %v", errUsage, err)
	} else if err != nil {
		return res, err
	}
	res.MsPerStep, res.PeakBytes = m.MsPerStep, m.PeakBytes
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		res.PeakRSS = ru.Maxrss * 1024 // kilobytes on Linux
	}
	return res, nil
}

// plotScaling draws time and peak memory against n, log-log, one line per
// implementation, with each line's slope in the legend.
func plotScaling(path string, results []attnResult) error {
	var series []plot.ScalingSeries
	for _, r := range results {
		if r.Skipped != "" {
			continue
		}
		i := slices.IndexFunc(series, func(s plot.ScalingSeries) bool { return s.Name == r.name() })
		if i < 0 {
			series = append(series, plot.ScalingSeries{Name: r.name()})
			i = len(series) - 1
		}
		series[i].N = append(series[i].N, float64(r.Seq))
		series[i].Ms = append(series[i].Ms, r.MsPerStep)
		series[i].Bytes = append(series[i].Bytes, float64(max(r.PeakBytes, 1)))
	}
	if len(series) == 0 {
		return errors.New("nothing to plot: every configuration was skipped")
	}
	return outputErr("plot", plot.Scaling(path, "attention: one forward and backward pass", series))
}
