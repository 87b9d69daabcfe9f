package config

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/qkv-dev/qkv/internal/memprobe"
	"github.com/qkv-dev/qkv/layers"
)

// MemoryEstimate is what a model compiled for batches of B sequences of S
// tokens needs in memory, in bytes, by kind. It counts the tensors the
// gorgonia machine keeps from one run to the next (every node's value, and
// in training every gradient), so it is what the process's heap grows by
// when the model is built and run, within a small factor (the tests check
// 0.5x to 3x against runtime.MemStats). Sizes are float64 so that absurd
// configurations are estimated instead of overflowing.
type MemoryEstimate struct {
	// Training is whether the model has a cost, gradients and an optimizer.
	Training bool
	// B and S are the batch's sequences and tokens per sequence.
	B, S int
	// Params are the weights, in the model's dtype.
	Params float64
	// Grads are the weights' gradients (training only).
	Grads float64
	// Optimizer is Adam's two moments per weight, float64 (training only).
	Optimizer float64
	// Activations are the (B, S, Dim) and (B, S, Hidden) values of every
	// layer, embeddings and dropout masks included, and their gradients
	// when training.
	Activations float64
	// Attention is every layer's (B, Heads, S, S) attention weights, kept
	// for backward, its (B, S, S) masks, and the gradients when training.
	Attention float64
	// Logits are the (B, S, Vocab) logits, log-probabilities and one-hot
	// targets, and their gradients when training.
	Logits float64
}

// Total returns the sum of every kind, in bytes.
func (e MemoryEstimate) Total() float64 {
	return e.Params + e.Grads + e.Optimizer + e.Activations + e.Attention + e.Logits
}

// String gives the total and the breakdown, e.g. "1.2 GiB for training
// B=64 S=12 (params 226 KiB, grads 226 KiB, ...)".
func (e MemoryEstimate) String() string {
	what := "inference"
	if e.Training {
		what = "training"
	}
	parts := []string{"params " + FormatBytes(e.Params)}
	if e.Training {
		parts = append(parts, "grads "+FormatBytes(e.Grads), "optimizer "+FormatBytes(e.Optimizer))
	}
	parts = append(parts, "activations "+FormatBytes(e.Activations), "attention "+FormatBytes(e.Attention), "logits "+FormatBytes(e.Logits))
	return fmt.Sprintf("%s for %s B=%d S=%d (%s)", FormatBytes(e.Total()), what, e.B, e.S, strings.Join(parts, ", "))
}

// Add returns the sum of e and o, as for two models that live together
// (training and evaluation); B and S are e's.
func (e MemoryEstimate) Add(o MemoryEstimate) MemoryEstimate {
	e.Training = e.Training || o.Training
	e.Params += o.Params
	e.Grads += o.Grads
	e.Optimizer += o.Optimizer
	e.Activations += o.Activations
	e.Attention += o.Attention
	e.Logits += o.Logits
	return e
}

// The number of values of each size a block, the embeddings and the head
// keep in a forward pass, calibrated against runtime.MemStats
// (TestMemoryEstimateMatchesHeap). Per token of a block, about 8 of width
// Dim (ln1, q, k, v, the attention's output, wo's output, the residual, ln2,
// the feed-forward's output and the second residual, less those whose
// tensors gorgonia reuses within a run) and 2 of width Hidden (the
// feed-forward's pre-activation and activation, each one op's kept output);
// per sequence and layer the attention weights (Heads x S x S), plus the
// input's padding mask (S x S): causality is a rule, not a tensor.
const (
	dimValuesPerLayer    = 8
	hiddenValuesPerLayer = 2
	embeddingDimValues   = 4 // token embedding, positions, their sum, ln_f's output
	logitValues          = 3 // logits, log-probabilities, one-hot targets
	dropoutValues        = 2 // a dropout site's mask and output, in training
	// trainingActivations is how many times more activation memory a
	// training model keeps than an inference one: the values' gradients and
	// the backward ops' own values (measured: 2.25 to 2.3).
	trainingActivations = 2.3
	// flashTrainingValues is how many (B, S, D + 2H) values a flash
	// attention layer keeps in training (measured: about 5).
	flashTrainingValues = 5
	// gradCopies is how many copies of the weights' size their gradients
	// take: the gradient nodes' values, which graph.Machine binds as they
	// are (gorgonia's tape machine kept a dual value besides: 2).
	gradCopies = 1
)

