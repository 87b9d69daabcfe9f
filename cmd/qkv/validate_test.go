package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/internal/gemm"
	"github.com/qkv-dev/qkv/train/checkpoint"
	"github.com/qkv-dev/qkv/train/config"
)

// qkvNoPanic is qkv that turns a panic into a test error (exit -1).
func qkvNoPanic(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("qkv %q panicked: %v", args, r)
			code = -1
		}
	}()
	return qkv(args...)
}

// validationCase is one command line that must be refused before anything
// is built: its exit status and substrings its stderr must contain.
type validationCase struct {
	args []string
	code int
	want []string
}

// check runs c as a subtest of its own, so that `go test -v` lists (and
// counts) every command line refused.
func (c validationCase) check(t *testing.T) {
	t.Helper()
	t.Run(strings.Join(c.args, " "), func(t *testing.T) {
		code, _, stderr := qkvNoPanic(t, c.args...)
		if code != c.code {
			t.Errorf("qkv %q: exit %d, want %d; stderr %q", c.args, code, c.code, stderr)
			return
		}
		for _, w := range c.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("qkv %q: stderr %q lacks %q", c.args, stderr, w)
			}
		}
		if strings.Contains(stderr, "goroutine ") || strings.Contains(stderr, "panic") {
			t.Errorf("qkv %q: stderr looks like a crash: %q", c.args, stderr)
		}
	})
}

func args(s string) []string { return strings.Fields(s) }

