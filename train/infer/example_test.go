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

	m, _, task, err := infer.Load(dir, 4) // compiled for up to 4 prompts at a time
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
