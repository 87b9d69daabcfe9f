package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/term"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/train"
	"github.com/qkv-dev/qkv/train/checkpoint"
	"github.com/qkv-dev/qkv/train/config"
)

// taskFlags are the task parameters as flags; 0 keeps the task's default.
type taskFlags struct {
	name string
	cfg  data.TaskConfig
}

func (tf *taskFlags) register(fs *flag.FlagSet, def string) {
	fs.StringVar(&tf.name, "task", def, "task: one of "+fmt.Sprint(data.Names()))
	fs.IntVar(&tf.cfg.Length, "length", 0, "sequence length (copy, reverse, sort); 0, as every task flag, keeps the task's default")
	fs.IntVar(&tf.cfg.MinLength, "min-length", 0, "shortest sequence, for variable lengths (alone, the longest keeps the task's default)")
	fs.IntVar(&tf.cfg.MaxLength, "max-length", 0, "longest sequence, for variable lengths (alone, the shortest keeps the task's default)")
	fs.IntVar(&tf.cfg.Alphabet, "alphabet", 0, "number of distinct symbols (copy, reverse, sort)")
	fs.IntVar(&tf.cfg.Digits, "digits", 0, "digits per operand (add)")
	fs.IntVar(&tf.cfg.Pairs, "pairs", 0, "key-value pairs (recall)")
	fs.IntVar(&tf.cfg.MinPairs, "min-pairs", 0, "fewest pairs (recall; alone, the most keeps the default)")
	fs.IntVar(&tf.cfg.MaxPairs, "max-pairs", 0, "most pairs (recall; alone, the fewest keeps the default)")
	fs.IntVar(&tf.cfg.Keys, "keys", 0, "distinct keys (recall)")
	fs.IntVar(&tf.cfg.Values, "values", 0, "distinct values (recall)")
	fs.StringVar(&tf.cfg.Data, "data", "", "text of chars: a file, a directory (its files, sorted), a glob, or go:PACKAGE for a standard-library package's non-test source (default "+data.DefaultCorpus+")")
	fs.IntVar(&tf.cfg.Context, "context", 0, "characters the model reads to predict the next (chars; nanoGPT's block_size, default 64)")
	fs.Float64Var(&tf.cfg.ValFraction, "val-fraction", 0, "share of the text, at its end, held out for the validation loss (chars; default 0.1)")
	fs.IntVar(&tf.cfg.Queries, "queries", 0, "keys asked back after the pairs (recall): -1 every key in a random order, the default; 1 one key, the single-query framing; n from 2, n distinct keys")
}

// resolve returns the task's default parameters overridden by the flags
// given. Giving a fixed length (pairs) replaces a default range, and the other
// way round; one end of a range given alone keeps the default's other end
// (a fixed default n is the range n to n), so `--task copy --min-length 5`
// is 5 to 8. A task flag given as 0 keeps the default, as --help says.
func (tf *taskFlags) resolve(fs *flag.FlagSet) data.TaskConfig {
	cfg := data.DefaultConfig(tf.name)
	visitSet(fs, func(f *flag.Flag) {
		switch f.Name {
		case "length", "min-length", "max-length":
			setRange(f.Name, "length", &cfg.Length, &cfg.MinLength, &cfg.MaxLength, tf.cfg.Length, tf.cfg.MinLength, tf.cfg.MaxLength)
		case "alphabet":
			cfg.Alphabet = tf.cfg.Alphabet
		case "digits":
			cfg.Digits = tf.cfg.Digits
		case "pairs", "min-pairs", "max-pairs":
			setRange(f.Name, "pairs", &cfg.Pairs, &cfg.MinPairs, &cfg.MaxPairs, tf.cfg.Pairs, tf.cfg.MinPairs, tf.cfg.MaxPairs)
		case "keys":
			cfg.Keys = tf.cfg.Keys
		case "values":
			cfg.Values = tf.cfg.Values
		case "queries":
			cfg.Queries = cmp.Or(tf.cfg.Queries, cfg.Queries)
		case "data":
			cfg.Data = tf.cfg.Data
		case "context":
			cfg.Context = tf.cfg.Context
		case "val-fraction":
			cfg.ValFraction = tf.cfg.ValFraction
		}
	})
	return cfg
}

// setRange applies the flag name, base ("length", "pairs"), "min-"+base or
// "max-"+base, to the task's fixed n or range lo to hi, the flags' values
// being flagN, flagLo and flagHi: a fixed value replaces the range, one end
// of the range replaces the fixed value and keeps the other end (a fixed n
// counting as the range n to n).
func setRange(name, base string, n, lo, hi *int, flagN, flagLo, flagHi int) {
	switch name {
	case base:
		*n, *lo, *hi = flagN, 0, 0
	case "min-" + base:
		*n, *lo, *hi = 0, flagLo, cmp.Or(*hi, *n)
	case "max-" + base:
		*n, *lo, *hi = 0, cmp.Or(*lo, *n), flagHi
	}
}

