package main

import (
	"bytes"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/internal/fsx"
	"github.com/qkv-dev/qkv/internal/gemm"
	"github.com/qkv-dev/qkv/internal/hugepage"
	"github.com/qkv-dev/qkv/internal/vec"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/tools/torchref"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
	"github.com/qkv-dev/qkv/train/optim"
)

// benchTrainFlags are the training flags a bench training step uses: the
// preset, the task's and every flag of the schema but those of the
// schedule (--steps, --warmup, --min-lr: the step runs at --lr), of
// evaluation and of checkpoints.
var benchTrainFlags = func() []string {
	names := append([]string{"preset", "task"}, taskFlagNames...)
	for _, f := range schemaOf((*config.Config)(nil)) {
		switch f.flag {
		case "steps", "warmup", "min-lr", "eval-every", "target-exact", "checkpoint-every":
		default:
			names = append(names, f.flag)
		}
	}
	return names
}()

// benchModes are bench's three modes: the flag that selects each (none for
// the training step), what it times, and the flags it uses besides -n and
// --max-memory.
var benchModes = []benchMode{
	{"", "a training step", append([]string{"torch", "profile", "memprofile", "huge-pages"}, benchTrainFlags...)},
	{"seq", "one attention layer, --heads x --head-dim wide, without dropout", []string{"seq", "attention", "batch", "heads", "head-dim", "causal", "window", "global-tokens", "block-local", "dtype", "plot", "feature-map", "feature-dim", "linear-norm", "linear-chunk"}},
	{"generate", "generating with a decoder of random weights: one sequence, no dropout, its own vocabulary",
		[]string{"generate", "preset", "dim", "heads", "layers", "hidden", "activation", "positions", "post-ln", "bias", "tie-embeddings", "bias-free-norm", "attention", "dtype", "seed", "layer-kinds", "feature-map", "feature-dim", "linear-norm", "linear-chunk"}},
}

// benchMode is one of bench's modes.
type benchMode struct {
	flag, what string
	uses       []string
}

// name names the mode as its flag ("--seq"), or "the training step".
func (m benchMode) name() string {
	if m.flag == "" {
		return "the training step"
	}
	return "--" + m.flag
}

// benchConfigFlags registers on fs the training flags of benchTrainFlags,
// as train registers them (the same help and defaults), and returns the
// function that resolves the task flags after parsing.
func benchConfigFlags(fs *flag.FlagSet, cfg *config.Config) func() error {
	all := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	resolve := configFlags(all, cfg)
	for _, name := range benchTrainFlags {
		f := all.Lookup(name)
		fs.Var(f.Value, f.Name, f.Usage)
	}
	return func() error {
		// resolve reads which flags all was given; fs holds the same
		// values, so setting each again changes nothing but marks it given.
		var err error
		fs.Visit(func(f *flag.Flag) {
			if all.Lookup(f.Name) != nil && err == nil {
				err = all.Set(f.Name, f.Value.String())
			}
		})
		if err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		return resolve()
	}
}

// selectBenchMode returns the mode the flags given on fs select ("", "seq"
// or "generate") and refuses, naming them, flags that mode does not use.
func selectBenchMode(fs *flag.FlagSet) (string, error) {
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if given["seq"] && given["generate"] {
		return "", fmt.Errorf("%w: --seq and --generate are two benchmarks: give one", errUsage)
	}
	mode := 0
	for i, m := range benchModes {
		if m.flag != "" && given[m.flag] {
			mode = i
		}
	}
	var unused []string
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "n" || f.Name == "max-memory" || slices.Contains(benchModes[mode].uses, f.Name) {
			return
		}
		var where []string
		for _, m := range benchModes {
			if slices.Contains(m.uses, f.Name) {
				where = append(where, m.name())
			}
		}
		unused = append(unused, fmt.Sprintf("--%s (used by %s)", f.Name, strings.Join(where, " and ")))
	})
	if len(unused) > 0 {
		return "", fmt.Errorf("%w: qkv bench (%s) does not use %s: it times %s", errUsage, benchModes[mode].name(), strings.Join(unused, ", "), benchModes[mode].what)
	}
	return benchModes[mode].flag, nil
}

