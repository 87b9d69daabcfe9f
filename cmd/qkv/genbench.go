package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
	"github.com/qkv-dev/qkv/train/model/decode"
)

// cpuModel is /proc/cpuinfo's first "model name", or "unknown".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// genResult is one line of `qkv bench --generate`: the time to produce the
// token at Position, with and without the key/value cache (a linear
// block's recurrent state, for the blocks of --layer-kinds linear).
type genResult struct {
	Position int  `json:"position"`
	Cached   bool `json:"cached"`
	// Path is "fast" (decode.Decoder), "graph" (the cached step through
	// gorgonia, model.Cached) or "" without the cache.
	Path       string  `json:"path,omitempty"`
	MsPerToken float64 `json:"ms_per_token"`
	TokensPerS float64 `json:"tokens_per_s"`
	Dim        int     `json:"dim"`
	Layers     int     `json:"layers"`
	// LayerKinds are the model's (layers.StackConfig.LayerKinds), absent
	// for softmax attention in every block.
	LayerKinds string `json:"layer_kinds,omitempty"`
	// CacheBytes, of the cached decoder, is what its self-attentions keep
	// between steps (model.Cached.CacheBytes): key/value caches of room
	// for Position+1 tokens, or linear blocks' states, which do not grow.
	CacheBytes int `json:"cache_bytes,omitempty"`
}

// genConfig is the configuration of the decoder that runGenBench times at
// position p: cfg's model with a vocabulary of 16, room for p+1 tokens and
// no dropout.
func genConfig(cfg config.Config, p int) config.Config {
	m := cfg.Model
	m.Vocab, m.MaxLen, m.Dropout, m.AttnDropout = 16, p+1, 0, 0
	if m.Positions == "" {
		m.Positions = layers.PositionsLearned
	}
	cfg.Model = m
	return cfg
}

// runGenBench times producing one token at each position p of positions
// with a decoder of cfg's width and depth (random weights, one sequence, a
// context of p+1): with the cache, the step at position p once the p
// tokens before it are fed (model.Cached.Feed), which attends over the
// cached context, or reads a linear block's state; without it, the whole
// prefix of p tokens run again. Medians of repeats runs.
func runGenBench(cfg config.Config, positions []int, repeats int, stdout io.Writer) error {
	var results []genResult
	for _, p := range positions {
		c := genConfig(cfg, p)
		m := c.Model
		if err := c.Model.Validate(); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		seq := make([]int, p)
		for i := range seq {
			seq[i] = 2 + i%14
		}
		net, err := model.Build(c, 1, p+1, model.Options{})
		if err != nil {
			return configError(err, c)
		}
		cached, err := net.Cached()
		if err != nil {
			net.Close()
			return err
		}
		uncached := func() error { _, err := net.NextLogits(nil, [][]int{seq}); return err }
		// The fast path, where it runs the model: the same step at p.
		var fast *decode.Decoder
		if decode.Supported(c) == nil {
			if fast, err = decode.New(c, 1, net.Params); err != nil {
				net.Close()
				return err
			}
		}
		tUncached, err := median(uncached, repeats)
		if err == nil {
			var tStep, tFast float64
			if tStep, err = stepAt(cached, seq, repeats); err == nil && fast != nil {
				tFast, err = fastStepAt(fast, seq, repeats)
			}
			if err == nil {
				r := genResult{Position: p, Cached: true, Path: "graph", MsPerToken: tStep, Dim: m.Dim, Layers: m.Layers, LayerKinds: m.LayerKinds, CacheBytes: cached.CacheBytes()}
				results = append(results, r)
				u := r
				u.Cached, u.Path, u.MsPerToken, u.CacheBytes = false, "", tUncached, 0
				results = append(results, u)
				if fast != nil {
					f := r
					f.Path, f.MsPerToken = "fast", tFast
					results = append(results, f)
				} else {
					fmt.Fprintf(stdout, "position %d: the fast path does not run this model (%v): graph path only\n", p, decode.Supported(c))
				}
			}
		}
		net.Close()
		if err != nil {
			return err
		}
	}
	if k := cfg.Model.LayerKinds; k != "" {
		fmt.Fprintf(stdout, "layer kinds %s\n", k)
	}
	fmt.Fprintf(stdout, "%-10s %14s %16s %16s %18s %14s %16s %18s %8s\n", "position", "fast ms/token", "fast tokens/s", "cached ms/token", "cached tokens/s", "cache", "uncached ms/token", "uncached tokens/s", "fast/cached")
	for i := 0; i < len(results); {
		c, u := results[i].MsPerToken, results[i+1].MsPerToken
		f, n := math.NaN(), 2
		if i+2 < len(results) && results[i+2].Path == "fast" && results[i+2].Position == results[i].Position {
			f, n = results[i+2].MsPerToken, 3
		}
		fmt.Fprintf(stdout, "%-10d %14.4f %16.0f %16.3f %18.0f %14s %16.3f %18.0f %7.1fx\n", results[i].Position, f, 1000/f, c, 1000/c,
			config.FormatBytes(float64(results[i].CacheBytes)), u, 1000/u, c/f)
		i += n
	}
	fmt.Fprintf(stdout, "cached: the graph's cached step (model.Cached); fast: the fast decode path (%s kernels); kernels on a CPU of %s\n", decode.Kernels(), cpuModel())
	for _, r := range results {
		r.TokensPerS = 1000 / r.MsPerToken
		line, _ := json.Marshal(r)
		fmt.Fprintln(stdout, string(line))
	}
	return nil
}

// stepAt feeds the cached decoder seq, one token a step from position 0,
// untimed, and then times the step at position len(seq): one untimed and
// repeats timed, the median in milliseconds. Each repeat feeds that
// position again; it costs what the first feed did (a softmax block
// rewrites the same cache slot, a linear block adds to its state again).
func stepAt(c *model.Cached, seq []int, repeats int) (float64, error) {
	if err := c.Start(nil); err != nil {
		return 0, err
	}
	for t, id := range seq {
		if _, err := c.Feed([]int{id}, t); err != nil {
			return 0, err
		}
	}
	return median(func() error { _, err := c.Feed([]int{seq[len(seq)-1]}, len(seq)); return err }, repeats)
}

// fastStepAt is stepAt on the fast path: the median time in milliseconds
// of the step at position len(seq), the decoder primed with seq before
// each.
func fastStepAt(d *decode.Decoder, seq []int, repeats int) (float64, error) {
	ids := []int{seq[len(seq)-1]}
	ms := make([]float64, repeats+1) // the first warms up
	for i := range ms {
		if err := d.Prime([][]int{seq}); err != nil {
			return 0, err
		}
		start := time.Now()
		if err := d.Feed(ids); err != nil {
			return 0, err
		}
		ms[i] = float64(time.Since(start).Nanoseconds()) / 1e6
	}
	ms = ms[1:]
	slices.Sort(ms)
	return ms[len(ms)/2], nil
}

// median runs f once to warm up, then repeats times, and returns the
// median time in milliseconds.
func median(f func() error, repeats int) (float64, error) {
	if err := f(); err != nil {
		return 0, err
	}
	ms := make([]float64, repeats)
	for i := range ms {
		start := time.Now()
		if err := f(); err != nil {
			return 0, err
		}
		ms[i] = float64(time.Since(start).Microseconds()) / 1000
	}
	slices.Sort(ms)
	return ms[len(ms)/2], nil
}