// kindFlag is the flag.Value of a string kind (layers.Activation,
// layers.PositionsKind). It stores what it is given: an unknown name is
// refused by the configuration's Validate, which names the flag, as for every
// other flag.
type kindFlag[T ~string] struct{ p *T }

// String returns the current value ("" for the zero kindFlag the flag
// package makes to find defaults).
func (f kindFlag[T]) String() string {
	if f.p == nil {
		return ""
	}
	return string(*f.p)
}

// Set stores s.
func (f kindFlag[T]) Set(s string) error {
	*f.p = T(s)
	return nil
}

// configFlags registers every training flag on fs, defaulting to cfg, and
// returns a function that resolves the task flags into cfg after parsing,
// refusing a fixed length (pairs) given with a range.
func configFlags(fs *flag.FlagSet, cfg *config.Config) func() error {
	var tf taskFlags
	tf.register(fs, cfg.Task.Name)
	fs.String("preset", "", "start from a named configuration, which the other flags then change: "+strings.Join(config.Presets(), ", ")+" (nanoGPT's shakespeare_char on a CPU, on --task chars; --task chars alone starts from it too)")
	registerSchema(fs, cfg) // the model's and the run's fields, by their tags
	return func() error {
		if err := taskConflicts(fs); err != nil {
			return err
		}
		cfg.Task = config.TaskSpec{Name: tf.name, Params: tf.resolve(fs)}
		// A resumed run's task is the checkpoint's, which resumeConfig
		// compares the task flags with; the defaults' task is not it.
		if !flagGiven(fs, "resume") {
			if err := checkTaskFlags(fs, *cfg); err != nil {
				return err
			}
		}
		if !flagGiven(fs, "warmup") {
			cfg.Warmup = defaultWarmup(cfg.Warmup, cfg.Steps)
		}
		return nil
	}
}

// defaultWarmup is the warm-up of a run whose --warmup is not given: the
// configured default (50) but at most a tenth of the steps, so that
// `qkv train --steps 8` runs (with no warm-up) instead of refusing a
// warm-up longer than the run. From 500 steps on it is the default itself.
// A non-positive steps is left for validation to name.
func defaultWarmup(def, steps int) int {
	return min(def, max(steps, 0)/10)
}

// flagGiven reports whether the flag name was set on the command line.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}

