package layers

import (
	"errors"
	"fmt"

	"github.com/qkv-dev/qkv/graph"
	G "gorgonia.org/gorgonia"
)

// EmbeddingConfig configures a token embedding table.
type EmbeddingConfig struct {
	Vocab, Dim int
	// Std is the standard deviation of the table's N(0, Std²) entries; 0
	// means 1, nn.Embedding's (GPT-2's is 0.02).
	Std float64
}

// Embedding maps token ids to learned vectors: row id of a (Vocab, Dim) table.
// Its configuration is fixed when it is built: Config returns a copy.
type Embedding struct {
	cfg   EmbeddingConfig
	table graph.Param
}

// Config returns a copy of the configuration the layer was built with; the
// zero EmbeddingConfig for a nil Embedding.
func (e *Embedding) Config() EmbeddingConfig { return orZero(e).cfg }

// Table returns the (Vocab, Dim) table, role graph.RoleEmbedding; the zero
// Param for a nil Embedding.
func (e *Embedding) Table() graph.Param { return orZero(e).table }

// NewEmbedding returns an embedding in scope s with entries drawn from
// N(0, 1), PyTorch's nn.Embedding default.
func NewEmbedding(s *Scope, cfg EmbeddingConfig) (*Embedding, error) {
	if err := s.checkLayer("embedding", cfg.validate); err != nil {
		return nil, err
	}
	table, err := s.param("table", graph.RoleEmbedding, normal(stdOr1(cfg.Std)), cfg.Vocab, cfg.Dim)
	if err != nil {
		return nil, layerErr("embedding", s.path(), err)
	}
	return &Embedding{cfg: cfg, table: table}, nil
}

// Validate checks what NewEmbedding checks, without allocating anything:
// Vocab and Dim positive, and the (Vocab, Dim) table within
// graph.MaxElements.
func (c EmbeddingConfig) Validate() error { return c.validate("") }

func (c EmbeddingConfig) validate(name string) error {
	if err := checkPositive(size{"Vocab", "vocab", c.Vocab}, size{"Dim", "dim", c.Dim}); err != nil {
		return layerErr("embedding", name, err)
	}
	if err := checkTensor("table (Vocab, Dim)", "vocab", []string{"dim"}, c.Vocab, c.Dim); err != nil {
		return layerErr("embedding", name, err)
	}
	if err := checkStd("Std", c.Std); err != nil {
		return layerErr("embedding", name, err)
	}
	return nil
}

// Forward looks up ids (B, S) and returns (B, S, Dim). The ids input checks
// every id against the vocabulary when it is set, before the engine sees it.
func (e *Embedding) Forward(ids *graph.IDs) (*G.Node, error) {
	if e == nil || e.table.Node == nil {
		return nil, errors.New("layers: embedding: the layer is nil or a zero value: make it with NewEmbedding")
	}
	out, err := graph.Embed(e.table.Node, ids)
	if err != nil {
		return nil, fmt.Errorf("layers: embedding %q: %w", e.table.Name, err)
	}
	return out, nil
}

// Params returns the table; nothing for a nil Embedding.
func (e *Embedding) Params() []graph.Param { return learned(orZero(e).table) }
