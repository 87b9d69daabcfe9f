package train

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/gofrs/flock"
	"github.com/schollz/progressbar/v3"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/internal/fsx"
	"github.com/qkv-dev/qkv/internal/hugepage"
	"github.com/qkv-dev/qkv/train/checkpoint"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/infer"
	"github.com/qkv-dev/qkv/train/model"
	"github.com/qkv-dev/qkv/train/optim"
)

// ErrInterrupted is returned by Run when its context was cancelled (SIGINT or
// SIGTERM in the CLI) after it saved a checkpoint.
var ErrInterrupted = errors.New("train: interrupted")

// Files of a run directory besides the checkpoint's own.
const (
	MetricsFile = "metrics.jsonl"
	SummaryFile = "summary.json"
	CurvesFile  = "curves.png"
)

// Metric is one line of metrics.jsonl.
type Metric struct {
	Step         int               `json:"step"`
	Loss         float64           `json:"loss"`
	LR           float64           `json:"lr"`
	GradNorm     float64           `json:"grad_norm"`
	TokensPerSec float64           `json:"tokens_per_s"`
	Eval         *infer.EvalResult `json:"eval,omitempty"`
}

// Summary is summary.json: what a run did and how well it ended.
type Summary struct {
	Task          config.TaskSpec `json:"task"`
	Steps         int             `json:"steps"`
	WallSeconds   float64         `json:"wall_seconds"`
	Params        int             `json:"params"`
	ExactMatch    float64         `json:"exact_match"`
	TokenAccuracy float64         `json:"token_accuracy"`
	// ValLoss and ValBPC are a language model's loss on the validation
	// text at the last step, in nats and bits per character; absent for
	// the other tasks.
	ValLoss      float64 `json:"val_loss,omitempty"`
	ValBPC       float64 `json:"val_bpc,omitempty"`
	StoppedEarly bool    `json:"stopped_early"`
	// MsPerStep is this process's wall time per step, evaluations
	// included; EvalSeconds is the part of it spent evaluating, so that
	// the training steps alone can be compared with another framework's.
	MsPerStep   float64       `json:"ms_per_step"`
	EvalSeconds float64       `json:"eval_seconds"`
	Config      config.Config `json:"config"`
}

// Options says where a run writes and how it reports.
type Options struct {
	// Out is the run directory: checkpoint, metrics, summary and plots.
	Out string
	// Resume continues the checkpoint in Out instead of starting afresh.
	Resume bool
	// Force lets a fresh run start in an Out that holds a checkpoint: the
	// old run directory is renamed to Out.old-N first, never deleted.
	// Without it such a run is refused with ErrRunExists.
	Force bool
	// Progress receives progress; nil discards it.
	Progress io.Writer
	// Bar draws a progress bar (for terminals) instead of plain lines.
	Bar bool
	// StopAfter, if > 0, ends the run after that step as an interrupt would:
	// checkpoint saved, ErrInterrupted returned. Tests use it to split a run.
	StopAfter int
	// Curves, if set, draws the run's curves into path (CurvesFile in Out)
	// when the run ends, after summary.json is written and while Run still
	// holds the directory's lock; its error fails the run. history is
	// every step's Metric, a resumed run's earlier steps included. The
	// command line draws them with internal/plot; train draws nothing, so
	// that it does not depend on the plotting libraries.
	Curves func(path string, sum Summary, history []Metric) error
	// HugePages asks Linux, after the first step, to back the process's
	// heap with 2 MiB pages (internal/hugepage), when at least
	// hugePagesMinSteps steps remain: the step's memory-bound ops and the
	// products' first reads of their operands then miss the TLB less. It
	// changes no result, but it acts on the whole process's memory, so it
	// is the caller's choice: the command line sets it.
	HugePages bool
}

// hugePagesMinSteps is the fewest remaining steps for which Options.HugePages
// collapses the heap: moving the nanoGPT preset's 94 MiB took 0.2–0.3 s
// here (qkv bench prints it) and saved about 1 ms a step (46.5 against
// 45.7 ms at GOMAXPROCS=1, medians of 4 alternating runs), so shorter runs
// would lose time.
const hugePagesMinSteps = 200

// runState is state.json: what besides weights and optimizer moments a
// resumed run needs to continue bit for bit.
type runState struct {
	Step        int             `json:"step"`
	Stream      json.RawMessage `json:"stream"`
	WallSeconds float64         `json:"wall_seconds"`
}

