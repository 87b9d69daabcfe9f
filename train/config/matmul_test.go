package config

import (
	"errors"
	"strings"
	"testing"
)

// TestMatmul: float32 (or nothing) and bf16 are valid, bf16 only with
// float32 weights, anything else refused naming the field; config.json
// holds the key only for bf16, so older runs' files are unchanged.
func TestMatmul(t *testing.T) {
	for _, c := range []struct {
		matmul Matmul
		dtype  DType
		field  string // "" when valid
		with   string
	}{
		{"", Float32, "", ""}, {MatmulFloat32, Float32, "", ""}, {MatmulBF16, Float32, "", ""},
		{"", Float64, "", ""}, {MatmulFloat32, Float64, "", ""},
		{MatmulBF16, Float64, "matmul", "dtype"}, {"bf8", Float32, "matmul", ""}, {"BF16", Float32, "matmul", ""},
	} {
		cfg := Default()
		cfg.Matmul, cfg.DType = c.matmul, c.dtype
		err := cfg.Validate()
		var ce *Error
		switch {
		case c.field == "" && err != nil:
			t.Errorf("matmul %q, dtype %q: %v", c.matmul, c.dtype, err)
		case c.field != "" && (!errors.As(err, &ce) || ce.Field != c.field || strings.Join(ce.With, ",") != c.with):
			t.Errorf("matmul %q, dtype %q: got %v, want an *Error of field %q with %q", c.matmul, c.dtype, err, c.field, c.with)
		}
		b, err := Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if has, want := strings.Contains(string(b), `"matmul"`), c.matmul != ""; has != want {
			t.Errorf("matmul %q: config.json has the key: %t, want %t", c.matmul, has, want)
		}
	}
}
