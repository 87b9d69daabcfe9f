//go:build openblas

package graph

import (
	"gonum.org/v1/netlib/blas/netlib"
	G "gorgonia.org/gorgonia"
)

// With the openblas build tag, gorgonia's matrix products run on OpenBLAS
// (cgo; needs libopenblas-dev and CGO_LDFLAGS=-lopenblas) instead of gonum's
// pure-Go BLAS. The default build stays pure Go.
func init() { G.Use(netlib.Implementation{}) }
