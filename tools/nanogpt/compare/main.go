// Command compare sets a qkv chars run beside tools/nanogpt's PyTorch runs
// of the same configuration: a table of validation loss, parameters and
// training time, and a PNG of the validation losses against the step.
// side_by_side.sh runs it; the qkv run must have evaluated the same fixed
// windows as the PyTorch script (--test-size equal to its --fixed-windows).
//
//	go run ./tools/nanogpt/compare --qkv RUN_DIR --plot out.png torch-1.json [torch-2.json ...]
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"

	"github.com/qkv-dev/qkv/internal/plot"
	"github.com/qkv-dev/qkv/train"
)

// torchRun is the part of nanogpt_chars.py's JSON that the table reads.
type torchRun struct {
	Params       int     `json:"params_total"`
	ValLossFixed float64 `json:"val_loss_fixed"`
	FixedWindows int     `json:"fixed_windows"`
	TrainSeconds float64 `json:"train_seconds"`
	MsPerStep    float64 `json:"ms_per_step_median"`
	Threads      int     `json:"threads"`
	Iters        int     `json:"iters"`
	SHA256       string  `json:"sha256"`
	Curve        []struct {
		Iter     int     `json:"iter"`
		ValFixed float64 `json:"val_fixed"`
	} `json:"curve"`
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

func run(args []string, w io.Writer) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	dir := fs.String("qkv", "", "qkv run directory (summary.json, metrics.jsonl)")
	png := fs.String("plot", "", "PNG of the validation losses to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" || fs.NArg() == 0 {
		return errors.New("want --qkv RUN_DIR and at least one nanogpt_chars.py JSON")
	}
	var sum train.Summary
	if err := readJSON(filepath.Join(*dir, train.SummaryFile), &sum); err != nil {
		return err
	}
	q := plot.LossSeries{Name: "qkv"}
	if err := qkvCurve(filepath.Join(*dir, train.MetricsFile), &q); err != nil {
		return err
	}
	trainSeconds := sum.WallSeconds - sum.EvalSeconds
	fmt.Fprintf(w, "| run | parameters | validation loss (nats) | bits per character | training seconds (no evaluation) | ms per step (mean) |\n|---|---|---|---|---|---|\n")
	fmt.Fprintf(w, "| qkv (%s) | %d | %.4f | %.4f | %.1f | %.1f |\n", sum.Config.DType, sum.Params, sum.ValLoss, sum.ValBPC, trainSeconds, 1000*trainSeconds/float64(sum.Steps))
	series := []plot.LossSeries{q}
	for _, path := range fs.Args() {
		var r torchRun
		if err := readJSON(path, &r); err != nil {
			return err
		}
		switch {
		case r.FixedWindows != sum.Config.TestSize:
			return fmt.Errorf("%s evaluated %d fixed windows, the qkv run %d: give qkv --test-size %d", path, r.FixedWindows, sum.Config.TestSize, r.FixedWindows)
		case r.SHA256 != sum.Config.Task.Params.SHA256:
			return fmt.Errorf("%s read a corpus of sha256 %s, the qkv run %s", path, r.SHA256, sum.Config.Task.Params.SHA256)
		}
		name := fmt.Sprintf("PyTorch %d thread", r.Threads)
		if r.Threads != 1 {
			name += "s"
		}
		fmt.Fprintf(w, "| %s | %d | %.4f | %.4f | %.1f | %.1f (median %.1f) |\n", name, r.Params, r.ValLossFixed, r.ValLossFixed/math.Ln2, r.TrainSeconds, 1000*r.TrainSeconds/float64(r.Iters), r.MsPerStep)
		s := plot.LossSeries{Name: name}
		for _, p := range r.Curve {
			if p.Iter > 0 { // qkv evaluates from its first eval_every on
				s.Step, s.Loss = append(s.Step, float64(p.Iter)), append(s.Loss, p.ValFixed)
			}
		}
		series = append(series, s)
	}
	if *png == "" {
		return nil
	}
	title := fmt.Sprintf("%s, nanoGPT's CPU configuration: %d validation windows of %d characters", sum.Config.Task.Params.Data, sum.Config.TestSize, sum.Config.Task.Params.Context+1)
	return plot.Compare(*png, title, series)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// qkvCurve reads the validation loss of every evaluation in metrics.jsonl.
func qkvCurve(path string, s *plot.LossSeries) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m train.Metric
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if m.Eval != nil && m.Eval.Loss != 0 {
			s.Step, s.Loss = append(s.Step, float64(m.Step)), append(s.Loss, m.Eval.Loss)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(s.Step) == 0 {
		return fmt.Errorf("%s: no validation loss: is it a chars run?", path)
	}
	return nil
}
