package infer_test

import (
	"slices"
	"strconv"
	"testing"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/internal/graphtest"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/infer"
	"github.com/qkv-dev/qkv/train/model"
)

// TestCopyParamsFromOtherDType: copying a float64 model's weights into a
// float32 one is refused naming both dtypes, where gorgonia panicked.
func TestCopyParamsFromOtherDType(t *testing.T) {
	cfg, task := tiny(t)
	m32, err := model.Build(cfg, 1, task.MaxLen()-1, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m32.Close()
	cfg.DType = config.Float64
	m64, err := model.Build(cfg, 1, task.MaxLen()-1, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m64.Close()
	graphtest.WantErr(t, m32.CopyParamsFrom(m64), "model: params: param \""+m32.Params[0].Name+"\" is float64, the model's is float32")
	graphtest.WantErr(t, m64.CopyParamsFrom(m32), "is float32, the model's is float64")
	graphtest.WantErr(t, m32.SetParams(m64.Params), "is float64, the model's is float32")
}

// TestEvaluateRefusesWrongAnswerLength: an example whose answer is shorter
// or longer than the task's is refused naming the example and the length,
// by both architectures' Evaluate, where a one-token answer that matched
// scored token accuracy 1.
func TestEvaluateRefusesWrongAnswerLength(t *testing.T) {
	dec, task := tiny(t)
	encdec := dec
	encdec.Arch = config.ArchEncDec
	if _, err := encdec.Resolve(); err != nil {
		t.Fatal(err)
	}
	m, err := model.Build(dec, 2, task.MaxLen()-1, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	e, err := model.Build(encdec, 2, encdec.Model.MaxLen, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	good := task.Generate(nil)
	got, err := infer.Greedy(m, task, [][]int{good.Prompt})
	if err != nil {
		t.Fatal(err)
	}
	want := len(good.Answer)
	for _, answer := range [][]int{got[0][:1], append(slices.Clone(got[0]), got[0][0]), nil} {
		bad := good
		bad.Answer = answer
		examples := []data.Example{good, bad}
		evaluate := map[string]func() (infer.EvalResult, error){
			"decoder":         func() (infer.EvalResult, error) { return infer.Evaluate(m, task, examples) },
			"encoder-decoder": func() (infer.EvalResult, error) { return infer.Evaluate(e, task, examples) },
		}
		for arch, f := range evaluate {
			res, err := f()
			if err == nil {
				t.Errorf("%s: an answer of %d tokens (want %d) scored %+v", arch, len(answer), want, res)
				continue
			}
			graphtest.WantErr(t, err, "infer: example 1: the answer has", "want "+strconv.Itoa(want))
		}
	}
}

// TestBegin: what each architecture reads of a prompt before its answer,
// and Begin's refusals, where a nil task panicked.
func TestBegin(t *testing.T) {
	_, task := tiny(t)
	sep := task.Vocab().SEP()
	frames := []data.Example{task.Frame([]int{2, 3, 4})}
	src, seqs, err := infer.Begin(config.ArchDecoder, task, frames)
	if err != nil || src != nil || !slices.Equal(seqs[0], []int{2, 3, 4, sep}) {
		t.Errorf("decoder: %v, %v, %v; want no sources and the prompt and SEP", src, seqs, err)
	}
	src, seqs, err = infer.Begin(config.ArchEncDec, task, frames)
	if err != nil || !slices.Equal(src[0], []int{2, 3, 4}) || !slices.Equal(seqs[0], []int{sep}) {
		t.Errorf("encoder-decoder: %v, %v, %v; want the prompt as source and SEP", src, seqs, err)
	}
	if _, _, err := infer.Begin(config.ArchDecoder, nil, frames); err == nil {
		t.Error("Begin with a nil task: no error")
	}
	if _, _, err := infer.Begin("rnn", task, frames); err == nil {
		t.Error("Begin of an unknown architecture: no error")
	}
}
