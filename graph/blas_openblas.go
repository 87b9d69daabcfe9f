//go:build openblas

package graph

import (
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/netlib/blas/netlib"
	G "gorgonia.org/gorgonia"
)

// With the openblas build tag, the matrix products of gorgonia's ops and of
// Linear run on OpenBLAS (cgo; needs libopenblas-dev and
// CGO_LDFLAGS=-lopenblas) instead of gonum's pure-Go BLAS. The default build
// stays pure Go.
func init() {
	G.Use(netlib.Implementation{})
	blas32.Use(netlib.Implementation{})
	blas64.Use(netlib.Implementation{})
}
