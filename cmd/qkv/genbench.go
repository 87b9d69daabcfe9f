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
// token at Position, with and without the key/value cache.
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
// context of p+1): with the cache, one step, which attends over the
// context (the mean of p steps); without it, the whole prefix of p tokens
// run again. Medians of repeats runs.
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
		// With the cache every step attends over the context of p+1
		// positions, so p steps from a one-token prompt cost p times the
		// step at position p.
		steps := func() error { _, err := cached.Generate(nil, [][]int{seq[:1]}, []int{p}); return err }
		// The fast path, where it runs the model: the same p steps.
		var fast func() error
		if decode.Supported(c) == nil {
			d, err := decode.New(c, 1, net.Params)
			if err != nil {
				net.Close()
				return err
			}
			ids := make([]int, 1)
			fast = func() error {
				d.Reset()
				for i := range p {
					ids[0] = seq[i]
					if err := d.Feed(ids); err != nil {
						return err
					}
				}
				return nil
			}
		}
		tUncached, err := median(uncached, repeats)
		if err == nil {
			var tSteps, tFast float64
			if tSteps, err = median(steps, repeats); err == nil && fast != nil {
				tFast, err = median(fast, repeats)
			}
			if err == nil {
				results = append(results,
					genResult{Position: p, Cached: true, Path: "graph", MsPerToken: tSteps / float64(p), Dim: m.Dim, Layers: m.Layers},
					genResult{Position: p, Cached: false, MsPerToken: tUncached, Dim: m.Dim, Layers: m.Layers})
				if fast != nil {
					results = append(results, genResult{Position: p, Cached: true, Path: "fast", MsPerToken: tFast / float64(p), Dim: m.Dim, Layers: m.Layers})
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
	fmt.Fprintf(stdout, "%-10s %14s %16s %16s %18s %16s %18s %8s\n", "position", "fast ms/token", "fast tokens/s", "cached ms/token", "cached tokens/s", "uncached ms/token", "uncached tokens/s", "fast/cached")
	for i := 0; i < len(results); {
		c, u := results[i].MsPerToken, results[i+1].MsPerToken
		f, n := math.NaN(), 2
		if i+2 < len(results) && results[i+2].Path == "fast" && results[i+2].Position == results[i].Position {
			f, n = results[i+2].MsPerToken, 3
		}
		fmt.Fprintf(stdout, "%-10d %14.4f %16.0f %16.3f %18.0f %16.3f %18.0f %7.1fx\n", results[i].Position, f, 1000/f, c, 1000/c, u, 1000/u, c/f)
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
