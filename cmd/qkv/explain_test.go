package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/cmd/qkv/internal/explain"
)

// Every claim prints one JSON line with the fields the issue names, its
// verdict one of the three and consistent with holds; progress goes to
// stderr.
func TestExplainJSON(t *testing.T) {
	plots := filepath.Join(t.TempDir(), "plots") // created by explain
	code, out, stderr := qkv("explain", "--json", "--small", "--plots", plots)
	if code != 0 {
		t.Fatalf("explain: exit %d: %s%s", code, out, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(explain.IDs()) {
		t.Fatalf("%d JSON lines, want one per claim (%d):\n%s", len(lines), len(explain.IDs()), out)
	}
	for i, line := range lines {
		var r struct {
			Claim, Statement, Verdict string
			Measured                  map[string]float64
			Holds                     *bool
			Plots                     []string
		}
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("line %d: %v: %s", i+1, err, line)
		}
		if r.Claim != explain.IDs()[i] || r.Statement == "" || len(r.Measured) == 0 || r.Holds == nil {
			t.Errorf("line %d lacks a field: %s", i+1, line)
			continue
		}
		if ok := r.Verdict == explain.Holds; ok != *r.Holds || !(ok || r.Verdict == explain.HoldsInPart || r.Verdict == explain.DoesNotHold) {
			t.Errorf("%s: verdict %q with holds %v", r.Claim, r.Verdict, *r.Holds)
		}
		if len(r.Plots) == 0 {
			t.Errorf("%s wrote no figure into --plots %s", r.Claim, plots)
		}
		for _, p := range r.Plots {
			if filepath.Dir(p) != plots || !strings.HasPrefix(filepath.Base(p), r.Claim) || filepath.Ext(p) != ".png" {
				t.Errorf("%s: figure %s is not %s/%s*.png", r.Claim, p, plots, r.Claim)
			}
			if fi, err := os.Stat(p); err != nil || fi.Size() == 0 {
				t.Errorf("%s: figure %s: %v", r.Claim, p, err)
			}
		}
		if !strings.Contains(stderr, r.Claim) {
			t.Errorf("no progress line for %s on stderr: %q", r.Claim, stderr)
		}
	}
}

func TestExplainUnknownClaim(t *testing.T) {
	code, _, stderr := qkv("explain", "scores-varaince")
	if code != 2 || !strings.Contains(stderr, "did you mean scores-variance?") {
		t.Errorf("explain scores-varaince: exit %d, stderr %q; want 2 and a suggestion", code, stderr)
	}
}

// TestNaturalCompare: measured names are listed with their numbers in
// order of value.
func TestNaturalCompare(t *testing.T) {
	names := []string{"var_scaled_dk4", "var_raw_dk1024", "var_raw_dk16", "var_raw_dk4", "worst", "var_raw_dk256"}
	slices.SortFunc(names, naturalCompare)
	want := []string{"var_raw_dk4", "var_raw_dk16", "var_raw_dk256", "var_raw_dk1024", "var_scaled_dk4", "worst"}
	if !slices.Equal(names, want) {
		t.Errorf("sorted %q, want %q", names, want)
	}
}
