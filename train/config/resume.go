package config

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
)

// runControl are the fields of config.json that a resumed run may change:
// how long it runs and how it is observed, how attention is computed (the
// same function to rounding) and how the projections multiply (the same
// weights and optimizer state, multiplied in bf16 or float32: a run
// trained with bf16 on AMX may go on where there is none). Every other
// field says what is trained.
var runControl = map[string]bool{"steps": true, "eval_every": true, "checkpoint_every": true, "target_exact": true, "model.attention": true, "matmul": true}

// Continues reports whether c may continue the run saved as saved: every
// field but the run-control ones (steps, eval_every, checkpoint_every,
// target_exact, model.attention, matmul) must be equal once both are resolved, or
// the resumed run would silently train something else on the checkpoint's
// weights and optimizer state (another task, learning rate or attention
// scale fits the same tensors). The error is an *Error naming the first
// differing field, by its config.json path, and both values.
func (c Config) Continues(saved Config) error {
	if _, err := c.Resolve(); err != nil {
		return err
	}
	if _, err := saved.Resolve(); err != nil {
		return fmt.Errorf("config: the saved run's configuration: %w", err)
	}
	got, err := flatten(c)
	if err != nil {
		return err
	}
	want, err := flatten(saved)
	if err != nil {
		return err
	}
	keys := make(map[string]bool, len(got)+len(want))
	for k := range got {
		keys[k] = true
	}
	for k := range want {
		keys[k] = true
	}
	sorted := make([]string, 0, len(keys))
	for k := range keys {
		sorted = append(sorted, k)
	}
	sort.Strings(sorted)
	for _, k := range sorted {
		if runControl[k] || reflect.DeepEqual(got[k], want[k]) {
			continue
		}
		return cfgErr(k, "is %s in the saved run, %s here: a resumed run trains what was saved (only %s may change)",
			show(want[k]), show(got[k]), "steps, eval_every, checkpoint_every, target_exact, model.attention and matmul")
	}
	return nil
}

// flatten returns c's config.json as a map from dotted paths ("model.dim")
// to leaf values, absent fields absent.
func flatten(c Config) (map[string]any, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var tree map[string]any
	if err := json.Unmarshal(b, &tree); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	out := make(map[string]any)
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		if m, ok := v.(map[string]any); ok {
			for k, x := range m {
				walk(prefix+k+".", x)
			}
			return
		}
		out[prefix[:len(prefix)-1]] = v
	}
	walk("", tree)
	return out, nil
}

// show writes a config value for an error, "absent" for a missing one.
func show(v any) string {
	if v == nil {
		return "absent"
	}
	b, _ := json.Marshal(v)
	return string(b)
}
