package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/internal/plot"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/checkpoint"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/infer"
	"github.com/qkv-dev/qkv/train/model"
)

// tooLargeAdvice is the advice for a checkpoint too large for the memory
// limit.
const tooLargeAdvice = "raise --max-memory if the machine has it"

// checkpointFlag registers --checkpoint and --max-memory on fs and returns
// a function that, after parsing, loads the checkpoint's model for batches
// of b sequences. It reads and checks the checkpoint's config.json first,
// naming the file if it is invalid, and refuses (exit 2) a model estimated
// to need more memory than --max-memory before reading its weights.
//
// With weights, the model must return its attention weights: flash
// attention never forms them, so a flash model is built with fused attention
// instead (the same function of the same weights), saying so on stderr.
//
// b is the batch the model is compiled for; 0 is the run's evaluation batch
// (config.Config.EvalBatch).
func checkpointFlag(fs *flag.FlagSet, stderr io.Writer) func(b int, weights bool) (*loaded, error) {
	dir := fs.String("checkpoint", "", "run directory holding the checkpoint (required)")
	var impl layers.AttentionImpl
	fs.Var(kindFlag[layers.AttentionImpl]{&impl}, "attention", "compute attention with composed, fused or flash instead of the checkpoint's own (the same function of the same weights)")
	mem := registerMemory(fs)
	return func(b int, weights bool) (*loaded, error) {
		if *dir == "" {
			return nil, fmt.Errorf("%w: --checkpoint is required", errUsage)
		}
		// A directory that is not there, or holds no checkpoint, is the
		// user's mistake (exit 2); a checkpoint that cannot be read is not.
		switch fi, err := os.Stat(*dir); {
		case errors.Is(err, os.ErrNotExist):
			return nil, fmt.Errorf("%w: --checkpoint %s: no such directory", errUsage, *dir)
		case err == nil && !fi.IsDir():
			return nil, fmt.Errorf("%w: --checkpoint %s: a file, not a run directory", errUsage, *dir)
		case err == nil && !checkpoint.Exists(*dir):
			return nil, fmt.Errorf("%w: --checkpoint %s: holds no checkpoint (qkv train --out DIR writes one)", errUsage, *dir)
		}
		if impl != "" {
			if _, err := layers.ParseAttentionImpl(string(impl)); err != nil {
				return nil, fmt.Errorf("%w: --attention: unknown attention %q: want %q, %q or %q", errUsage, impl, layers.AttentionComposed, layers.AttentionFused, layers.AttentionFlash)
			}
		}
		file := checkpoint.File(*dir, checkpoint.ConfigFile)
		defer mem.apply()()
		fused := false
		// The memory check comes before the weights are read: a checkpoint
		// too large for the limit costs nothing of its size.
		_, cfg, err := config.LoadCheckpoint(*dir, func(c *config.Config) error {
			if impl != "" {
				c.Model.Attention = impl
			}
			if fused = weights && c.Model.Attention == layers.AttentionFlash; fused {
				c.Model.Attention = layers.AttentionFused
			}
			_, tooLarge, err := mem.fits(c, func(c config.Config) (config.MemoryEstimate, error) {
				if b <= 0 { // the evaluation batch of the run, known once its config is
					b = c.EvalBatch()
				}
				return config.EstimateMemory(c, b, c.Model.MaxLen, false)
			}, tooLargeAdvice)
			if tooLarge != "" {
				return fmt.Errorf("%w: %s: %s", errUsage, file, tooLarge)
			}
			if err != nil { // the checkpoint's config.json is wrong, not a flag
				return fmt.Errorf("checkpoint %s: %s: %w", *dir, file, err)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if fused {
			fmt.Fprintln(stderr, "flash attention forms no weights: drawing them with fused attention, the same function of the same weights")
		}
		l := &loaded{}
		l.m, l.cfg, l.task, err = model.Load(*dir, b, model.LoadOptions{Attention: cfg.Model.Attention})
		if err != nil {
			return nil, err
		}
		return l, nil
	}
}

// loaded is a checkpoint's model, decoder-only or encoder-decoder, with its
// configuration and task.
type loaded struct {
	m    *model.Model
	cfg  config.Config
	task data.Task
}

// greedy decodes the answers of prompts.
func (l *loaded) greedy(prompts [][]int) ([][]int, error) {
	return infer.Greedy(l.m, l.task, prompts)
}

// evaluate scores greedy answers on examples.
func (l *loaded) evaluate(examples []data.Example) (infer.EvalResult, error) {
	return infer.Evaluate(l.m, l.task, examples)
}

// Close releases the model's machine.
func (l *loaded) Close() error { return l.m.Close() }

func runEval(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("eval", "--checkpoint DIR", stderr)
	load := checkpointFlag(fs, stderr)
	testSize := fs.Int("test-size", 0, "held-out examples to score instead of the run's --test-size: of chars, validation windows, evenly spaced over the held-out text (0: the run's)")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if *testSize < 0 || *testSize > data.MaxTestSize {
		return fmt.Errorf("%w: --test-size must be in [0, %d], got %d", errUsage, data.MaxTestSize, *testSize)
	}
	l, err := load(0, false) // the run's evaluation batch
	if err != nil {
		return err
	}
	defer l.Close()
	cfg := l.cfg
	stream, err := data.NewStream(l.task, cfg.Seed, cmp.Or(*testSize, cfg.TestSize))
	if err != nil {
		return err
	}
	res, err := l.evaluate(stream.Test())
	if err != nil {
		return err
	}
	if res.Loss != 0 {
		fmt.Fprintf(stdout, "task %s (%s), %d validation windows: loss %.4f nats per character (%.4f bits), next-character accuracy %.3f\n",
			cfg.Task.Name, cfg.Task.Params, res.N, res.Loss, res.BPC, res.TokenAccuracy)
		return nil
	}
	fmt.Fprintf(stdout, "task %s (%s), %d held-out examples: exact match %.3f, token accuracy %.3f\n",
		cfg.Task.Name, cfg.Task.Params, res.N, res.ExactMatch, res.TokenAccuracy)
	return nil
}

// promptArg returns the prompt (predict's arguments or attend's --input),
// parsed in the task's vocabulary. A prompt the task refuses is a usage
// error written as one sentence about the prompt as typed, with an example
// of a valid one.
func promptArg(task data.Task, text string) ([]int, error) {
	if strings.TrimSpace(text) == "" {
		return nil, fmt.Errorf("%w: no prompt: give one such as %q", errUsage, example(task))
	}
	p, err := data.ParsePrompt(task, text)
	var pe *data.PromptError
	if errors.As(err, &pe) {
		return nil, fmt.Errorf("%w: prompt %q %s; a valid prompt of task %s looks like %q", errUsage, text, pe.Problem, task.Name(), example(task))
	}
	return p, err
}

// example returns a valid prompt of the task, for error messages.
func example(task data.Task) string {
	return task.Vocab().Decode(task.Generate(nil).Shown())
}

func runPredict(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("predict", `--checkpoint DIR PROMPT (e.g. 2 0 1 1 0 2, quoted or not: the arguments are the prompt)`, stderr)
	load := checkpointFlag(fs, stderr)
	if err := parse(fs, args, -1); err != nil {
		return err
	}
	for _, a := range fs.Args() {
		if strings.HasPrefix(a, "-") { // no task has a symbol starting with '-'
			return fmt.Errorf("%w: prompt symbol %q: no task has a symbol starting with '-' (flags may come before or after the prompt; after --, every argument is the prompt)", errUsage, a)
		}
	}
	l, err := load(1, false)
	if err != nil {
		return err
	}
	defer l.Close()
	prompt, err := promptArg(l.task, strings.Join(fs.Args(), " "))
	if err != nil {
		return err
	}
	got, err := l.greedy([][]int{prompt})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, l.task.Vocab().Decode(got[0]))
	return nil
}

func runAttend(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("attend", `--checkpoint DIR --input "PROMPT" --out attn.png`, stderr)
	load := checkpointFlag(fs, stderr)
	input := fs.String("input", "", "prompt to attend over (required)")
	out := fs.String("out", "attn.png", "PNG file to write")
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	if strings.TrimSpace(*out) == "" {
		return fmt.Errorf("%w: --out: give the PNG file to write, e.g. attn.png", errUsage)
	}
	l, err := load(1, true)
	if err != nil {
		return err
	}
	defer l.Close()
	m, task := l.m, l.task
	prompt, err := promptArg(task, *input)
	if err != nil {
		return err
	}
	if task.Vocab().IsChars() {
		return attendChars(l, prompt, *out, stdout)
	}
	answer, err := infer.Greedy(m, task, [][]int{prompt})
	if err != nil {
		return err
	}
	// The model reads the frame's prompt (a multi-query recall prompt less
	// its queries, which follow SEP), SEP and the answer but the last
	// token, which it only ever predicts: a decoder-only model as one
	// sequence, an encoder-decoder the prompt in its encoder.
	sources, seqs, err := infer.Begin(m.Arch, task, []data.Example{task.Frame(prompt)})
	if err != nil {
		return err
	}
	seq := append(seqs[0], answer[0]...)
	seq = seq[:min(len(seq)-1, m.S)]
	got, err := infer.Attention(m, sources, [][]int{seq})
	if err != nil {
		return err
	}
	if sources != nil {
		return attendEncDec(l, prompt, answer[0], sources[0], seq, got[0], *out, stdout)
	}
	vocab := task.Vocab()
	maps := l.heatmaps(got[0].Self, plot.SelfHidden(len(seq), true, l.cfg.Model.Window), true)
	if len(maps) == 0 {
		return errors.New("model has no attention layers")
	}
	title := fmt.Sprintf("%s: %s -> %s", task.Name(), oneLine(vocab, prompt), oneLine(vocab, answer[0]))
	if v := l.variants(); v != "" {
		title += " (" + v + ")"
	}
	if err := plot.Attention(*out, title, vocab.Labels(seq), maps); err != nil {
		return outputErr("out", err)
	}
	fmt.Fprintf(stdout, "answer %s; attention of %d layers written to %s\n", oneLine(vocab, answer[0]), len(maps)/max(1, l.cfg.Model.Heads), *out)
	return nil
}

// attendEncDec draws an encoder–decoder's three kinds of attention, got,
// for a prompt and its greedy answer, each in a PNG of its own next to out
// (attn-encoder.png, attn-decoder.png, attn-cross.png for attn.png),
// written all or none: the encoder's self-attention over the prompt's
// frame (srcIDs), the decoder's causal self-attention over SEP and the
// answer (tgt), and the cross-attention from the decoder's positions
// (queries) to the prompt's (keys).
func attendEncDec(l *loaded, prompt, answer, srcIDs, tgt []int, got infer.AttentionMaps, out string, stdout io.Writer) error {
	task := l.task
	vocab := task.Vocab()
	// The decoder's self-attention is masked within the real tokens, and
	// the encoder's too when it is causal: padding, which the others hide,
	// is not drawn.
	w := l.cfg.Model.Window
	causal := plot.SelfHidden(len(tgt), true, w)
	encHidden := plot.SelfHidden(len(srcIDs), l.cfg.Model.CausalEncoder, w)
	kinds := []struct {
		name    string
		maps    infer.Maps
		queries []string
		keys    []string
		hidden  [][]bool
	}{
		{"encoder", got.Encoder, vocab.Labels(srcIDs), vocab.Labels(srcIDs), encHidden},
		{"decoder", got.Self, vocab.Labels(tgt), vocab.Labels(tgt), causal},
		{"cross", got.Cross, vocab.Labels(tgt), vocab.Labels(srcIDs), nil},
	}
	ext := filepath.Ext(out)
	base := strings.TrimSuffix(out, ext)
	title := fmt.Sprintf("%s: %s -> %s", task.Name(), oneLine(vocab, prompt), oneLine(vocab, answer))
	var written []string
	var err error
	var pngs plot.Set // all three or none
	for _, kind := range kinds {
		path := base + "-" + kind.name + ext
		t := title + " (" + kind.name + " attention)"
		if kind.name == "cross" {
			err = pngs.CrossAttention(path, t, kind.queries, kind.keys, l.heatmaps(kind.maps, nil, false))
		} else {
			err = pngs.Attention(path, t, kind.queries, l.heatmaps(kind.maps, kind.hidden, true))
		}
		if err != nil {
			return err
		}
		written = append(written, path)
	}
	if err := pngs.Write(); err != nil {
		return outputErr("out", err)
	}
	fmt.Fprintf(stdout, "answer %s; encoder, decoder and cross-attention written to %s\n", vocab.Decode(answer), strings.Join(written, ", "))
	return nil
}

// oneLine writes ids for a title or a one-line report: decoded, and for a
// character vocabulary quoted, so that the newlines and tabs of a text
// stay on the line as \n and \t.
func oneLine(v *data.Vocab, ids []int) string {
	if v.IsChars() {
		return strconv.Quote(v.Decode(ids))
	}
	return v.Decode(ids)
}

// charsWindow is the most characters of a prompt `qkv attend` draws for a
// character model: a figure of 4 layers by 4 heads of them stays legible
// at a page's width (charsFigureWidthPx).
const (
	charsWindow        = 64
	charsFigureWidthPx = 1000
)

// attendChars draws a character model's attention over the prompt alone,
// its last charsWindow characters after BOS, as the model reads a window
// of its text: no continuation is decoded or drawn, BOS is labelled BOS
// and spaces '␣'; the panels share their axes so that the figure fits
// charsFigureWidthPx.
func attendChars(l *loaded, prompt []int, out string, stdout io.Writer) error {
	m, task := l.m, l.task
	vocab := task.Vocab()
	cut := 0
	if len(prompt) > charsWindow {
		cut = len(prompt) - charsWindow
	}
	_, seqs, err := infer.Begin(m.Arch, task, []data.Example{task.Frame(prompt[cut:])})
	if err != nil {
		return err
	}
	// The frame of a text is BOS alone, the prompt its given answer: the
	// model reads BOS, then the characters.
	seq := append(seqs[0], prompt[cut:]...)
	seq = seq[:min(len(seq), m.S)]
	got, err := infer.Attention(m, nil, [][]int{seq})
	if err != nil {
		return err
	}
	maps := l.heatmaps(got[0].Self, plot.SelfHidden(len(seq), true, l.cfg.Model.Window), true)
	if len(maps) == 0 {
		return errors.New("model has no attention layers")
	}
	labels := vocab.Labels(seq)
	for i, id := range seq {
		if id == vocab.SEP() { // a character model's BOS has SEP's id
			labels[i] = "BOS"
		}
	}
	shown := oneLine(vocab, prompt[cut:])
	title := fmt.Sprintf("%s: attention over %s", task.Name(), shown)
	if cut > 0 {
		title = fmt.Sprintf("%s: attention over the last %d characters, %s", task.Name(), charsWindow, shown)
	}
	if v := l.variants(); v != "" {
		title += " (" + v + ")"
	}
	if err := plot.AttentionWith(out, title, labels, maps, plot.AttentionOptions{MaxWidthPx: charsFigureWidthPx}); err != nil {
		return outputErr("out", err)
	}
	what := fmt.Sprintf("BOS and %d characters", len(seq)-1)
	if cut > 0 {
		what = fmt.Sprintf("BOS and the prompt's last %d characters", len(seq)-1)
	}
	fmt.Fprintf(stdout, "attention of %d layers over %s (%s) written to %s\n", len(maps)/max(1, l.cfg.Model.Heads), shown, what, out)
	return nil
}

// heatmaps are the panels of one kind of attention of l's model: maps
// with hidden as plot.Heatmaps makes them, each named with what sets its
// head apart (its key/value head under grouped-query attention; self
// attention's window), and with sinks the share of each row the sink took,
// 1 less the row's sum.
func (l *loaded) heatmaps(maps [][][][]float64, hidden [][]bool, self bool) []plot.AttentionMap {
	out := plot.Heatmaps(maps, hidden)
	mc := l.cfg.Model
	for i := range out {
		m := &out[i]
		var parts []string
		if g := mc.KVHeads; g > 0 && g < mc.Heads {
			parts = append(parts, fmt.Sprintf("kv head %d", m.Head/(mc.Heads/g)))
		}
		if self && mc.Window > 0 {
			parts = append(parts, fmt.Sprintf("window %d", mc.Window))
		}
		if mc.Sinks {
			parts = append(parts, "sink")
			m.Sink = make([]float64, len(m.Weights))
			for q, row := range m.Weights {
				sum := 0.0
				for _, w := range row {
					sum += w
				}
				m.Sink[q] = min(max(1-sum, 0), 1)
			}
		}
		m.Variant = strings.Join(parts, " · ")
	}
	return out
}

// variants names the attention variants of l's model, for a figure's
// title: positions applied in attention, grouped-query heads, window,
// sinks, softcap, QK-norm; "" for the 2017 formula.
func (l *loaded) variants() string {
	mc := l.cfg.Model
	var parts []string
	switch mc.Positions {
	case layers.PositionsRoPE, layers.PositionsRoPEInterleaved:
		parts = append(parts, "RoPE")
	case layers.PositionsALiBi:
		parts = append(parts, "ALiBi")
	}
	if g := mc.KVHeads; g > 0 && g < mc.Heads {
		parts = append(parts, fmt.Sprintf("%d query heads on %d key/value heads", mc.Heads, g))
	}
	if mc.Window > 0 {
		parts = append(parts, fmt.Sprintf("window %d", mc.Window))
	}
	if mc.Sinks {
		parts = append(parts, "sinks")
	}
	if mc.Softcap > 0 {
		parts = append(parts, fmt.Sprintf("softcap %g", mc.Softcap))
	}
	if mc.QKNorm {
		parts = append(parts, "QK-norm")
	}
	return strings.Join(parts, ", ")
}
