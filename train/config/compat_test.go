package config

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/layers"
)

// configJSON is the config.json a checkpoint of the default run holds,
// written before activation and positions had types of their own: it must
// still load, mean the same model, and be written back byte for byte.
const configJSON = `{
  "task": {
    "name": "sort",
    "params": {
      "length": 6,
      "alphabet": 3
    }
  },
  "model": {
    "vocab": 5,
    "max_len": 12,
    "dim": 48,
    "heads": 4,
    "layers": 2,
    "hidden": 192,
    "activation": "gelu",
    "positions": "learned",
    "post_ln": false,
    "bias": true,
    "dropout": 0,
    "attn_dropout": 0
  },
  "dtype": "float32",
  "seed": 1,
  "batch": 64,
  "steps": 2000,
  "lr": 0.003,
  "min_lr": 0.0003,
  "warmup": 50,
  "optimizer": "adamw",
  "weight_decay": 0.01,
  "clip_norm": 1,
  "eval_every": 25,
  "test_size": 200,
  "target_exact": 1,
  "checkpoint_every": 500
}`

func TestConfigJSONCompatible(t *testing.T) {
	c, err := Unmarshal([]byte(configJSON))
	if err != nil {
		t.Fatal(err)
	}
	if c.Model.Activation != layers.ActivationGELU || c.Model.Positions != layers.PositionsLearned {
		t.Errorf("activation %q, positions %q; want gelu, learned", c.Model.Activation, c.Model.Positions)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := c.Model.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != configJSON {
		t.Errorf("written back as\n%s\nwant\n%s", b, configJSON)
	}
}

func TestErrorIsErrInvalid(t *testing.T) {
	bad := Default()
	bad.LR = -1
	err := bad.Validate()
	if !errors.Is(err, ErrInvalid) || errors.Is(err, layers.ErrConfig) {
		t.Errorf("lr -1: %v: errors.Is ErrInvalid %v, layers.ErrConfig %v; want true, false", err, errors.Is(err, ErrInvalid), errors.Is(err, layers.ErrConfig))
	}
	// A model the layers refuse is both: invalid here, and a layer config.
	model := Default()
	if _, err := model.Resolve(); err != nil {
		t.Fatal(err)
	}
	model.Model.MaxLen = 1 << 40
	err = validateModel(model)
	var ce *Error
	if !errors.Is(err, ErrInvalid) || !errors.Is(err, layers.ErrConfig) || !errors.As(err, &ce) || ce.Field != "model.max_len" {
		t.Errorf("max_len 1<<40: %v: want a *Error on model.max_len matching ErrInvalid and layers.ErrConfig", err)
	}
	if errors.Is(errors.New("config: lr"), ErrInvalid) {
		t.Error("a plain error matches ErrInvalid")
	}
}

func TestParseKinds(t *testing.T) {
	for _, c := range []struct {
		s    string
		ok   bool
		want tensor.Dtype
	}{{"float32", true, tensor.Float32}, {"float64", true, tensor.Float64}, {"", false, tensor.Dtype{}}, {"int8", false, tensor.Dtype{}}, {"Float32", false, tensor.Dtype{}}} {
		d, err := ParseDType(c.s)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("ParseDType(%q) = %v, %v", c.s, d, err)
			continue
		}
		if got, _ := d.Tensor(); c.ok && got != c.want {
			t.Errorf("ParseDType(%q).Tensor() = %v, want %v", c.s, got, c.want)
		}
	}
	if got, err := DType("").Tensor(); err != nil || got != tensor.Float32 {
		t.Errorf("the empty DType is %v, %v; want float32", got, err)
	}
	for _, c := range []struct {
		s  string
		ok bool
	}{{"adam", true}, {"adamw", true}, {"sgd", false}, {"", false}, {"AdamW", false}} {
		k, err := ParseOptimizerKind(c.s)
		if (err == nil) != c.ok || (err == nil && k.String() != c.s) || (err != nil && !errors.Is(err, ErrInvalid)) {
			t.Errorf("ParseOptimizerKind(%q) = %v, %v", c.s, k, err)
		}
	}
}

// TestRecallWithoutQueriesIsSingleQuery: a recall config.json written
// before queries existed has no such parameter; it still means one query
// before SEP (the sequence length its checkpoint's positions were trained
// for), resolves back to the same parameters, and is written back without
// queries, while a new run's default asks every key.
func TestRecallWithoutQueriesIsSingleQuery(t *testing.T) {
	old := strings.Replace(configJSON, `"name": "sort",
    "params": {
      "length": 6,
      "alphabet": 3
    }`, `"name": "recall",
    "params": {
      "pairs": 4,
      "keys": 8,
      "values": 10
    }`, 1)
	c, err := Unmarshal([]byte(old))
	if err != nil {
		t.Fatal(err)
	}
	task, err := c.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	ex := task.Generate(rand.New(rand.NewPCG(1, 0)))
	if task.MaxLen() != 11 || len(ex.Answer) != 1 || ex.Given != nil || len(ex.Prompt) != 9 {
		t.Errorf("old recall: MaxLen %d, example %+v; want 11 and one target after a 9-token prompt", task.MaxLen(), ex)
	}
	b, err := Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "queries") {
		t.Errorf("old recall written back with queries:\n%s", b)
	}
	fresh := Default()
	fresh.Task = TaskSpec{Name: "recall", Params: data.DefaultConfig("recall")}
	task, err = fresh.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if task.MaxLen() != 17 || fresh.Task.Params.Queries != data.QueriesAll {
		t.Errorf("default recall: MaxLen %d, queries %d; want 17 (4 pairs, SEP, 4 queries and values) and %d", task.MaxLen(), fresh.Task.Params.Queries, data.QueriesAll)
	}
}