func runBench(args []string, stdout, stderr io.Writer) error {
	cfg, err := startConfig(args)
	if err != nil {
		return err
	}
	fs := newFlags("bench", "[flags]", stderr)
	resolveTask := benchConfigFlags(fs, &cfg)
	steps := fs.Int("n", 30, "timed training steps (after 3 untimed), or with --seq and --generate timed repeats (after 1), at least 1")
	torch := fs.String("torch", "", "also time the same model and step in PyTorch with this python (e.g. /usr/bin/python3)")
	seq := fs.String("seq", "", "time one attention layer (forward and backward) instead of a training step, at these sequence lengths, e.g. 512 or 128,256,512 (each in a process of its own); --attention may list several implementations, e.g. composed,fused,flash, and linear (linear attention with --feature-map, --feature-dim, --linear-norm, --linear-chunk; the window and sparse patterns apply to the softmax ones)")
	headDim := fs.Int("head-dim", 32, "with --seq: d_k, the width of each head")
	causal := fs.Bool("causal", true, "with --seq: causal attention")
	plotFile := fs.String("plot", "", "with --seq: write a log-log PNG of time and peak memory against the sequence length")
	profile := fs.String("profile", "", "write a CPU profile of the timed steps to this file (go tool pprof reads it)")
	memprofile := fs.String("memprofile", "", "write a profile of every allocation of the timed steps to this file (go tool pprof -sample_index=alloc_objects); it records each one, so the steps run slower")
	hugePages := fs.Bool("huge-pages", true, "move the heap onto 2 MiB pages after the untimed steps, as qkv train does on Linux (false: time the steps on the pages the runtime got)")
	generate := fs.String("generate", "", "time generating one token at these positions, e.g. 32,128,512, with the key/value cache and without (the model of --dim --heads --layers --hidden, random weights)")
	mem := registerMemory(fs)
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if err := cmp.Or(checkOutput("plot", *plotFile, ".png"), checkOutput("profile", *profile, ""), checkOutput("memprofile", *memprofile, "")); err != nil {
		return err
	}
	if *steps < 1 {
		return fmt.Errorf("%w: -n: must be at least 1, got %d", errUsage, *steps)
	}
	mode, err := selectBenchMode(fs)
	if err != nil {
		return err
	}
	switch mode {
	case "generate":
		positions, err := parseInts("generate", *generate)
		if err != nil {
			return err
		}
		if err := cfg.Validate(); err != nil {
			return configError(err, cfg)
		}
		for _, p := range positions {
			c := genConfig(cfg, p)
			est, err := config.EstimateMemory(c, 1, p+1, false)
			if err != nil {
				return configError(err, c)
			}
			if err := mem.check(est, c, "lower --generate, --dim, --hidden or --layers, or raise --max-memory"); err != nil {
				return err
			}
		}
		defer mem.apply()()
		return runGenBench(cfg, positions, *steps, stdout)
	case "seq":
		b := attnBench{batch: cfg.Batch, heads: cfg.Model.Heads, headDim: *headDim, causal: *causal, window: cfg.Model.Window, dtype: cfg.DType, repeats: *steps, plot: *plotFile, mem: mem}
		b.global, b.blockLocal = cfg.Model.GlobalTokens, cfg.Model.BlockLocal // the model's flags, read by this mode
		b.linear = cfg.Model.LinearOptions
		var err error
		if b.seqs, err = parseInts("seq", *seq); err != nil {
			return err
		}
		for _, name := range strings.Split(cmp.Or(string(cfg.Model.Attention), string(layers.AttentionFused)), ",") {
			impl, err := parseAttnImpl(strings.TrimSpace(name))
			if err != nil {
				return fmt.Errorf("%w: --attention: %v", errUsage, err)
			}
			b.impls = append(b.impls, impl)
		}
		for _, f := range []struct {
			name string
			v    int
		}{{"batch", b.batch}, {"heads", b.heads}, {"head-dim", b.headDim}} {
			if f.v < 1 {
				return fmt.Errorf("%w: --%s: must be at least 1, got %d", errUsage, f.name, f.v)
			}
		}
		// The layer's width is --heads x --head-dim, not --dim; the rest of
		// the configuration (--dtype) is checked as train checks it.
		c := cfg
		c.Model.Dim, c.Model.Attention = b.heads*b.headDim, ""
		if err := c.Validate(); err != nil {
			return configError(err, c)
		}
		defer mem.apply()()
		return runAttnBench(b, stdout, stderr)
	}
	if err := resolveTask(); err != nil {
		return err
	}
	task, err := mem.resolve(&cfg, func(c config.Config) (config.MemoryEstimate, error) {
		return config.EstimateMemory(c, c.Batch, c.Model.MaxLen, true)
	})
	if err != nil {
		return err
	}
	defer mem.apply()()
	restore, err := model.UseMatmul(cfg.Matmul)
	if err != nil {
		return configError(err, cfg)
	}
	defer restore()
	m, err := model.Build(cfg, cfg.Batch, task.MaxLen()-1, model.Options{Train: true})
	if err != nil {
		return configError(err, cfg) // a *config.MemoryError: exit 2 naming the sizes
	}
	defer m.Close()
	oc, err := config.OptimizerFor(cfg)
	if err != nil {
		return err
	}
	opt, err := optim.New(oc, m.Params)
	if err != nil {
		return err
	}
	stream, err := data.NewStream(task, cfg.Seed, cfg.TestSize)
	if err != nil {
		return err
	}
	n := 0
	step := func() error { // the training step of qkv train, at the peak rate
		examples, err := stream.Draw(cfg.Batch)
		if err != nil {
			return err
		}
		batch, err := m.BatchFor(task, examples)
		if err != nil {
			return err
		}
		_, err = m.Step(batch, opt, model.StepOptions{LR: cfg.LR, Clip: cfg.ClipNorm, Step: n})
		n++
		return err
	}
	for i := 0; i < 3; i++ {
		if err := step(); err != nil {
			return err
		}
	}
	// As qkv train does after its first step (train.Options.HugePages).
	var huge int64
	var hugeErr error
	hugeStart := time.Now()
	if *hugePages {
		huge, hugeErr = hugepage.Collapse()
	}
	hugeTime := time.Since(hugeStart)
	var prof *fsx.Pending // written to a temporary file, in place only once complete
	if *profile != "" {
		if prof, err = fsx.Create(*profile, ""); err != nil {
			return outputErr("profile", err)
		}
		defer prof.Abort() // does nothing once committed
		if err := pprof.StartCPUProfile(prof); err != nil {
			return fmt.Errorf("--profile: %w", err)
		}
		defer pprof.StopCPUProfile() // on an early return; a second call does nothing
	}
	var memprof *fsx.Pending
	if *memprofile != "" {
		if memprof, err = fsx.Create(*memprofile, ""); err != nil {
			return outputErr("memprofile", err)
		}
		defer memprof.Abort() // does nothing once committed
		defer func(rate int) { runtime.MemProfileRate = rate }(runtime.MemProfileRate)
		runtime.MemProfileRate = 1 // from here on, every allocation
	}
	var before, after runtime.MemStats
	gcBefore := readGC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	for i := 0; i < *steps; i++ {
		if err := step(); err != nil {
			return err
		}
	}
	elapsed := time.Since(start)
	if prof != nil {
		pprof.StopCPUProfile()
		if err := prof.Commit(); err != nil {
			return fmt.Errorf("--profile: %w", err)
		}
	}
	runtime.ReadMemStats(&after)
	if memprof != nil {
		runtime.GC() // the profile holds what the last collection saw
		if err := cmp.Or(pprof.Lookup("allocs").WriteTo(memprof, 0), memprof.Commit()); err != nil {
			return fmt.Errorf("--memprofile: %w", err)
		}
	}
	gc := readGC().since(gcBefore)
	per := max(elapsed/time.Duration(*steps), time.Nanosecond)
	fmt.Fprintf(stdout, "%s %s, %s, B=%d S=%d D=%d H=%d L=%d FF=%d, %d params\n",
		cfg.Task.Name, cfg.Task.Params, cfg.DType, cfg.Batch, m.S, cfg.Model.Dim, cfg.Model.Heads, cfg.Model.Layers, cfg.Model.Hidden, m.NumParams())
	products := gemm.Kernels()
	if cfg.Matmul == config.MatmulBF16 {
		products += ", Linear layers' in bf16 on AMX (--matmul bf16)"
	}
	fmt.Fprintf(stdout, "kernels: GEMM %s, elementwise %s; GOMAXPROCS %d\n", products, vec.Kernels(), runtime.GOMAXPROCS(0))
	ms := float64(per.Microseconds()) / 1000
	fmt.Fprintf(stdout, "qkv (gorgonia):      %7.1f ms/step, %6.0f tokens/s, %d allocations/step, GC %.1f%% of the time (%.0f cycles; background marking %.1f%% more, on spare CPU)\n",
		ms, float64(cfg.Batch*m.S)/per.Seconds(), (after.Mallocs-before.Mallocs)/uint64(*steps),
		100*gc.held/elapsed.Seconds(), gc.cycles, 100*gc.background/elapsed.Seconds())
	reportFLOPs(stdout, stepFLOPs(m.Params, cfg, m.S), per, cfg.DType)
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		fmt.Fprintf(stdout, "memory:              peak RSS %s (the whole process: weights, optimizer, batch, the graph's buffers, the text)\n", config.FormatBytes(float64(ru.Maxrss*1024)))
	}
	switch {
	case !*hugePages:
		fmt.Fprintf(stdout, "huge pages:          not asked for (--huge-pages=false)\n")
	case hugeErr != nil:
		fmt.Fprintf(stdout, "huge pages:          none (%v)\n", hugeErr)
	default:
		fmt.Fprintf(stdout, "huge pages:          %s of the heap moved to 2 MiB pages in %.2f s after the untimed steps, as qkv train does\n", config.FormatBytes(float64(huge)), hugeTime.Seconds())
	}
	if *profile != "" {
		fmt.Fprintf(stdout, "CPU profile of the timed steps in %s (go tool pprof -top %s)\n", *profile, *profile)
	}
	if *memprofile != "" {
		fmt.Fprintf(stdout, "allocations of the timed steps in %s (go tool pprof -sample_index=alloc_objects -top %s)\n", *memprofile, *memprofile)
	}
	if *torch == "" {
		return nil
	}
	return benchTorch(stdout, *torch, cfg, *steps, ms)
}