func runTrain(args []string, stdout, stderr io.Writer) error {
	cfg, err := startConfig(args)
	if err != nil {
		return err
	}
	fs := newFlags("train", "[flags]", stderr)
	resolveTask := configFlags(fs, &cfg)
	fs.Lookup("warmup").DefValue = fmt.Sprintf("min(%d, steps/10)", cfg.Warmup) // as --help shows it
	out := fs.String("out", "", "run directory for checkpoint, metrics and plots (default runs/<task>)")
	resume := fs.String("resume", "", "continue the run in this directory from its checkpoint: its config.json gives model, task, data and optimizer, and those flags, if given, must equal it; --steps, --eval-every, --checkpoint-every, --target-exact, --attention and --matmul may change. A run that already reached its --steps or --target-exact is left as it is (exit 0, saying so): give a larger --steps, or a --target-exact it has not reached (0: none), to train further")
	force := fs.Bool("force", false, "start afresh even if the run directory holds a checkpoint: the old directory is renamed to DIR.old-N, never deleted")
	mem := registerMemory(fs)
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if *force && *resume != "" {
		return fmt.Errorf("%w: --force starts afresh and --resume continues: give one", errUsage)
	}
	if err := resolveTask(); err != nil {
		return err
	}
	defer mem.apply()()
	opts := train.Options{Progress: stderr, Bar: isTerminal(stderr), Force: *force, Curves: drawCurves, HugePages: true}
	startStep := 0
	switch {
	case *resume != "":
		if *out != "" && *out != *resume {
			return fmt.Errorf("%w: --out and --resume name different directories", errUsage)
		}
		var err error
		if cfg, startStep, err = resumeConfig(*resume, fs, mem); err != nil {
			return err
		}
		opts.Out, opts.Resume = *resume, true
	case *out != "":
		opts.Out = *out
	default:
		opts.Out = filepath.Join("runs", cfg.Task.Name)
	}
	if _, err := mem.resolve(&cfg, config.EstimateRun); err != nil {
		return err
	}
	if opts.Resume {
		if done := finished(opts.Out, startStep, cfg); done != "" {
			fmt.Fprintln(stdout, done)
			return nil
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	sum, err := train.Run(ctx, cfg, opts)
	switch {
	case errors.Is(err, train.ErrInterrupted):
		fmt.Fprintf(stderr, "resume with: qkv train --resume %s\n", opts.Out)
	case errors.Is(err, train.ErrRunExists):
		dir := "run directory " + opts.Out
		if *out != "" {
			dir = "--out " + opts.Out
		}
		aside := fmt.Sprintf("start afresh with --force (which moves it to %s.old-N)", filepath.Clean(opts.Out))
		if !checkpoint.Exists(opts.Out) { // nothing to resume
			return fmt.Errorf("%w: %s holds %s: %s", errUsage, dir, train.EarlierRun(opts.Out), aside)
		}
		return fmt.Errorf("%w: %s holds a checkpoint of an earlier run: continue it with --resume %s, or %s", errUsage, dir, opts.Out, aside)
	}
	if err != nil {
		return configError(err, cfg) // a *config.MemoryError of model.Build: exit 2 naming the sizes
	}
	// This process's steps and seconds, and the run's in all when resumed:
	// MsPerStep is of this process's steps.
	n := sum.Steps - startStep
	fmt.Fprintf(stdout, "task %s (%s): %s in %.1f s (%.1f ms/step; %.1f s of it evaluating), %d params",
		sum.Task.Name, sum.Task.Params, plural(n, "step"), float64(n)*sum.MsPerStep/1000, sum.MsPerStep, sum.EvalSeconds, sum.Params)
	if startStep > 0 {
		fmt.Fprintf(stdout, "; resumed at step %d, the run has %d steps in %.1f s in all", startStep, sum.Steps, sum.WallSeconds)
	}
	fmt.Fprintf(stdout, "\n%s\n", stopReason(sum))
	if sum.ValLoss != 0 {
		fmt.Fprintf(stdout, "validation loss %.4f nats per character (%.4f bits), next-character accuracy %.3f\n", sum.ValLoss, sum.ValBPC, sum.TokenAccuracy)
	} else {
		fmt.Fprintf(stdout, "held-out exact match %.3f, token accuracy %.3f\n", sum.ExactMatch, sum.TokenAccuracy)
	}
	fmt.Fprintf(stdout, "run directory %s (%s naming the checkpoint folder, %s, %s, %s)\n",
		opts.Out, checkpoint.ManifestFile, train.MetricsFile, train.SummaryFile, train.CurvesFile)
	return nil
}

// stopReason says why a finished run stopped where it did, naming the
// flag: progress counts steps against --steps, which a target may end early.
func stopReason(sum train.Summary) string {
	if sum.StoppedEarly {
		return fmt.Sprintf("stopped at step %d: held-out exact match %.3f reached --target-exact %g (before --steps %d)", sum.Steps, sum.ExactMatch, sum.Config.TargetExact, sum.Config.Steps)
	}
	s := fmt.Sprintf("stopped at step %d: reached --steps %d", sum.Steps, sum.Config.Steps)
	if sum.Config.TargetExact > 0 {
		s += fmt.Sprintf(" (held-out exact match %.3f, below --target-exact %g)", sum.ExactMatch, sum.Config.TargetExact)
	}
	return s
}

// finished says why the run in dir, whose checkpoint is at step, has
// nothing left to do when resumed with cfg, or returns "" if it has: it is
// at cfg.Steps, or its summary.json shows held-out exact match at step
// reaching cfg.TargetExact, where the loop would stop again at its next
// evaluation after training that many steps more.
func finished(dir string, step int, cfg config.Config) string {
	const more = "nothing to do; to train further give a larger --steps"
	if step >= cfg.Steps {
		return fmt.Sprintf("run in %s already finished at step %d (reached --steps %d): %s", dir, step, cfg.Steps, more)
	}
	var sum train.Summary
	b, err := os.ReadFile(filepath.Join(dir, train.SummaryFile))
	if err != nil || json.Unmarshal(b, &sum) != nil || sum.Steps != step { // a run stopped before its summary
		return ""
	}
	if cfg.TargetExact > 0 && sum.ExactMatch >= cfg.TargetExact {
		higher := "" // no target above 1 exists
		if sum.ExactMatch < 1 {
			higher = fmt.Sprintf(" (or one above %.3f)", sum.ExactMatch)
		}
		return fmt.Sprintf("run in %s already finished at step %d: held-out exact match %.3f reached --target-exact %g: %s and --target-exact 0%s",
			dir, step, sum.ExactMatch, cfg.TargetExact, more, higher)
	}
	return ""
}

// isTerminal reports whether w is a terminal, where a progress bar redraws
// in place; elsewhere plain lines are easier to read.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}
