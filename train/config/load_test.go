package config_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/internal/graphtest"
	"github.com/qkv-dev/qkv/train/checkpoint"
	"github.com/qkv-dev/qkv/train/config"
)

// forgeCheckpoint saves a checkpoint whose config.json is cfg and whose
// model.safetensors the manifest records as size bytes: a sparse file of
// that size, so that the checksums are all that is wrong with it and only a
// check of the sizes before reading can refuse it cheaply.
func forgeCheckpoint(t *testing.T, cfg config.Config, size int64) string {
	t.Helper()
	b, err := config.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ck := &checkpoint.Checkpoint{Step: 1, Config: b, State: []byte(`{}`),
		Weights: []checkpoint.NamedTensor{{Name: "w", Shape: []int{1}, DType: tensor.Float32, Data: []float64{1}}}}
	if err := checkpoint.Save(dir, ck); err != nil {
		t.Fatal(err)
	}
	model := checkpoint.File(dir, checkpoint.ModelFile)
	if err := os.Truncate(model, size); err != nil {
		t.Skipf("no sparse files here: %v", err)
	}
	path := filepath.Join(dir, checkpoint.ManifestFile)
	var m map[string]any
	if err := json.Unmarshal(graphtest.ReadFile(t, path), &m); err != nil {
		t.Fatal(err)
	}
	for _, f := range m["files"].([]any) {
		if f := f.(map[string]any); f["name"] == checkpoint.ModelFile {
			f["size"] = size
		}
	}
	mb, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, mb, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestLoadCheckpointRefusesForgedSizes: a checkpoint whose manifest and
// model file claim more than its configuration's weights take, or a
// consistent 1000-layer one too large for the memory limit, is refused
// before its weights are read: the refusal allocates under a megabyte.
func TestLoadCheckpointRefusesForgedSizes(t *testing.T) {
	const maxAlloc = 1 << 20
	small := config.Default()
	big := config.Default()
	big.Model.Layers = 1000
	resolved := big
	if _, err := resolved.Resolve(); err != nil {
		t.Fatal(err)
	}
	b, err := config.Marshal(big)
	if err != nil {
		t.Fatal(err)
	}
	bigSize := config.CheckpointLimits(resolved, len(b)).Model // consistent with its config
	defer config.SetMemoryLimit(config.SetMemoryLimit(256 << 20))
	cases := []struct {
		name  string
		cfg   config.Config
		size  int64
		check func(*config.Config) error
		want  string
	}{
		{"20 GB for a 2-layer model", small, 20 << 30, nil, "checkpoint.json records 21474836480 bytes, more than the"},
		{"1000 layers, consistent, over the memory limit", big, bigSize, nil, "more than the memory limit of 256.0 MiB"},
		{"1000 layers, refused by the caller's check", big, bigSize, func(c *config.Config) error {
			if _, err := c.Resolve(); err != nil {
				return err
			}
			est, err := config.EstimateRun(*c)
			if err != nil {
				return err
			}
			return est.Check(0)
		}, "config: the model needs about"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := forgeCheckpoint(t, c.cfg, c.size)
			var err error
			n := graphtest.Allocated(func() { _, _, err = config.LoadCheckpoint(dir, c.check) })
			graphtest.WantErr(t, err, c.want)
			if n > maxAlloc {
				t.Errorf("the refusal allocated %d bytes", n)
			}
			if c.check != nil {
				var me *config.MemoryError
				if !errors.As(err, &me) {
					t.Errorf("the caller's error is not returned as it is: %v", err)
				}
			}
		})
	}
	t.Logf("%d forged checkpoints refused before their weights were read (a %d-byte model file for 1000 layers)", len(cases), bigSize)
}
