package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// genRows returns the JSON lines of `qkv bench --generate`.
func genRows(out string) []genResult {
	var rows []genResult
	for _, l := range strings.Split(out, "\n") {
		var r genResult
		if strings.HasPrefix(l, "{") && json.Unmarshal([]byte(l), &r) == nil {
			rows = append(rows, r)
		}
	}
	return rows
}

// A decoder of linear layers generates with --layer-kinds linear: its
// cached step reads a state whose size does not depend on the position,
// where a softmax decoder's key/value cache grows with it.
func TestBenchGenerateLinear(t *testing.T) {
	base := []string{"bench", "--generate", "4,16", "--dim", "8", "--heads", "2", "--hidden", "16", "--layers", "2", "-n", "1"}
	code, out, stderr := qkv(append(base, "--layer-kinds", "linear", "--feature-dim", "2")...)
	if code != 0 {
		t.Fatalf("bench --generate --layer-kinds linear: exit %d: %s", code, stderr)
	}
	lin := genRows(out)
	if len(lin) != 4 || !lin[0].Cached || lin[1].Cached || lin[0].LayerKinds != "linear" || !(lin[0].MsPerToken > 0) || !(lin[2].TokensPerS > 0) {
		t.Fatalf("linear results %+v", lin)
	}
	// Per block S (1, H·dφ, dk) and z (1, 1, H·dφ), float32: dφ = 1+2+4
	// for Taylor of d' = 2.
	const f = 2 * 7
	if want := 2 * (f*4 + f) * 4; lin[0].CacheBytes != want || lin[2].CacheBytes != want {
		t.Errorf("linear state %d bytes at position 4, %d at 16; want %d at both", lin[0].CacheBytes, lin[2].CacheBytes, want)
	}
	if !strings.Contains(out, "layer kinds linear") {
		t.Errorf("the table does not name the layer kinds:\n%s", out)
	}
	code, out, stderr = qkv(base...)
	if code != 0 {
		t.Fatalf("bench --generate: exit %d: %s", code, stderr)
	}
	soft := genRows(out)
	if len(soft) != 4 || soft[0].LayerKinds != "" || soft[2].CacheBytes <= soft[0].CacheBytes {
		t.Errorf("softmax results %+v: want caches growing with the position", soft)
	}
	if code, _, stderr := qkv(append(base, "--layer-kinds", "linear", "--feature-map", "nope")...); code != 2 || !strings.Contains(stderr, "feature") {
		t.Errorf("bad --feature-map: exit %d, stderr %q", code, stderr)
	}
}
