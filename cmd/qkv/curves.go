package main

import (
	"fmt"
	"math"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/internal/plot"
	"github.com/qkv-dev/qkv/train"
)

// drawCurves is train.Options.Curves for `qkv train`: the training loss of
// every step and the held-out scores of every evaluation (a language
// model's validation loss and next-character accuracy, no exact match),
// drawn into path with internal/plot.
func drawCurves(path string, sum train.Summary, history []train.Metric) error {
	var loss []plot.CurvePoint
	var eval []plot.EvalPoint
	for _, m := range history {
		loss = append(loss, plot.CurvePoint{Step: m.Step, Loss: m.Loss})
		if m.Eval != nil {
			p := plot.EvalPoint{Step: m.Step, TokenAccuracy: m.Eval.TokenAccuracy, ExactMatch: m.Eval.ExactMatch, Loss: m.Eval.Loss}
			if p.Loss != 0 {
				p.ExactMatch = math.NaN() // a whole window right is not what a language model is for
			}
			eval = append(eval, p)
		}
	}
	per := "token"
	if sum.Task.Name == "chars" {
		per = "character"
	}
	return plot.CurvesPer(path, curvesTitle(sum), per, loss, eval)
}

// curvesTitle is the title of a run's curves: the task, its parameters as
// a reader reads them and the steps. recall's queries=-1 (data.QueriesAll)
// is written "every key queried".
func curvesTitle(sum train.Summary) string {
	params := sum.Task.Params
	every := params.Queries == data.QueriesAll
	if every {
		params.Queries = 0
	}
	text := params.String()
	switch {
	case every && text == "(no parameters)":
		text = "every key queried"
	case every:
		text += ", every key queried"
	}
	return fmt.Sprintf("%s (%s): %d steps", sum.Task.Name, text, sum.Steps)
}