// TestFlagValidation: every numeric flag of every subcommand is checked
// for NaN, Inf and its range before anything is built, and a bad value
// exits 2 naming the flag.
func TestFlagValidation(t *testing.T) {
	out := filepath.Join(t.TempDir(), "never")
	cases := []validationCase{
		// Rates and floats of train: NaN, Inf and range.
		{args("train --dropout NaN"), 2, []string{"--dropout: Dropout NaN is outside [0, 1)"}},
		{args("train --dropout 1"), 2, []string{"--dropout:"}},
		{args("train --attn-dropout NaN"), 2, []string{"--attn-dropout:", "NaN"}},
		{args("train --attn-dropout -0.1"), 2, []string{"--attn-dropout:"}},
		{args("train --lr NaN"), 2, []string{"--lr: must be a finite number > 0, got NaN"}},
		{args("train --lr Inf"), 2, []string{"--lr:", "+Inf"}},
		{args("train --lr 0"), 2, []string{"--lr:"}},
		{args("train --min-lr NaN"), 2, []string{"--min-lr:", "NaN"}},
		{args("train --min-lr -1"), 2, []string{"--min-lr:"}},
		{args("train --min-lr 0.1"), 2, []string{"--min-lr (with --lr):"}},
		{args("train --clip NaN"), 2, []string{"--clip:", "NaN"}},
		{args("train --clip Inf"), 2, []string{"--clip:", "+Inf"}},
		{args("train --clip -1"), 2, []string{"--clip:"}},
		{args("train --weight-decay NaN"), 2, []string{"--weight-decay:", "NaN"}},
		{args("train --weight-decay -1"), 2, []string{"--weight-decay:", "-1"}},
		{args("train --weight-decay Inf"), 2, []string{"--weight-decay:"}},
		{args("train --weight-decay 0"), 2, []string{"--weight-decay (with --optimizer): must be > 0 with \"adamw\""}},
		{args("train --arch transformer"), 2, []string{"--arch: unknown architecture \"transformer\""}},
		{args("train --attention sparse"), 2, []string{"--attention: unknown Impl \"sparse\""}},
		{args("train --attention flash --attn-dropout 0.1"), 2, []string{"--attn-dropout (with --attention): flash attention takes no attention dropout"}},
		{args("train --target-exact NaN"), 2, []string{"--target-exact:", "NaN"}},
		{args("train --target-exact 1.5"), 2, []string{"--target-exact:"}},
		// Names.
		{args("train --optimizer sgd"), 2, []string{"--optimizer:", `"sgd"`}},
		{args("train --positions rotary"), 2, []string{"--positions:"}},
		{args("train --dtype float16"), 2, []string{"--dtype:"}},
		// A range's end given alone keeps the default's other end, and the
		// flag typed is named first.
		{args("train --task copy --max-length 2"), 2, []string{"--max-length: task copy: --min-length 3 is greater than --max-length 2"}},
		{args("train --task copy --min-length 9"), 2, []string{"--min-length: task copy: --min-length 9 is greater than --max-length 8"}},
		{args("train --task recall --min-pairs 9"), 2, []string{"--min-pairs: task recall: --min-pairs 9 is greater than --max-pairs 4"}},
		// Integers.
		{args("train --steps 0"), 2, []string{"--steps:"}},
		{args("train --batch -1"), 2, []string{"--batch:"}},
		{args("train --eval-every 0"), 2, []string{"--eval-every:"}},
		{args("train --checkpoint-every 0"), 2, []string{"--checkpoint-every:"}},
		{args("train --warmup -1"), 2, []string{"--warmup (with --steps):"}},
		{args("train --warmup 5000"), 2, []string{"--warmup (with --steps):"}},
		{args("train --layers 0"), 2, []string{"--layers:"}},
		{args("train --layers 100000"), 2, []string{"--layers:"}},
		{args("train --dim 0"), 2, []string{"--dim:"}},
		{args("train --hidden -3"), 2, []string{"--hidden:"}},
		{args("train --heads 0"), 2, []string{"--heads:"}},
		{args("train --heads 5"), 2, []string{"--heads (with --dim):", "not divisible"}},
		{args("train --test-size 0"), 2, []string{"--test-size:"}},
		{args("train --test-size 100000"), 2, []string{"--test-size", "729 distinct prompts"}},
		{args("train --test-size 1000000"), 2, []string{"--test-size:", "100000"}},
		// Task parameters.
		{args("train --alphabet 1"), 2, []string{"--alphabet"}},
		{args("train --alphabet 40"), 2, []string{"--alphabet:"}},
		{args("train --length -2"), 2, []string{"--length:"}},
		{args("train --task copy --min-length 5 --max-length 3"), 2, []string{"--min-length"}},
		{args("train --task add --digits 99"), 2, []string{"--digits:"}},
		{args("train --task recall --keys 30"), 2, []string{"--keys:"}},
		{args("train --task recall --pairs 9"), 2, []string{"--pairs: ", "keys is 8"}},
		// Conflicting task flags name both.
		{args("train --length 3 --min-length 2 --max-length 5"), 2, []string{"--length and --min-length conflict"}},
		{args("train --length 3 --max-length 5"), 2, []string{"--length and --max-length conflict"}},
		{args("train --task recall --pairs 3 --min-pairs 2 --max-pairs 5"), 2, []string{"--pairs and --min-pairs conflict"}},
		// Memory: refused before building, naming the sizes.
		{args("train --dim 8192 --hidden 32768 --layers 2 --max-memory 16GiB"), 2, []string{"--max-memory:", "dim 8192", "hidden 32768", "layers 2", "params"}},
		{args("train --batch 10000000"), 2, []string{"--max-memory:", "B=10000000", "activations", "attention", "logits"}},
		{args("train --max-memory 1KiB"), 2, []string{"--max-memory:", "more than 1.0 KiB"}},
		{args("train --max-memory lots"), 2, []string{"-max-memory", "lots"}},
		{args("train --max-memory NaN"), 2, []string{"-max-memory"}},
		{args("train --max-memory -1GiB"), 2, []string{"-max-memory"}},
		{args("train --out " + out + " --resume " + out + "x"), 2, []string{"--out and --resume"}},
		// bench.
		{args("bench -n 0"), 2, []string{"-n: must be at least 1, got 0"}},
		{args("bench -n -5"), 2, []string{"-n: must be at least 1, got -5"}},
		{args("bench --lr NaN"), 2, []string{"--lr:"}},
		{args("bench --clip Inf"), 2, []string{"--clip:"}},
		{args("bench --length 3 --min-length 2"), 2, []string{"--length and --min-length conflict"}},
		{args("bench --max-memory 1MiB"), 2, []string{"--max-memory:", "training B=64"}},
		// gradcheck.
		{args("gradcheck --tol NaN"), 2, []string{"--tol: must be a finite number > 0, got NaN"}},
		{args("gradcheck --tol -1"), 2, []string{"--tol:"}},
		{args("gradcheck --tol Inf"), 2, []string{"--tol:"}},
		{args("gradcheck --dim 0"), 2, []string{"--dim:"}},
		{args("gradcheck --dim 1000"), 2, []string{"--dim:"}},
		{args("gradcheck --heads 3"), 2, []string{"--heads (with --dim)"}},
		{args("gradcheck --heads 0"), 2, []string{"--heads:"}},
		{args("gradcheck --layers 0"), 2, []string{"--layers:"}},
		{args("gradcheck --hidden -1"), 2, []string{"--hidden:"}},
		{args("gradcheck --batch 0"), 2, []string{"--batch:"}},
		{args("gradcheck --activation swish"), 2, []string{"--activation:"}},
		// attend, eval, predict.
		{[]string{"attend", "--checkpoint", out, "--input", "1 2", "--out", ""}, 2, []string{"--out:"}},
		{args("eval --checkpoint x --max-memory 0"), 2, []string{"-max-memory"}},
		{args("predict --checkpoint x --max-memory 1e99 1"), 2, []string{"-max-memory"}},
	}
	if len(cases) < 40 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, c := range cases {
		c.check(t)
	}
	if _, err := os.Stat(out); err == nil {
		t.Errorf("a refused command created %s", out)
	}
}