// torchBench is what tools/torchref/torchref.py bench prints.
type torchBench struct {
	Torch string `json:"torch"`
	BLAS  string `json:"blas"`
	// BLASCore is the OpenBLAS core the step ran on, and whether
	// torchref.py chose it because OpenBLAS would have taken a core
	// without AVX2 on this CPU; "" when it is not OpenBLAS.
	BLASCore string `json:"blas_core"`
	Results  []struct {
		Threads   int     `json:"threads"`
		MsPerStep float64 `json:"ms_per_step"`
		// Skipped says why a thread count was not timed: the machine
		// had no idle core for its extra threads (torchref.py's rule).
		Skipped string `json:"skipped"`
		// Attention names PyTorch's own attention call when the step ran
		// it (_scaled_dot_product_attention) instead of the reference's
		// explicit softmax(QK^T/sqrt(dk)) V; "" for the latter.
		Attention string `json:"attention"`
	} `json:"results"`
}

// benchTorch times the same configuration's training step (forward,
// weighted cross-entropy, backward, clipping, AdamW) in PyTorch, through the
// reference implementation in tools/torchref, and prints it beside qkv's.
func benchTorch(stdout io.Writer, python string, cfg config.Config, steps int, qkvMs float64) error {
	b, err := config.Marshal(cfg)
	if err != nil {
		return err
	}
	f, err := os.CreateTemp("", "qkv-bench-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	// The script travels in the binary: the command runs from any directory.
	sf, err := os.CreateTemp("", "torchref-*.py")
	if err != nil {
		return err
	}
	script := sf.Name()
	defer os.Remove(script)
	if _, err := sf.Write(torchref.Script); err != nil {
		sf.Close()
		return fmt.Errorf("--torch: %w", err)
	}
	if err := sf.Close(); err != nil {
		return fmt.Errorf("--torch: %w", err)
	}
	var out, errOut bytes.Buffer
	cmd := exec.Command(python, script, "bench", "--config", f.Name(), "--steps", strconv.Itoa(steps))
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("--torch: %s: %v\n%s", python, err, errOut.String())
	}
	var res torchBench
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		return fmt.Errorf("--torch: reading torchref output: %w", err)
	}
	best := math.Inf(1)
	for _, r := range res.Results {
		if r.Skipped != "" {
			fmt.Fprintf(stdout, "PyTorch %s %d thread(s): not timed: %s\n", res.Torch, r.Threads, r.Skipped)
			continue
		}
		how := ""
		if r.Attention != "" {
			how = ", " + r.Attention
		}
		blas := res.BLAS
		if res.BLASCore != "" {
			blas += ", core " + res.BLASCore
		}
		fmt.Fprintf(stdout, "PyTorch %s %d thread(s)%s: %7.1f ms/step (BLAS %s)\n", res.Torch, r.Threads, how, r.MsPerStep, blas)
		best = min(best, r.MsPerStep)
	}
	if best > 0 && !math.IsInf(best, 1) {
		fmt.Fprintf(stdout, "qkv / PyTorch's best: %.2fx the time\n", qkvMs/best)
	}
	return nil
}

