package train

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/qkv-dev/qkv/internal/graphtest"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/checkpoint"
	"github.com/qkv-dev/qkv/train/config"
)

// TestRunDirOrphanCheckpoint: a run directory whose checkpoint.json is gone
// but whose checkpoint-000004/ is intact still holds that run. A fresh run
// is refused and leaves the folder as it was, Force moves it aside whole,
// and a resume continues from it bit for bit.
func TestRunDirOrphanCheckpoint(t *testing.T) {
	cfg := tinyConfig()
	cfg.Steps, cfg.Warmup, cfg.EvalEvery, cfg.CheckpointEvery = 6, 0, 2, 2
	straight := t.TempDir()
	if _, err := Run(context.Background(), cfg, Options{Out: straight}); err != nil {
		t.Fatal(err)
	}
	orphaned := func(t *testing.T) (dir, folder string, model []byte) {
		dir = filepath.Join(t.TempDir(), "run")
		if _, err := Run(context.Background(), cfg, Options{Out: dir, StopAfter: 4}); !errors.Is(err, ErrInterrupted) {
			t.Fatal(err)
		}
		folder = filepath.Dir(checkpoint.File(dir, checkpoint.ModelFile))
		if err := os.Remove(filepath.Join(dir, checkpoint.ManifestFile)); err != nil {
			t.Fatal(err)
		}
		return dir, folder, graphtest.ReadFile(t, filepath.Join(folder, checkpoint.ModelFile))
	}
	cases := 0
	t.Run("fresh run refused", func(t *testing.T) {
		cases++
		dir, folder, model := orphaned(t)
		_, err := Run(context.Background(), cfg, Options{Out: dir})
		if !errors.Is(err, ErrRunExists) {
			t.Fatalf("a fresh run over %s: %v, want ErrRunExists", folder, err)
		}
		if got := graphtest.ReadFile(t, filepath.Join(folder, checkpoint.ModelFile)); string(got) != string(model) {
			t.Errorf("the refused run changed %s", folder)
		}
	})
	t.Run("forced run moves it aside", func(t *testing.T) {
		cases++
		dir, folder, model := orphaned(t)
		if _, err := Run(context.Background(), cfg, Options{Out: dir, Force: true}); err != nil {
			t.Fatal(err)
		}
		moved := filepath.Join(dir+".old-1", filepath.Base(folder), checkpoint.ModelFile)
		if got := graphtest.ReadFile(t, moved); string(got) != string(model) {
			t.Errorf("%s is not the orphaned checkpoint", moved)
		}
	})
	t.Run("resume continues bit for bit", func(t *testing.T) {
		cases++
		dir, _, _ := orphaned(t)
		if _, err := Run(context.Background(), cfg, Options{Out: dir, Resume: true}); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{checkpoint.ModelFile, checkpoint.OptimizerFile} {
			if string(graphtest.ReadFile(t, checkpoint.File(dir, name))) != string(graphtest.ReadFile(t, checkpoint.File(straight, name))) {
				t.Errorf("%s of the run resumed from the orphaned folder differs from a run never stopped", name)
			}
		}
		if got, want := graphtest.DirNames(t, dir), graphtest.DirNames(t, straight); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("the resumed run's directory holds %q, a run never stopped %q", got, want)
		}
	})
	t.Logf("%d cases of a run directory whose checkpoint.json was lost", cases)
}

// TestCheckpointLimitsBoundRealFiles: for every kind of model (decoder and
// encoder-decoder, with and without biases, float32 and float64, learned
// and no positions) the files a run saves fit within config.CheckpointLimits,
// and the bound is not loose by more than the headers.
func TestCheckpointLimitsBoundRealFiles(t *testing.T) {
	n := 0
	for _, arch := range []config.Arch{config.ArchDecoder, config.ArchEncDec} {
		for _, bias := range []bool{true, false} {
			for _, dt := range []config.DType{config.Float32, config.Float64} {
				cfg := tinyConfig()
				cfg.Arch, cfg.Model.Bias, cfg.DType = arch, bias, dt
				cfg.Steps, cfg.Warmup, cfg.EvalEvery = 1, 0, 1
				if !bias {
					cfg.Model.Positions = layers.PositionsNone
				}
				dir := t.TempDir()
				if _, err := Run(context.Background(), cfg, Options{Out: dir}); err != nil {
					t.Fatal(err)
				}
				saved := graphtest.ReadFile(t, checkpoint.File(dir, checkpoint.ConfigFile))
				resolved, err := config.Unmarshal(saved)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := resolved.Resolve(); err != nil {
					t.Fatal(err)
				}
				l := config.CheckpointLimits(resolved, len(saved))
				for _, f := range []struct {
					name  string
					limit int64
				}{{checkpoint.ModelFile, l.Model}, {checkpoint.OptimizerFile, l.Optimizer}} {
					size := int64(len(graphtest.ReadFile(t, checkpoint.File(dir, f.name))))
					if size > f.limit || f.limit > 3*size+64<<10 {
						t.Errorf("%s bias %v %s: %s is %d bytes, the limit %d", arch, bias, dt, f.name, size, f.limit)
					}
				}
				n++
			}
		}
	}
	t.Logf("%d kinds of model: their files fit within config.CheckpointLimits", n)
}
