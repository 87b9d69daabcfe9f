package model_test

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/internal/graphtest"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
	"github.com/qkv-dev/qkv/train/optim"
)

// copyConfig returns a resolved float64 configuration of arch on the copy
// task, small enough to build in a moment.
func copyConfig(t *testing.T, arch config.Arch) (config.Config, data.Task) {
	t.Helper()
	cfg := config.Default()
	cfg.Arch, cfg.DType = arch, config.Float64
	cfg.Task = config.TaskSpec{Name: "copy", Params: data.TaskConfig{MinLength: 1, MaxLength: 6, Alphabet: 7}}
	cfg.Model.Dim, cfg.Model.Heads, cfg.Model.Hidden, cfg.Model.Layers = 12, 3, 20, 2
	task, err := cfg.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	return cfg, task
}

// TestCachedMemoryEqualsForward: the cached decoder fed a whole target
// token by token (Start, then Feed) gives at every position the logits the
// full forward pass gives there, within 1e-9 in float64: for an
// encoder–decoder, whose steps read the cross-attention memory Start
// computed from the sources, and for a decoder-only model, which reads
// none. Rows of different source and target lengths share the batch.
func TestCachedMemoryEqualsForward(t *testing.T) {
	srcs := [][]int{{2, 3, 4}, {5, 6, 7, 8, 2, 3}}
	tgts := [][]int{{1, 4, 2, 6, 3}, {1, 2}}
	for _, arch := range []config.Arch{config.ArchEncDec, config.ArchDecoder} {
		for _, impl := range []layers.AttentionImpl{"", layers.AttentionFlash} {
			t.Run(string(arch)+"/"+string(impl), func(t *testing.T) {
				cfg, _ := copyConfig(t, arch)
				cfg.Model.Attention = impl
				m, err := model.Build(cfg, 2, cfg.Model.MaxLen, model.Options{})
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				randomize(m.Params)
				sources := srcs
				if arch == config.ArchDecoder {
					sources = nil
				}
				b, err := m.BatchOf(sources, tgts)
				if err != nil {
					t.Fatal(err)
				}
				if err := m.SetBatch(b); err != nil {
					t.Fatal(err)
				}
				var full []float64 // (B, S, V)
				if err := m.Run(func() (err error) {
					full, err = graph.Float64s(m.Logits.Value())
					return err
				}); err != nil {
					t.Fatal(err)
				}
				c, err := m.Cached()
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Start(sources); err != nil {
					t.Fatal(err)
				}
				v := m.Logits.Shape()[2]
				worst, n := 0.0, 0
				for pos := range max(len(tgts[0]), len(tgts[1])) {
					ids := make([]int, c.B)
					for r, tgt := range tgts {
						if pos < len(tgt) {
							ids[r] = tgt[pos]
						}
					}
					rows, err := c.Feed(ids, pos)
					if err != nil {
						t.Fatal(err)
					}
					for r, tgt := range tgts {
						if pos >= len(tgt) {
							continue
						}
						want := full[(r*m.S+pos)*v : (r*m.S+pos+1)*v]
						for j := range want {
							worst = max(worst, math.Abs(rows[r][j]-want[j]))
						}
						n++
					}
				}
				if worst > 1e-9 {
					t.Errorf("cached logits differ from the full forward pass by %.3g over %d positions (tolerance 1e-9)", worst, n)
				}
				if sources != nil { // the control: other sources, other logits
					if err := c.Start([][]int{srcs[1], srcs[0]}); err != nil {
						t.Fatal(err)
					}
					rows, err := c.Feed([]int{tgts[0][0], tgts[1][0]}, 0)
					if err != nil {
						t.Fatal(err)
					}
					changed := 0.0
					for j := range v {
						changed = max(changed, math.Abs(rows[0][j]-full[j]))
					}
					if changed < 1e-6 {
						t.Errorf("another source changes the first logits by %.3g only: the memory is not read", changed)
					}
				}
				t.Logf("%d positions, worst logit difference %.2g", n, worst)
			})
		}
	}
}

