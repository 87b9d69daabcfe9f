package main

import (
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/train"
	"github.com/qkv-dev/qkv/train/checkpoint"
	"github.com/qkv-dev/qkv/train/config"
)

// TestErrorsReadAsOneSentence: an error is "qkv CMD: " and one sentence
// naming the flag, argument or path at fault, without the usage mark or the
// library's prefixes stacked before it, and with a suggestion for a slip.
func TestErrorsReadAsOneSentence(t *testing.T) {
	dir := trainedRun(t) // sort, length 3
	cases := []validationCase{
		{args("trian"), 2, []string{`unknown command "trian" (did you mean train?)`}},
		{args("gradchek"), 2, []string{"(did you mean gradcheck?)"}},
		{args("train --trget-exact 1"), 2, []string{"-trget-exact (did you mean --target-exact?)"}},
		{args("train --task sort --digits 3"), 2, []string{"qkv train: --digits: ", "digits is not a parameter of sort"}},
		{args("train --steps many"), 2, []string{`qkv train: --steps: invalid value "many"`}},
		{[]string{"predict", "--checkpoint", dir, "2 5 1"}, 2, []string{`qkv predict: prompt "2 5 1" holds "5" at position 1, which is not a symbol of the task (0 1 2); a valid prompt of task sort looks like "`}},
		{[]string{"predict", "--checkpoint", dir, "2 0"}, 2, []string{`qkv predict: prompt "2 0" has 2 symbols, want 3;`}},
		{[]string{"predict", "--checkpoint", dir, "--", "2", "0", "-1"}, 2, []string{`qkv predict: prompt symbol "-1": no task has a symbol starting with '-'`}},
		{[]string{"attend", "--checkpoint", dir, "--input", "2 | 1"}, 2, []string{`qkv attend: prompt "2 | 1" holds "|" (id 1) at position 1, want one of the 3 symbols 0 1 2`}},
		{[]string{"train", "--task", "sort", "--length", "3", "--test-size", "8", "--out", dir}, 2, []string{"qkv train: --out " + dir + " holds a checkpoint of an earlier run: continue it with --resume " + dir}},
		{args("train --resume /nonexistent/run"), 2, []string{"qkv train: --resume /nonexistent/run: no such directory"}},
		{args("eval --checkpoint /nonexistent/run"), 2, []string{"qkv eval: --checkpoint /nonexistent/run: no such directory"}},
		{args("gradcheck --dim 1000"), 2, []string{"qkv gradcheck: --dim: "}},
		{[]string{"eval", "--checkpoint", dir, "--attention", "sparse"}, 2, []string{`qkv eval: --attention: unknown attention "sparse": want "composed", "fused" or "flash"`}},
	}
	for _, c := range cases {
		c.check(t)
		_, _, stderr := qkv(c.args...)
		last := stderr[strings.LastIndex(strings.TrimSuffix(stderr, "\n"), "\n")+1:]
		for _, bad := range []string{"usage:", ": data:", ": vocab:", ": layers:", "train: train:"} {
			if strings.Contains(last, bad) {
				t.Errorf("qkv %q: %q has %q", c.args, last, bad)
			}
		}
	}
}

