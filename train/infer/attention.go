package infer

import (
	"errors"
	"fmt"
	"slices"

	G "gorgonia.org/gorgonia"

	"github.com/qkv-dev/qkv/graph"
)

// Maps are one sequence's attention weights, indexed [layer][head][query][key]
// over its real tokens: row i is what query i puts on each key, and sums to
// 1 over the keys it may see.
type Maps [][][][]float64

// Attention runs m on seqs (1 to B sequences of 1 to S valid token ids) and
// returns each sequence's attention weights, every layer and head, over its
// own tokens. A model built with flash attention forms no weights: load it
// with LoadOptions{Attention: layers.AttentionFused}.
func (m *Model) Attention(seqs [][]int) ([]Maps, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	if len(seqs) == 0 || len(seqs) > m.B {
		return nil, fmt.Errorf("infer: attention: %d sequences, want 1 to %d", len(seqs), m.B)
	}
	ids, lengths := make([]int, m.B*m.S), make([]int, m.B)
	for b, seq := range seqs {
		if len(seq) == 0 || len(seq) > m.S {
			return nil, fmt.Errorf("infer: attention: sequence %d has %d tokens, want 1 to %d", b, len(seq), m.S)
		}
		copy(ids[b*m.S:], seq)
		lengths[b] = len(seq)
	}
	if err := m.SetBatch(ids, lengths); err != nil {
		return nil, fmt.Errorf("infer: attention: %w", err)
	}
	out := make([]Maps, len(seqs))
	err := m.Run(func() error {
		for _, w := range m.Weights {
			for b, seq := range seqs {
				layer, err := weightsOf(w, b, len(seq), len(seq))
				if err != nil {
					return err
				}
				out[b] = append(out[b], layer)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// EncDecMaps are one example's attention weights in an encoder–decoder, each
// indexed [layer][head][query][key] over the real tokens: the encoder's
// self-attention over the source, the decoder's causal self-attention over
// the target, and the cross-attention from target positions (queries) to
// source positions (keys).
type EncDecMaps struct {
	Encoder, DecoderSelf, Cross Maps
}

// Attention runs m on sources src and targets tgt (1 to B pairs; a source
// of 1 to Ss ids, a target of 1 to St ids: SEP and the answer but its last
// token) and returns each pair's attention weights.
func (m *EncDecModel) Attention(src, tgt [][]int) ([]EncDecMaps, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	if len(src) == 0 || len(src) > m.B || len(tgt) != len(src) {
		return nil, fmt.Errorf("infer: attention: %d sources and %d targets, want as many of each, 1 to %d", len(src), len(tgt), m.B)
	}
	srcIDs, tgtIDs := make([]int, m.B*m.Ss), make([]int, m.B*m.St)
	srcLen, tgtLen := make([]int, m.B), make([]int, m.B)
	for b := range m.B {
		srcLen[b], tgtLen[b] = 1, 1 // rows no pair fills: one token each, never read
	}
	for b := range src {
		if len(src[b]) == 0 || len(src[b]) > m.Ss || len(tgt[b]) == 0 || len(tgt[b]) > m.St {
			return nil, fmt.Errorf("infer: attention: pair %d has a source of %d and a target of %d tokens, want 1 to %d and 1 to %d", b, len(src[b]), len(tgt[b]), m.Ss, m.St)
		}
		copy(srcIDs[b*m.Ss:], src[b])
		copy(tgtIDs[b*m.St:], tgt[b])
		srcLen[b], tgtLen[b] = len(src[b]), len(tgt[b])
	}
	if err := m.SetBatch(srcIDs, srcLen, tgtIDs, tgtLen); err != nil {
		return nil, fmt.Errorf("infer: attention: %w", err)
	}
	out := make([]EncDecMaps, len(src))
	err := m.Run(func() error {
		for b := range src {
			for _, kind := range []struct {
				nodes      []*G.Node
				maps       *Maps
				rows, cols int
			}{
				{m.Weights.Encoder, &out[b].Encoder, len(src[b]), len(src[b])},
				{m.Weights.DecoderSelf, &out[b].DecoderSelf, len(tgt[b]), len(tgt[b])},
				{m.Weights.Cross, &out[b].Cross, len(tgt[b]), len(src[b])},
			} {
				for _, w := range kind.nodes {
					layer, err := weightsOf(w, b, kind.rows, kind.cols)
					if err != nil {
						return err
					}
					*kind.maps = append(*kind.maps, layer)
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// weightsOf copies row b of a layer's weights w (B, H, Sq, Sk) over its
// first rows queries and cols keys: [head][query][key].
func weightsOf(w *G.Node, b, rows, cols int) ([][][]float64, error) {
	if w == nil {
		return nil, errors.New("infer: attention: a layer forms no attention weights (flash attention): load the model with fused attention")
	}
	vals, err := graph.Float64s(w.Value())
	if err != nil {
		return nil, fmt.Errorf("infer: attention: %w", err)
	}
	s := w.Shape() // (B, H, Sq, Sk)
	h, sq, sk := s[1], s[2], s[3]
	heads := make([][][]float64, h)
	for head := range heads {
		heads[head] = make([][]float64, rows)
		for i := range rows {
			off := ((b*h+head)*sq + i) * sk
			heads[head][i] = slices.Clone(vals[off : off+cols])
		}
	}
	return heads, nil
}
