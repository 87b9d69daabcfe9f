package train_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/internal/graphtest"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/tools/torchref"
	"github.com/qkv-dev/qkv/train"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/model"
)

// torchScript is the independent PyTorch reference, relative to this package.
const torchScript = "../tools/torchref/torchref.py"

// torchPython returns the interpreter of the PyTorch reference
// (graphtest.TorchPython): required unless $QKV_SKIP_TORCH is 1.
func torchPython(t *testing.T) string {
	t.Helper()
	return graphtest.TorchPython(t, torchScript)
}

// torchVariant is one model configuration compared with the reference.
type torchVariant struct {
	name  string
	dtype string
	tol   float64
	model layers.StackConfig
}

// torchConfig is a tiny two-block model on reverse with rows of 2 to 4
// symbols (vocab 6, S = 8), trained a few steps at a high learning rate so
// that LayerNorm gains and biases move away from their initial 1 and 0.
func torchConfig(v torchVariant) config.Config {
	cfg := config.Default()
	cfg.Task = config.TaskSpec{Name: "reverse", Params: data.TaskConfig{MinLength: 2, MaxLength: 4, Alphabet: 4}}
	cfg.Model = v.model
	cfg.DType = config.DType(v.dtype)
	cfg.Seed = 7
	cfg.Batch = 8
	cfg.Steps = 6
	cfg.LR = 1e-2
	cfg.MinLR = 1e-3
	cfg.Warmup = 1
	cfg.EvalEvery = 6
	cfg.TestSize = 8
	cfg.TargetExact = 0
	cfg.CheckpointEvery = 6
	return cfg
}

// torchBatch returns ids and lengths of b rows of s tokens over vocab v:
// full rows, then rows padded with PAD after lengths s-3, 1 and 0. A row of
// length 0 hides every key from every query, whose attention weights are then
// defined as zero.
func torchBatch(b, s, v int, rng *rand.Rand) (ids, lengths []int) {
	ids = make([]int, b*s)
	lengths = make([]int, b)
	for r := 0; r < b; r++ {
		n := s
		switch b - 1 - r {
		case 0:
			n = 0
		case 1:
			n = 1
		case 2:
			n = s - 3
		}
		lengths[r] = n
		for j := 0; j < s; j++ {
			ids[r*s+j] = data.PADID
			if j < n {
				ids[r*s+j] = 2 + rng.IntN(v-2)
			}
		}
	}
	return ids, lengths
}

// torchLogits runs the reference on the checkpoint in dir and returns its
// logits, flattened (B, S, V).
func torchLogits(t *testing.T, py, dir string, b, s int, ids, lengths []int) ([]float64, []int) {
	t.Helper()
	return torchRun(t, py, dir, map[string]any{"ids": splitRows(ids, b, s), "lengths": lengths})
}

// splitRows returns the b rows of s ids of the row-major ids.
func splitRows(ids []int, b, s int) [][]int {
	rows := make([][]int, b)
	for r := range rows {
		rows[r] = ids[r*s : (r+1)*s]
	}
	return rows
}

