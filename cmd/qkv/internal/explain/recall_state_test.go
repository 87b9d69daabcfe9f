package explain

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The small experiment runs the whole pipeline: every model trains,
// generates and is measured, both claims give a verdict and draw.
func TestRecallVsState(t *testing.T) {
	dir := t.TempDir()
	o := Options{Small: true, Seed: 1, Plots: dir}
	r, err := Run("recall-vs-state", o)
	if err != nil {
		t.Fatal(err)
	}
	if r.Statement == "" || r.Method == "" || r.Why == "" || r.Verdict == "" {
		t.Errorf("incomplete result %+v", r)
	}
	p := recallPlanFor(o)
	for _, m := range p.Models {
		k := measuredKey(m.Name)
		if a, ok := r.Measured["p2_"+k+"_acc"]; !ok || a < 0 || a > 1 {
			t.Errorf("%s: accuracy %v (%v)", m.Name, a, ok)
		}
		if r.Measured["params_"+k] <= 0 || r.Measured["p2_"+k+"_state_bytes"] <= 0 {
			t.Errorf("%s: params %v, state %v", m.Name, r.Measured["params_"+k], r.Measured["p2_"+k+"_state_bytes"])
		}
	}
	tr, err := Run("throughput-vs-recall", o)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range tr.Measured {
		if strings.HasSuffix(k, "_tokens_per_s") && !(v > 0) {
			t.Errorf("%s = %v", k, v)
		}
	}
	for _, name := range []string{"recall-vs-state.png", "throughput-vs-recall.png"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// The state bytes follow the formulas: a softmax layer's cache grows with
// the context, a window's stops at w, a linear layer's is constant; and a
// softmax or linear model's agree with what the cached decoder keeps.
func TestRecallStateBytes(t *testing.T) {
	p := recallPlan{Dim: 48, Heads: 4, Layers: 2}
	for _, c := range []struct {
		m    recallModel
		n    int
		want int
	}{
		{recallModel{LayerKinds: "softmax"}, 64, 2 * 2 * 64 * 48 * 4},
		{recallModel{LayerKinds: "window:8"}, 64, 2 * 2 * 8 * 48 * 4},
		{recallModel{LayerKinds: "window:8"}, 4, 2 * 2 * 4 * 48 * 4},
		{recallModel{LayerKinds: "linear", FeatureMap: "taylor", FeatureDim: 4}, 64, 2 * (4*21*12 + 4*21) * 4},
		{recallModel{LayerKinds: "linear", FeatureMap: "elu1"}, 64, 2 * (4*12*12 + 4*12) * 4},
		{recallModel{LayerKinds: "linear,window:8", FeatureMap: "taylor", FeatureDim: 4}, 64, (4*21*12+4*21)*4 + 2*8*48*4},
	} {
		got, err := p.stateBytes(c.m, c.n)
		if err != nil || got != c.want {
			t.Errorf("%s %s d'=%d at n=%d: %d bytes (%v), want %d", c.m.LayerKinds, c.m.FeatureMap, c.m.FeatureDim, c.n, got, err, c.want)
		}
	}
	e, err := recallExperimentFor(Options{Small: true, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range e.Runs {
		if (r.Model.LayerKinds == "softmax" || r.Model.LayerKinds == "linear") && r.CacheBytes != r.StateBytes {
			t.Errorf("%s: the cached decoder keeps %d bytes a row, the formula says %d", r.Model.Name, r.CacheBytes, r.StateBytes)
		}
	}
}
