package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qkv-dev/qkv/train"
	"github.com/qkv-dev/qkv/train/checkpoint"
	"github.com/qkv-dev/qkv/train/infer"
)

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnvVar) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// qkvProcess returns a command running qkv with args as its own process.
func qkvProcess(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), runMainEnvVar+"=1")
	return cmd
}

// killTrials is how many runs TestKillNineResumesBitForBit kills: a few by
// default, QKV_KILL_TRIALS for a long run.
func killTrials(t *testing.T) int {
	s := os.Getenv("QKV_KILL_TRIALS")
	if s == "" {
		if testing.Short() {
			return 1
		}
		return 4
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("QKV_KILL_TRIALS=%q: want a positive count", s)
	}
	return n
}

// killSeed is the seed of the kill instants: QKV_KILL_SEED when set, so
// that a run's instants can be drawn again, else the clock, so that every
// run tries new ones. The instants are fractions of the reference run's
// time; where they land (inside a save or between saves) still depends on
// the machine's speed.
func killSeed(t *testing.T) uint64 {
	s := os.Getenv("QKV_KILL_SEED")
	if s == "" {
		return uint64(time.Now().UnixNano())
	}
	seed, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatalf("QKV_KILL_SEED=%q: want an unsigned integer", s)
	}
	return seed
}

// metricLine is what must repeat bit for bit in metrics.jsonl: all but the
// throughput.
type metricLine struct {
	Step     int
	Loss, LR float64
	GradNorm float64 `json:"grad_norm"`
	Eval     *infer.EvalResult
}

func readMetricLines(t *testing.T, dir string) []metricLine {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, train.MetricsFile))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []metricLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m metricLine
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%s is not valid JSONL: line %q: %v", train.MetricsFile, sc.Text(), err)
		}
		out = append(out, m)
	}
	return out
}

// TestKillNineResumesBitForBit kills real training processes with SIGKILL
// at random instants, checkpointing every step so that many kills land in
// a save, and resumes each: every run must end with the weights, optimizer
// state and metrics of a run never killed, bit for bit.
func TestKillNineResumesBitForBit(t *testing.T) {
	trials := killTrials(t)
	args := []string{"train", "--task", "sort", "--length", "3", "--test-size", "8", "--dim", "16", "--heads", "2",
		"--hidden", "32", "--layers", "1", "--batch", "8", "--steps", "40", "--warmup", "5", "--eval-every", "10",
		"--target-exact", "0", "--checkpoint-every", "1"}
	root := t.TempDir()
	ref := filepath.Join(root, "ref")
	start := time.Now()
	if out, err := qkvProcess(t, append(args, "--out", ref)...).CombinedOutput(); err != nil {
		t.Fatalf("reference run: %v\n%s", err, out)
	}
	span := time.Since(start)
	want, err := checkpoint.Load(ref)
	if err != nil {
		t.Fatal(err)
	}
	wantMetrics := readMetricLines(t, ref)

	seed := killSeed(t)
	rng := rand.New(rand.NewPCG(seed, 1))
	t.Logf("%d trials, kill instants drawn with QKV_KILL_SEED=%d over %v", trials, seed, span)
	kills := map[string]int{}
	defer func() { t.Logf("killed: %v", kills) }()
	for trial := range trials {
		dir := filepath.Join(root, fmt.Sprint("run", trial))
		cmd := qkvProcess(t, append(args, "--out", dir)...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		after := time.Duration(rng.Float64() * float64(span))
		time.Sleep(after)
		cmd.Process.Kill()
		cmd.Wait()

		resumeArgs := []string{"train", "--resume", dir}
		ck, err := checkpoint.Load(dir)
		switch {
		case err != nil && !errors.Is(err, checkpoint.ErrNotFound):
			t.Fatalf("trial %d (killed after %v): %v", trial, after, err)
		case err != nil:
			resumeArgs = append(args, "--out", dir, "--force") // killed before its first checkpoint: its metrics, if any, moved aside
			kills["before the first checkpoint"]++
		case interruptedSave(t, dir):
			kills["inside a save"]++
		case ck.Step == want.Step:
			kills["after the last save"]++
		default:
			kills["between saves"]++
		}
		out, err := qkvProcess(t, resumeArgs...).CombinedOutput()
		if err != nil {
			t.Fatalf("trial %d (killed after %v): %s: %v\n%s", trial, after, resumeArgs[1], err, out)
		}
		got, err := checkpoint.Load(dir)
		if err != nil {
			t.Fatalf("trial %d (killed after %v): %v", trial, after, err)
		}
		if got.Step != want.Step || !sameTensors(got.Weights, want.Weights) || !sameTensors(got.Optimizer, want.Optimizer) {
			t.Errorf("trial %d (killed after %v): final checkpoint at step %d differs from the run never killed", trial, after, got.Step)
		}
		if gotMetrics := readMetricLines(t, dir); !slices.EqualFunc(gotMetrics, wantMetrics, sameMetric) {
			t.Errorf("trial %d (killed after %v): metrics.jsonl has %d lines differing from the run never killed (%d lines)",
				trial, after, len(gotMetrics), len(wantMetrics))
		}
	}
}

// interruptedSave reports whether the run directory dir holds what a save
// killed part way leaves: a staging folder or temporary manifest, or a
// checkpoint folder the manifest does not name.
func interruptedSave(t *testing.T, dir string) bool {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	current := filepath.Base(filepath.Dir(checkpoint.File(dir, checkpoint.ConfigFile)))
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".checkpoint") || (strings.HasPrefix(name, "checkpoint-") && name != current) {
			return true
		}
	}
	return false
}