// torchRun runs `torchref.py logits --input` on the checkpoint in dir with
// the batch input (marshalled to the JSON file) and returns the logits,
// flattened, and their shape.
func torchRun(t *testing.T, py, dir string, input map[string]any) ([]float64, []int) {
	t.Helper()
	in, err := json.Marshal(input)
	if err != nil {
		t.Fatal(err)
	}
	inFile := filepath.Join(t.TempDir(), "batch.json")
	if err := os.WriteFile(inFile, in, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(py, torchScript, "logits", "--checkpoint", dir, "--input", inFile)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, stderr.Bytes())
	}
	var res struct {
		Shape  []int         `json:"shape"`
		Logits [][][]float64 `json:"logits"`
		DType  string        `json:"dtype"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("reference output: %v\n%.500s", err, out)
	}
	var flat []float64
	for _, row := range res.Logits {
		for _, pos := range row {
			flat = append(flat, pos...)
		}
	}
	return flat, res.Shape
}

// withScale is c with the attention scale s, which torchref reads from
// config.json's model.attn_scale.
func withScale(c layers.StackConfig, s layers.AttentionScale) layers.StackConfig {
	c.AttnScale = s
	return c
}

// withVariants is c with the positions pos (if not "") and the attention
// variants v, which torchref reads from config.json's model.positions,
// kv_heads, softcap, sinks, qk_norm, window and rope_base.
func withVariants(c layers.StackConfig, pos layers.PositionsKind, v layers.AttentionVariants) layers.StackConfig {
	if pos != "" {
		c.Positions = pos
	}
	c.AttentionVariants = v
	return c
}

// withVariantCases appends to variants one float64 comparison per
// torchref.Variants entry on base (4 heads, so that grouped queries
// share), and a float32 one of the last two.
func withVariantCases(variants []torchVariant, base layers.StackConfig, tol64, tol32 float64) []torchVariant {
	for _, c := range torchref.Variants {
		m := withVariants(base, c.Positions, c.Variants)
		m.LayerKinds, m.LinearOptions = c.LayerKinds, c.Linear
		variants = append(variants, torchVariant{"float64/pre-LN/" + c.Name, "float64", tol64, m})
	}
	for _, c := range torchref.Variants[len(torchref.Variants)-2:] {
		variants = append(variants, torchVariant{"float32/pre-LN/" + c.Name, "float32", tol32, withVariants(base, c.Positions, c.Variants)})
	}
	return variants
}

// fourHeads is the base of the variants' comparisons: pre-LN, learned
// positions, GELU, biases, 4 heads of 4.
var fourHeads = layers.StackConfig{
	Dim:          16,
	Heads:        4,
	Layers:       2,
	Hidden:       32,
	BlockOptions: layers.BlockOptions{Activation: layers.ActivationGELU, Positions: layers.PositionsLearned, Bias: true},
}

// causalEncoder is c with a causal encoder, which torchref reads from
// config.json's model.causal_encoder.
func causalEncoder(c layers.StackConfig) layers.StackConfig {
	c.CausalEncoder = true
	return c
}

// The base models of both architectures' comparisons: pre-LN with learned
// positions, GELU and biases; post-LN with sinusoids, ReLU and no biases;
// no positions.
var (
	preLN = layers.StackConfig{
		Dim:          16,
		Heads:        2,
		Layers:       2,
		Hidden:       32,
		BlockOptions: layers.BlockOptions{Activation: layers.ActivationGELU, Positions: layers.PositionsLearned, Bias: true},
	}
	postLN = layers.StackConfig{
		Dim:          16,
		Heads:        4,
		Layers:       2,
		Hidden:       24,
		BlockOptions: layers.BlockOptions{Activation: layers.ActivationReLU, Positions: layers.PositionsSinusoidal, PostLN: true, Bias: false},
	}
	noPos = layers.StackConfig{
		Dim:          12,
		Heads:        3,
		Layers:       1,
		Hidden:       20,
		BlockOptions: layers.BlockOptions{Activation: layers.ActivationGELU, Positions: layers.PositionsNone, Bias: true},
	}
)

func TestTorchReferenceLogits(t *testing.T) {
	py := torchPython(t)
	variants := []torchVariant{
		{"float64/pre-LN/learned/gelu/bias", "float64", 1e-9, preLN},
		{"float64/pre-LN/learned/gelu/bias/attn_scale-dmodel", "float64", 1e-9, withScale(preLN, layers.ScaleDModel)},
		{"float64/post-LN/sinusoidal/relu/no-bias/attn_scale-none", "float64", 1e-9, withScale(postLN, layers.ScaleNone)},
		{"float32/pre-LN/learned/gelu/bias", "float32", 1e-4, preLN},
		{"float64/post-LN/sinusoidal/relu/no-bias", "float64", 1e-9, postLN},
		{"float32/post-LN/sinusoidal/relu/no-bias", "float32", 1e-4, postLN},
		{"float64/pre-LN/no-positions/gelu/bias", "float64", 1e-9, noPos},
	}
	variants = withVariantCases(variants, fourHeads, 1e-9, 1e-4)
	// nanoGPT's bias=False model: head tied to tok_emb (torchref sets
	// head.weight = tok_emb.weight), LayerNorms without bias (written by
	// hand there: torch 1.13 has no LayerNorm(bias=False)), GPT-2's init,
	// no projection biases.
	nano := layers.StackConfig{
		Dim:           16,
		Heads:         4,
		Layers:        2,
		Hidden:        64,
		TieEmbeddings: true,
		Init:          layers.InitGPT2,
		BlockOptions:  layers.BlockOptions{Activation: layers.ActivationGELU, Positions: layers.PositionsLearned, BiasFreeNorm: true},
	}
	variants = append(variants,
		torchVariant{"float64/pre-LN/nanogpt-tied-bias-free-norm-gpt2-init-no-bias", "float64", 1e-9, nano},
		torchVariant{"float32/pre-LN/nanogpt-tied-bias-free-norm-gpt2-init-no-bias", "float32", 1e-4, nano})
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			dir := t.TempDir()
			if _, err := train.Run(context.Background(), torchConfig(v), train.Options{Out: dir}); err != nil {
				t.Fatal(err)
			}
			const b = 6
			m, cfg, _, err := model.Load(dir, b, model.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			s, voc := m.S, cfg.Model.Vocab
			ids, lengths := torchBatch(b, s, voc, rand.New(rand.NewPCG(3, 4)))
			if err := m.SetBatch(model.Batch{Batch: data.Batch{B: b, S: s, Inputs: ids, Lengths: lengths}}); err != nil {
				t.Fatal(err)
			}
			var got []float64
			if err := m.Run(func() (err error) {
				got, err = graph.Float64s(m.Logits.Value())
				return err
			}); err != nil {
				t.Fatal(err)
			}

			want, shape := torchLogits(t, py, dir, b, s, ids, lengths)
			if fmt.Sprint(shape) != fmt.Sprint([]int{b, s, voc}) || len(want) != len(got) {
				t.Fatalf("reference logits have shape %v (%d values), qkv (%d, %d, %d) (%d values)", shape, len(want), b, s, voc, len(got))
			}
			maxDiff, at := 0.0, 0
			lo, hi := math.Inf(1), math.Inf(-1)
			for i := range got {
				if math.IsNaN(got[i]) || math.IsInf(got[i], 0) {
					t.Fatalf("qkv logit %d (row %d, position %d) is %v", i, i/(s*voc), i/voc%s, got[i])
				}
				if d := math.Abs(got[i] - want[i]); d > maxDiff || math.IsNaN(d) {
					maxDiff, at = d, i
				}
				lo, hi = min(lo, got[i]), max(hi, got[i])
			}
			if hi-lo < 0.1 {
				t.Fatalf("logits span only [%v, %v]: the comparison would prove little", lo, hi)
			}
			t.Logf("max |qkv - torch| = %.3g over %d logits in [%.3f, %.3f] (tolerance %g)", maxDiff, len(got), lo, hi, v.tol)
			if !(maxDiff < v.tol) {
				r, p := at/(s*voc), at/voc%s
				t.Errorf("logit %d (row %d of length %d, position %d, token %d): qkv %.17g, torch %.17g, |diff| %.3g >= %g",
					at, r, lengths[r], p, at%voc, got[at], want[at], maxDiff, v.tol)
			}
		})
	}
}

// torchEncDecBatch returns a padded batch of b sources of up to ss tokens and
// b targets of up to st tokens over vocab v, row-major, with their lengths:
// full rows and rows padded at the end, sources and targets of different
// lengths, one source of length 0 (every encoder and cross-attention query
// sees no key, whose weights are then zero) and one target of length 0 (no
// real position at all).
func torchEncDecBatch(b, ss, st, v int, rng *rand.Rand) (src, srcLengths, tgt, tgtLengths []int) {
	pairs := [][2]int{{ss, st}, {ss, 1}, {ss - 3, st - 2}, {1, st}, {0, 2}, {2, 0}}
	fill := func(ids []int, n, s int) {
		for j := 0; j < s; j++ {
			ids[j] = data.PADID
			if j < n {
				ids[j] = 2 + rng.IntN(v-2)
			}
		}
	}
	src, tgt = make([]int, b*ss), make([]int, b*st)
	srcLengths, tgtLengths = make([]int, b), make([]int, b)
	for r := 0; r < b; r++ {
		p := pairs[r%len(pairs)]
		srcLengths[r], tgtLengths[r] = max(p[0], 0), max(p[1], 0)
		fill(src[r*ss:(r+1)*ss], srcLengths[r], ss)
		fill(tgt[r*st:(r+1)*st], tgtLengths[r], st)
	}
	return src, srcLengths, tgt, tgtLengths
}

// TestTorchReferenceEncDecLogits trains tiny encoder–decoders
// (config.ArchEncDec) and requires torchref's logits of their checkpoints to
// equal qkv's at every real target position of a padded batch.
func TestTorchReferenceEncDecLogits(t *testing.T) {
	py := torchPython(t)
	variants := []torchVariant{
		{"float64/pre-LN/learned/gelu/bias", "float64", 1e-12, preLN},
		{"float64/pre-LN/learned/gelu/bias/attn_scale-dmodel", "float64", 1e-12, withScale(preLN, layers.ScaleDModel)},
		{"float64/post-LN/sinusoidal/relu/no-bias/attn_scale-none", "float64", 1e-12, withScale(postLN, layers.ScaleNone)},
		{"float32/pre-LN/learned/gelu/bias", "float32", 1e-5, preLN},
		{"float64/post-LN/sinusoidal/relu/no-bias", "float64", 1e-12, postLN},
		{"float32/post-LN/sinusoidal/relu/no-bias", "float32", 1e-5, postLN},
		{"float64/pre-LN/no-positions/gelu/bias", "float64", 1e-12, noPos},
		{"float64/pre-LN/learned/gelu/bias/causal-encoder", "float64", 1e-12, causalEncoder(preLN)},
		{"float32/post-LN/sinusoidal/relu/no-bias/causal-encoder", "float32", 1e-5, causalEncoder(postLN)},
	}
	variants = withVariantCases(variants, fourHeads, 1e-12, 1e-5)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := torchConfig(v)
			cfg.Arch = config.ArchEncDec
			if _, err := train.Run(context.Background(), cfg, train.Options{Out: dir}); err != nil {
				t.Fatal(err)
			}
			const b = 6
			m, cfg, _, err := model.Load(dir, b, model.LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			ss, st, voc := m.SourceLen, m.S, cfg.Model.Vocab
			src, srcLengths, tgt, tgtLengths := torchEncDecBatch(b, ss, st, voc, rand.New(rand.NewPCG(5, 6)))
			if err := m.SetBatch(model.Batch{Batch: data.Batch{B: b, S: st, Inputs: tgt, Lengths: tgtLengths}, Source: &model.Source{S: ss, IDs: src, Lengths: srcLengths}}); err != nil {
				t.Fatal(err)
			}
			var got []float64
			if err := m.Run(func() (err error) {
				got, err = graph.Float64s(m.Logits.Value())
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if len(got) != b*st*voc {
				t.Fatalf("qkv logits: %d values, want (%d, %d, %d)", len(got), b, st, voc)
			}

			want, shape := torchRun(t, py, dir, map[string]any{
				"src": splitRows(src, b, ss), "src_lengths": srcLengths,
				"tgt": splitRows(tgt, b, st), "tgt_lengths": tgtLengths,
			})
			if fmt.Sprint(shape) != fmt.Sprint([]int{b, st, voc}) || len(want) != len(got) {
				t.Fatalf("reference logits have shape %v (%d values), qkv (%d, %d, %d) (%d values)", shape, len(want), b, st, voc, len(got))
			}
			for i, x := range got {
				if math.IsNaN(x) || math.IsInf(x, 0) {
					t.Fatalf("qkv logit %d (row %d, position %d) is %v", i, i/(st*voc), i/voc%st, x)
				}
			}
			maxDiff, at, n := 0.0, -1, 0
			lo, hi := math.Inf(1), math.Inf(-1)
			for r := 0; r < b; r++ {
				for p := 0; p < tgtLengths[r]; p++ { // real target positions only
					for k := 0; k < voc; k++ {
						i := (r*st+p)*voc + k
						if d := math.Abs(got[i] - want[i]); d > maxDiff || math.IsNaN(d) || at < 0 {
							maxDiff, at = d, i
						}
						lo, hi = min(lo, got[i]), max(hi, got[i])
						n++
					}
				}
			}
			if n == 0 || hi-lo < 0.1 {
				t.Fatalf("%d compared logits span only [%v, %v]: the comparison would prove little", n, lo, hi)
			}
			t.Logf("max |qkv - torch| = %.3g over %d logits at real target positions, in [%.3f, %.3f] (tolerance %g)", maxDiff, n, lo, hi, v.tol)
			if !(maxDiff < v.tol) {
				r, p := at/(st*voc), at/voc%st
				t.Errorf("logit %d (row %d: source length %d, target length %d; position %d, token %d): qkv %.17g, torch %.17g, |diff| %.3g >= %g",
					at, r, srcLengths[r], tgtLengths[r], p, at%voc, got[at], want[at], maxDiff, v.tol)
			}
		})
	}
}
