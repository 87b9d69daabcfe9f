package layers

import (
	"fmt"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
)

// EmbeddingConfig configures a token embedding table.
type EmbeddingConfig struct {
	Vocab, Dim int
}

// Embedding maps token ids to learned vectors: row id of a (Vocab, Dim) table.
type Embedding struct {
	Config EmbeddingConfig
	Table  graph.Param
}

// NewEmbedding returns an embedding in scope s with entries drawn from
// N(0, 1), PyTorch's nn.Embedding default.
func NewEmbedding(s *Scope, cfg EmbeddingConfig) (*Embedding, error) {
	if err := checkPositive(size{"Vocab", cfg.Vocab}, size{"Dim", cfg.Dim}); err != nil {
		return nil, fmt.Errorf("layers: embedding %q: %w", s.prefix, err)
	}
	return &Embedding{Config: cfg, Table: s.param("table", normal(1), cfg.Vocab, cfg.Dim)}, nil
}

// Forward looks up ids (B, S) and returns (B, S, Dim). The ids input checks
// every id against the vocabulary when it is set, before the engine sees it.
func (e *Embedding) Forward(ids *graph.IDs) (*G.Node, error) {
	out, err := graph.Embed(e.Table.Node, ids)
	if err != nil {
		return nil, fmt.Errorf("layers: embedding %q: %w", e.Table.Name, err)
	}
	return out, nil
}

// Params returns the table.
func (e *Embedding) Params() []graph.Param { return []graph.Param{e.Table} }
