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
	cache := fs.Bool("cache", true, "extend the sequence with the key/value cache; --cache=false recomputes every position for every character (the same text, slower; one sample, graph path)")
	decoder := fs.String("decoder", decoderAuto, "which decoder extends the samples: auto (the fast path where it runs the model, else the graph's cached step), fast, or graph (the cached step through gorgonia, for comparison; the same text within float rounding)")
	numSamples := fs.Int("num-samples", 1, "samples drawn at once, as rows of one batch sharing the weights; sample i draws from its own stream seeded by --seed and i (sample 0 by --seed itself), so each is reproducible")
	overflow := fs.String("overflow", overflowCrop, "past the context: crop (nanoGPT's: every further character is predicted from BOS and the last context-1 characters, all recomputed) or slide (re-prime the cache from BOS and the last half of the context, then extend it a character per step until it is full again: cheaper, each character sees between half the context and all of it; docs/generation.md)")
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
	if *numSamples < 1 {
		return fmt.Errorf("%w: --num-samples must be at least 1, got %d", errUsage, *numSamples)
	}
	if *overflow != overflowCrop && *overflow != overflowSlide {
		return fmt.Errorf("%w: --overflow must be %s or %s, got %q", errUsage, overflowCrop, overflowSlide, *overflow)
	}
	switch *decoder {
	case decoderAuto, decoderFast, decoderGraph:
	default:
		return fmt.Errorf("%w: --decoder must be %s, %s or %s, got %q", errUsage, decoderAuto, decoderFast, decoderGraph, *decoder)
	}
	if !*cache && (*numSamples != 1 || *overflow != overflowCrop || *decoder == decoderFast) {
		return fmt.Errorf("%w: --cache=false recomputes one sample on the graph path with the crop: it takes no --num-samples, --overflow slide or --decoder fast", errUsage)
	}
	samplers := make([]*infer.Sampler, *numSamples)
	for i := range samplers {
		var err error
		if samplers[i], err = infer.NewSampler(*temperature, *topK, *topP, sampleSeed(*seed, i)); err != nil {
			return fmt.Errorf("%w: --temperature, --top-k or --top-p: %s", errUsage, strings.TrimPrefix(err.Error(), "infer: sampler: "))
		}
	}
	sampler := samplers[0]
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
	// PAD, BOS and UNK are never a character of the text: the model was
	// never asked to predict them, and they are never drawn.
	special := []int{v.PAD(), v.SEP()}
	if unk, err := v.ID(data.CharUNKSymbol); err == nil {
		special = append(special, unk)
	}
	mask := func(logits []float64) []float64 {
		for _, id := range special {
			logits[id] = math.Inf(-1)
		}
		return logits
	}
	out := bufio.NewWriter(stdout)
	if !*cache {
		fmt.Fprint(out, *prompt)
		start := time.Now()
		err = infer.Stream(l.m, nil, prefix, *tokens, 1, func(logits []float64) int { return sampler.Next(mask(logits)) }, func(tok int) error {
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
		fmt.Fprintf(stderr, "%d characters in %.2f s: %.0f characters/s (recomputing every position; past the context of %d characters, each recomputes its window)\n",
			*tokens, secs, float64(*tokens)/secs, context)
		return nil
	}
	lm, how, err := newRowsLM(*decoder, l.cfg, l.m, *numSamples)
	if err != nil {
		return err
	}
	defer lm.close()
	n := *numSamples
	texts := make([][]int, n) // of samples after the first, printed at the end
	if n == 1 {
		fmt.Fprint(out, *prompt)
	}
	start := time.Now()
	reprimes, err := generate(lm, n, prefix, *tokens, l.cfg.Model.MaxLen, 1, *overflow,
		func(r int, logits []float64) int { return samplers[r].Next(mask(logits)) },
		func(r, tok int) error {
			if n > 1 {
				texts[r] = append(texts[r], tok)
				return nil
			}
			if _, err := out.WriteString(v.Decode([]int{tok})); err != nil {
				return err
			}
			return out.Flush() // each character as it comes
		})
	if err != nil {
		return err
	}
	secs := time.Since(start).Seconds()
	if n > 1 {
		for r, text := range texts {
			fmt.Fprintf(out, "--- sample %d of %d (seed %d) ---\n%s%s\n", r+1, n, sampleSeed(*seed, r), *prompt, v.Decode(text))
		}
	} else {
		fmt.Fprintln(out)
	}
	if err := out.Flush(); err != nil {
		return err
	}
	past := fmt.Sprintf("past the context of %d positions (BOS and %d characters), each character recomputes its window (--overflow crop)", l.cfg.Model.MaxLen, context)
	if *overflow == overflowSlide {
		past = fmt.Sprintf("past the context of %d positions, the cache was re-primed from its last half (--overflow slide)", l.cfg.Model.MaxLen)
	}
	fmt.Fprintf(stderr, "%d samples x %d characters in %.3f s: %.0f characters/s (%s; %s: %d re-primes)\n",
		n, *tokens, secs, float64(n**tokens)/secs, how, past, reprimes)
	return nil
}

// sampleSeed is the seed of sample i's draws: seed for sample 0, and for
// the others seed plus i times the golden ratio's 64-bit fraction, so that
// nearby seeds and samples do not share streams.
func sampleSeed(seed uint64, i int) uint64 {
	return seed + uint64(i)*0x9e3779b97f4a7c15
}
