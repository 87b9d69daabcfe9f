package explain

import (
	"testing"

	"github.com/qkv-dev/qkv/layers"
)

// TestScaleDKNotDModel: the claim reports every measurement for the three
// scales, its runs are train.Run's (the dk run's losses are those of the
// same configuration trained again, bit for bit, with "dk" spelled out),
// and the scale changes the training from its first step.
func TestScaleDKNotDModel(t *testing.T) {
	r := mustRun(t, "scale-dk-not-dmodel")
	for _, s := range []string{"dk", "dmodel", "none"} {
		for _, m := range []string{"steps_to_exact_", "final_loss_", "final_exact_", "mean_loss_", "steps_run_"} {
			if _, ok := r.Measured[m+s]; !ok {
				t.Errorf("no measurement %s%s", m, s)
			}
		}
	}
	if r.Verdict != Holds && r.Verdict != HoldsInPart && r.Verdict != DoesNotHold {
		t.Errorf("verdict %q", r.Verdict)
	}

	o := Options{Small: true, Seed: 1}
	dk, err := trainScale(scaleConfig(o, layers.ScaleDK), layers.ScaleDK)
	if err != nil {
		t.Fatal(err)
	}
	spelled := scaleConfig(o, layers.ScaleDK)
	spelled.Model.AttnScale = layers.ScaleDK
	again, err := trainModel(spelled)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if len(again.Metrics) != len(dk.Loss) {
		t.Fatalf("%d steps, train.Run gives %d", len(dk.Loss), len(again.Metrics))
	}
	for i, m := range again.Metrics {
		if m.Loss != dk.Loss[i] {
			t.Fatalf("step %d: loss %v, train.Run with attn_scale dk gives %v", i+1, dk.Loss[i], m.Loss)
		}
	}
	if got := r.Measured["final_loss_dk"]; got != dk.FinalLoss {
		t.Errorf("final_loss_dk %v, the dk run ends at %v", got, dk.FinalLoss)
	}
	for _, s := range []layers.AttentionScale{layers.ScaleDModel, layers.ScaleNone} {
		cfg := scaleConfig(o, s)
		if cfg.Model.AttnScale != s {
			t.Fatalf("scaleConfig(%s) trains attn_scale %q", s, cfg.Model.AttnScale)
		}
		other, err := trainScale(cfg, s)
		if err != nil {
			t.Fatal(err)
		}
		// Same seed, same weights and batch: only the scale differs, and
		// it changes the first step's loss already.
		if other.Loss[0] == dk.Loss[0] {
			t.Errorf("scale %s: first loss %v equals dk's: the scale changed nothing", s, other.Loss[0])
		}
		if got := r.Measured["final_loss_"+string(s)]; got != other.FinalLoss {
			t.Errorf("final_loss_%s %v, the run ends at %v", s, got, other.FinalLoss)
		}
	}
}

// TestJudgeScales: the verdict follows the steps to 100% exact match, dk
// first in the runs.
func TestJudgeScales(t *testing.T) {
	run := func(s layers.AttentionScale, steps int, exact, loss float64) scaleRun {
		return scaleRun{Scale: s, StepsToExact: steps, FinalExact: exact, FinalLoss: loss}
	}
	for _, c := range []struct {
		name           string
		dk, dmodel, no scaleRun
		want           string
	}{
		{"dk first", run("dk", 100, 1, 0.01), run("dmodel", 200, 1, 0.01), run("none", -1, 0.5, 0.3), Holds},
		{"dk tied", run("dk", 100, 1, 0.01), run("dmodel", 100, 1, 0.01), run("none", 100, 1, 0.01), Holds},
		{"dmodel faster", run("dk", 100, 1, 0.01), run("dmodel", 80, 1, 0.01), run("none", -1, 0.5, 0.3), HoldsInPart},
		{"dk never", run("dk", -1, 0.9, 0.05), run("dmodel", 220, 1, 0.01), run("none", -1, 0.92, 0.007), DoesNotHold},
		{"none reached, higher exact", run("dk", -1, 0.9, 0.05), run("dmodel", -1, 0.8, 0.1), run("none", -1, 0.9, 0.04), HoldsInPart},
	} {
		holds, v, why := judgeScales([]scaleRun{c.dk, c.dmodel, c.no}, 600)
		if v != c.want || holds != (c.want == Holds) || why == "" {
			t.Errorf("%s: %v %q (%s), want %q", c.name, holds, v, why, c.want)
		}
	}
}
