package model

import (
	"errors"
	"fmt"
	"slices"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/graph"
)

// Batch is what a model reads in one run: the decoder's rows (data.Batch:
// Inputs and Lengths, and for a training step Targets and Weights; Starts
// is not read) and, for an encoder–decoder, the encoder's (Source). Every
// slice is row-major, B rows of the model's S positions, padded.
type Batch struct {
	data.Batch
	// Source is an encoder–decoder's source rows; nil for a decoder-only
	// model, which has no encoder.
	Source *Source
}

// Source is the encoder's side of an encoder–decoder's batch: B rows of S
// token ids, row-major and padded, and each row's unpadded length, from
// which the encoder's and the cross-attention's key-padding masks are made.
type Source struct {
	// S is the positions of a row, the model's SourceLen.
	S int
	// IDs are the B rows of S token ids, row-major.
	IDs []int
	// Lengths are the rows' unpadded lengths.
	Lengths []int
}

// BatchFor lays examples (at most B) out for a training step of m, targets
// and weights included, as m's architecture reads them. A decoder-only
// model reads prompt + SEP + answer as one sequence (data.BatchFor), rows
// the examples do not fill being padding of weight 0 (data.Batch.PadRows).
// An encoder–decoder's encoder reads the prompt and its decoder SEP and the
// answer but its last token (teacher forcing), trained on the next token
// at every target answer position (given ones carry no loss): the tokens
// the decoder-only model is trained on. Rows no example fills hold one
// padding token of weight 0.
func (m *Model) BatchFor(task data.Task, examples []data.Example) (Batch, error) {
	if err := m.check(); err != nil {
		return Batch{}, err
	}
	if task == nil {
		return Batch{}, errors.New("model: batch: nil task")
	}
	if len(examples) > m.B {
		return Batch{}, fmt.Errorf("model: batch: %d examples for a batch of %d", len(examples), m.B)
	}
	if m.net == nil {
		b, err := data.BatchFor(task, examples)
		if err != nil {
			return Batch{}, err
		}
		if b.B < m.B {
			if b, err = b.PadRows(m.B, task.Vocab().PAD()); err != nil {
				return Batch{}, err
			}
		}
		return Batch{Batch: b}, nil
	}
	bs, ss, st := m.B, m.SourceLen, m.S
	b := Batch{
		Batch: data.Batch{B: bs, S: st, Inputs: make([]int, bs*st), Targets: make([]int, bs*st),
			Weights: make([]float64, bs*st), Lengths: make([]int, bs), Starts: make([]int, bs)},
		Source: &Source{S: ss, IDs: make([]int, bs*ss), Lengths: make([]int, bs)},
	}
	src, tgt := b.Source, b.Batch
	for i := range src.Lengths {
		src.Lengths[i], tgt.Lengths[i] = 1, 1 // rows no example fills: one PAD each, weight 0
	}
	for i, e := range examples {
		if len(e.Prompt) > ss || len(e.Answer) > st || len(e.Prompt) == 0 || len(e.Answer) == 0 {
			return Batch{}, fmt.Errorf("model: batch: example %d: prompt of %d and answer of %d tokens, want 1 to %d and 1 to %d", i, len(e.Prompt), len(e.Answer), ss, st)
		}
		copy(src.IDs[i*ss:], e.Prompt)
		tgt.Inputs[i*st] = task.Vocab().SEP()
		copy(tgt.Inputs[i*st+1:], e.Answer[:len(e.Answer)-1])
		copy(tgt.Targets[i*st:], e.Answer)
		for t := range e.Answer {
			if !e.IsGiven(t) {
				tgt.Weights[i*st+t] = 1
			}
		}
		src.Lengths[i], tgt.Lengths[i] = len(e.Prompt), len(e.Answer)
	}
	return b, nil
}

// BatchOf lays up to B sequences out for a run of m without targets: seqs
// are the decoder's (1 to S tokens each) and sources, one per sequence, an
// encoder–decoder's encoder's (1 to SourceLen tokens each; nil for a
// decoder-only model). Rows they do not fill are padding: of length 0 in a
// decoder-only model (every key hidden), of one token in an
// encoder–decoder; positions past a row's length are hidden by the masks.
func (m *Model) BatchOf(sources, seqs [][]int) (Batch, error) {
	if err := m.check(); err != nil {
		return Batch{}, err
	}
	if err := m.checkRows(sources, seqs); err != nil {
		return Batch{}, err
	}
	if len(seqs) > m.B {
		return Batch{}, fmt.Errorf("model: %d sequences, want at most the model's %d rows", len(seqs), m.B)
	}
	b := Batch{Batch: data.Batch{B: m.B, S: m.S, Inputs: make([]int, m.B*m.S), Lengths: make([]int, m.B)}}
	for i, seq := range seqs {
		copy(b.Inputs[i*m.S:], seq)
		b.Lengths[i] = len(seq)
	}
	if m.net == nil {
		return b, nil
	}
	b.Source = &Source{S: m.SourceLen, IDs: make([]int, m.B*m.SourceLen), Lengths: make([]int, m.B)}
	for i := len(seqs); i < m.B; i++ { // rows no sequence fills: one token each
		b.Source.Lengths[i], b.Lengths[i] = 1, 1
	}
	for i, src := range sources {
		copy(b.Source.IDs[i*m.SourceLen:], src)
		b.Source.Lengths[i] = len(src)
	}
	return b, nil
}

