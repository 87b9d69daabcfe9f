//go:build openblas

package graph

import "gonum.org/v1/netlib/blas/netlib"

// qkvBLAS is, with the openblas build tag, OpenBLAS (cgo; needs
// libopenblas-dev and CGO_LDFLAGS=-lopenblas): Linear's matrix products run
// on it instead of internal/gemm, called directly as in the default build.
// Attention's stay on internal/gemm. The default build stays pure Go.
type qkvBLAS = netlib.Implementation
