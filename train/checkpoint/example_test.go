package checkpoint_test

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"

	"github.com/qkv-dev/qkv/train/checkpoint"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
)

// Weights out of one model and into another, here through PyTorch's
// nn.Linear layout: the second model, built with other random weights,
// then computes exactly what the first does.
func ExampleLoadWeights() {
	cfg := config.Default()
	if _, err := cfg.Resolve(); err != nil {
		log.Fatal(err)
	}
	a, err := model.Build(cfg, 1, cfg.Model.MaxLen, model.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer a.Close()
	cfg.Seed = 2 // other initial weights
	b, err := model.Build(cfg, 1, cfg.Model.MaxLen, model.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer b.Close()

	dir, err := os.MkdirTemp("", "qkv-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "decoder.safetensors")
	if err := checkpoint.SaveWeights(path, a.Params, checkpoint.LayoutTorch); err != nil {
		log.Fatal(err)
	}
	seq := [][]int{{2, 3, 4, 2, 1}}
	before, err := b.NextLogits(nil, seq)
	if err != nil {
		log.Fatal(err)
	}
	if err := checkpoint.LoadWeights(path, b.Params, checkpoint.LayoutTorch); err != nil {
		log.Fatal(err)
	}
	want, err := a.NextLogits(nil, seq)
	if err != nil {
		log.Fatal(err)
	}
	got, err := b.NextLogits(nil, seq)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("same logits before loading:", slices.Equal(before[0], want[0]))
	fmt.Println("same logits after loading:", slices.Equal(got[0], want[0]))
	// Output:
	// same logits before loading: false
	// same logits after loading: true
}
