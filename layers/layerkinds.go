package layers

import (
	"fmt"
	"strconv"
	"strings"
)

// LayerKind is what one block's self-attention is: softmax attention, the
// model's own with all its variants (a sliding window of its own when
// Window > 0), or linear attention (Linear), which keeps a state of
// constant size while generating instead of a key/value cache that grows
// with every position.
type LayerKind struct {
	// Linear makes the block's self-attention linear attention
	// (LinearAttention), with the model's LinearOptions.
	Linear bool
	// Window, with softmax attention, replaces the model's Window for
	// this block: query i sees keys i-w < j <= i.
	Window int
}

// String writes k as ParseLayerKinds reads it: "linear", "window:W" or
// "softmax".
func (k LayerKind) String() string {
	switch {
	case k.Linear:
		return "linear"
	case k.Window > 0:
		return "window:" + strconv.Itoa(k.Window)
	}
	return "softmax"
}

// ParseLayerKinds reads a comma-separated list of layer kinds, which a
// stack cycles over its blocks (block i takes kinds[i % len(kinds)]):
// "softmax", "linear" or "window:W". "" is every block softmax. So
// "linear,window:64" alternates Based's two mixers, and
// "linear,linear,softmax" keeps one softmax layer in three.
func ParseLayerKinds(s string) ([]LayerKind, error) {
	if s == "" {
		return []LayerKind{{}}, nil
	}
	var kinds []LayerKind
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "softmax":
			kinds = append(kinds, LayerKind{})
		case f == "linear":
			kinds = append(kinds, LayerKind{Linear: true})
		case strings.HasPrefix(f, "window:"):
			w, err := strconv.Atoi(strings.TrimPrefix(f, "window:"))
			if err != nil || w < 1 {
				return nil, fieldErrorf("layer_kinds", nil, "LayerKinds %q: %q needs a window of at least 1 key, as window:64", s, f)
			}
			kinds = append(kinds, LayerKind{Window: w})
		default:
			return nil, fieldErrorf("layer_kinds", nil, "LayerKinds %q: unknown kind %q, want softmax, linear or window:W, separated by commas", s, f)
		}
	}
	return kinds, nil
}

// kindOf returns the kind of block i of a stack whose LayerKinds are
// kinds (ParseLayerKinds's, checked).
func kindOf(kinds []LayerKind, i int) LayerKind { return kinds[i%len(kinds)] }

// layerKindsError wraps a ParseLayerKinds error for the stack called name.
func layerKindsError(name string, err error) error {
	return fmt.Errorf("layers: %s: %w", name, err)
}
