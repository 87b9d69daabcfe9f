package model_test

import (
	"math"

	"github.com/qkv-dev/qkv/graph"
)

// randomize sets every parameter to a fixed non-trivial value, so that an
// untrained model still tells its inputs apart and no zero bias or unit
// gain hides a difference.
func randomize(ps []graph.Param) {
	for i, p := range ps {
		switch vals := p.Node.Value().Data().(type) {
		case []float64:
			for j := range vals {
				vals[j] = 0.5 * math.Sin(float64(7*i+3*j+1))
			}
		case []float32:
			for j := range vals {
				vals[j] = float32(0.5 * math.Sin(float64(7*i+3*j+1)))
			}
		}
	}
}
