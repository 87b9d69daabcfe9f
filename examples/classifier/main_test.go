package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestClassifier runs the example as main does, with its default settings,
// and keeps the weights file in a directory of the test's.
func TestClassifier(t *testing.T) {
	var out strings.Builder
	dir := t.TempDir()
	res, err := train(options{Seed: 1, Steps: 1000, LR: 3e-3, Out: dir}, &out)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	// Seeds 1 to 5 reach 97.9% to 100% at 1000 steps; without attention
	// the model stops near 78%.
	if res.Accuracy < 0.95 {
		t.Errorf("held-out accuracy %.3f, want at least 0.95", res.Accuracy)
	}
	if !res.Identical {
		t.Error("the reloaded model's logits differ from the trained model's")
	}
	if !strings.Contains(out.String(), "reloaded: logits identical") {
		t.Errorf("output lacks %q", "reloaded: logits identical")
	}
	if _, err := os.Stat(filepath.Join(dir, "classifier.safetensors")); err != nil {
		t.Errorf("weights file: %v", err)
	}
}
