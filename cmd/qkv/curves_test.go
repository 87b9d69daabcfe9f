package main

import (
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/train"
	"github.com/qkv-dev/qkv/train/config"
)

// TestCurvesTitle: recall's default, every key queried, is said in words,
// not as queries=-1; a count of queries stays a count.
func TestCurvesTitle(t *testing.T) {
	for _, c := range []struct {
		params data.TaskConfig
		want   string
	}{
		{data.DefaultConfig("recall"), "recall (pairs=4 keys=8 values=10, every key queried): 300 steps"},
		{data.TaskConfig{Pairs: 4, Keys: 8, Values: 10, Queries: 2}, "recall (pairs=4 keys=8 values=10 queries=2): 300 steps"},
		{data.TaskConfig{Queries: data.QueriesAll}, "recall (every key queried): 300 steps"},
	} {
		got := curvesTitle(train.Summary{Task: config.TaskSpec{Name: "recall", Params: c.params}, Steps: 300})
		if got != c.want {
			t.Errorf("title %q, want %q", got, c.want)
		}
		if strings.Contains(got, "-1") {
			t.Errorf("title %q shows -1", got)
		}
	}
}