// TestCachedStartFeedErrors: Start and Feed refuse what they cannot run,
// naming it, where a wrong source or position would decode garbage.
func TestCachedStartFeedErrors(t *testing.T) {
	for _, arch := range []config.Arch{config.ArchEncDec, config.ArchDecoder} {
		cfg, _ := copyConfig(t, arch)
		m, err := model.Build(cfg, 2, cfg.Model.MaxLen, model.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		c, err := m.Cached()
		if err != nil {
			t.Fatal(err)
		}
		if arch == config.ArchEncDec {
			graphtest.WantErr(t, c.Start(nil), "no sources")
			graphtest.WantErr(t, c.Start([][]int{{2}, {2}, {2}}), "3 sources, want at most 2")
			graphtest.WantErr(t, c.Start([][]int{make([]int, c.SourceLen+1)}), "want 1 to")
			if err := c.Start([][]int{{2}}); err != nil {
				t.Fatal(err)
			}
			if _, _, err := c.Decode(nil, [][]int{{1}}, []int{1}); err == nil {
				t.Error("Decode of an encoder-decoder without sources: no error")
			}
		} else {
			graphtest.WantErr(t, c.Start([][]int{{2}}), "no encoder")
			if err := c.Start(nil); err != nil {
				t.Fatal(err)
			}
		}
		_, err = c.Feed([]int{1}, 0)
		graphtest.WantErr(t, err, "feed: 1 tokens at position 0, want 2")
		_, err = c.Feed([]int{1, 1}, c.L)
		graphtest.WantErr(t, err, "feed:", "want 2 at a position in [0,")
		var nilCached *model.Cached
		graphtest.WantErr(t, nilCached.Start(nil), "nil cached decoder")
		if _, err := nilCached.Feed([]int{1}, 0); err == nil {
			t.Error("Feed of a nil Cached: no error")
		}
	}
}

// TestBuildEitherArch: Build, Assemble and NewCached build the
// configuration's own architecture, with the inputs and weights of its
// kind, and refuse an architecture they do not know.
func TestBuildEitherArch(t *testing.T) {
	for _, arch := range []config.Arch{config.ArchDecoder, config.ArchEncDec} {
		cfg, _ := copyConfig(t, arch)
		m, err := model.Build(cfg, 2, cfg.Model.MaxLen, model.Options{})
		if err != nil {
			t.Fatal(err)
		}
		encdec := arch == config.ArchEncDec
		if m.Arch != arch || (m.SourceLen != 0) != encdec || (m.SourceIDs != nil) != encdec || (m.CrossPad != nil) != encdec ||
			len(m.Weights.Self) != cfg.Model.Layers || (len(m.Weights.Cross) == cfg.Model.Layers) != encdec || (len(m.Weights.Encoder) == cfg.Model.Layers) != encdec {
			t.Errorf("%s: built arch %s, source %d, %d self, %d encoder and %d cross weights", arch, m.Arch, m.SourceLen, len(m.Weights.Self), len(m.Weights.Encoder), len(m.Weights.Cross))
		}
		if m.Targets != nil || m.Cost != nil {
			t.Errorf("%s: an inference model has targets or a cost", arch)
		}
		if a, err := model.Assemble(cfg, 2, cfg.Model.MaxLen, model.Options{Train: true}); err != nil || a.Arch != arch || a.Cost == nil || a.VM != nil {
			t.Errorf("%s: Assemble with Train: %v", arch, err)
		}
		m.Close()
	}
	cfg, _ := copyConfig(t, config.ArchDecoder)
	cfg.Arch = "rnn"
	if _, err := model.Build(cfg, 1, cfg.Model.MaxLen, model.Options{}); err == nil || !strings.Contains(err.Error(), `model: unknown architecture "rnn"`) {
		t.Errorf("Build of an unknown architecture: %v", err)
	}
	if _, err := model.Assemble(cfg, 1, cfg.Model.MaxLen, model.Options{}); err == nil {
		t.Error("Assemble of an unknown architecture: no error")
	}
	if _, err := model.NewCached(cfg, 1, nil); err == nil {
		t.Error("NewCached of an unknown architecture: no error")
	}
}

// TestStepEitherArch: the one Step trains either architecture on the batch
// BatchFor lays out (a short batch padded with rows of no loss), and the
// encoder–decoder's batch is the prompt to the encoder, SEP and the answer
// but its last token to the decoder, the answer as its targets.
func TestStepEitherArch(t *testing.T) {
	for _, arch := range []config.Arch{config.ArchDecoder, config.ArchEncDec} {
		t.Run(string(arch), func(t *testing.T) {
			cfg, task := copyConfig(t, arch)
			m, err := model.Build(cfg, 4, cfg.Model.MaxLen, model.Options{Train: true})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			oc, err := config.OptimizerFor(cfg)
			if err != nil {
				t.Fatal(err)
			}
			opt, err := optim.New(oc, m.Params)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			examples := []data.Example{task.Generate(rng), task.Generate(rng), task.Generate(rng)}
			b, err := m.BatchFor(task, examples)
			if err != nil {
				t.Fatal(err)
			}
			if b.B != 4 || b.S != m.S || (b.Source != nil) != (arch == config.ArchEncDec) {
				t.Fatalf("batch of %d rows of %d, source %v", b.B, b.S, b.Source != nil)
			}
			if b.Source != nil {
				e, sep := examples[1], task.Vocab().SEP()
				row := b.Inputs[m.S : 2*m.S]
				if got := b.Source.IDs[m.SourceLen : m.SourceLen+len(e.Prompt)]; !equal(got, e.Prompt) || b.Source.Lengths[1] != len(e.Prompt) {
					t.Errorf("source row 1 = %v (length %d), want the prompt %v", got, b.Source.Lengths[1], e.Prompt)
				}
				if row[0] != sep || !equal(row[1:len(e.Answer)], e.Answer[:len(e.Answer)-1]) || !equal(b.Targets[m.S:m.S+len(e.Answer)], e.Answer) {
					t.Errorf("decoder row 1 = %v, targets %v; want SEP and %v", row, b.Targets[m.S:2*m.S], e.Answer)
				}
				if b.Lengths[3] != 1 || b.Source.Lengths[3] != 1 {
					t.Errorf("the filler row has lengths %d and %d, want 1", b.Lengths[3], b.Source.Lengths[3])
				}
			}
			for _, w := range b.Weights[3*m.S:] {
				if w != 0 {
					t.Fatal("the filler row carries loss")
				}
			}
			var losses []float64
			for step := range 8 {
				res, err := m.Step(b, opt, model.StepOptions{LR: 3e-3, Clip: 1, Step: step})
				if err != nil {
					t.Fatal(err)
				}
				losses = append(losses, res.Loss)
			}
			if !(losses[7] < losses[0]) {
				t.Errorf("8 steps on one batch: loss %v", losses)
			}
			if _, err := m.BatchFor(task, append(examples, examples...)); err == nil {
				t.Error("BatchFor of 6 examples for 4 rows: no error")
			}
			bad := b
			if arch == config.ArchEncDec {
				bad.Source = nil
			} else {
				bad.Source = &model.Source{S: 1, IDs: make([]int, 4), Lengths: []int{1, 1, 1, 1}}
			}
			if _, err := m.Step(bad, opt, model.StepOptions{LR: 1e-3}); err == nil {
				t.Error("Step of a batch with the other architecture's source: no error")
			}
		})
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
