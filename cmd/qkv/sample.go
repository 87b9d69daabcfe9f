package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/train/infer"
	"github.com/qkv-dev/qkv/train/model"
)

func runSample(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("sample", "--checkpoint DIR [--prompt TEXT] [--tokens N]", stderr)
	load := checkpointFlag(fs, stderr)
	prompt := fs.String("prompt", "", "text the sample continues (its last --context characters are read; empty: from the start of a text)")
	tokens := fs.Int("tokens", 500, "characters to generate")
	temperature := fs.Float64("temperature", 0.8, "divides the logits before sampling: below 1 more conservative, above more random; 0 is greedy decoding")
	topK := fs.Int("top-k", 200, "sample among the k most likely characters only (0: all)")
	topP := fs.Float64("top-p", 0, "sample among the most likely characters whose probabilities sum to p (0 or 1: all)")
	seed := fs.Uint64("seed", 1337, "seed of the draws: the same seed, checkpoint and flags give the same text")
	cache := fs.Bool("cache", true, "extend the sequence with the key/value cache; --cache=false recomputes every position for every character (the same text, slower)")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if *tokens < 0 {
		return fmt.Errorf("%w: --tokens must be at least 0, got %d", errUsage, *tokens)
	}
	// Each flag's own sentence, naming it; infer's words name its
	// parameters, not the flags.
	switch {
	case !(*temperature >= 0) || math.IsInf(*temperature, 1):
		return fmt.Errorf("%w: --temperature must be a finite number, at least 0 (0: greedy decoding), got %v", errUsage, *temperature)
	case *topK < 0:
		return fmt.Errorf("%w: --top-k must be at least 0 (0: every character), got %d", errUsage, *topK)
	case !(*topP >= 0 && *topP <= 1):
		return fmt.Errorf("%w: --top-p must be in [0, 1] (0 or 1: every character), got %v", errUsage, *topP)
	}
	sampler, err := infer.NewSampler(*temperature, *topK, *topP, *seed)
	if err != nil {
		return fmt.Errorf("%w: --temperature, --top-k or --top-p: %s", errUsage, strings.TrimPrefix(err.Error(), "infer: sampler: "))
	}
	l, err := load(1, false)
	if err != nil {
		return err
	}
	defer l.Close()
	if !data.IsLanguageModel(l.task) {
		return fmt.Errorf("%w: qkv sample continues the text of a language model (task chars); this checkpoint's task is %s: ask it with qkv predict", errUsage, l.task.Name())
	}
	v := l.task.Vocab()
	ids, err := v.Encode(*prompt)
	if err != nil {
		return fmt.Errorf("%w: --prompt: %v", errUsage, err)
	}
	context := l.cfg.Task.Params.Context
	if len(ids) > context {
		fmt.Fprintf(stderr, "the prompt has %d characters: the model reads its last %d\n", len(ids), context)
		ids = ids[len(ids)-context:]
	}
	prefix := append([]int{v.SEP()}, ids...) // BOS starts every window
	var c *model.Cached
	if *cache {
		if c, err = l.m.Cached(); err != nil {
			return err
		}
	}
	// PAD, BOS and UNK are never a character of the text: the model was
	// never asked to predict them, and they are never drawn.
	special := []int{v.PAD(), v.SEP()}
	if unk, err := v.ID(data.CharUNKSymbol); err == nil {
		special = append(special, unk)
	}
	choose := func(logits []float64) int {
		for _, id := range special {
			logits[id] = math.Inf(-1)
		}
		return sampler.Next(logits)
	}
	out := bufio.NewWriter(stdout)
	fmt.Fprint(out, *prompt)
	start := time.Now()
	err = infer.Stream(l.m, c, prefix, *tokens, 1, choose, func(tok int) error {
		if _, err := out.WriteString(v.Decode([]int{tok})); err != nil {
			return err
		}
		return out.Flush() // each character as it comes
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(out)
	if err := out.Flush(); err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	how := "with the key/value cache"
	if !*cache {
		how = "recomputing every position"
	}
	fmt.Fprintf(stderr, "%d characters in %.2f s: %.0f characters/s (%s; past the context of %d characters, each recomputes its window)\n",
		*tokens, secs, float64(*tokens)/secs, how, context)
	return nil
}