// trainedRun trains a tiny model for 4 steps into a fresh directory.
func trainedRun(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "run")
	code, _, stderr := qkv(append(args("train --task sort --length 3 --dim 16 --heads 2 --hidden 32 --layers 1 --batch 8 --steps 4 --warmup 1 --eval-every 2 --test-size 8 --target-exact 0 --lr 0.01 --out"), dir)...)
	if code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	return dir
}

// TestResumeFlags: on --resume the checkpoint's config.json wins; flags
// given equal to it are fine, flags that differ are refused naming the
// flag and both values, --steps extends the run, and a bad config.json is
// reported naming the file.
func TestResumeFlags(t *testing.T) {
	dir := trainedRun(t)
	resume := func(extra string) []string { return append([]string{"train", "--resume", dir}, args(extra)...) }
	cases := []validationCase{
		{resume("--lr 0.003"), 2, []string{"--lr: the checkpoint in " + dir + " has 0.01, given 0.003"}},
		{resume("--dim 32"), 2, []string{"--dim:", "has 16, given 32"}},
		{resume("--layers 2"), 2, []string{"--layers:", "has 1, given 2"}},
		{resume("--dropout 0.1"), 2, []string{"--dropout:", "has 0, given 0.1"}},
		{resume("--optimizer adam"), 2, []string{"--optimizer:", "has adamw, given adam"}},
		{resume("--seed 7"), 2, []string{"--seed:", "has 1, given 7"}},
		{resume("--batch 9"), 2, []string{"--batch:", "has 8, given 9"}},
		{resume("--test-size 9"), 2, []string{"--test-size:", "has 8, given 9"}},
		{resume("--task copy"), 2, []string{"--task:", "has sort, given copy"}},
		{resume("--length 4"), 2, []string{"--length:", "--length 3", "given --length 4"}},
		{resume("--alphabet 4"), 2, []string{"--alphabet:", "given --alphabet 4"}},
		{resume("--post-ln"), 2, []string{"--post-ln:", "has false, given true"}},
		{resume("--steps 3"), 2, []string{"--steps 3:", "already at step 4"}},
		{resume("--steps 6 --warmup 9"), 2, []string{"--warmup:"}},
		{resume("--steps 6 --lr NaN"), 2, []string{"--lr:", "given NaN"}},
		{resume("--eval-every 0"), 2, []string{"--eval-every:"}},
		{resume("--length 3 --min-length 3"), 2, []string{"--length and --min-length conflict"}},
		{resume("--max-memory 1KiB"), 2, []string{"--max-memory:"}},
	}
	for _, c := range cases {
		c.check(t)
	}

	// Equal flags are fine; --steps extends the run.
	code, out, stderr := qkvNoPanic(t, resume("--lr 0.01 --dim 16 --length 3 --task sort --steps 6 --eval-every 3")...)
	if code != 0 || !strings.Contains(out, "6 steps") {
		t.Fatalf("resume with equal flags and --steps 6: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	cfg, err := config.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Steps != 6 || cfg.EvalEvery != 3 || cfg.LR != 0.01 {
		t.Errorf("resumed config: steps %d eval_every %d lr %v, want 6, 3, 0.01", cfg.Steps, cfg.EvalEvery, cfg.LR)
	}
	if code, _, stderr := qkvNoPanic(t, "train", "--resume", dir, "--out", dir, "--min-length", "3", "--max-length", "3"); code != 0 {
		t.Errorf("--out equal to --resume: exit %d: %s", code, stderr)
	}
	// A config.json edited by hand is refused, naming the file and field.
	cfgPath := checkpoint.File(dir, checkpoint.ConfigFile)
	good, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, []byte(strings.Replace(string(good), `"lr": 0.01`, `"lr": -1`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	validationCase{resume(""), 1, []string{cfgPath, "lr is -1, was 0.01 when saved"}}.check(t)
	validationCase{args("eval --checkpoint " + dir), 1, []string{cfgPath, "lr is -1, was 0.01 when saved"}}.check(t)
	if err := os.WriteFile(cfgPath, good, 0o644); err != nil {
		t.Fatal(err)
	}
	// A checkpoint saved whole with a configuration qkv refuses (by another
	// program, or another version) is reported naming its config.json, not
	// as a usage error.
	saved, err := checkpoint.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	edit := func(oldNew ...string) {
		t.Helper()
		b := string(good)
		for i := 0; i < len(oldNew); i += 2 {
			if !strings.Contains(b, oldNew[i]) {
				t.Fatalf("config.json lacks %q", oldNew[i])
			}
			b = strings.Replace(b, oldNew[i], oldNew[i+1], 1)
		}
		ck := *saved
		ck.Config = []byte(b)
		if err := checkpoint.Save(dir, &ck); err != nil {
			t.Fatal(err)
		}
		cfgPath = checkpoint.File(dir, checkpoint.ConfigFile)
	}
	edit(`"lr": 0.01`, `"lr": -1`)
	validationCase{resume(""), 1, []string{cfgPath, "lr must be a finite number > 0"}}.check(t)
	validationCase{args("eval --checkpoint " + dir), 1, []string{cfgPath, "lr must be"}}.check(t)
	edit(`"steps": 6`, `"steps": "six"`)
	validationCase{resume(""), 1, []string{cfgPath}}.check(t)
	// A model too large for the memory given (2e9 parameters, within the
	// layers' cap): refused before its weights are read, naming the limit.
	edit(`"layers": 1`, `"layers": 10`, `"dim": 16`, `"dim": 4000`)
	for _, c := range [][]string{
		{"eval", "--max-memory", "4GiB", "--checkpoint", dir},
		{"predict", "--max-memory", "4GiB", "--checkpoint", dir, "1 2 0"},
		{"attend", "--max-memory", "4GiB", "--checkpoint", dir, "--input", "1 2 0"},
	} {
		validationCase{c, 1, []string{cfgPath, "reading its checkpoint", "more than the memory limit of 4.0 GiB"}}.check(t)
	}
	validationCase{resume("--max-memory 4GiB"), 2, []string{cfgPath, "--max-memory:", "dim 4000", "layers 10"}}.check(t)
	// Beyond the layers' cap on parameters: config.json itself is invalid.
	edit(`"layers": 1`, `"layers": 1000`, `"dim": 16`, `"dim": 4000`)
	validationCase{args("eval --checkpoint " + dir), 1, []string{cfgPath, "model.layers", "exceed graph.MaxElements"}}.check(t)
	ck := *saved
	if err := checkpoint.Save(dir, &ck); err != nil {
		t.Fatal(err)
	}
	// eval's own batch (the run's evaluation batch: its 8 held-out
	// prompts) is checked against --max-memory.
	validationCase{args("eval --checkpoint " + dir + " --max-memory 20KiB"), 2, []string{"--max-memory:", "inference B=8", "more than 20.0 KiB"}}.check(t)
	if code, out, stderr := qkvNoPanic(t, "eval", "--checkpoint", dir, "--max-memory", "1GiB"); code != 0 || !strings.Contains(out, "exact match") {
		t.Errorf("eval within --max-memory: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	// --matmul may change: the same weights, multiplied in bf16 (where
	// there is AMX) and back.
	if !gemm.HasAMX() {
		validationCase{resume("--steps 7 --matmul bf16"), 2, []string{"--matmul: bf16 needs AMX"}}.check(t)
	}
	for i, m := range []config.Matmul{config.MatmulBF16, ""} {
		if m == config.MatmulBF16 && !gemm.HasAMX() {
			continue
		}
		steps := 7 + i
		if code, _, stderr := qkvNoPanic(t, resume(fmt.Sprintf("--steps %d --matmul %s", steps, cmp.Or(string(m), "float32")))...); code != 0 {
			t.Fatalf("resume with --matmul %q: exit %d: %s", m, code, stderr)
		}
		if cfg, err := config.Load(dir); err != nil || cfg.Matmul != m || cfg.Steps != steps {
			t.Errorf("resumed with --matmul %q: matmul %q, steps %d (%v)", m, cfg.Matmul, cfg.Steps, err)
		}
	}
}

// TestFieldFlags: every field of config.json that a flag sets maps to a
// flag train and bench register, so that a config.Error names it.
func TestFieldFlags(t *testing.T) {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg := config.Default()
	configFlags(fs, &cfg)
	for field, name := range fieldFlags {
		if name != "" && fs.Lookup(name) == nil {
			t.Errorf("field %s maps to --%s, which is not a training flag", field, name)
		}
	}
	// Every leaf of config.json, with every task parameter set.
	cfg.Task.Params.MinLength, cfg.Task.Params.MaxLength, cfg.Task.Params.Digits = 1, 1, 1
	cfg.Task.Params.Pairs, cfg.Task.Params.MinPairs, cfg.Task.Params.MaxPairs, cfg.Task.Params.Keys, cfg.Task.Params.Values = 1, 1, 1, 1, 1
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var tree map[string]any
	if err := json.Unmarshal(b, &tree); err != nil {
		t.Fatal(err)
	}
	var leaves []string
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if m, ok := v.(map[string]any); ok {
			for k, sub := range m {
				walk(strings.TrimPrefix(prefix+"."+k, "."), sub)
			}
			return
		}
		leaves = append(leaves, prefix)
	}
	walk("", tree)
	sort.Strings(leaves)
	if len(leaves) < 30 {
		t.Fatalf("only %d fields in config.json: %v", len(leaves), leaves)
	}
	for _, l := range leaves {
		if _, ok := fieldFlags[l]; !ok {
			t.Errorf("config.json field %s has no entry in fieldFlags", l)
		}
	}
	// And the mapping is what errors use.
	err = configError(&config.Error{Field: "clip_norm", Problem: "x"}, cfg)
	if got := fmt.Sprint(err); !strings.Contains(got, "--clip: x") || !errors.Is(err, errUsage) {
		t.Errorf("configError = %q, want a usage error --clip: x", got)
	}
	// A *config.MemoryError (of model.Build, within train.Run) exits 2 too.
	est := config.MemoryEstimate{B: 3, S: 4, Params: 1 << 20}
	err = configError(fmt.Errorf("train: %w", &config.MemoryError{Estimate: est, Limit: 1 << 10}), cfg)
	if got := fmt.Sprint(err); !errors.Is(err, errUsage) || !strings.Contains(got, "--max-memory") || !strings.Contains(got, "B=3 S=4") {
		t.Errorf("configError of a MemoryError = %q", got)
	}
}

// TestTaskRangeEndAlone: one end of a length or pairs range keeps the
// task's default other end (a fixed default n being n to n).
func TestTaskRangeEndAlone(t *testing.T) {
	cases := []struct {
		args string
		want data.TaskConfig
	}{
		{"--task copy --min-length 5", data.TaskConfig{MinLength: 5, MaxLength: 8, Alphabet: 10}},
		{"--task copy --max-length 12", data.TaskConfig{MinLength: 3, MaxLength: 12, Alphabet: 10}},
		{"--task sort --min-length 3", data.TaskConfig{MinLength: 3, MaxLength: 6, Alphabet: 3}},
		{"--task recall --max-pairs 6", data.TaskConfig{MinPairs: 4, MaxPairs: 6, Keys: 8, Values: 10, Queries: data.QueriesAll}},
		{"--task recall --queries 1", data.TaskConfig{Pairs: 4, Keys: 8, Values: 10, Queries: 1}},
		{"--task recall --queries 0", data.TaskConfig{Pairs: 4, Keys: 8, Values: 10, Queries: data.QueriesAll}},
		{"--task copy --length 4", data.TaskConfig{Length: 4, Alphabet: 10}},
	}
	for _, c := range cases {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		var tf taskFlags
		tf.register(fs, "sort")
		if err := fs.Parse(strings.Fields(c.args)); err != nil {
			t.Fatal(err)
		}
		if got := tf.resolve(fs); got != c.want {
			t.Errorf("%s: %+v, want %+v", c.args, got, c.want)
		}
	}
}
