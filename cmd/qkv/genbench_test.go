package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
)

// genRows returns the JSON lines of `qkv bench --generate`.
func genRows(out string) []genResult {
	var rows []genResult
	for _, l := range strings.Split(out, "\n") {
		var r genResult
		if strings.HasPrefix(l, "{") && json.Unmarshal([]byte(l), &r) == nil {
			rows = append(rows, r)
		}
	}
	return rows
}

// A decoder of linear layers generates with --layer-kinds linear: its
// cached step reads a state whose size does not depend on the position,
// where a softmax decoder's key/value cache grows with it.
func TestBenchGenerateLinear(t *testing.T) {
	base := []string{"bench", "--generate", "4,16", "--dim", "8", "--heads", "2", "--hidden", "16", "--layers", "2", "-n", "1"}
	code, out, stderr := qkv(append(base, "--layer-kinds", "linear", "--feature-dim", "2")...)
	if code != 0 {
		t.Fatalf("bench --generate --layer-kinds linear: exit %d: %s", code, stderr)
	}
	lin := genRows(out)
	if len(lin) != 4 || !lin[0].Cached || lin[1].Cached || lin[0].LayerKinds != "linear" || !(lin[0].MsPerToken > 0) || !(lin[2].TokensPerS > 0) {
		t.Fatalf("linear results %+v", lin)
	}
	// Per block S (1, H·dφ, dk) and z (1, 1, H·dφ), float32: dφ = 1+2+4
	// for Taylor of d' = 2.
	const f = 2 * 7
	if want := 2 * (f*4 + f) * 4; lin[0].CacheBytes != want || lin[2].CacheBytes != want {
		t.Errorf("linear state %d bytes at position 4, %d at 16; want %d at both", lin[0].CacheBytes, lin[2].CacheBytes, want)
	}
	if !strings.Contains(out, "layer kinds linear") {
		t.Errorf("the table does not name the layer kinds:\n%s", out)
	}
	code, out, stderr = qkv(base...)
	if code != 0 {
		t.Fatalf("bench --generate: exit %d: %s", code, stderr)
	}
	soft := slices.DeleteFunc(genRows(out), func(r genResult) bool { return r.Path == "fast" }) // the graph path's rows
	if len(soft) != 4 || soft[0].LayerKinds != "" || soft[2].CacheBytes <= soft[0].CacheBytes {
		t.Errorf("softmax results %+v: want caches growing with the position", soft)
	}
	if code, _, stderr := qkv(append(base, "--layer-kinds", "linear", "--feature-map", "nope")...); code != 2 || !strings.Contains(stderr, "feature") {
		t.Errorf("bad --feature-map: exit %d, stderr %q", code, stderr)
	}
}

// BenchmarkSpeedGenerate is the recurrent generation target
// (docs/linear-attention.md): the cached decoder's step at position 4096
// (stepAt, as qkv bench --generate times it) of nanoGPT's CPU model
// (dim 128, 4 layers of 4 heads) with softmax attention in every block,
// against the same model with linear attention (Based's Taylor map of
// d' = 16, and elu+1) in every block:
//
//	go test ./cmd/qkv -run '^$' -bench SpeedGenerate -benchtime 20x
func BenchmarkSpeedGenerate(b *testing.B) {
	const p = 4096
	for _, v := range []struct {
		name string
		set  func(*config.Config)
	}{
		{"softmax", func(*config.Config) {}},
		{"linear_taylor16", func(c *config.Config) {
			c.Model.LayerKinds, c.Model.FeatureMap, c.Model.FeatureDim = "linear", graph.FeatureTaylor, 16
		}},
		{"linear_elu1", func(c *config.Config) { c.Model.LayerKinds, c.Model.FeatureMap = "linear", graph.FeatureELU1 }},
	} {
		b.Run(fmt.Sprintf("%s/position=%d", v.name, p), func(b *testing.B) {
			cfg, err := config.Preset(config.PresetNanoGPTCPU)
			if err != nil {
				b.Fatal(err)
			}
			v.set(&cfg)
			c := genConfig(cfg, p)
			net, err := model.Build(c, 1, p+1, model.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer net.Close()
			cached, err := net.Cached()
			if err != nil {
				b.Fatal(err)
			}
			seq := make([]int, p)
			for i := range seq {
				seq[i] = 2 + i%14
			}
			if _, err := stepAt(cached, seq, 1); err != nil { // the prefix fed, the step warm
				b.Fatal(err)
			}
			for b.Loop() {
				if _, err := cached.Feed([]int{seq[p-1]}, p); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
			b.ReportMetric(float64(cached.CacheBytes()), "cache-bytes")
		})
	}
}
