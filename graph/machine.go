package graph

import (
	"errors"
	"fmt"

	G "gorgonia.org/gorgonia"
)

// NewMachine compiles g into a tape machine and returns an error where
// gorgonia's NewTapeMachine would panic on a graph it cannot compile.
func NewMachine(g *G.ExprGraph, opts ...G.VMOpt) (vm G.VM, err error) {
	if g == nil {
		return nil, errors.New("graph: compile: the graph is nil")
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("graph: compile: %v", r)
		}
	}()
	return G.NewTapeMachine(g, opts...), nil
}