// trainer holds one run's pieces.
type trainer struct {
	cfg    config.Config
	opt    Options
	task   data.Task
	stream *data.Stream
	// model is the model trained, eval the forward-only one evaluated,
	// given model's parameters before each evaluation.
	model *model.Model
	eval  *model.Model
	optim *optim.Optimizer
	sched optim.Schedule
	step  int
	// saved is the step of the last complete checkpoint in Out, -1 if none.
	saved int
	wall  float64 // seconds spent before this process, from a resumed run
	lock  *flock.Flock
	// metrics is metrics.jsonl, synced before each checkpoint so that it
	// always reaches the checkpoint's step.
	metrics *os.File
	log     io.Writer
	// history is every step's metrics so far, for Options.Curves.
	history []Metric
}

// Run trains cfg's model on cfg's task, writing everything to opt.Out, and
// returns the summary. It stops at cfg.Steps, at the target exact match, on
// a non-finite loss or gradient (with an error naming the step and the last
// complete checkpoint, if any), or when ctx is cancelled (after saving a
// checkpoint, returning ErrInterrupted).
//
// Run locks opt.Out for as long as it runs: a second Run on the same
// directory, in this process or another, fails at once with ErrLocked. A
// fresh run into a directory holding a checkpoint fails with ErrRunExists
// unless opt.Force.
func Run(ctx context.Context, cfg config.Config, opt Options) (Summary, error) {
	if ctx == nil {
		return Summary{}, errors.New("train: nil context")
	}
	// Before the run directory is claimed: a CPU without AMX refuses
	// bf16 with nothing written. Validation refuses a bad value after.
	restore, err := model.UseMatmul(cfg.Matmul)
	if err != nil {
		return Summary{}, err
	}
	defer restore()
	t, err := newTrainer(cfg, opt)
	if err != nil {
		return Summary{}, err
	}
	defer t.close()
	return t.run(ctx)
}

// close releases the trainer's machines and the run directory's lock.
func (t *trainer) close() {
	if t.model != nil {
		t.model.Close()
	}
	if t.eval != nil {
		t.eval.Close()
	}
	if t.lock != nil {
		t.lock.Unlock()
	}
}

func newTrainer(cfg config.Config, opt Options) (t *trainer, err error) {
	task, err := cfg.Resolve()
	if err != nil {
		return nil, err
	}
	if opt.Out == "" {
		return nil, errors.New("train: no output directory")
	}
	if opt.Resume && opt.Force {
		return nil, errors.New("train: Resume continues the run in Out and Force starts afresh: set one")
	}
	t = &trainer{cfg: cfg, opt: opt, task: task, log: opt.Progress, saved: -1}
	if t.log == nil {
		t.log = io.Discard
	}
	made := t // t is nil once an error is returned
	defer func() {
		if err != nil {
			made.close()
		}
	}()
	// Both models together must fit before either is built.
	est, err := config.EstimateRun(cfg)
	if err != nil {
		return nil, err
	}
	if err := est.Check(0); err != nil {
		return nil, err
	}
	if err := t.claimOut(); err != nil {
		return nil, err
	}
	if t.stream, err = data.NewStream(task, cfg.Seed, cfg.TestSize); err != nil {
		return nil, err
	}
	s := task.MaxLen() - 1
	if err := t.build(s); err != nil {
		return nil, err
	}
	oc, err := config.OptimizerFor(cfg)
	if err != nil {
		return nil, err
	}
	if t.optim, err = optim.New(oc, t.model.Params); err != nil {
		return nil, err
	}
	t.sched = config.ScheduleFor(cfg)
	if err := t.sched.Validate(); err != nil {
		return nil, err
	}
	if opt.Resume {
		if err := t.restore(); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// build compiles the training and the evaluation model of the run's
// architecture, for sequences of s tokens.
func (t *trainer) build(s int) error {
	var err error
	if t.model, err = model.Build(t.cfg, t.cfg.Batch, s, model.Options{Train: true}); err != nil {
		return err
	}
	t.eval, err = model.Build(t.cfg, t.cfg.EvalBatch(), s, model.Options{})
	return err
}

// claimOut creates and locks the run directory, and makes sure a fresh run
// overwrites nothing of an earlier one (EarlierRun): it is refused, or with
// Force the old directory is moved aside.
func (t *trainer) claimOut() error {
	out := t.opt.Out
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("train: run directory %s: %w", out, err)
	}
	lock, err := lockRun(out)
	if err != nil {
		return err
	}
	t.lock = lock
	fsx.RemoveTemps(out, MetricsFile, SummaryFile, CurvesFile) // of a run killed while writing them
	held := EarlierRun(out)
	if t.opt.Resume || held == "" {
		return nil
	}
	if !t.opt.Force {
		return fmt.Errorf("train: %s holds %s: %w", out, held, ErrRunExists)
	}
	old, err := moveAside(out)
	if err != nil {
		return err
	}
	fmt.Fprintf(t.log, "moved the previous run in %s to %s\n", out, old)
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("train: run directory %s: %w", out, err)
	}
	if t.lock, err = lockRun(out); err != nil {
		return err
	}
	lock.Unlock() // the old directory's lock, held until the new one was
	return nil
}