func sameMetric(a, b metricLine) bool {
	bits := math.Float64bits
	return a.Step == b.Step && bits(a.Loss) == bits(b.Loss) && bits(a.LR) == bits(b.LR) &&
		bits(a.GradNorm) == bits(b.GradNorm) && (a.Eval == nil) == (b.Eval == nil) && (a.Eval == nil || *a.Eval == *b.Eval)
}

// sameTensors reports whether a and b hold the same tensors bit for bit.
func sameTensors(a, b []checkpoint.NamedTensor) bool {
	return slices.EqualFunc(a, b, func(x, y checkpoint.NamedTensor) bool {
		return x.Name == y.Name && x.DType == y.DType && slices.Equal(x.Shape, y.Shape) &&
			slices.EqualFunc(x.Data, y.Data, func(p, q float64) bool { return math.Float64bits(p) == math.Float64bits(q) })
	})
}

// TestRunDirSecondTrainer starts a second qkv process on the run directory
// of a first that is training: it must be refused at once, and the first
// run's metrics must stay valid.
func TestRunDirSecondTrainer(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	args := []string{"train", "--task", "sort", "--length", "3", "--test-size", "8", "--dim", "16", "--heads", "2",
		"--hidden", "32", "--layers", "1", "--batch", "8", "--steps", "100000", "--warmup", "5", "--eval-every", "1000",
		"--target-exact", "0", "--out", dir}
	first := qkvProcess(t, args...)
	if err := first.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		first.Process.Kill()
		first.Wait()
	}()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(filepath.Join(dir, train.MetricsFile)); err == nil && bytes.Count(b, []byte("\n")) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("training did not start within 60 s")
		}
	}
	for _, extra := range [][]string{nil, {"--force"}} {
		second := qkvProcess(t, append(slices.Clone(args), extra...)...)
		out, err := second.CombinedOutput()
		if code := second.ProcessState.ExitCode(); code != 1 || !bytes.Contains(out, []byte("another process is training there")) {
			t.Errorf("second trainer %q: exit %d (%v), output %q", extra, code, err, out)
		}
	}
	readMetricLines(t, dir) // valid JSONL, as the first run writes it
}
