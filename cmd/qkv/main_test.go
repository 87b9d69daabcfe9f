package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/qkv-dev/qkv/train"
	"github.com/qkv-dev/qkv/train/checkpoint"
)

// qkv runs the command line in-process and returns exit status and output.
func qkv(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestUsageErrors(t *testing.T) {
	cases := []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "Commands:"},
		{[]string{"juggle"}, 2, `unknown command "juggle"`},
		{[]string{"train", "--bogus"}, 2, "unknown flag --bogus"},
		{[]string{"train", "--steps", "many"}, 2, "invalid value"},
		{[]string{"train", "--heads", "5"}, 2, "--heads (with --dim): Dim 48 is not divisible by Heads 5"},
		{[]string{"train", "--task", "juggle"}, 2, `unknown task "juggle"`},
		{[]string{"train", "--dtype", "int8"}, 2, "float32 or float64"},
		{[]string{"train", "--batch", "0"}, 2, "--batch: must be positive"},
		{[]string{"train", "--task", "sort", "--digits", "3"}, 2, "digits is not a parameter of sort"},
		{[]string{"train", "--activation", "swish"}, 2, `unknown activation "swish"`},
		{[]string{"train", "extra"}, 2, `unexpected arguments "extra"`},
		{[]string{"predict", "1 2"}, 2, "--checkpoint is required"},
		{[]string{"eval"}, 2, "--checkpoint is required"},
		{[]string{"eval", "--checkpoint", "/nonexistent/run"}, 2, "--checkpoint /nonexistent/run: no such directory"},
	}
	for _, c := range cases {
		validationCase{c.args, c.code, []string{c.want}}.check(t)
	}
}