// TestResumeTaskFlagsOfAnotherTask: on --resume the task flags are checked
// against the checkpoint's task, not against the default task (sort).
func TestResumeTaskFlagsOfAnotherTask(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	if code, _, stderr := qkv(append(args("train --task add --digits 1 --dim 16 --heads 2 --hidden 32 --layers 1 --batch 8 --steps 2 --warmup 0 --test-size 8 --out"), dir)...); code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	if code, out, stderr := qkv("train", "--resume", dir, "--digits", "1", "--steps", "4"); code != 0 || !strings.Contains(out, "2 steps in") {
		t.Errorf("resume of an add run with --digits 1: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	validationCase{[]string{"train", "--resume", dir, "--digits", "2"}, 2, []string{"--digits: the checkpoint in " + dir}}.check(t)
}

// TestPredictUnquotedPrompt: the arguments after predict's flags are the
// prompt, quoted as one or not.
func TestPredictUnquotedPrompt(t *testing.T) {
	dir := trainedRun(t)
	code, quoted, stderr := qkv("predict", "--checkpoint", dir, "2 0 1")
	if code != 0 {
		t.Fatalf("quoted prompt: exit %d: %s", code, stderr)
	}
	code, unquoted, stderr := qkv("predict", "--checkpoint", dir, "2", "0", "1")
	if code != 0 || unquoted != quoted {
		t.Errorf("unquoted prompt: exit %d, stdout %q, stderr %q; quoted gave %q", code, unquoted, stderr, quoted)
	}
}

// TestTaskFlagZeroIsDefault: --help says a task flag of 0 keeps the task's
// default; --length 0 must do so, and conflict with no range.
func TestTaskFlagZeroIsDefault(t *testing.T) {
	for _, a := range []string{"--length 0", "--task copy --length 0 --min-length 2 --max-length 5", "--alphabet 0 --length 0"} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		cfg := config.Default()
		resolve := configFlags(fs, &cfg)
		if err := fs.Parse(args(a)); err != nil {
			t.Fatal(err)
		}
		if err := resolve(); err != nil {
			t.Errorf("%s: %v", a, err)
			continue
		}
		want := data.DefaultConfig(cfg.Task.Name)
		if cfg.Task.Name == "copy" {
			want.MinLength, want.MaxLength = 2, 5
		}
		if cfg.Task.Params != want {
			t.Errorf("%s: task parameters %v, want %v", a, cfg.Task.Params, want)
		}
	}
	validationCase{args("train --length 0 --steps 0"), 2, []string{"--steps:"}}.check(t) // past the task flags
}

// TestStopReasonAndResumeFinished: train says when the run will stop and
// why it stopped; resuming a run that reached its --target-exact or its
// --steps trains nothing and says so; a resumed run's figures are this
// process's steps and time, and the run's totals beside them.
func TestStopReasonAndResumeFinished(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	code, out, stderr := qkv(append(args("train --task sort --length 3 --dim 16 --heads 2 --hidden 32 --layers 1 --batch 16 --steps 400 --warmup 2 --eval-every 10 --test-size 8 --lr 0.01 --target-exact 0.5 --out"), dir)...)
	if code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	ck, err := checkpoint.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	step := ck.Step
	if step >= 400 {
		t.Fatalf("the run did not reach its target early (step %d); the test needs one that does", step)
	}
	for _, w := range []string{"training sort until held-out exact match reaches 0.500 or step 400, evaluating every 10 steps"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("train's progress lacks %q:\n%s", w, stderr)
		}
	}
	if w := "stopped at step " + itoa(step) + ": held-out exact match"; !strings.Contains(out, w) || !strings.Contains(out, "reached --target-exact 0.5 (before --steps 400)") {
		t.Errorf("train's summary lacks why it stopped (%q):\n%s", w, out)
	}

	code, out, stderr = qkv("train", "--resume", dir)
	if code != 0 || !strings.Contains(out, "already finished at step "+itoa(step)+": held-out exact match") || !strings.Contains(out, "reached --target-exact 0.5: nothing to do") {
		t.Errorf("resume of a run at its target: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	if ck, err := checkpoint.Load(dir); err != nil || ck.Step != step {
		t.Errorf("resume of a run at its target trained on: checkpoint at step %d (%v), want %d", ck.Step, err, step)
	}

	total := step + 20
	code, out, stderr = qkv("train", "--resume", dir, "--target-exact", "0", "--steps", itoa(total))
	if code != 0 || !strings.Contains(out, ": 20 steps in ") || !strings.Contains(out, "resumed at step "+itoa(step)+", the run has "+itoa(total)+" steps in") ||
		!strings.Contains(out, "stopped at step "+itoa(total)+": reached --steps "+itoa(total)) || !strings.Contains(stderr, "resuming sort at step "+itoa(step)+" until step "+itoa(total)) {
		t.Errorf("resume with --steps %d: exit %d, stdout %q, stderr %q", total, code, out, stderr)
	}

	code, out, stderr = qkv("train", "--resume", dir)
	if code != 0 || !strings.Contains(out, "already finished at step "+itoa(total)+" (reached --steps "+itoa(total)+"): nothing to do; to train further give a larger --steps") {
		t.Errorf("resume of a run at its --steps: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestGradcheckProgressAndBounds: gradcheck shows how far it is (a line
// per tenth of the weights when stderr is no terminal), and refuses sizes
// beyond the bounds that finish in minutes, naming the flag and the bound.
func TestGradcheckProgressAndBounds(t *testing.T) {
	code, out, stderr := qkv("gradcheck", "--layers", "1")
	if code != 0 {
		t.Fatalf("gradcheck: exit %d: %s%s", code, out, stderr)
	}
	for _, w := range []string{"gradcheck: 10% (", "gradcheck: 100% (", " weights, about ", "left), at head.b"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("gradcheck's progress lacks %q:\n%s", w, stderr)
		}
	}
	for _, c := range []validationCase{
		{args("gradcheck --dim 64 --heads 2"), 2, []string{"--dim: at most 32, got 64"}},
		{args("gradcheck --hidden 256"), 2, []string{"--hidden: at most 128, got 256"}},
		{args("gradcheck --layers 8"), 2, []string{"--layers: at most 4, got 8"}},
		{args("gradcheck --batch 16"), 2, []string{"--batch: at most 4, got 16"}},
	} {
		c.check(t)
	}
}

// TestFinishedAdvice: the advice for resuming a run that reached its target
// offers a higher target only where one exists.
func TestFinishedAdvice(t *testing.T) {
	cfg := config.Default()
	cfg.Steps, cfg.TargetExact = 2000, 0.9
	for _, c := range []struct {
		exact  float64
		higher bool
	}{{0.95, true}, {1, false}} {
		dir := t.TempDir()
		b, err := json.Marshal(train.Summary{Steps: 100, ExactMatch: c.exact})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, train.SummaryFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
		msg := finished(dir, 100, cfg)
		if !strings.Contains(msg, "already finished at step 100") || strings.Contains(msg, "or one above") != c.higher {
			t.Errorf("exact match %g: %q (want a higher target offered: %v)", c.exact, msg, c.higher)
		}
	}
}
