package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/layers"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// TestNanoGPTOptions: model.tie_embeddings, bias_free_norm and init are
// validated naming the field, absent from config.json when unset, read
// back when set, passed to the encoder–decoder (all but tie_embeddings,
// which it refuses), and a resumed run may change none of them.
func TestNanoGPTOptions(t *testing.T) {
	var ce *Error
	bad := Default()
	bad.Model.Init = "xavier"
	if err := bad.Validate(); !errors.As(err, &ce) || ce.Field != "model.init" || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"gpt2"`) {
		t.Errorf("unknown init: %v, want a *Error on model.init naming gpt2", err)
	}
	bad = Default()
	bad.Arch, bad.Model.TieEmbeddings = ArchEncDec, true
	if err := bad.Validate(); !errors.As(err, &ce) || ce.Field != "model.tie_embeddings" || !strings.Contains(err.Error(), `"encdec"`) {
		t.Errorf("tie_embeddings with encdec: %v, want a *Error on model.tie_embeddings naming arch encdec", err)
	}
	b, err := Marshal(Default())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tie_embeddings", "bias_free_norm", `"init"`} {
		if strings.Contains(string(b), f) {
			t.Errorf("config.json of the defaults spells %s:\n%s", f, b)
		}
	}
	c := Default()
	c.Model.TieEmbeddings, c.Model.BiasFreeNorm, c.Model.Init = true, true, layers.InitGPT2
	if _, err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	if b, err = Marshal(c); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{`"tie_embeddings": true`, `"bias_free_norm": true`, `"init": "gpt2"`} {
		if !strings.Contains(string(b), f) {
			t.Errorf("config.json lacks %s:\n%s", f, b)
		}
	}
	back, err := Unmarshal(b)
	if err != nil {
		t.Fatal(err)
	}
	if m := back.Model; !m.TieEmbeddings || !m.BiasFreeNorm || m.Init != layers.InitGPT2 {
		t.Errorf("read back %+v", m)
	}
	back.Arch = ArchEncDec
	if ed := back.EncDec(); !ed.BiasFreeNorm || ed.Init != layers.InitGPT2 {
		t.Errorf("EncDec() has bias_free_norm %v, init %q", ed.BiasFreeNorm, ed.Init)
	}
	for _, f := range []struct {
		field string
		edit  func(*layers.StackConfig)
	}{
		{"model.tie_embeddings", func(m *layers.StackConfig) { m.TieEmbeddings = true }},
		{"model.bias_free_norm", func(m *layers.StackConfig) { m.BiasFreeNorm = true }},
		{"model.init", func(m *layers.StackConfig) { m.Init = layers.InitGPT2 }},
	} {
		saved, cfg := Default(), Default()
		f.edit(&cfg.Model)
		for _, pair := range [][2]Config{{cfg, saved}, {saved, cfg}} { // set here, or in the saved run
			if err := pair[0].Continues(pair[1]); !errors.As(err, &ce) || ce.Field != f.field || !strings.Contains(err.Error(), "saved run") {
				t.Errorf("resume changing %s: %v", f.field, err)
			}
		}
	}
}

// TestNumParamsNanoGPT: NumParams counts nanoGPT's CPU configuration as the
// layers build it. nanoGPT (model.py, bias=False, vocab 104 characters,
// block_size 64, n_embd 128, n_layer 4, n_head 4, MLP 4·128 = 512):
//
//	wte                 104·128           =  13,312
//	wpe                  64·128           =   8,192
//	per block: ln_1 128, c_attn 128·384 = 49,152, attn c_proj 128·128 = 16,384,
//	           ln_2 128, c_fc 128·512 = 65,536, mlp c_proj 512·128 = 65,536
//	                                       = 196,864; 4 blocks = 787,456
//	ln_f                                  =     128
//	lm_head, tied to wte                  =       0
//	total 809,088; get_num_params() (non_embedding: less wpe) 800,896.
//
// (810,240 = 809,088 + 9·128 would be the same model with its nine
// LayerNorms' biases, i.e. without bias_free_norm.) qkv's model adds PAD and
// SEP to the vocabulary (106 rows: +256) and a position for BOS (MaxLen 65:
// +128): 809,472 in all, 801,152 without pos_emb.table.
func TestNumParamsNanoGPT(t *testing.T) {
	m := layers.StackConfig{
		Vocab:         106,
		MaxLen:        65,
		Dim:           128,
		Heads:         4,
		Layers:        4,
		Hidden:        512,
		TieEmbeddings: true,
		Init:          layers.InitGPT2,
		BlockOptions:  layers.BlockOptions{Activation: layers.ActivationGELU, BiasFreeNorm: true},
	}
	const nano = 13312 + 8192 + 4*(128+49152+16384+128+65536+65536) + 128 // nanoGPT's model.py, vocab 104, block 64
	if nano != 809088 {
		t.Fatalf("the arithmetic above: %d", nano)
	}
	want := float64(nano + 2*128 + 128) // PAD, SEP; BOS's position
	got, err := m.NumParams()
	if err != nil {
		t.Fatal(err)
	}
	if float64(got) != want {
		t.Errorf("NumParams = %v, want %v", got, want)
	}
	if got := got - m.MaxLen*m.Dim; got != 801152 {
		t.Errorf("NumParams without positions = %v, want 801,152", got)
	}
	s, err := layers.NewScope(G.NewGraph(), tensor.Float32, 1)
	if err != nil {
		t.Fatal(err)
	}
	d, err := layers.NewDecoder(s, m)
	if err != nil {
		t.Fatal(err)
	}
	built := 0
	for _, p := range d.Params() {
		built += p.Node.Shape().TotalSize()
	}
	if float64(built) != want {
		t.Errorf("the decoder holds %d values, want %v", built, want)
	}
	// Each option on its own against the layers, with and without Bias.
	for _, bias := range []bool{true, false} {
		for _, o := range []layers.StackConfig{{TieEmbeddings: true}, {BlockOptions: layers.BlockOptions{BiasFreeNorm: true}}, {BlockOptions: layers.BlockOptions{BiasFreeNorm: true, PostLN: true}}, {TieEmbeddings: true, BlockOptions: layers.BlockOptions{BiasFreeNorm: true}}} {
			c := layers.StackConfig{
				Vocab:         11,
				MaxLen:        7,
				Dim:           8,
				Heads:         2,
				Layers:        3,
				Hidden:        12,
				TieEmbeddings: o.TieEmbeddings,
				BlockOptions:  layers.BlockOptions{Bias: bias, BiasFreeNorm: o.BiasFreeNorm, PostLN: o.PostLN},
			}
			s, _ := layers.NewScope(G.NewGraph(), tensor.Float32, 1)
			d, err := layers.NewDecoder(s, c)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, p := range d.Params() {
				n += p.Node.Shape().TotalSize()
			}
			if got, err := c.NumParams(); err != nil || got != n {
				t.Errorf("%+v: NumParams = %v, the decoder holds %d", o, got, n)
			}
		}
	}
}