// EarlierRun says what of an earlier run the directory dir holds: "a
// checkpoint" (see checkpoint.Exists), else the metrics, summary or curves
// of a run that saved no checkpoint (killed before its first), else "".
// A fresh run refuses to start over either: they are the user's results.
func EarlierRun(dir string) string {
	if checkpoint.Exists(dir) {
		return "a checkpoint"
	}
	for _, name := range []string{MetricsFile, SummaryFile, CurvesFile} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return name + " of a run that saved no checkpoint"
		}
	}
	return ""
}

// lastCheckpoint says where training can be resumed from, for errors.
func (t *trainer) lastCheckpoint() string {
	if t.saved < 0 {
		return "no checkpoint was saved in " + t.opt.Out
	}
	return fmt.Sprintf("the last complete checkpoint, step %d, is in %s", t.saved, t.opt.Out)
}

func (t *trainer) run(ctx context.Context) (_ Summary, err error) {
	metrics, err := t.openMetrics()
	if err != nil {
		return Summary{}, err
	}
	defer func() { // every line was synced; a failing close is still told
		if cerr := metrics.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("train: %s: %w", filepath.Join(t.opt.Out, MetricsFile), cerr)
		}
	}()
	t.metrics = metrics

	fmt.Fprintln(t.log, t.plan())
	bar := t.newBar()
	start := time.Now()
	wall := func() float64 { return t.wall + time.Since(start).Seconds() }
	startStep := t.step
	last := infer.EvalResult{}
	stoppedEarly := false
	evalSeconds := 0.0
	for t.step < t.cfg.Steps {
		if ctx.Err() != nil || (t.opt.StopAfter > 0 && t.step >= t.opt.StopAfter) {
			if err := t.save(wall()); err != nil {
				return Summary{}, err
			}
			fmt.Fprintf(t.log, "\ninterrupted at step %d; checkpoint saved in %s\n", t.step, t.opt.Out)
			return Summary{}, ErrInterrupted
		}
		stepStart := time.Now()
		m, err := t.trainStep()
		if err != nil {
			return Summary{}, err
		}
		t.step++
		m.Step = t.step
		m.TokensPerSec = float64(t.cfg.Batch*t.cfg.Model.MaxLen) / time.Since(stepStart).Seconds()
		if t.opt.HugePages && t.step == startStep+1 && t.cfg.Steps-t.step >= hugePagesMinSteps {
			// After the step's rate is taken; whether the kernel obliged
			// changes nothing but speed.
			_, _ = hugepage.Collapse()
		}
		if t.step%t.cfg.EvalEvery == 0 || t.step == t.cfg.Steps {
			evalStart := time.Now()
			if last, err = t.evaluate(); err != nil {
				return Summary{}, err
			}
			evalSeconds += time.Since(evalStart).Seconds()
			eval := last // history keeps every evaluation, not the latest
			m.Eval = &eval
			stoppedEarly = t.cfg.TargetExact > 0 && last.ExactMatch >= t.cfg.TargetExact
		}
		if err := t.writeMetric(m); err != nil {
			return Summary{}, err
		}
		t.history = append(t.history, m)
		t.report(bar, m)
		if t.step%t.cfg.CheckpointEvery == 0 || t.step == t.cfg.Steps || stoppedEarly {
			if err := t.save(wall()); err != nil {
				return Summary{}, err
			}
		}
		if stoppedEarly {
			break
		}
	}
	if bar != nil {
		bar.ChangeMax(t.step) // a run stopped at its target ends there, not at cfg.Steps
		bar.Finish()
		fmt.Fprintln(t.log)
	}
	if last.N == 0 { // resumed at the end: score the weights as they are
		if last, err = t.evaluate(); err != nil {
			return Summary{}, err
		}
	}
	elapsed := time.Since(start).Seconds()
	sum := Summary{
		Task: t.cfg.Task, Steps: t.step, WallSeconds: wall(), Params: t.model.NumParams(),
		ExactMatch: last.ExactMatch, TokenAccuracy: last.TokenAccuracy, StoppedEarly: stoppedEarly, Config: t.cfg,
		ValLoss: last.Loss, ValBPC: last.BPC, EvalSeconds: evalSeconds,
	}
	if n := t.step - startStep; n > 0 {
		sum.MsPerStep = 1000 * elapsed / float64(n)
	}
	return sum, t.finish(sum)
}