// EstimateMemory estimates what a model of cfg needs for batches of b
// sequences of s tokens: weights, and with training their gradients and
// Adam's moments, plus one batch's activations. It covers both
// architectures: model.Build(cfg, b, s, opts) checks it with training
// opts.Train (CheckMemory). cfg must be resolved (Model.Vocab and MaxLen set). It fails
// only for non-positive sizes.
func EstimateMemory(cfg Config, b, s int, training bool) (MemoryEstimate, error) {
	m := cfg.Model
	if b <= 0 || s <= 0 || m.Dim <= 0 || m.Hidden <= 0 || m.Heads <= 0 || m.Layers <= 0 || m.Vocab <= 0 || m.MaxLen <= 0 {
		return MemoryEstimate{}, fmt.Errorf("config: memory estimate: sizes must be positive, got B=%d S=%d dim=%d hidden=%d heads=%d layers=%d vocab=%d max_len=%d",
			b, s, m.Dim, m.Hidden, m.Heads, m.Layers, m.Vocab, m.MaxLen)
	}
	dt, err := cfg.DType.Tensor()
	if err != nil {
		return MemoryEstimate{}, err
	}
	elem := float64(dt.Size())
	e := MemoryEstimate{Training: training, B: b, S: s}
	D, F, H, L, V := float64(m.Dim), float64(m.Hidden), float64(m.Heads), float64(m.Layers), float64(m.Vocab)
	B, S := float64(b), float64(s)

	n, err := cfg.NumParams()
	if err != nil {
		return MemoryEstimate{}, err
	}
	params := float64(n)
	e.Params = params * elem
	tokens := B * S
	e.Activations = (tokens*D*(dimValuesPerLayer*L+embeddingDimValues) + tokens*F*hiddenValuesPerLayer*L) * elem
	if training && m.Dropout > 0 { // a mask and an output per site: embeddings and two per block
		e.Activations += tokens * D * (2*L + 1) * dropoutValues * elem
	}
	weights := B * S * S * H * L * elem
	if training && m.AttnDropout > 0 {
		weights *= 1 + dropoutValues
	}
	masks := B * S * S * elem // the padding mask, constant: no gradient
	e.Logits = tokens * V * logitValues * elem
	if training {
		e.Grads = gradCopies * e.Params
		e.Optimizer = params * 8 * 2
		e.Activations *= trainingActivations
		weights *= 2 // the weights' gradients
		e.Logits *= 2
	}
	if m.Attention == layers.AttentionFlash {
		// No (S, S) weights: per layer and token, the packed output and
		// log-sum-exp (D + 2H values), and in training its gradient and the
		// stacked dQ, dK, dV and their copies.
		weights = tokens * (D + 2*H) * L * elem
		if training {
			weights *= flashTrainingValues
		}
	}
	e.Attention = weights + masks
	if cfg.Arch == ArchEncDec {
		// An encoder and a decoder of Layers blocks each, the decoder's with
		// a cross-attention: the parameters are counted exactly above; the
		// activations generously as twice the decoder-only model's, the
		// attention as three (self, self and cross).
		e.Activations, e.Attention = 2*e.Activations, 3*e.Attention
	}
	return e, nil
}

// EstimateRun estimates what Run needs for cfg (resolved): the training
// model for cfg.Batch sequences and the evaluation model for
// cfg.EvalBatch() held-out prompts, at the task's longest input.
func EstimateRun(cfg Config) (MemoryEstimate, error) {
	s := cfg.Model.MaxLen
	tr, err := EstimateMemory(cfg, cfg.Batch, s, true)
	if err != nil {
		return MemoryEstimate{}, err
	}
	ev, err := EstimateMemory(cfg, cfg.EvalBatch(), s, false)
	if err != nil {
		return MemoryEstimate{}, err
	}
	return tr.Add(ev), nil
}

