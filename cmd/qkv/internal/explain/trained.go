package explain

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
)

// trainedRun is a model trained by train.Run, as `qkv train` trains it, in
// a temporary run directory: its summary, every step's metrics, and the
// directory to load the model from until Close removes it.
type trainedRun struct {
	Dir     string
	Summary train.Summary
	Metrics []train.Metric
}

// trainModel trains cfg in a new temporary run directory. The claims that
// need a trained model measure one trained exactly as the CLI trains it, so
// their figures are those a user gets from the same configuration.
func trainModel(cfg config.Config) (*trainedRun, error) {
	tmp, err := os.MkdirTemp("", "qkv-explain-")
	if err != nil {
		return nil, err
	}
	r := &trainedRun{Dir: filepath.Join(tmp, "run")}
	if r.Summary, err = train.Run(context.Background(), cfg, train.Options{Out: r.Dir}); err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("training %s: %w", cfg.Task.Name, err)
	}
	if r.Metrics, err = readMetrics(filepath.Join(r.Dir, train.MetricsFile)); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	return r, nil
}

// Close removes the run directory.
func (r *trainedRun) Close() error { return os.RemoveAll(filepath.Dir(r.Dir)) }

// load loads the trained model, of either architecture, for batches of b
// rows, with fused attention so that it forms the weights the claims read.
func (r *trainedRun) load(b int) (*model.Model, error) {
	m, _, _, err := model.Load(r.Dir, b, model.LoadOptions{Attention: layers.AttentionFused})
	return m, err
}

// stepsToExact returns the first evaluated step whose held-out exact match
// reached 1, or -1 if none did.
func (r *trainedRun) stepsToExact() int {
	for _, m := range r.Metrics {
		if m.Eval != nil && m.Eval.ExactMatch >= 1 {
			return m.Step
		}
	}
	return -1
}

// readMetrics reads a metrics.jsonl file.
func readMetrics(path string) ([]train.Metric, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []train.Metric
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m train.Metric
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return nil, fmt.Errorf("%s: line %d: %w", path, len(out)+1, err)
		}
		out = append(out, m)
	}
	return out, sc.Err()
}