func TestTrainPredictEvalAttend(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	code, out, stderr := qkv("train", "--task", "sort", "--length", "3", "--dim", "16", "--heads", "2", "--hidden", "32",
		"--layers", "1", "--batch", "16", "--steps", "20", "--warmup", "2", "--eval-every", "10", "--test-size", "8", "--out", dir)
	if code != 0 {
		t.Fatalf("train: exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, "held-out exact match") || !strings.Contains(stderr, "step 10/20") {
		t.Errorf("train output lacks its report:\nstdout %s\nstderr %s", out, stderr)
	}

	code, out, stderr = qkv("predict", "--checkpoint", dir, "2 0 1")
	if code != 0 {
		t.Fatalf("predict: exit %d: %s", code, stderr)
	}
	if got := strings.Fields(out); len(got) != 3 {
		t.Errorf("predict printed %q, want 3 answer symbols", out)
	}
	code, _, stderr = qkv("predict", "--checkpoint", dir, "2 0 9")
	if code != 2 || !strings.Contains(stderr, "9") {
		t.Errorf("predict with an unknown symbol: exit %d, stderr %q", code, stderr)
	}

	code, out, stderr = qkv("eval", "--checkpoint", dir)
	if code != 0 || !strings.Contains(out, "8 held-out examples") {
		t.Errorf("eval: exit %d, stdout %q, stderr %q", code, out, stderr)
	}

	png := filepath.Join(t.TempDir(), "attn.png")
	code, _, stderr = qkv("attend", "--checkpoint", dir, "--input", "1 1 0", "--out", png)
	if code != 0 {
		t.Fatalf("attend: exit %d: %s", code, stderr)
	}
	b, err := os.ReadFile(png)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Errorf("attend did not write a PNG: %v", err)
	}

	// A fresh run into the directory is refused; --force moves it aside.
	code, _, stderr = qkv("train", "--task", "sort", "--length", "3", "--test-size", "8", "--steps", "2", "--warmup", "0", "--out", dir)
	if code != 2 || !strings.Contains(stderr, "holds a checkpoint") || !strings.Contains(stderr, "--resume "+dir) || !strings.Contains(stderr, "--force") {
		t.Errorf("fresh run over a checkpoint: exit %d, stderr %q", code, stderr)
	}

	// An edited config.json is refused, naming the file and the field.
	ck, err := os.ReadFile(filepath.Join(dir, checkpoint.ManifestFile))
	if err != nil {
		t.Fatal(err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(ck, &m); err != nil {
		t.Fatal(err)
	}
	cfgPath := filepath.Join(dir, m.Dir, checkpoint.ConfigFile)
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, bytes.Replace(cfg, []byte(`"dim": 16`), []byte(`"dim": 8`), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cmd := range [][]string{{"predict", "--checkpoint", dir, "2 0 1"}, {"eval", "--checkpoint", dir}, {"train", "--resume", dir}} {
		code, _, stderr = qkv(cmd...)
		if code == 0 || !strings.Contains(stderr, cfgPath) || !strings.Contains(stderr, "model.dim is 8, was 16 when saved") {
			t.Errorf("%s with an edited config.json: exit %d, stderr %q", cmd[0], code, stderr)
		}
	}
}

func TestGradcheckCommand(t *testing.T) {
	code, out, stderr := qkv("gradcheck", "--layers", "1")
	if code != 0 {
		t.Fatalf("gradcheck: exit %d: %s%s", code, out, stderr)
	}
	for _, name := range []string{"blocks.0.attn.wq", "blocks.0.attn.wk", "blocks.0.attn.wv", "blocks.0.attn.wo", "ok: every gradient"} {
		if !strings.Contains(out, name) {
			t.Errorf("gradcheck output lacks %q:\n%s", name, out)
		}
	}
	if code, _, _ := qkv("gradcheck", "--tol", "1e-30"); code != 1 {
		t.Errorf("gradcheck with an impossible tolerance: exit %d, want 1", code)
	}
}

// TestGradcheckAttentionFlags: gradcheck differentiates the attention and
// options it is given, and says which at the top of its report; unknown
// names exit 2 naming the flag.
func TestGradcheckAttentionFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "attention fused, scale dk, positions learned"},
		{[]string{"--attention", "flash", "--attn-scale", "dmodel", "--positions", "none"}, "attention flash, scale dmodel, positions none"},
		{[]string{"--attention", "composed", "--attn-scale", "none", "--positions", "sinusoidal", "--post-ln"}, "post-LN): attention composed, scale none, positions sinusoidal"},
		{[]string{"--attention", "flash", "--kv-heads", "1", "--softcap", "2", "--sinks", "--qk-norm"}, "attention flash, scale dk, positions learned, kv-heads=1, softcap=2, sinks, qk-norm"},
		{[]string{"--attention", "composed", "--positions", "rope", "--rope-base", "100", "--window", "3", "--kv-heads", "1"}, "attention composed, scale dk, positions rope, kv-heads=1, window=3, rope-base=100"},
		{[]string{"--positions", "alibi", "--window", "2", "--sinks"}, "positions alibi, sinks, window=2"},
		{[]string{"--bias=false", "--tie-embeddings", "--bias-free-norm"}, "positions learned, bias=false, bias-free-norm, tie-embeddings"},
	} {
		code, out, stderr := qkv(append([]string{"gradcheck", "--layers", "1"}, c.args...)...)
		if code != 0 || !strings.Contains(out, c.want) || !strings.Contains(out, "ok: every gradient") {
			t.Errorf("gradcheck %v: exit %d, want 0 and a report checking %q:\n%s%s", c.args, code, c.want, out, stderr)
		}
	}
	for _, f := range []string{"attention", "attn-scale", "positions"} {
		validationCase{[]string{"gradcheck", "--" + f, "bogus"}, 2, []string{"--" + f + ":", `"bogus"`}}.check(t)
	}
	validationCase{args("gradcheck --kv-heads 3"), 2, []string{"--kv-heads (with --heads): KVHeads 3 does not divide Heads 2"}}.check(t)
	validationCase{args("gradcheck --softcap -1"), 2, []string{"--softcap: Softcap -1 must be a finite number > 0, or 0 for no cap"}}.check(t)
}

