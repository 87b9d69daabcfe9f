package model_test

import (
	"testing"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
)

// randomModel returns a resolved config of dtype dt and a model of it whose
// every parameter is random, so that no zero bias or unit gain hides a
// difference.
func randomModel(t *testing.T, dt config.DType, positions layers.PositionsKind, postLN bool) (config.Config, *model.Model) {
	t.Helper()
	cfg := config.Default()
	cfg.Task = config.TaskSpec{Name: "copy", Params: data.TaskConfig{MinLength: 2, MaxLength: 6, Alphabet: 5}}
	cfg.Model.Dim, cfg.Model.Heads, cfg.Model.Hidden, cfg.Model.Layers = 12, 3, 20, 2
	cfg.Model.Positions, cfg.Model.PostLN, cfg.DType = positions, postLN, dt
	task, err := cfg.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	m, err := model.Build(cfg, 3, task.MaxLen()-1, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	randomize(m.Params) // non-trivial, so no zero bias hides a difference
	return cfg, m
}

// TestCachedEqualsUncached: generating with the key/value cache gives the
// tokens that recomputing the prefix gives, from logits equal within 1e-9
// (float64), for prompts of different lengths, more prompts than rows,
// every kind of positions and post-LN.
func TestCachedEqualsUncached(t *testing.T) {
	seqs := [][]int{{2, 3, 1}, {4, 4, 5, 6, 2, 1}, {5, 1}, {3, 2, 6, 1}, {6, 6, 1}}
	steps := []int{5, 2, 7, 4, 0}
	for _, c := range []struct {
		name      string
		dt        config.DType
		positions layers.PositionsKind
		postLN    bool
		attention layers.AttentionImpl
	}{
		{"float64 learned", config.Float64, layers.PositionsLearned, false, ""},
		{"float64 sinusoidal post-LN", config.Float64, layers.PositionsSinusoidal, true, ""},
		{"float64 no positions flash", config.Float64, layers.PositionsNone, false, layers.AttentionFlash},
		{"float32 learned", config.Float32, layers.PositionsLearned, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg, m := randomModel(t, c.dt, c.positions, c.postLN)
			cfg.Model.Attention = c.attention
			cached, err := model.NewCached(cfg, 2, m.Params)
			if err != nil {
				t.Fatal(err)
			}
			defer cached.Close()
			tol := 1e-9
			if c.dt == config.Float32 {
				tol = 1e-4
			}
			r := decodeDecoder(t, m, cached, seqs, steps)
			worst := r.worst
			if worst > tol {
				t.Errorf("cached logits differ from uncached by %.3g (tolerance %g)", worst, tol)
			}
			t.Logf("%d tokens, worst logit difference %.2g", r.tokens, worst)
		})
	}
}

func TestCachedErrors(t *testing.T) {
	cfg, m := randomModel(t, config.Float64, layers.PositionsLearned, false)
	c, err := model.NewCached(cfg, 2, m.Params)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, bad := range []struct {
		name  string
		seqs  [][]int
		steps []int
	}{
		{"empty prompt", [][]int{{}}, []int{1}},
		{"unknown token", [][]int{{99}}, []int{1}},
		{"negative token", [][]int{{-1}}, []int{1}},
		{"too long", [][]int{make([]int, c.L)}, []int{2}},
		{"negative steps", [][]int{{2}}, []int{-1}},
		{"step counts", [][]int{{2}}, nil},
	} {
		if _, err := c.Generate(nil, bad.seqs, bad.steps); err == nil {
			t.Errorf("%s: no error", bad.name)
		}
	}
	if _, err := model.NewCached(cfg, 0, m.Params); err == nil {
		t.Error("0 rows: no error")
	}
	if _, err := model.NewCached(cfg, 1, m.Params[1:]); err == nil {
		t.Error("missing params: no error")
	}
	var nilCached *model.Cached
	if _, err := nilCached.Generate(nil, [][]int{{2}}, []int{1}); err == nil {
		t.Error("nil Cached: no error")
	}
}
