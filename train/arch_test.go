package train

import (
	"testing"

	"github.com/qkv-dev/qkv/internal/graphtest"
	"github.com/qkv-dev/qkv/train/config"
)

// TestBuildRefusesOtherArch: the training builders refuse the other
// architecture's configuration instead of building their own model from it.
func TestBuildRefusesOtherArch(t *testing.T) {
	dec := tinyConfig()
	if _, err := dec.Resolve(); err != nil {
		t.Fatal(err)
	}
	encdec := dec
	encdec.Arch = config.ArchEncDec
	if m, err := BuildModel(encdec, 2, dec.Model.MaxLen); err == nil {
		m.Close()
		t.Error("BuildModel built a decoder from an encoder-decoder configuration")
	} else {
		graphtest.WantErr(t, err, "train: BuildModel", `arch is "encdec"`, "use BuildEncDec")
	}
	if m, err := BuildEncDec(dec, 2); err == nil {
		m.Close()
		t.Error("BuildEncDec built an encoder-decoder from a decoder configuration")
	} else {
		graphtest.WantErr(t, err, "train: BuildEncDec", `arch is "decoder"`, "use BuildModel")
	}
}
