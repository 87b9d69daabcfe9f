package train

import (
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"testing"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/internal/graphtest"
	"github.com/qkv-dev/qkv/train/checkpoint"
	"github.com/qkv-dev/qkv/train/config"
	"github.com/qkv-dev/qkv/train/infer"
	"github.com/qkv-dev/qkv/train/model"
	"github.com/qkv-dev/qkv/train/optim"
)

// TestNoPanics calls every exported function and method of train with nil,
// zero-value, out-of-range and mismatched inputs: each must return an error
// naming what is wrong, and none may panic.
func TestNoPanics(t *testing.T) {
	tiny := tinyConfig()
	task, err := tiny.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	resolved := tiny
	m, err := model.Build(tiny, 2, task.MaxLen()-1, model.Options{Train: true})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	inf, err := model.Build(tiny, 2, task.MaxLen()-1, model.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer inf.Close()
	var nilModel *model.Model
	train := model.Options{Train: true}
	// rows is a decoder batch of m's shape binding ids and lengths.
	rows := func(ids, lengths []int) model.Batch {
		return model.Batch{Batch: data.Batch{B: m.B, S: m.S, Inputs: ids, Lengths: lengths}}
	}
	var nilOpt *optim.Optimizer
	adam, err := optim.NewAdam(optim.DefaultBeta1, optim.DefaultBeta2, optim.DefaultEps)
	if err != nil {
		t.Fatal(err)
	}
	nilNode := []graph.Param{{Name: "w", Node: nil}}
	noValue := []graph.Param{{Name: "nv", Node: G.NewMatrix(G.NewGraph(), tensor.Float64, G.WithShape(2, 2), G.WithName("nv"))}}
	prompt := task.Generate(nil).Prompt
	dir := t.TempDir()
	huge := tiny
	huge.Batch = math.MaxInt / 2
	bad := func(mutate func(*config.Config)) config.Config {
		c := tinyConfig()
		mutate(&c)
		return c
	}

	cases := []struct {
		name string
		run  func() error
		want []string
	}{
		// Checkpoints.
		{"SaveCheckpoint nil", func() error { return checkpoint.Save(dir, nil) }, []string{"nil checkpoint"}},
		{"SaveCheckpoint empty dir name", func() error { return checkpoint.Save("", &checkpoint.Checkpoint{}) }, []string{"checkpoint: "}},
		{"SaveCheckpoint NaN weight", func() error {
			return checkpoint.Save(dir, &checkpoint.Checkpoint{Weights: []checkpoint.NamedTensor{{Name: "w", Shape: []int{1}, DType: tensor.Float32, Data: []float64{math.NaN()}}}})
		}, []string{`tensor "w": value 0 is NaN`}},
		{"SaveCheckpoint nil shape data", func() error {
			return checkpoint.Save(dir, &checkpoint.Checkpoint{Weights: []checkpoint.NamedTensor{{Name: "w", Shape: []int{2}, DType: tensor.Float32}}})
		}, []string{`tensor "w": 0 values, want 2`}},
		{"SaveCheckpoint overflowing shape", func() error {
			return checkpoint.Save(dir, &checkpoint.Checkpoint{Weights: []checkpoint.NamedTensor{{Name: "w", Shape: []int{math.MaxInt, 3}, DType: tensor.Float32}}})
		}, []string{`tensor "w": shape`, "too large"}},
		{"LoadCheckpoint empty name", func() error { _, err := checkpoint.Load(""); return err }, []string{"no checkpoint"}},
		{"LoadCheckpoint a file", func() error { _, err := checkpoint.Load("/dev/null"); return err }, []string{"/dev/null"}},
		{"LoadConfig missing", func() error { _, err := config.Load(filepath.Join(dir, "none")); return err }, []string{"no checkpoint"}},
		{"LoadModel missing", func() error {
			_, _, _, err := model.Load(filepath.Join(dir, "none"), 1, model.LoadOptions{})
			return err
		}, []string{"no checkpoint"}},
		{"checkpoint.ParamTensors nil node", func() error { _, err := checkpoint.ParamTensors(nilNode); return err }, []string{`param "w": nil node`}},
		{"checkpoint.ParamTensors no value", func() error { _, err := checkpoint.ParamTensors(noValue); return err }, []string{`param "nv": no value`}},
		{"checkpoint.LoadParams nil node", func() error { return checkpoint.LoadParams(nilNode, nil, "f") }, []string{`param "w": nil node`}},
		{"checkpoint.LoadParams no value", func() error { return checkpoint.LoadParams(noValue, nil, "f") }, []string{`param "nv": no value`}},

		// Gradients and optimizers.
		{"GradNorm nil node", func() error { _, err := optim.GradNorm(nilNode); return err }, []string{`"w"`}},
		{"ClipGradNorm nil node", func() error { _, err := optim.ClipGradNorm(nilNode, 1); return err }, []string{`"w"`}},
		{"ClipGradNorm NaN", func() error { _, err := optim.ClipGradNorm(m.Params, math.NaN()); return err }, []string{"NaN"}},
		{"ClipGradNorm negative", func() error { _, err := optim.ClipGradNorm(m.Params, -1); return err }, []string{"-1"}},
		{"ZeroGrads nil node", func() error { return optim.ZeroGrads(nilNode) }, []string{`"w"`}},
		{"optim.New nil node", func() error { _, err := optim.New(adam, nilNode); return err }, []string{`"w"`}},
		{"optim.New zero config", func() error { _, err := optim.New(optim.Config{}, m.Params); return err }, []string{"empty"}},
		{"optim.NewAdamW NaN decay", func() error {
			_, err := optim.NewAdamW(0.9, 0.999, 1e-8, math.NaN(), optim.DecayWeights)
			return err
		}, []string{"NaN"}},
		{"Optimizer nil Step", func() error { return nilOpt.Step(1) }, []string{"nil optimizer"}},
		{"Optimizer nil Restore", func() error { return nilOpt.Restore(0, nil) }, []string{"nil optimizer"}},
		{"Optimizer Step NaN lr", func() error {
			o, err := optim.New(adam, m.Params)
			if err != nil {
				t.Fatal(err)
			}
			return o.Step(math.NaN())
		}, []string{"NaN"}},
		{"Optimizer Restore negative step", func() error {
			o, err := optim.New(adam, m.Params)
			if err != nil {
				t.Fatal(err)
			}
			return o.Restore(-1, o.State())
		}, []string{"-1"}},
		{"Schedule zero", func() error { return optim.Schedule{}.Validate() }, []string{"optim"}},
		{"Schedule NaN", func() error { return optim.Schedule{Peak: math.NaN(), Total: 10}.Validate() }, []string{"NaN"}},

		// Models.
		{"Build zero config", func() error { _, err := model.Build(config.Config{}, 1, 1, train); return err }, []string{"sizes must be positive"}},
		{"Build zero batch", func() error { _, err := model.Build(tiny, 0, 4, train); return err }, []string{"0"}},
		{"Build negative length", func() error { _, err := model.Build(tiny, 1, -4, train); return err }, []string{"-4"}},
		{"Build huge batch", func() error { _, err := model.Build(huge, huge.Batch, 4, train); return err }, []string{"memory"}},
		{"Model nil SetBatch", func() error { return nilModel.SetBatch(model.Batch{}) }, []string{"nil or unbuilt model"}},
		{"Model nil Run", func() error { return nilModel.Run(nil) }, []string{"nil model"}},
		{"Model nil Close", func() error { return nilModel.Close() }, []string{"nil model"}},
		{"Model nil Step", func() error { _, err := nilModel.Step(model.Batch{}, nil, model.StepOptions{}); return err }, []string{"nil model"}},
		{"Model zero Run", func() error { return (&model.Model{}).Run(nil) }, []string{"Build"}},
		{"Model SetBatch short", func() error { return m.SetBatch(rows([]int{1}, []int{1, 1})) }, []string{"ids"}},
		{"Model SetBatch bad id", func() error { return m.SetBatch(rows(make([]int, m.B*m.S), []int{-1, 1})) }, []string{"-1"}},
		{"Model SetBatch source", func() error {
			b := rows(make([]int, m.B*m.S), []int{1, 1})
			b.Source = &model.Source{S: 1, IDs: []int{1, 1}, Lengths: []int{1, 1}}
			return m.SetBatch(b)
		}, []string{"no encoder"}},
		{"Model Step inference", func() error {
			_, err := inf.Step(rows(make([]int, m.B*m.S), []int{1, 1}), nil, model.StepOptions{})
			return err
		}, []string{"built for inference"}},
		{"CopyParamsFrom nil", func() error { return m.CopyParamsFrom(nil) }, []string{"nil model"}},
		{"CopyParamsFrom zero", func() error { return m.CopyParamsFrom(&model.Model{}) }, []string{"no machine"}},
		{"Greedy nil model", func() error { _, err := infer.Greedy(nil, task, [][]int{prompt}); return err }, []string{"nil model"}},
		{"Greedy nil task", func() error { _, err := infer.Greedy(inf, nil, [][]int{prompt}); return err }, []string{"nil task"}},
		{"Greedy bad prompt", func() error { _, err := infer.Greedy(inf, task, [][]int{{999}}); return err }, []string{"prompt"}},
		{"Evaluate nil model", func() error { _, err := infer.Evaluate(nil, task, nil); return err }, []string{"nil model"}},
		{"Evaluate nil task", func() error { _, err := infer.Evaluate(inf, nil, nil); return err }, []string{"nil task"}},

		// Runs.
		{"Run zero config", func() error {
			_, err := Run(context.Background(), config.Config{}, Options{Out: t.TempDir()})
			return err
		}, []string{"config: task.name"}},
		{"Run no directory", func() error { _, err := Run(context.Background(), tiny, Options{}); return err }, []string{"no output directory"}},
		{"Run nil context", func() error {
			_, err := Run(nil, tiny, Options{Out: t.TempDir()}) //lint:ignore SA1012 a nil context is the point
			return err
		}, []string{"nil context"}},
		{"Run Inf clip", func() error {
			_, err := Run(context.Background(), bad(func(c *config.Config) { c.ClipNorm = math.Inf(1) }), Options{Out: t.TempDir()})
			return err
		}, []string{"clip"}},
		{"Run NaN target", func() error {
			_, err := Run(context.Background(), bad(func(c *config.Config) { c.TargetExact = math.NaN() }), Options{Out: t.TempDir()})
			return err
		}, []string{"target_exact"}},
		{"Run huge batch", func() error { _, err := Run(context.Background(), huge, Options{Out: t.TempDir()}); return err }, []string{"memory"}},
		{"config.Unmarshal garbage", func() error { _, err := config.Unmarshal([]byte("{")); return err }, []string{"config.json"}},
		{"config.Unmarshal NaN", func() error { _, err := config.Unmarshal(json.RawMessage(`{"lr": NaN}`)); return err }, []string{"config.json"}},

		{"config.EstimateMemory zero config", func() error { _, err := config.EstimateMemory(config.Config{}, 1, 1, true); return err }, []string{"sizes must be positive"}},
		{"config.EstimateMemory zero batch", func() error { _, err := config.EstimateMemory(resolved, 0, 4, false); return err }, []string{"B=0"}},
		{"config.EstimateRun zero config", func() error { _, err := config.EstimateRun(config.Config{}); return err }, []string{"sizes must be positive"}},
		{"config.ParseBytes words", func() error { _, err := config.ParseBytes("lots"); return err }, []string{`"lots"`}},
		{"config.ParseBytes negative", func() error { _, err := config.ParseBytes("-1GiB"); return err }, []string{"at least 1 byte"}},
		{"config.ParseBytes NaN", func() error { _, err := config.ParseBytes("NaN"); return err }, []string{"at least 1 byte"}},
		{"config.ParseBytes overflow", func() error { _, err := config.ParseBytes("1e30TiB"); return err }, []string{"below 8 EiB"}},
		{"SaveCheckpoint empty tensor name", func() error {
			return checkpoint.Save(dir, &checkpoint.Checkpoint{Weights: []checkpoint.NamedTensor{{Shape: []int{1}, DType: tensor.Float32, Data: []float64{1}}}})
		}, []string{"empty name"}},
		{"SaveCheckpoint reserved name", func() error {
			return checkpoint.Save(dir, &checkpoint.Checkpoint{Weights: []checkpoint.NamedTensor{{Name: "__metadata__", Shape: []int{}, DType: tensor.Float32, Data: []float64{1}}}})
		}, []string{"reserved"}},
		{"checkpoint.LoadParams duplicate tensors", func() error {
			w, err := checkpoint.ParamTensors(m.Params)
			if err != nil {
				t.Fatal(err)
			}
			return checkpoint.LoadParams(m.Params, append(w, w[0]), "f")
		}, []string{"duplicate name"}},
		{"Run resume and force", func() error {
			_, err := Run(context.Background(), tiny, Options{Out: t.TempDir(), Resume: true, Force: true})
			return err
		}, []string{"Resume", "Force"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := graphtest.NoPanic(t, c.name, c.run)
			graphtest.WantErr(t, err, c.want...)
		})
	}
	if len(cases) < 60 {
		t.Errorf("%d cases", len(cases))
	}
}