// trainStep runs one optimisation step on the next batch of the stream.
func (t *trainer) trainStep() (Metric, error) {
	examples, err := t.stream.Draw(t.cfg.Batch)
	if err != nil {
		return Metric{}, err
	}
	lr := t.sched.LR(t.step)
	batch, err := t.model.BatchFor(t.task, examples)
	if err != nil {
		return Metric{}, err
	}
	res, err := t.model.Step(batch, t.optim, model.StepOptions{LR: lr, Clip: t.cfg.ClipNorm, Step: t.step})
	if errors.Is(err, model.ErrNonFinite) {
		err = fmt.Errorf("train: step %d: %w; %s", t.step+1, err, t.lastCheckpoint())
	}
	return Metric{LR: lr, Loss: res.Loss, GradNorm: res.GradNorm}, err
}

func (t *trainer) evaluate() (infer.EvalResult, error) {
	if err := t.eval.SetParams(t.model.Params); err != nil {
		return infer.EvalResult{}, err
	}
	return infer.Evaluate(t.eval, t.task, t.stream.Test())
}

// save writes the checkpoint of the current step, unless it is the last one
// saved. A failed save names the checkpoint that is still complete.
func (t *trainer) save(wall float64) error {
	if t.step == t.saved {
		return nil
	}
	if t.metrics != nil {
		if err := t.metrics.Sync(); err != nil {
			return fmt.Errorf("train: saving step %d: %s: %w; %s", t.step, MetricsFile, err, t.lastCheckpoint())
		}
	}
	if err := t.writeCheckpoint(wall); err != nil {
		return fmt.Errorf("train: saving step %d: %w; %s", t.step, err, t.lastCheckpoint())
	}
	t.saved = t.step
	return nil
}

func (t *trainer) writeCheckpoint(wall float64) error {
	cfgJSON, err := config.Marshal(t.cfg)
	if err != nil {
		return err
	}
	stream, err := t.stream.State()
	if err != nil {
		return err
	}
	state, err := json.Marshal(runState{Step: t.step, Stream: stream, WallSeconds: wall})
	if err != nil {
		return err
	}
	weights, err := checkpoint.ParamTensors(t.model.Params)
	if err != nil {
		return err
	}
	return checkpoint.Save(t.opt.Out, &checkpoint.Checkpoint{
		Step: t.step, Config: cfgJSON, State: state, Weights: weights, Optimizer: t.optim.State(),
	})
}

// restore loads the checkpoint in Out into the freshly built trainer.
func (t *trainer) restore() error {
	ck, saved, err := config.LoadCheckpoint(t.opt.Out, nil)
	if err != nil {
		return err
	}
	if err := t.cfg.Continues(saved); err != nil {
		return fmt.Errorf("train: resume %s: %w", t.opt.Out, err)
	}
	var st runState
	if err := json.Unmarshal(ck.State, &st); err != nil {
		return fmt.Errorf("train: checkpoint %s: %s: %w", t.opt.Out, checkpoint.StateFile, err)
	}
	if st.Step != ck.Step {
		return fmt.Errorf("train: checkpoint %s: %s: the run state is at step %d, the checkpoint at step %d", t.opt.Out, checkpoint.StateFile, st.Step, ck.Step)
	}
	if err := checkpoint.LoadParams(t.model.Params, ck.Weights, checkpoint.File(t.opt.Out, checkpoint.ModelFile)); err != nil {
		return err
	}
	if err := t.optim.Restore(st.Step, ck.Optimizer); err != nil {
		return fmt.Errorf("train: checkpoint %s: optimizer: %w", t.opt.Out, err)
	}
	if err := t.stream.Restore(st.Stream); err != nil {
		return fmt.Errorf("train: checkpoint %s: data stream: %w", t.opt.Out, err)
	}
	t.step, t.wall, t.saved = st.Step, st.WallSeconds, st.Step
	return nil
}

