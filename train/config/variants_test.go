package config

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/layers"
)

// TestAttentionVariants: model.kv_heads, softcap, window, rope_base and the
// positions RoPE needs are validated naming the field; the variants are absent from config.json when unset,
// read back when set, and passed to the encoder-decoder.
func TestAttentionVariants(t *testing.T) {
	for _, c := range []struct {
		v     layers.AttentionVariants
		field string
		pos   layers.PositionsKind
		dim   int
	}{
		{layers.AttentionVariants{}, "model.positions", layers.PositionsRoPE, 12},              // dk = 3: odd
		{layers.AttentionVariants{RoPEBase: 500}, "model.rope_base", layers.PositionsALiBi, 0}, // not RoPE
		{layers.AttentionVariants{RoPEBase: 1}, "model.rope_base", layers.PositionsRoPE, 0},    // base 1: no rotation
		{layers.AttentionVariants{RoPEBase: math.NaN()}, "model.rope_base", layers.PositionsRoPEInterleaved, 0},
		{layers.AttentionVariants{Window: -1}, "model.window", "", 0},
		{layers.AttentionVariants{}, "model.positions", "rotary", 0},
		{layers.AttentionVariants{KVHeads: 3}, "model.kv_heads", "", 0},
		{layers.AttentionVariants{KVHeads: -1}, "model.kv_heads", "", 0},
		{layers.AttentionVariants{Softcap: -1}, "model.softcap", "", 0},
		{layers.AttentionVariants{Softcap: math.NaN()}, "model.softcap", "", 0},
		{layers.AttentionVariants{Softcap: math.Inf(1)}, "model.softcap", "", 0},
	} {
		bad := Default() // 4 heads
		bad.Model.AttentionVariants, bad.Model.Positions = c.v, c.pos
		if c.dim != 0 {
			bad.Model.Dim = c.dim
		}
		var ce *Error
		if err := bad.Validate(); !errors.As(err, &ce) || ce.Field != c.field || !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want a *Error on %s", c.v, err, c.field)
		}
	}
	plain := Default()
	b, err := Marshal(plain)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"kv_heads", "softcap", "sinks", "qk_norm", "window", "rope_base"} {
		if strings.Contains(string(b), f) {
			t.Errorf("config.json of the defaults spells %s:\n%s", f, b)
		}
	}
	all := layers.AttentionVariants{KVHeads: 2, Softcap: 30, Sinks: true, QKNorm: true, Window: 5, RoPEBase: 500}
	c := Default()
	c.Model.AttentionVariants, c.Model.Positions = all, layers.PositionsRoPEInterleaved
	if _, err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	if b, err = Marshal(c); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{`"kv_heads": 2`, `"softcap": 30`, `"sinks": true`, `"qk_norm": true`, `"window": 5`, `"rope_base": 500`, `"positions": "rope-interleaved"`} {
		if !strings.Contains(string(b), f) {
			t.Errorf("config.json lacks %s:\n%s", f, b)
		}
	}
	back, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.Model.AttentionVariants != all {
		t.Errorf("read back %+v, want %+v", back.Model.AttentionVariants, all)
	}
	back.Arch = ArchEncDec
	if got := back.EncDec().AttentionVariants; got != all {
		t.Errorf("EncDec() has %+v, want %+v", got, all)
	}
}
