package graph

import (
	"fmt"

	G "gorgonia.org/gorgonia"
)

// NewMachine compiles g into a tape machine and returns an error where
// gorgonia's NewTapeMachine would panic on a graph it cannot compile.
func NewMachine(g *G.ExprGraph, opts ...G.VMOpt) (vm G.VM, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("graph: compile: %v", r)
		}
	}()
	return G.NewTapeMachine(g, opts...), nil
}
