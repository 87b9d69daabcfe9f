package config

import (
	"errors"
	"strings"
	"testing"
)

// TestCausalEncoder: model.causal_encoder is refused for a decoder-only
// model naming the field and arch, written to config.json only when set,
// read back, and passed to the encoder-decoder.
func TestCausalEncoder(t *testing.T) {
	bad := Default()
	bad.Model.CausalEncoder = true
	err := bad.Validate()
	var ce *Error
	if !errors.As(err, &ce) || ce.Field != "model.causal_encoder" || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"encdec"`) {
		t.Errorf("causal_encoder on a decoder: %v, want a *Error on model.causal_encoder naming arch encdec", err)
	}
	for _, causal := range []bool{false, true} {
		c := Default()
		c.Arch, c.Model.CausalEncoder = ArchEncDec, causal
		if _, err := c.Resolve(); err != nil {
			t.Fatalf("causal_encoder %v: %v", causal, err)
		}
		b, err := Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		if has := strings.Contains(string(b), `"causal_encoder": true`); has != causal {
			t.Errorf("causal_encoder %v: config.json has it: %v\n%s", causal, has, b)
		}
		if !causal && strings.Contains(string(b), "causal_encoder") {
			t.Errorf("config.json spells the default causal_encoder:\n%s", b)
		}
		back, err := Unmarshal(b)
		if err != nil {
			t.Fatal(err)
		}
		if back.Model.CausalEncoder != causal || back.EncDec().CausalEncoder != causal {
			t.Errorf("causal_encoder %v read back as %v, EncDec() %v", causal, back.Model.CausalEncoder, back.EncDec().CausalEncoder)
		}
	}
}
