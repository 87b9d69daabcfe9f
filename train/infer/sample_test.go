package infer_test

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/infer"
	"github.com/qkv-dev/qkv/train/model"
)

// The sampler's draws follow softmax(logits/T) restricted by top-k and
// top-p, within 4 standard errors over 40,000 draws; tokens outside the
// restriction, or of probability 0, are never drawn.
func TestSamplerDistribution(t *testing.T) {
	logits := []float64{math.Inf(-1), 0.5, 1, 2, 3, -1}
	cases := []struct {
		name        string
		temperature float64
		topK        int
		topP        float64
		kept        []int // tokens that may be drawn, most likely first
	}{
		{"temperature 1", 1, 0, 0, []int{4, 3, 2, 1, 5}},
		{"temperature 0.5", 0.5, 0, 0, []int{4, 3, 2, 1, 5}},
		{"top-k 2", 1, 2, 0, []int{4, 3}},
		// p(4) = 0.61 at T=1, p(4)+p(3) = 0.83: 0.7 keeps two tokens.
		{"top-p 0.7", 1, 0, 0.7, []int{4, 3}},
		{"top-k 3, top-p 0.99", 1.5, 3, 0.99, []int{4, 3, 2}},
	}
	const draws = 40000
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := infer.NewSampler(c.temperature, c.topK, c.topP, 7)
			if err != nil {
				t.Fatal(err)
			}
			want := make([]float64, len(logits))
			var sum float64
			for _, id := range c.kept {
				want[id] = math.Exp(logits[id] / c.temperature)
				sum += want[id]
			}
			count := make([]float64, len(logits))
			for range draws {
				count[s.Next(slices.Clone(logits))]++
			}
			for id := range logits {
				p := want[id] / sum
				got := count[id] / draws
				se := math.Sqrt(p*(1-p)/draws) + 1e-12
				if math.Abs(got-p) > 4*se {
					t.Errorf("token %d drawn %.4f of the time, want %.4f (4 standard errors %.4f)", id, got, p, 4*se)
				}
			}
		})
	}
}

// Temperature 0 is argmax, the lowest id among ties; the same seed draws
// the same tokens; bad settings are refused naming them.
func TestSamplerGreedySeedAndErrors(t *testing.T) {
	s, err := infer.NewSampler(0, 0, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Next([]float64{1, 3, 3, 2}); got != 1 {
		t.Errorf("greedy chose %d, want 1", got)
	}
	draw := func(seed uint64) []int {
		s, err := infer.NewSampler(1, 0, 0, seed)
		if err != nil {
			t.Fatal(err)
		}
		var out []int
		for range 50 {
			out = append(out, s.Next([]float64{0, 0.1, 0.2, 0.3}))
		}
		return out
	}
	if a, b, c := draw(3), draw(3), draw(4); !slices.Equal(a, b) || slices.Equal(a, c) {
		t.Errorf("seed 3 twice: %v and %v; seed 4: %v: want the same, then different", a, b, c)
	}
	for _, bad := range []struct {
		temperature float64
		topK        int
		topP        float64
		word        string
	}{{-1, 0, 0, "temperature"}, {math.NaN(), 0, 0, "temperature"}, {math.Inf(1), 0, 0, "temperature"}, {1, -1, 0, "top-k"}, {1, 0, 1.5, "top-p"}, {1, 0, math.NaN(), "top-p"}} {
		if _, err := infer.NewSampler(bad.temperature, bad.topK, bad.topP, 1); err == nil || !strings.Contains(err.Error(), bad.word) {
			t.Errorf("NewSampler(%v, %d, %v): error %v, want one naming %s", bad.temperature, bad.topK, bad.topP, err, bad.word)
		}
	}
}

// charsModel returns a small character model of random weights over a
// text of its own, compiled for one row.
func charsModel(t *testing.T, dt config.DType) (*model.Model, config.Config) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "text.txt")
	text := strings.Repeat("the quick brown fox jumps over the lazy dog.\n", 20)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Preset(config.PresetNanoGPTCPU)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Task.Params.Data, cfg.Task.Params.Context = path, 12
	cfg.Model.Dim, cfg.Model.Hidden, cfg.Model.Layers, cfg.DType = 16, 32, 2, dt
	if _, err := cfg.Resolve(); err != nil {
		t.Fatal(err)
	}
	m, err := model.Build(cfg, 1, cfg.Model.MaxLen, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, cfg
}

