package main

import (
	"flag"
	"io"
	"strconv"
	"testing"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/optim"
)

// TestSchemaTags: every flagged field has help, a flag of its own, and a
// zero tag that is the default the code applies for a zero value.
func TestSchemaTags(t *testing.T) {
	zeros := map[string]string{
		"model.rope_base":    strconv.FormatFloat(graph.DefaultRoPEBase, 'g', -1, 64),
		"model.attn_scale":   string(layers.ScaleDK),
		"decay":              string(config.DecayWeights),
		"matmul":             string(config.MatmulFloat32),
		"beta1":              strconv.FormatFloat(optim.DefaultBeta1, 'g', -1, 64),
		"beta2":              strconv.FormatFloat(optim.DefaultBeta2, 'g', -1, 64),
		"model.feature_map":  string(graph.FeatureTaylor),
		"model.linear_norm":  string(layers.LinearNormSum),
		"model.linear_chunk": strconv.Itoa(graph.DefaultLinearChunk),
	}
	seen := map[string]string{}
	for _, f := range schemaOf((*config.Config)(nil)) {
		if f.help == "" {
			t.Errorf("%s (--%s) has no help", f.path, f.flag)
		}
		if other, ok := seen[f.flag]; ok {
			t.Errorf("--%s sets both %s and %s", f.flag, other, f.path)
		}
		seen[f.flag] = f.path
		if f.zero != zeros[f.path] {
			t.Errorf("%s: zero tag %q, the code's default %q", f.path, f.zero, zeros[f.path])
		}
		delete(zeros, f.path)
	}
	for path := range zeros {
		t.Errorf("%s is not in the schema", path)
	}
}

// TestFieldFlagDefaults: a field whose zero stands for a default shows it,
// stores it given explicitly as zero (config.json stays without it), and
// keeps a configuration that already spells it out as it is.
func TestFieldFlagDefaults(t *testing.T) {
	cfg := config.Default()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	registerSchema(fs, &cfg)
	if got := fs.Lookup("rope-base").DefValue; got != "10000" {
		t.Errorf("--rope-base shows %q, want 10000", got)
	}
	for _, a := range [][]string{{"--rope-base", "10000"}, {"--attn-scale", "dk"}, {"--beta2", "0.999"}} {
		if err := fs.Parse(a); err != nil {
			t.Fatal(err)
		}
	}
	if cfg.Model.RoPEBase != 0 || cfg.Model.AttnScale != "" || cfg.Beta2 != 0 {
		t.Errorf("defaults given explicitly were stored: %v %q %v", cfg.Model.RoPEBase, cfg.Model.AttnScale, cfg.Beta2)
	}
	cfg.Model.AttnScale = layers.ScaleDK
	if err := fs.Parse([]string{"--attn-scale", "dk", "--rope-base", "500", "--sinks", "--kv-heads", "2", "--seed", "7"}); err != nil {
		t.Fatal(err)
	}
	if cfg.Model.AttnScale != layers.ScaleDK || cfg.Model.RoPEBase != 500 || !cfg.Model.Sinks || cfg.Model.KVHeads != 2 || cfg.Seed != 7 {
		t.Errorf("flags not stored: %+v, seed %d", cfg.Model, cfg.Seed)
	}
	if err := fs.Parse([]string{"--layers", "two"}); err == nil {
		t.Error("--layers two was accepted")
	}
}
