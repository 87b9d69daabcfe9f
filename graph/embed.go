package graph

import (
	"fmt"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// Embed returns the rows of table (Vocab, D) picked by ids, shaped (B, S, D).
//
// It uses ByIndices along axis 0 only (its gradient along other axes is
// wrong), and requires the table to have a row for every id the input may
// hold; IDs.Set has already rejected ids outside [0, ids.Vocab), so no id ever
// reaches the engine out of range.
func Embed(table *G.Node, ids *IDs) (*G.Node, error) {
	if err := CheckNode(table, "table"); err != nil {
		return nil, fmt.Errorf("graph: embed: %w", err)
	}
	if err := ids.Check(); err != nil {
		return nil, fmt.Errorf("graph: embed: %w", err)
	}
	s := table.Shape()
	if len(s) != 2 {
		return nil, shapeErrorf("graph: embed: table %q must be (vocab, dim), got shape %v", table.Name(), s)
	}
	if ids.Vocab > s[0] {
		return nil, shapeErrorf("graph: embed: ids %q range over %d tokens but table %q has %d rows", ids.Node.Name(), ids.Vocab, table.Name(), s[0])
	}
	// B*S ids and a (vocab, dim) table may each be small enough while the
	// (B, S, dim) rows they select are not.
	if err := CheckElements(ids.B, ids.S, s[1]); err != nil {
		return nil, fmt.Errorf("graph: embed: output (B, S, dim): %w", err)
	}
	rows, err := G.ByIndices(table, ids.Node, 0)
	if err != nil {
		return nil, fmt.Errorf("graph: embed: %w", err)
	}
	return Reshape(rows, tensor.Shape{ids.B, ids.S, s[1]})
}