// Stream with the key/value cache draws what recomputing every window
// draws, greedy and sampled, token for token, also far past the context
// (here 3 contexts), where each token is predicted from BOS and the last
// L-1 characters: the reference below crops as nanoGPT does.
func TestStreamCacheEqualsRecompute(t *testing.T) {
	for _, dt := range []config.DType{config.Float64, config.Float32} {
		m, cfg := charsModel(t, dt)
		L := cfg.Model.MaxLen
		c, err := m.Cached()
		if err != nil {
			t.Fatal(err)
		}
		prefix := []int{1, 5, 6, 7} // BOS and three characters
		const n = 40
		for _, temp := range []float64{0, 1} {
			run := func(cache *model.Cached) []int {
				s, err := infer.NewSampler(temp, 0, 0, 9)
				if err != nil {
					t.Fatal(err)
				}
				var got []int
				err = infer.Stream(m, cache, prefix, n, 1, s.Next, func(tok int) error { got = append(got, tok); return nil })
				if err != nil {
					t.Fatal(err)
				}
				return got
			}
			// The reference: NextLogits on BOS and the last L-1 tokens.
			s, err := infer.NewSampler(temp, 0, 0, 9)
			if err != nil {
				t.Fatal(err)
			}
			seq := slices.Clone(prefix)
			var want []int
			for range n {
				window := seq
				if len(seq) > L {
					window = append([]int{seq[0]}, seq[len(seq)-(L-1):]...)
				}
				logits, err := m.NextLogits(nil, [][]int{window})
				if err != nil {
					t.Fatal(err)
				}
				tok := s.Next(logits[0])
				seq, want = append(seq, tok), append(want, tok)
			}
			cached, recomputed := run(c), run(nil)
			if !slices.Equal(cached, want) || !slices.Equal(recomputed, want) {
				t.Errorf("%s temperature %v: cached %v, recomputed %v, want %v", dt, temp, cached, recomputed, want)
			}
		}
	}
}

// Stream refuses what it cannot do, naming it.
func TestStreamErrors(t *testing.T) {
	m, cfg := charsModel(t, config.Float64)
	L := cfg.Model.MaxLen
	noop := func(int) error { return nil }
	first := func(l []float64) int { return 2 }
	for _, c := range []struct {
		prefix  []int
		n, keep int
		word    string
	}{
		{nil, 1, 1, "prefix"},
		{make([]int, L+1), 1, 1, "prefix"},
		{[]int{1}, -1, 1, "tokens"},
		{[]int{1}, 1, L, "keep"},
	} {
		if err := infer.Stream(m, nil, c.prefix, c.n, c.keep, first, noop); err == nil || !strings.Contains(err.Error(), c.word) {
			t.Errorf("Stream(prefix of %d, n %d, keep %d): error %v, want one naming %s", len(c.prefix), c.n, c.keep, err, c.word)
		}
	}
}

// TestSamplerDrawsAsReflectionSort: Next, which sorts in buffers it keeps,
// draws the token a fresh sort.SliceStable of the ids by falling logit
// (ties by id) and the same weights draw, for logits with ties and hidden
// (-Inf) tokens, with and without top-k and top-p, call after call.
func TestSamplerDrawsAsReflectionSort(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for _, c := range []struct {
		k int
		p float64
	}{{0, 0}, {5, 0}, {0, 0.9}, {20, 0.5}} {
		s, err := infer.NewSampler(0.8, c.k, c.p, 42)
		if err != nil {
			t.Fatal(err)
		}
		ref := rand.New(rand.NewPCG(42, 0x73616d70))
		for call := range 300 {
			logits := make([]float64, 1+r.IntN(120))
			for i := range logits {
				logits[i] = float64(r.IntN(7)) // many ties
				if r.IntN(9) == 0 {
					logits[i] = math.Inf(-1)
				}
			}
			logits[r.IntN(len(logits))] = 3 // at least one visible
			want := referenceDraw(logits, 0.8, c.k, c.p, ref)
			if got := s.Next(logits); got != want {
				t.Fatalf("top-k %d top-p %v, call %d: Next = %d, the reference draws %d", c.k, c.p, call, got, want)
			}
		}
	}
}

// referenceDraw is Next as it was written with a fresh sort.SliceStable
// and fresh slices for every call.
func referenceDraw(logits []float64, temp float64, topK int, topP float64, rng *rand.Rand) int {
	order := make([]int, len(logits))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return logits[order[a]] > logits[order[b]] })
	if topK > 0 && topK < len(order) {
		order = order[:topK]
	}
	weights := make([]float64, len(order))
	var sum float64
	for i, id := range order {
		weights[i] = math.Exp((logits[id] - logits[order[0]]) / temp)
		sum += weights[i]
	}
	if topP > 0 && topP < 1 {
		var acc float64
		for i, w := range weights {
			acc += w
			if acc >= topP*sum {
				order, weights, sum = order[:i+1], weights[:i+1], acc
				break
			}
		}
	}
	u := rng.Float64() * sum
	for i, w := range weights {
		if u -= w; u < 0 {
			return order[i]
		}
	}
	last := len(weights) - 1
	for last > 0 && weights[last] == 0 {
		last--
	}
	return order[last]
}
