package config

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/layers"
)

// TestAttentionVariants: model.kv_heads and model.softcap are validated
// naming the field; the variants are absent from config.json when unset,
// read back when set, and passed to the encoder-decoder.
func TestAttentionVariants(t *testing.T) {
	for _, c := range []struct {
		v     layers.AttentionVariants
		field string
	}{
		{layers.AttentionVariants{KVHeads: 3}, "model.kv_heads"},
		{layers.AttentionVariants{KVHeads: -1}, "model.kv_heads"},
		{layers.AttentionVariants{Softcap: -1}, "model.softcap"},
		{layers.AttentionVariants{Softcap: math.NaN()}, "model.softcap"},
		{layers.AttentionVariants{Softcap: math.Inf(1)}, "model.softcap"},
	} {
		bad := Default() // 4 heads
		bad.Model.AttentionVariants = c.v
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
	for _, f := range []string{"kv_heads", "softcap", "sinks", "qk_norm"} {
		if strings.Contains(string(b), f) {
			t.Errorf("config.json of the defaults spells %s:\n%s", f, b)
		}
	}
	all := layers.AttentionVariants{KVHeads: 2, Softcap: 30, Sinks: true, QKNorm: true}
	c := Default()
	c.Model.AttentionVariants = all
	if _, err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	if b, err = Marshal(c); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{`"kv_heads": 2`, `"softcap": 30`, `"sinks": true`, `"qk_norm": true`} {
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
