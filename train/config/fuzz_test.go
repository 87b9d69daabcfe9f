package config

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/qkv-dev/qkv/data"
)

// FuzzConfig feeds arbitrary bytes to UnmarshalConfig, Validate, Resolve and
// the memory estimate: none may panic, and a configuration Resolve accepts
// must marshal to JSON and back to an equal configuration that Resolve
// accepts again, with a finite, positive memory estimate. Resolve builds
// nothing, so only the held-out set, which it draws, is capped (at 500) to
// keep each input to a moment.
func FuzzConfig(f *testing.F) {
	seed := func(c Config) {
		b, err := Marshal(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	seed(Default())
	for _, name := range data.Names() {
		c := Default()
		c.Task = TaskSpec{Name: name, Params: data.DefaultConfig(name)}
		seed(c)
	}
	c := Default()
	c.Model.PostLN, c.Model.Positions, c.Model.Activation, c.DType = true, "sinusoidal", "relu", "float64"
	c.Model.Dropout, c.Model.AttnDropout, c.ClipNorm, c.TargetExact, c.Optimizer = 0.1, 0.1, 0, 0, "adam"
	seed(c)
	c = Default()
	c.Model.Dim, c.Model.Heads, c.Model.Hidden, c.Model.Layers = 1, 1, 1, 1
	c.Batch, c.Steps, c.Warmup, c.TestSize, c.MinLR = 1, 1, 1, 1, c.LR
	seed(c)
	for _, s := range []string{
		`{}`, `null`, `[]`, `{"lr": 1e309}`, `{"model": {"dim": -1}}`,
		`{"task": {"name": "sort", "params": {"length": 3, "min_length": 2, "max_length": 5, "alphabet": 3}}}`,
		`{"task": {"name": "sort", "params": {"length": 6, "alphabet": 3}}, "model": {"dim": 9223372036854775807, "heads": 1, "layers": 1, "hidden": 1}, "dtype": "float32", "batch": 1, "steps": 1, "lr": 1, "optimizer": "adam", "eval_every": 1, "test_size": 1, "checkpoint_every": 1}`,
		`{"task": {"name": "sort", "params": {"length": 6, "alphabet": 3}}, "model": {"dim": 8, "heads": 2, "layers": 1, "hidden": 8}, "batch": 9223372036854775807, "steps": 1, "lr": 1, "optimizer": "adam", "eval_every": 1, "test_size": 1, "checkpoint_every": 1}`,
		`{"task": {"name": "recall", "params": {"pairs": 26, "keys": 26, "values": 10}}, "model": {"dim": 8, "heads": 8, "layers": 1024, "hidden": 8}, "batch": 1, "steps": 1, "lr": 1e-300, "min_lr": 0, "optimizer": "adamw", "weight_decay": 1e308, "clip_norm": 1e308, "eval_every": 1, "test_size": 500, "target_exact": 1, "checkpoint_every": 1}`,
		`{"task": {"name": "sort", "params": {"length": 1, "alphabet": 36}}, "model": {"dim": 8, "heads": 2, "layers": 1, "hidden": 8}, "batch": 1, "steps": 1, "lr": 1, "optimizer": "adam", "eval_every": 1, "test_size": 35, "checkpoint_every": 1}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := Unmarshal(b)
		if err != nil {
			return
		}
		verr := cfg.Validate()
		var ce *Error
		if verr != nil && !errors.As(verr, &ce) {
			t.Fatalf("Validate returned %T %v, want a *Error", verr, verr)
		}
		if cfg.TestSize > 500 {
			return // drawing a large held-out set takes long
		}
		resolved := cfg
		_, err = resolved.Resolve()
		if (verr != nil) && err == nil {
			t.Fatalf("Validate refused (%v) but Resolve accepted", verr)
		}
		if err != nil {
			var me *MemoryError
			if !errors.As(err, &ce) && !errors.As(err, &me) {
				t.Fatalf("Resolve returned %T %v, want a *Error or *MemoryError", err, err)
			}
			return
		}
		out, err := Marshal(resolved)
		if err != nil {
			t.Fatalf("accepted config does not marshal: %v", err)
		}
		back, err := Unmarshal(out)
		if err != nil {
			t.Fatalf("marshalled config does not unmarshal: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(back, resolved) {
			t.Fatalf("round trip changed the config:\n%+v\n%+v", resolved, back)
		}
		again := back
		if _, err := again.Resolve(); err != nil {
			t.Fatalf("the marshalled config no longer resolves: %v", err)
		}
		if !reflect.DeepEqual(again, resolved) {
			t.Fatalf("Resolve is not idempotent:\n%+v\n%+v", resolved, again)
		}
		est, err := EstimateRun(resolved)
		if err != nil {
			t.Fatalf("no estimate for an accepted config: %v", err)
		}
		if tot := est.Total(); !(tot > 0) || math.IsInf(tot, 0) {
			t.Fatalf("estimate %v of an accepted config", est)
		}
		_ = est.String()
		if _, err := json.Marshal(est); err != nil {
			t.Fatalf("estimate does not marshal: %v", err)
		}
	})
}
