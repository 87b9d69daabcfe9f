package train

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/qkv-dev/qkv/internal/graphtest"
	"github.com/qkv-dev/qkv/train/checkpoint"
	"github.com/qkv-dev/qkv/train/config"
)

// TestEncDecRun: an encoder-decoder run drives its loss down, and a run
// stopped, checkpointed and resumed ends bit for bit like one never
// stopped, dropout included.
func TestEncDecRun(t *testing.T) {
	cfg := tinyConfig()
	cfg.Arch = config.ArchEncDec
	cfg.Steps, cfg.EvalEvery = 40, 20
	cfg.Model.Dropout = 0.1
	straight, split := t.TempDir(), t.TempDir()
	sum, err := Run(context.Background(), cfg, Options{Out: straight})
	if err != nil {
		t.Fatal(err)
	}
	ms := readMetrics(t, straight)
	if len(ms) != 40 || !(meanLoss(ms[len(ms)-5:]) < 0.85*meanLoss(ms[:5])) {
		t.Errorf("%d steps, loss %.3f at first and %.3f at last", len(ms), meanLoss(ms[:5]), meanLoss(ms[len(ms)-5:]))
	}
	if sum.Params <= 0 || sum.ExactMatch < 0 {
		t.Errorf("summary %+v", sum)
	}
	if _, err := Run(context.Background(), cfg, Options{Out: split, StopAfter: 20}); !errors.Is(err, ErrInterrupted) {
		t.Fatalf("stopped run: %v", err)
	}
	if _, err := Run(context.Background(), cfg, Options{Out: split, Resume: true}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{checkpoint.ModelFile, checkpoint.OptimizerFile} {
		if !bytes.Equal(graphtest.ReadFile(t, checkpoint.File(straight, name)), graphtest.ReadFile(t, checkpoint.File(split, name))) {
			t.Errorf("%s differs between the straight and the resumed encoder-decoder run", name)
		}
	}
	ck, err := checkpoint.Load(straight)
	if err != nil {
		t.Fatal(err)
	}
	var sawCross bool
	for _, w := range ck.Weights {
		sawCross = sawCross || w.Name == "dec.blocks.0.cross_attn.wq"
	}
	if !sawCross {
		t.Error("the checkpoint has no cross-attention weights")
	}
}
