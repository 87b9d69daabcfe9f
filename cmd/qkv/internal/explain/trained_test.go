package explain

import (
	"os"
	"testing"

	"github.com/qkv-dev/qkv/train/config"
)

// trainModel trains as train.Run does: one metric per step, the summary's
// step count, and a model that loads; Close removes the directory.
func TestTrainModel(t *testing.T) {
	cfg := config.Default()
	cfg.Steps, cfg.Warmup, cfg.EvalEvery, cfg.TestSize = 12, 4, 6, 20
	r, err := trainModel(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Metrics) != 12 || r.Summary.Steps != 12 || r.Metrics[11].Step != 12 || r.Metrics[5].Eval == nil {
		t.Errorf("%d metrics, summary of %d steps, last step %d; want 12, 12, 12 with an evaluation at step 6",
			len(r.Metrics), r.Summary.Steps, r.Metrics[len(r.Metrics)-1].Step)
	}
	if got := r.stepsToExact(); got != -1 && r.Metrics[got-1].Eval.ExactMatch < 1 {
		t.Errorf("stepsToExact = %d where exact match is %v", got, r.Metrics[got-1].Eval.ExactMatch)
	}
	m, err := r.load(2)
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.Dir); !os.IsNotExist(err) {
		t.Errorf("%s still there after Close: %v", r.Dir, err)
	}
}
