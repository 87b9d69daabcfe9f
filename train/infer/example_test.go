package infer_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/train"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/infer"
	"github.com/qkv-dev/qkv/train/model"
)

// Load a trained checkpoint and run it: the sort model answers prompts it
// never saw. (The example first trains one, as `qkv train` would.)
func ExampleLoad() {
	dir, err := os.MkdirTemp("", "qkv-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	cfg := config.Default() // sort 6 symbols over 3, to 100% held-out exact match
	if _, err := train.Run(context.Background(), cfg, train.Options{Out: dir}); err != nil {
		log.Fatal(err)
	}

	m, _, task, err := model.Load(dir, 4, model.LoadOptions{}) // compiled for up to 4 prompts at a time
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	var prompts [][]int
	for _, text := range []string{"2 0 1 1 0 2", "1 1 1 0 0 0", "2 2 1 0 2 1"} {
		p, err := data.ParsePrompt(task, text)
		if err != nil {
			log.Fatal(err)
		}
		prompts = append(prompts, p)
	}
	answers, err := infer.Greedy(m, task, prompts)
	if err != nil {
		log.Fatal(err)
	}
	for i, a := range answers {
		fmt.Println(task.Vocab().Decode(prompts[i]), "->", task.Vocab().Decode(a))
	}
	// Output:
	// 2 0 1 1 0 2 -> 0 0 1 1 2 2
	// 1 1 1 0 0 0 -> 0 0 0 1 1 1
	// 2 2 1 0 2 1 -> 0 1 1 2 2 2
}

// A sampler at temperature 0 is greedy decoding; above it, it draws from
// the softmax restricted by top-k, the same tokens for the same seed.
func ExampleNewSampler() {
	logits := []float64{0.1, 2.0, 1.5, -1}
	greedy, err := infer.NewSampler(0, 0, 0, 1)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("greedy:", greedy.Next(logits))
	s, err := infer.NewSampler(1, 2, 0, 1337) // tokens 1 and 2 only
	if err != nil {
		log.Fatal(err)
	}
	counts := map[int]int{}
	for range 1000 {
		counts[s.Next(logits)]++
	}
	fmt.Println("drawn from the top 2:", counts[0]+counts[3] == 0)
	// Output:
	// greedy: 1
	// drawn from the top 2: true
}
