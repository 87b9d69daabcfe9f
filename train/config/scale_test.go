package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/layers"
)

// TestAttnScale: model.attn_scale is validated naming the field, written to
// config.json only when it is not the default, read back, and passed to
// the encoder-decoder too.
func TestAttnScale(t *testing.T) {
	bad := Default()
	bad.Model.AttnScale = "sqrt_dk"
	err := bad.Validate()
	var ce *Error
	if !errors.As(err, &ce) || ce.Field != "model.attn_scale" || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"sqrt_dk"`) {
		t.Errorf("attn_scale sqrt_dk: %v, want a *Error on model.attn_scale naming the value", err)
	}
	for _, s := range []layers.AttentionScale{"", layers.ScaleDK, layers.ScaleDModel, layers.ScaleNone} {
		c := Default()
		c.Model.AttnScale = s
		if _, err := c.Resolve(); err != nil {
			t.Errorf("attn_scale %q: %v", s, err)
			continue
		}
		b, err := Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if has := strings.Contains(string(b), `"attn_scale"`); has != (s != "") {
			t.Errorf("attn_scale %q: config.json has the field: %v\n%s", s, has, b)
		}
		back, err := Unmarshal(b)
		if err != nil {
			t.Fatal(err)
		}
		if back.Model.AttnScale != s {
			t.Errorf("attn_scale %q read back as %q", s, back.Model.AttnScale)
		}
		c.Arch = ArchEncDec
		if got := c.EncDec().AttnScale; got != s {
			t.Errorf("EncDec() has attn_scale %q, want %q", got, s)
		}
	}
}

// The evaluation batch is every held-out example up to MaxEvalBatch, and
// fewer for long sequences: at most MaxEvalTokens positions, at least one
// row.
func TestEvalBatch(t *testing.T) {
	for _, c := range []struct{ testSize, maxLen, want int }{
		{200, 12, 128}, {40, 12, 40}, {240, 65, 126}, {240, 257, 31}, {240, 8193, 1}, {0, 12, 1},
	} {
		cfg := Config{TestSize: c.testSize}
		cfg.Model.MaxLen = c.maxLen
		if got := cfg.EvalBatch(); got != c.want {
			t.Errorf("test size %d, max len %d: EvalBatch %d, want %d", c.testSize, c.maxLen, got, c.want)
		}
	}
}
