// Package graphtest holds the helpers that the tests of qkv's graph and
// layers packages share: seeded random inputs, float32 rounding for float64
// references, finiteness checks, and a guard that turns a panic into a test
// failure, and a check that an error says what it must.
package graphtest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"gorgonia.org/tensor"
)

// NewRand returns a deterministic generator for test inputs.
func NewRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)) }

// Uniform returns n values drawn uniformly from [lo, hi).
func Uniform(rng *rand.Rand, n int, lo, hi float64) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = lo + (hi-lo)*rng.Float64()
	}
	return v
}

// RoundTo rounds vals to the precision of dt, so that a float64 reference
// sees exactly the numbers a float32 graph holds.
func RoundTo(dt tensor.Dtype, vals []float64) []float64 {
	out := append([]float64(nil), vals...)
	if dt == tensor.Float32 {
		for i, v := range out {
			out[i] = float64(float32(v))
		}
	}
	return out
}

// AllFinite reports whether no value is NaN or infinite.
func AllFinite(v []float64) bool {
	for _, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}

// NoPanic calls f and turns a panic into a test failure (and an error), so
// that code whose contract is to return an error, and panics instead, is
// reported rather than killing the test binary.
func NoPanic(t testing.TB, what string, f func() error) (err error) {
	t.Helper()
	defer func() {
		if r := recover(); r != nil {
			t.Errorf("%s panicked instead of returning an error: %v", what, r)
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return f()
}

// WantErr fails t unless err is non-nil and its message contains every
// part: what a test of a refusal checks, that the error names the layer or
// file and what was expected.
func WantErr(t testing.TB, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", parts)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not contain %q", err, p)
		}
	}
}
