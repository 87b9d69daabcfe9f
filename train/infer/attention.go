package infer

import (
	"errors"
	"fmt"
	"slices"

	G "gorgonia.org/gorgonia"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/train/model"
)

// Maps are one sequence's attention weights of one kind, indexed
// [layer][head][query][key] over its real tokens: row i is what query i
// puts on each key, and sums to 1 over the keys it may see.
type Maps [][][][]float64

// AttentionMaps are one row's attention weights of every kind its model
// has, each over the row's real tokens.
type AttentionMaps struct {
	// Self is the decoder's causal self-attention over the sequence.
	Self Maps
	// Encoder is an encoder–decoder's encoder self-attention over the
	// source; nil for a decoder-only model.
	Encoder Maps
	// Cross is an encoder–decoder's cross-attention from the sequence's
	// positions (queries) to the source's (keys); nil for a decoder-only
	// model.
	Cross Maps
}

// Attention runs m on seqs (1 to B sequences of 1 to S token ids) and, for
// an encoder–decoder, on sources (one per sequence, 1 to SourceLen ids;
// nil for a decoder-only model), and returns each row's attention weights,
// every layer and head of every kind, over its own tokens. A model built
// with flash attention forms no weights: load it with
// model.LoadOptions{Attention: layers.AttentionFused}.
func Attention(m *model.Model, sources, seqs [][]int) ([]AttentionMaps, error) {
	if err := checkModel(m); err != nil {
		return nil, err
	}
	if len(seqs) == 0 || len(seqs) > m.B {
		return nil, fmt.Errorf("infer: attention: %d sequences, want 1 to %d", len(seqs), m.B)
	}
	b, err := m.BatchOf(sources, seqs)
	if err != nil {
		return nil, fmt.Errorf("infer: attention: %w", err)
	}
	if err := m.SetBatch(b); err != nil {
		return nil, fmt.Errorf("infer: attention: %w", err)
	}
	out := make([]AttentionMaps, len(seqs))
	err = m.Run(func() error {
		for r, seq := range seqs {
			kinds := []kind{{m.Weights.Self, &out[r].Self, len(seq), len(seq)}}
			if sources != nil {
				src := len(sources[r])
				kinds = append(kinds, kind{m.Weights.Encoder, &out[r].Encoder, src, src}, kind{m.Weights.Cross, &out[r].Cross, len(seq), src})
			}
			for _, kind := range kinds {
				for _, w := range kind.nodes {
					layer, err := weightsOf(w, r, kind.rows, kind.cols)
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

// kind is one kind of attention of a row: its layers' weights, the maps
// they are copied into, and the row's queries and keys.
type kind struct {
	nodes      []*G.Node
	maps       *Maps
	rows, cols int
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