// openMetrics opens metrics.jsonl for appending. A fresh run starts it
// empty. A resumed run keeps the lines up to its checkpoint's step, so that
// the file matches the weights: lines written after the checkpoint by a run
// that was then killed, and a line a kill cut short, are dropped. The kept
// lines are rewritten atomically and kept in t.history for the curves.
func (t *trainer) openMetrics() (*os.File, error) {
	path := filepath.Join(t.opt.Out, MetricsFile)
	if err := fsx.CheckOutput(path, ""); err != nil { // before reading it: a FIFO would block
		return nil, fmt.Errorf("train: %w", err)
	}
	if t.opt.Resume {
		if f, err := os.Open(path); err == nil {
			sc := bufio.NewScanner(f)
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				var m Metric
				if json.Unmarshal(sc.Bytes(), &m) == nil && m.Step > 0 && m.Step <= t.step {
					t.history = append(t.history, m)
				}
			}
			f.Close()
		}
	}
	err := fsx.WriteFile(path, "", func(w io.Writer) error {
		enc := json.NewEncoder(w)
		for _, m := range t.history {
			if err := enc.Encode(m); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("train: %w", err)
	}
	return f, nil
}

// writeMetric appends m to metrics.jsonl as one line in one write. A write
// that fails part way (a full disk) is cut off again, so that the file
// stays valid JSONL.
func (t *trainer) writeMetric(m Metric) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("train: %s: %w", MetricsFile, err)
	}
	end, err := t.metrics.Seek(0, io.SeekEnd)
	if err != nil {
		return fmt.Errorf("train: %s: %w", MetricsFile, err)
	}
	if _, err := t.metrics.Write(append(b, '\n')); err != nil {
		t.metrics.Truncate(end)
		return fmt.Errorf("train: %s: %w; %s", MetricsFile, err, t.lastCheckpoint())
	}
	return nil
}

func (t *trainer) newBar() *progressbar.ProgressBar {
	if !t.opt.Bar {
		return nil
	}
	bar := progressbar.NewOptions(t.cfg.Steps,
		progressbar.OptionSetWriter(t.log),
		progressbar.OptionSetDescription("train "+t.cfg.Task.Name),
		progressbar.OptionShowCount(),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetPredictTime(true),
	)
	_ = bar.Set(t.step)
	return bar
}

// plan says when the run will stop, so that the progress that follows,
// counted against cfg.Steps, is not taken for the run's length when a
// target may end it first.
func (t *trainer) plan() string {
	s := fmt.Sprintf("training %s", t.cfg.Task.Name)
	if t.step > 0 {
		s = fmt.Sprintf("resuming %s at step %d", t.cfg.Task.Name, t.step)
	}
	if t.cfg.TargetExact > 0 {
		s += fmt.Sprintf(" until held-out exact match reaches %.3f or step %d", t.cfg.TargetExact, t.cfg.Steps)
	} else {
		s += fmt.Sprintf(" until step %d", t.cfg.Steps)
	}
	if data.IsLanguageModel(t.task) {
		return s + fmt.Sprintf(", the validation loss on %d windows every %d steps", t.cfg.TestSize, t.cfg.EvalEvery)
	}
	return s + fmt.Sprintf(", evaluating every %d steps", t.cfg.EvalEvery)
}

// report shows progress: the bar's description carries the latest loss and
// eval; plain output prints a line per evaluation.
func (t *trainer) report(bar *progressbar.ProgressBar, m Metric) {
	line := fmt.Sprintf("step %d/%d loss %.4f lr %.2e", m.Step, t.cfg.Steps, m.Loss, m.LR)
	switch {
	case m.Eval != nil && m.Eval.Loss != 0:
		line += fmt.Sprintf(" | val loss %.4f (%.3f bits/char) next-char accuracy %.3f", m.Eval.Loss, m.Eval.BPC, m.Eval.TokenAccuracy)
	case m.Eval != nil:
		line += fmt.Sprintf(" | held-out exact %.3f token %.3f", m.Eval.ExactMatch, m.Eval.TokenAccuracy)
	}
	if bar != nil {
		bar.Describe(line)
		_ = bar.Set(m.Step)
		return
	}
	if m.Eval != nil {
		fmt.Fprintln(t.log, line)
	}
}

// finish writes summary.json and has Options.Curves draw the curves.
func (t *trainer) finish(sum Summary) error {
	b, err := json.MarshalIndent(sum, "", "  ")
	if err != nil {
		return err
	}
	err = fsx.WriteFile(filepath.Join(t.opt.Out, SummaryFile), "", func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
	if err != nil {
		return fmt.Errorf("train: %w", err)
	}
	if t.opt.Curves == nil {
		return nil
	}
	return t.opt.Curves(filepath.Join(t.opt.Out, CurvesFile), sum, t.history)
}