// TestInterruptSavesAndResumes sends SIGINT to a qkv process that is
// training (its own process, so that a signal arriving before the handler is
// installed kills that process, not the tests): it must save a checkpoint,
// exit 130 and say how to resume; resuming with --steps must finish the run
// at that total, and a finished run can be extended by a larger --steps.
func TestInterruptSavesAndResumes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	cmd := qkvProcess(t, "train", "--task", "sort", "--length", "3", "--dim", "16", "--heads", "2", "--hidden", "32",
		"--layers", "1", "--batch", "8", "--steps", "100000", "--warmup", "2", "--eval-every", "1000", "--test-size", "4",
		"--target-exact", "0", "--out", dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		select {
		case <-done:
		default: // the test failed while the process ran
			cmd.Process.Kill()
			<-done
		}
	}()
	// metrics.jsonl gets lines once the loop runs, after the signal handler
	// is installed.
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(filepath.Join(dir, train.MetricsFile)); err == nil && bytes.Count(b, []byte("\n")) >= 3 {
			break
		}
		select {
		case err := <-done:
			done <- err // for the deferred check
			t.Fatalf("qkv train ended before SIGINT: %v\nstderr %s", err, stderr.Bytes())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("training did not start within 60 s")
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		done <- err
	case <-time.After(60 * time.Second):
		t.Fatal("training did not stop within 60 s of SIGINT")
	}
	ck, err := checkpoint.Load(dir)
	if err != nil {
		t.Fatalf("after SIGINT: %v\nstderr %s", err, stderr.Bytes())
	}
	code := cmd.ProcessState.ExitCode()
	if code != 130 || !strings.Contains(stderr.String(), fmt.Sprintf("interrupted at step %d; checkpoint saved in %s", ck.Step, dir)) ||
		!strings.Contains(stderr.String(), "resume with: qkv train --resume "+dir) {
		t.Fatalf("after SIGINT: exit %d (%v), checkpoint at step %d, stderr %q", code, cmd.ProcessState, ck.Step, stderr.String())
	}
	if ck.Step < 3 {
		t.Errorf("interrupted after at least 3 metrics lines, the checkpoint is at step %d", ck.Step)
	}

	// --steps sets the resumed run's total: 5 more steps finish it, and a
	// finished run is extended by 5 more.
	for _, total := range []int{ck.Step + 5, ck.Step + 10} {
		code, out, errOut := qkv("train", "--resume", dir, "--steps", fmt.Sprint(total))
		if code != 0 || !strings.Contains(out, fmt.Sprintf(" %d steps", total)) {
			t.Fatalf("resume with --steps %d: exit %d, stdout %q, stderr %q", total, code, out, errOut)
		}
		got, err := checkpoint.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got.Step != total {
			t.Errorf("resume with --steps %d: checkpoint at step %d", total, got.Step)
		}
	}
}

// TestMistypedFlagOneLine: a flag that does not exist gets one line naming
// it and the nearest flag, not the flag package's list of every flag.
func TestMistypedFlagOneLine(t *testing.T) {
	for _, cmd := range []string{"train", "eval", "bench", "gradcheck"} {
		code, _, stderr := qkv(cmd, "--stpes", "3")
		if code != 2 || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, "-stpes") ||
			!strings.Contains(stderr, "'qkv "+cmd+" --help' lists the flags") {
			t.Errorf("qkv %s --stpes 3: exit %d, stderr %q; want exit 2 and one line", cmd, code, stderr)
		}
	}
	if code, stdout, _ := qkv("train", "--help"); code != 0 || !strings.Contains(stdout, "Run flags:") || !strings.Contains(stdout, "--steps INT") {
		t.Errorf("qkv train --help: exit %d, stdout %q; want the flags", code, stdout)
	}
}

// TestFailureNamesPathOnce: a failure that is not a usage mistake names the
// path at fault, and the command's name once.
func TestFailureNamesPathOnce(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(file, "run")
	code, _, stderr := qkv("train", "--out", out, "--steps", "1")
	if code != 1 || !strings.HasPrefix(stderr, "qkv train: run directory "+out+": ") || strings.Contains(stderr, "train: train:") {
		t.Errorf("qkv train --out %s: exit %d, stderr %q; want exit 1 naming the run directory once", out, code, stderr)
	}
}