// checkRows checks sequences and sources (any number) for m: as many
// sources as sequences for an encoder–decoder and none for a decoder-only
// model, and every one of a length m reads.
func (m *Model) checkRows(sources, seqs [][]int) error {
	if m.net == nil {
		if sources != nil {
			return errors.New("model: sources given to a decoder-only model, which has no encoder")
		}
		for i, seq := range seqs {
			if len(seq) == 0 || len(seq) > m.S {
				return fmt.Errorf("model: sequence %d has %d tokens, want 1 to the model's %d", i, len(seq), m.S)
			}
		}
		return nil
	}
	if len(sources) != len(seqs) {
		return fmt.Errorf("model: %d sources and %d sequences: an encoder-decoder reads one source per sequence", len(sources), len(seqs))
	}
	for i := range seqs {
		if len(sources[i]) == 0 || len(sources[i]) > m.SourceLen || len(seqs[i]) == 0 || len(seqs[i]) > m.S {
			return fmt.Errorf("model: source %d has %d tokens and sequence %d, want 1 to %d and 1 to %d", i, len(sources[i]), len(seqs[i]), m.SourceLen, m.S)
		}
	}
	return nil
}

// SetBatch binds b's inputs (not its targets) for the next run: the
// decoder's token ids and the key-padding mask made from its lengths, and
// an encoder–decoder's source with its masks. b must be of m's shape: B
// rows of S positions, and a source of SourceLen positions exactly when m
// has an encoder.
func (m *Model) SetBatch(b Batch) error {
	if m == nil || m.IDs == nil || m.Pad == nil {
		return errors.New("model: set batch: nil or unbuilt model: build it with Build, Assemble or Load")
	}
	if b.B != m.B || b.S != m.S || len(b.Inputs) != m.B*m.S || len(b.Lengths) != m.B {
		return fmt.Errorf("model: batch of %d rows of %d positions (%d ids, %d lengths), the model reads %d rows of %d", b.B, b.S, len(b.Inputs), len(b.Lengths), m.B, m.S)
	}
	if m.net == nil {
		if b.Source != nil {
			return errors.New("model: batch: a source given to a decoder-only model, which has no encoder")
		}
		if err := m.IDs.Set(b.Inputs); err != nil {
			return fmt.Errorf("model: batch: %w", err)
		}
		if err := m.Pad.SetKeyLengths(b.Lengths); err != nil {
			return fmt.Errorf("model: batch: %w", err)
		}
		return nil
	}
	src := b.Source
	switch {
	case src == nil:
		return errors.New("model: batch: an encoder-decoder's batch needs the source its encoder reads")
	case src.S != m.SourceLen || len(src.IDs) != m.B*src.S || len(src.Lengths) != m.B:
		return fmt.Errorf("model: batch: a source of %d positions (%d ids, %d lengths), the encoder reads %d rows of %d", src.S, len(src.IDs), len(src.Lengths), m.B, m.SourceLen)
	}
	if err := m.in.Set(src.IDs, src.Lengths, b.Inputs, b.Lengths); err != nil {
		return fmt.Errorf("model: batch: %w", err)
	}
	return nil
}

// NextLogits runs the model on seqs, any number of them, each of 1 to S
// token ids, and for an encoder–decoder on sources, one per sequence (1 to
// SourceLen ids; nil for a decoder-only model), B at a time, and returns
// for each sequence the logits of the token that follows its last (a row
// of the vocabulary's size). It is generation without the key/value cache,
// the reference Cached is tested against.
func (m *Model) NextLogits(sources, seqs [][]int) ([][]float64, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	if err := m.checkRows(sources, seqs); err != nil {
		return nil, err
	}
	v := m.Logits.Shape()[2]
	out := make([][]float64, 0, len(seqs))
	for start := 0; start < len(seqs); start += m.B {
		end := min(start+m.B, len(seqs))
		var srcs [][]int
		if sources != nil {
			srcs = sources[start:end]
		}
		chunk := seqs[start:end]
		b, err := m.BatchOf(srcs, chunk)
		if err != nil {
			return nil, err
		}
		if err := m.SetBatch(b); err != nil {
			return nil, err
		}
		err = m.Run(func() error {
			logits, err := graph.Float64s(m.Logits.Value()) // (B, S, V)
			if err != nil {
				return fmt.Errorf("model: logits: %w", err)
			}
			for i, seq := range chunk {
				at := (i*m.S + len(seq) - 1) * v
				out = append(out, slices.Clone(logits[at:at+v]))
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}