// gcTimes is what the garbage collector has done so far: the seconds it
// held the program up (mark assists, which allocating goroutines do, and
// stop-the-world pauses), the seconds of background marking (its own
// workers: on a quarter of the Ps, and on any P that is otherwise idle),
// and the cycles it has run. The runtime measures these in wall time, so
// on a loaded machine, where its threads wait for a CPU, they grow.
type gcTimes struct {
	held, background, cycles float64
}

// readGC returns the garbage collector's times so far.
func readGC() gcTimes {
	s := []metrics.Sample{
		{Name: "/cpu/classes/gc/mark/assist:cpu-seconds"},
		{Name: "/cpu/classes/gc/pause:cpu-seconds"},
		{Name: "/cpu/classes/gc/mark/dedicated:cpu-seconds"},
		{Name: "/cpu/classes/gc/mark/idle:cpu-seconds"},
		{Name: "/gc/cycles/total:gc-cycles"},
	}
	metrics.Read(s)
	v := make([]float64, len(s))
	for i, x := range s {
		switch x.Value.Kind() {
		case metrics.KindFloat64:
			v[i] = x.Value.Float64()
		case metrics.KindUint64:
			v[i] = float64(x.Value.Uint64())
		}
	}
	return gcTimes{held: v[0] + v[1], background: v[2] + v[3], cycles: v[4]}
}

// since returns the collector's work from t to g.
func (g gcTimes) since(t gcTimes) gcTimes {
	return gcTimes{held: g.held - t.held, background: g.background - t.background, cycles: g.cycles - t.cycles}
}
