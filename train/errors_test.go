package train

import (
	"context"
	"errors"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/checkpoint"
	"github.com/qkv-dev/qkv/train/config"
)

// Representative errors of every package match their sentinel with
// errors.Is through the wrapping between where they arise and the caller,
// and no other sentinel of the table.
func TestSentinelErrorsTable(t *testing.T) {
	sentinels := []error{graph.ErrShape, layers.ErrConfig, config.ErrInvalid, checkpoint.ErrNotFound, ErrInterrupted}

	g := G.NewGraph()
	s, err := layers.NewScope(g, tensor.Float64, 1)
	if err != nil {
		t.Fatal(err)
	}
	ff, err := layers.NewFeedForward(s.Sub("ff"), layers.FeedForwardConfig{Dim: 4, Hidden: 8})
	if err != nil {
		t.Fatal(err)
	}
	x := G.NewTensor(g, tensor.Float64, 3, G.WithShape(2, 3, 5), G.WithName("x"))
	_, shapeErr := ff.Forward(x)

	_, layerErr := layers.NewDecoder(s.Sub("dec"), layers.StackConfig{Vocab: 5, MaxLen: 4, Dim: 6, Heads: 4, Layers: 1, Hidden: 8})

	bad := tinyConfig()
	bad.Steps = 0
	_, runCfgErr := Run(context.Background(), bad, Options{Out: t.TempDir()})

	_, notFound := checkpoint.Load(t.TempDir())

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, interrupted := Run(ctx, tinyConfig(), Options{Out: t.TempDir()})

	for _, tc := range []struct {
		name string
		err  error
		want error
	}{
		{"feed-forward input of the wrong width", shapeErr, graph.ErrShape},
		{"decoder with D % H != 0", layerErr, layers.ErrConfig},
		{"Run with steps 0", runCfgErr, config.ErrInvalid},
		{"checkpoint.Load of an empty directory", notFound, checkpoint.ErrNotFound},
		{"Run with a cancelled context", interrupted, ErrInterrupted},
	} {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		for _, s := range sentinels {
			if got := errors.Is(tc.err, s); got != (s == tc.want) {
				t.Errorf("%s: %v: errors.Is(err, %q) = %v", tc.name, tc.err, s, got)
			}
		}
	}
}