// NumParams returns the number of learnable values of c's model
// (resolved: Vocab and MaxLen set), the decoder's or the encoder–decoder's,
// as the layers count what they build; its error is an *Error.
func (c Config) NumParams() (int, error) {
	var n int
	var err error
	if c.Arch == ArchEncDec {
		n, err = c.EncDec().NumParams()
	} else {
		n, err = c.Model.NumParams()
	}
	if err != nil {
		return 0, modelError(err)
	}
	return n, nil
}

// MemoryError is an estimate that exceeds the memory limit: building the
// model would likely end the process with an out-of-memory fatal error.
type MemoryError struct {
	// Estimate is what the model would need.
	Estimate MemoryEstimate
	// Limit is the limit it exceeds, in bytes.
	Limit int64
}

// Error gives the estimate with its breakdown and the limit.
func (e *MemoryError) Error() string {
	return fmt.Sprintf("config: the model needs about %s, more than the memory limit of %s", e.Estimate, FormatBytes(float64(e.Limit)))
}

// Check returns a *MemoryError if e's total exceeds limit bytes; a limit <=
// 0 means MemoryLimit().
func (e MemoryEstimate) Check(limit int64) error {
	if limit <= 0 {
		limit = MemoryLimit()
	}
	if e.Total() > float64(limit) {
		return &MemoryError{Estimate: e, Limit: limit}
	}
	return nil
}

// CheckMemory estimates what the model of cfg needs for b sequences of s
// tokens (EstimateMemory) and returns a *MemoryError if that exceeds
// MemoryLimit: the check every model builder makes before it allocates.
func CheckMemory(cfg Config, b, s int, training bool) error {
	est, err := EstimateMemory(cfg, b, s, training)
	if err != nil {
		return err
	}
	return est.Check(0)
}

var memoryLimit atomic.Int64

// SetMemoryLimit sets the most memory, in bytes, that model.Build lets a
// model's estimate take; 0 (the initial value) means the memory available
// at the time of each check (internal/memprobe.Probe). It returns the previous setting. The command
// line sets it from --max-memory.
func SetMemoryLimit(n int64) (previous int64) { return memoryLimit.Swap(max(n, 0)) }

// MemoryLimit returns the limit model.Build checks estimates against: the
// one set by SetMemoryLimit, or else the memory the process can still
// allocate (internal/memprobe.Probe: /proc/meminfo, ulimit -v, cgroups).
func MemoryLimit() int64 {
	if n := memoryLimit.Load(); n > 0 {
		return n
	}
	return memprobe.Probe().Bytes
}

// ParseBytes parses a memory size: a number of bytes with an optional
// binary (KiB, MiB, GiB, TiB) or decimal (KB, MB, GB, TB; K, M, G, T are
// binary) suffix, e.g. "16GiB", "512MiB", "1.5G", "100000". It must be
// finite and positive.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	units := []struct {
		suffix string
		mult   float64
	}{
		{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
		{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
	}
	mult := 1.0
	for _, u := range units {
		if len(t) > len(u.suffix) && strings.EqualFold(t[len(t)-len(u.suffix):], u.suffix) {
			t, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil {
		return 0, fmt.Errorf("memory size %q: want a number of bytes such as 16GiB, 512MiB or 1e9", s)
	}
	v *= mult
	if math.IsNaN(v) || v < 1 || v >= math.MaxInt64 {
		return 0, fmt.Errorf("memory size %q: must be at least 1 byte and below 8 EiB", s)
	}
	return int64(v), nil
}

// FormatBytes writes n bytes with a binary unit, e.g. "1.5 GiB".
func FormatBytes(n float64) string { return memprobe.FormatBytes(n) }
