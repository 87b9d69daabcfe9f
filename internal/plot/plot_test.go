package plot

import (
	"bytes"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/internal/graphtest"
	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// plotSampleDir returns where the tests write their sample PNGs: the
// directory named by QKV_PLOT_SAMPLES if set (for looking at them), otherwise
// a per-test temporary directory.
func plotSampleDir(t *testing.T) string {
	t.Helper()
	if d := os.Getenv("QKV_PLOT_SAMPLES"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// checkPNG verifies that path holds a PNG of the given size (0 = any) that
// is not a single flat colour and returns the decoded image.
func checkPNG(t *testing.T, path string, wantW, wantH int) image.Image {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	sig := []byte{0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'}
	if !bytes.HasPrefix(data, sig) {
		t.Fatalf("%s: missing PNG signature, got % x", path, data[:min(8, len(data))])
	}
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: decode: %v", path, err)
	}
	b := img.Bounds()
	if (wantW != 0 && b.Dx() != wantW) || (wantH != 0 && b.Dy() != wantH) {
		t.Fatalf("%s: size %dx%d, want %dx%d", path, b.Dx(), b.Dy(), wantW, wantH)
	}
	if countColors(img, 3) < 3 {
		t.Fatalf("%s: image is (nearly) a single colour", path)
	}
	return img
}

// countColors counts distinct colours in img, stopping at limit.
func countColors(img image.Image, limit int) int {
	seen := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[[4]uint32{r, g, bl, a}] = true
			if len(seen) >= limit {
				return len(seen)
			}
		}
	}
	return len(seen)
}

// noTempFiles fails if dir holds leftovers of the atomic write.
func noTempFiles(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.Contains(e.Name(), ".tmp-") {
			t.Errorf("temporary file left behind: %s", e.Name())
		}
	}
}

func sampleCurves(steps int) ([]CurvePoint, []EvalPoint) {
	var loss []CurvePoint
	var eval []EvalPoint
	for s := 1; s <= steps; s++ {
		l := 2.5*math.Exp(-float64(s)/float64(steps)*5) + 0.02 + 0.05*math.Abs(math.Sin(float64(s)*1.7))
		loss = append(loss, CurvePoint{Step: s, Loss: l})
		if s%(steps/10) == 0 {
			f := float64(s) / float64(steps)
			eval = append(eval, EvalPoint{Step: s, TokenAccuracy: 1 - 0.7*math.Exp(-4*f), ExactMatch: math.Pow(f, 1.5)})
		}
	}
	return loss, eval
}

func TestPlotCurves(t *testing.T) {
	dir := plotSampleDir(t)
	loss, eval := sampleCurves(400)
	path := filepath.Join(dir, "curves.png")
	if err := Curves(path, "copy task: d_model 64, 2 layers", loss, eval); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, path, 900, 750)
	noTempFiles(t, dir)
}

func TestPlotCurvesVariants(t *testing.T) {
	dir := plotSampleDir(t)
	loss, eval := sampleCurves(100)
	cases := []struct {
		name   string
		loss   []CurvePoint
		eval   []EvalPoint
		w, h   int
		nonPos bool
	}{
		{name: "no-eval", loss: loss, w: 900, h: 450},
		{name: "eval-only", eval: eval, w: 900, h: 450},
		{name: "few-points", loss: loss[:5], eval: eval[:1], w: 900, h: 750},
		{name: "single-loss", loss: loss[:1], w: 900, h: 450},
		{name: "constant-loss", loss: []CurvePoint{{1, 0.5}, {2, 0.5}, {3, 0.5}}, w: 900, h: 450},
		{name: "non-positive-loss", loss: []CurvePoint{{1, 1}, {2, 0}, {3, -0.5}}, w: 900, h: 450},
		{name: "nan-loss", loss: []CurvePoint{{1, math.NaN()}, {2, 1}, {3, math.Inf(1)}, {4, 0.5}}, w: 900, h: 450},
		{name: "unsorted", loss: []CurvePoint{{3, 0.1}, {1, 1}, {2, 0.4}}, eval: []EvalPoint{{3, 0.9, 0.5, 0}, {1, 0.1, 0, 0}}, w: 900, h: 750},
		{name: "validation-loss", loss: loss, eval: []EvalPoint{{Step: 10, TokenAccuracy: 0.3, ExactMatch: math.NaN(), Loss: 2.5}, {Step: 40, TokenAccuracy: 0.5, ExactMatch: math.NaN(), Loss: 1.7}}, w: 900, h: 750},
		{name: "tiny-range", loss: []CurvePoint{{1, 0.5101}, {2, 0.5102}, {3, 0.5103}}, w: 900, h: 450},
		{name: "huge-range", loss: []CurvePoint{{1, 1e6}, {2, 1}, {3, 1e-9}}, w: 900, h: 450},
	}
	t.Run("group", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				path := filepath.Join(dir, "curves-"+c.name+".png")
				if err := Curves(path, c.name, c.loss, c.eval); err != nil {
					t.Fatal(err)
				}
				checkPNG(t, path, c.w, c.h)
			})
		}
	})
	noTempFiles(t, dir)
}

func TestPlotCurvesOverwrites(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.png")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	loss, _ := sampleCurves(50)
	if err := Curves(path, "", loss, nil); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, path, 900, 450)
	noTempFiles(t, dir)
}

func TestPlotCurvesErrors(t *testing.T) {
	dir := t.TempDir()
	loss, _ := sampleCurves(50)
	cases := []struct {
		name string
		path string
		loss []CurvePoint
		eval []EvalPoint
		want string
	}{
		{"empty", filepath.Join(dir, "e.png"), nil, nil, "no loss or eval points"},
		{"all-nan", filepath.Join(dir, "n.png"), []CurvePoint{{1, math.NaN()}}, []EvalPoint{{1, math.NaN(), math.Inf(1), 0}}, "no finite"},
		{"missing-dir", filepath.Join(dir, "nope", "c.png"), loss, nil, "nope"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Curves(c.path, "x", c.loss, c.eval)
			wantRefused(t, c.path, err, c.want)
		})
	}
	noTempFiles(t, dir)
}

var sampleTokens = strings.Fields("2 0 1 1 0 2 SEP 0")

// sampleAttention builds causal attention maps with recognisable patterns:
// previous token, uniform, "attend to SEP" and diagonal.
func sampleAttention(layers, heads int, tokens []string) []AttentionMap {
	n := len(tokens)
	var maps []AttentionMap
	for l := range layers {
		for h := range heads {
			w := make([][]float64, n)
			for q := range n {
				w[q] = make([]float64, n)
				switch (l*heads + h) % 4 {
				case 0: // previous token
					k := max(q-1, 0)
					w[q][k] = 0.85
					w[q][q] += 0.15
				case 1: // uniform over the prefix
					for k := 0; k <= q; k++ {
						w[q][k] = 1 / float64(q+1)
					}
				case 2: // the SEP position once it exists
					sep := 6 % n
					if q >= sep {
						w[q][sep] = 0.7
						w[q][q] += 0.3
					} else {
						w[q][0] = 1
					}
				case 3: // self
					w[q][q] = 1
				}
			}
			maps = append(maps, AttentionMap{Layer: l, Head: h, Weights: w})
		}
	}
	return maps
}

func TestPlotAttention(t *testing.T) {
	dir := plotSampleDir(t)
	path := filepath.Join(dir, "attention.png")
	maps := withHidden(sampleAttention(2, 2, sampleTokens))
	if err := Attention(path, "attention on \"2 0 1 1 0 2 SEP 0\"", sampleTokens, maps); err != nil {
		t.Fatal(err)
	}
	img := checkPNG(t, path, 0, 0)
	b := img.Bounds()
	if b.Dx() < 400 || b.Dy() < 400 || b.Dx() > 4096 || b.Dy() > 4096 {
		t.Errorf("unexpected size %dx%d", b.Dx(), b.Dy())
	}
	// A heatmap needs many colours (the palette), not just text and lines.
	if n := countColors(img, 40); n < 40 {
		t.Errorf("only %d distinct colours; heatmaps missing?", n)
	}
	noTempFiles(t, dir)
}

func TestPlotAttentionVariants(t *testing.T) {
	dir := plotSampleDir(t)
	long := strings.Fields("<bos> reverse this please : a b c d <sep> d c b a <eos> <pad>")
	many := make([]string, 40)
	for i := range many {
		many[i] = string(rune('a' + i%26))
	}
	gapped := sampleAttention(2, 2, sampleTokens)
	gapped = append(gapped[:1], gapped[2:]...) // no layer 0 head 1
	cases := []struct {
		name   string
		tokens []string
		maps   []AttentionMap
	}{
		{"one-head", sampleTokens, withHidden(sampleAttention(1, 1, sampleTokens))},
		{"no-hidden", sampleTokens, sampleAttention(2, 2, sampleTokens)},
		{"long-tokens", long, sampleAttention(1, 3, long)},
		// Eight heads of 40 tokens hit the image size cap: small cells,
		// every other token labelled.
		{"many-tokens", many, sampleAttention(1, 8, many)},
		{"missing-panel", sampleTokens, gapped},
		{"single-token", []string{"x"}, []AttentionMap{{Weights: [][]float64{{1}}}}},
		{"out-of-range", []string{"a", "b"}, []AttentionMap{{Weights: [][]float64{{1.2, -0.1}, {math.NaN(), 0.5}}}}},
	}
	t.Run("group", func(t *testing.T) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				path := filepath.Join(dir, "attention-"+c.name+".png")
				if err := Attention(path, c.name, c.tokens, c.maps); err != nil {
					t.Fatal(err)
				}
				img := checkPNG(t, path, 0, 0)
				if b := img.Bounds(); b.Dx() > 4096 || b.Dy() > 4096 {
					t.Errorf("image too large: %v", b)
				}
			})
		}
	})
	noTempFiles(t, dir)
}

func TestPlotAttentionErrors(t *testing.T) {
	dir := t.TempDir()
	good := sampleAttention(1, 1, sampleTokens)
	ragged := sampleAttention(1, 1, sampleTokens)
	ragged[0].Weights[3] = ragged[0].Weights[3][:5]
	dup := append(sampleAttention(1, 2, sampleTokens), sampleAttention(1, 1, sampleTokens)...)
	hiddenWeight := withHidden(sampleAttention(1, 1, sampleTokens))
	hiddenWeight[0].Hidden[0][0] = true
	hiddenRows := withHidden(sampleAttention(1, 1, sampleTokens))
	hiddenRows[0].Hidden = hiddenRows[0].Hidden[:7]
	hiddenRagged := withHidden(sampleAttention(1, 1, sampleTokens))
	hiddenRagged[0].Hidden[2] = hiddenRagged[0].Hidden[2][:3]
	cases := []struct {
		name   string
		path   string
		tokens []string
		maps   []AttentionMap
		want   string
	}{
		{"no-tokens", filepath.Join(dir, "a.png"), nil, good, "no tokens"},
		{"no-maps", filepath.Join(dir, "b.png"), sampleTokens, nil, "no attention maps"},
		{"ragged", filepath.Join(dir, "c.png"), sampleTokens, ragged, "query row 3 has 5 keys"},
		{"too-few-tokens", filepath.Join(dir, "d.png"), sampleTokens[:7], good, "8 query rows, want 7"},
		{"too-many-tokens", filepath.Join(dir, "e.png"), append(sampleTokens[:8:8], "x"), good, "want 9"},
		{"empty-weights", filepath.Join(dir, "f.png"), sampleTokens, []AttentionMap{{}}, "0 query rows"},
		{"duplicate", filepath.Join(dir, "g.png"), sampleTokens, dup, "duplicate layer 0 head 0"},
		{"hidden-weight", filepath.Join(dir, "i.png"), sampleTokens, hiddenWeight, "layer 0 head 0: query 0 key 0 is hidden but has weight 1, want 0"},
		{"hidden-rows", filepath.Join(dir, "j.png"), sampleTokens, hiddenRows, "Hidden has 7 query rows, want 8"},
		{"hidden-ragged", filepath.Join(dir, "k.png"), sampleTokens, hiddenRagged, "Hidden row 2 has 3 keys, want 8"},
		{"missing-dir", filepath.Join(dir, "nope", "h.png"), sampleTokens, good, "nope"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := Attention(c.path, "x", c.tokens, c.maps)
			wantRefused(t, c.path, err, c.want)
		})
	}
	noTempFiles(t, dir)
}

// labelsIn returns the labelled ticks of ts that lie in [min, max], but
// for rounding.
func labelsIn(ts []gplot.Tick, min, max float64) []gplot.Tick {
	slack := (max - min) * 1e-9
	var out []gplot.Tick
	for _, tk := range ts {
		if !tk.IsMinor() && tk.Value >= min-slack && tk.Value <= max+slack {
			out = append(out, tk)
		}
	}
	return out
}

// is125 reports whether v > 0 is 1, 2 or 5 times a power of ten.
func is125(v float64) bool {
	e := math.Pow(10, math.Floor(math.Log10(v)+1e-9))
	for _, m := range []float64{1, 2, 5} {
		if math.Abs(v/e-m) < 1e-6 {
			return true
		}
	}
	return false
}

// inDenseSet reports whether every v of vs has its mantissa in one of
// denseMantissas' sets.
func inDenseSet(vs []float64) bool {
	for _, ms := range denseMantissas {
		if !slices.ContainsFunc(vs, func(v float64) bool {
			m := v / math.Pow(10, math.Floor(math.Log10(v)+1e-9))
			return !slices.ContainsFunc(ms, func(x float64) bool { return math.Abs(m-x) < 1e-6 })
		}) {
			return true
		}
	}
	return false
}

// onNiceGrid says why vs (increasing) are not where a log axis's labels
// belong, "" if they are: decades or 1-2-5 mantissas, the mantissas of one
// of the log-spaced sets denseMantissas, or the multiples of one 1-2-5
// step.
func onNiceGrid(vs []float64) string {
	if !slices.ContainsFunc(vs, func(v float64) bool { return !is125(v) }) || inDenseSet(vs) {
		return ""
	}
	step := vs[1] - vs[0]
	if !is125(step) {
		return fmt.Sprintf("neither 1-2-5 mantissas nor a 1-2-5 step (%g)", step)
	}
	for i, v := range vs {
		if math.Abs(v-vs[0]-float64(i)*step) > 1e-6*step || math.Abs(v/step-math.Round(v/step)) > 1e-6 {
			return fmt.Sprintf("%g is not on the grid of step %g", v, step)
		}
	}
	return ""
}

// checkLabels fails t unless ticks label at least minLabels values of
// [min, max], each label reading its value (as transformed by value), and
// returns the labelled values.
func checkLabels(t *testing.T, what string, ticks []gplot.Tick, min, max float64, minLabels int, value func(float64) float64) []float64 {
	t.Helper()
	var vs []float64
	for _, tk := range labelsIn(ticks, min, max) {
		v := value(tk.Value)
		got, err := strconv.ParseFloat(tk.Label, 64)
		if err != nil || math.Abs(got-v) > 1e-9*math.Abs(v) {
			t.Errorf("%s: label %q at %g", what, tk.Label, v)
		}
		if len(tk.Label) > 8 {
			t.Errorf("%s: unwieldy label %q", what, tk.Label)
		}
		vs = append(vs, v)
	}
	if len(vs) < minLabels || len(vs) > 12 {
		t.Errorf("%s: labels at %v, want %d to 12", what, vs, minLabels)
	}
	return vs
}

// TestLogTicker: every range a loss or a cost takes, narrow ones included,
// gets three labels at least, at decades or on a 1-2-5 grid.
func TestLogTicker(t *testing.T) {
	for _, c := range [][2]float64{
		{0.02, 3}, {0.5, 0.9}, {1e-9, 1e6}, {0.51, 0.515}, {1, 10}, {1.5, 3.5}, {1.9, 3.3}, {2.2, 2.4},
		{1.4, 78}, {3, 9216}, {1.4, 1013}, {0.5103, 0.5106}, {97, 103},
	} {
		what := fmt.Sprintf("Ticks(%g, %g)", c[0], c[1])
		vs := checkLabels(t, what, logTicker{}.Ticks(c[0], c[1]), c[0], c[1], 3, func(v float64) float64 { return v })
		if len(vs) >= 2 {
			if why := onNiceGrid(vs); why != "" {
				t.Errorf("%s: labels %v: %s", what, vs, why)
			}
		}
	}
}

// TestLossAxisLabels: the loss panel's log axis is labelled with losses, at
// least three of them, also over a recall run's narrow range (the old
// ticker labelled 1.9 to 3.3 only at 2 and 3).
func TestLossAxisLabels(t *testing.T) {
	for _, r := range [][2]float64{{1.5, 3.5}, {1.9, 3.3}, {0.02, 2.5}, {2.25, 2.31}} {
		var xy plotter.XYs
		for i := range 50 {
			xy = append(xy, plotter.XY{X: float64(i), Y: r[1] - (r[1]-r[0])*float64(i)/49})
		}
		p, _, err := lossPanel(xy, nil, "token")
		if err != nil {
			t.Fatal(err)
		}
		what := fmt.Sprintf("losses %g..%g", r[0], r[1])
		vs := checkLabels(t, what, p.Y.Tick.Marker.Ticks(p.Y.Min, p.Y.Max), p.Y.Min, p.Y.Max, 3, func(v float64) float64 { return math.Pow(10, v) })
		if len(vs) >= 2 {
			if why := onNiceGrid(vs); why != "" {
				t.Errorf("%s: labels %v: %s", what, vs, why)
			}
		}
	}
}

// TestLossAxisReadable: a character model's loss falling from 4.4 to 1.3
// (curves-chars.png) has labels inside 1.3 to 1.7, where it spends most of
// its steps, and the axis names its unit in words; the old ticker labelled
// only 2, 3 and 4.
func TestLossAxisReadable(t *testing.T) {
	var xy, val plotter.XYs
	for i := range 2000 {
		xy = append(xy, plotter.XY{X: float64(i), Y: 1.3 + 3.1*math.Exp(-float64(i)/150)})
	}
	for i := 250; i <= 2000; i += 250 {
		val = append(val, plotter.XY{X: float64(i), Y: 1.35 + 3.1*math.Exp(-float64(i)/150)})
	}
	p, _, err := lossPanel(xy, val, "character")
	if err != nil {
		t.Fatal(err)
	}
	vs := checkLabels(t, "chars losses", p.Y.Tick.Marker.Ticks(p.Y.Min, p.Y.Max), p.Y.Min, p.Y.Max, 5, func(v float64) float64 { return math.Pow(10, v) })
	var inside []float64
	for _, v := range vs {
		if v >= 1.3 && v <= 1.7 {
			inside = append(inside, v)
		}
	}
	if len(inside) < 2 {
		t.Errorf("labels %v: %v inside 1.3..1.7, want 2 at least", vs, inside)
	}
	if why := onNiceGrid(vs); why != "" {
		t.Errorf("labels %v: %s", vs, why)
	}
	if got := p.Y.Label.Text; got != "cross-entropy (nats per character)" {
		t.Errorf("y label %q, want the unit in words", got)
	}
	if strings.Contains(p.Title.Text, "token") {
		t.Errorf("a character model's loss panel says %q", p.Title.Text)
	}
	toy, _, err := lossPanel(xy, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := toy.Y.Label.Text; got != "cross-entropy (nats per token)" {
		t.Errorf("toy task's y label %q", got)
	}
}

// TestPanelsTitled: every panel of every figure says what it shows.
func TestPanelsTitled(t *testing.T) {
	loss, eval := sampleCurves(100)
	var xy, acc plotter.XYs
	for _, p := range loss {
		xy = append(xy, plotter.XY{X: float64(p.Step), Y: p.Loss})
	}
	for _, p := range eval {
		acc = append(acc, plotter.XY{X: float64(p.Step), Y: p.TokenAccuracy})
	}
	lp, _, err := lossPanel(xy, nil, "token")
	if err != nil {
		t.Fatal(err)
	}
	lin, _, err := lossPanel(plotter.XYs{{X: 1, Y: 1}, {X: 2, Y: -1}}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	ep, err := evalPanel(acc, acc, "token accuracy")
	if err != nil {
		t.Fatal(err)
	}
	hm := newHeatmapStyle(sampleTokens, sampleTokens, 1, 1, false, AttentionOptions{}, math.Inf(1)).panel(sampleAttention(1, 1, sampleTokens)[0])
	sc, err := scalingPanels([]ScalingSeries{{Name: "fused", N: []float64{128, 256}, Ms: []float64{1, 4}, Bytes: []float64{1 << 20, 4 << 20}}})
	if err != nil {
		t.Fatal(err)
	}
	panels := map[string]*gplot.Plot{"loss": lp, "linear loss": lin, "accuracy": ep, "heatmap": hm, "scaling time": sc[0], "scaling memory": sc[1]}
	for name, p := range panels {
		if strings.TrimSpace(p.Title.Text) == "" {
			t.Errorf("%s panel has no title", name)
		}
	}
	if sc[0].Title.Text == sc[1].Title.Text {
		t.Errorf("scaling panels share the title %q", sc[0].Title.Text)
	}
}

// TestHiddenCellsDrawn renders a causal heatmap and compares the pixels of
// a hidden cell (weight 0 because the mask hides it) with those of a cell
// of weight 0 that was visible: the first are the hidden greys, outside the
// colour map, the second the colour map's 0. Without Hidden both are the
// colour of 0.
func TestHiddenCellsDrawn(t *testing.T) {
	tokens := []string{"a", "SEP", "b"}
	w := [][]float64{{1, 0, 0}, {0.4, 0.6, 0}, {0, 0.3, 0.7}}
	st := newHeatmapStyle(tokens, tokens, 1, 1, false, AttentionOptions{}, math.Inf(1))
	zero := color.RGBAModel.Convert(st.pal.Colors()[0]).(color.RGBA)
	// cellPixels renders m and returns the pixels of the inner half of
	// cell (q, k).
	cellPixels := func(m AttentionMap, q, k int) []color.RGBA {
		const side = 300
		c := vgimg.NewWith(vgimg.UseWH(px(side), px(side)), vgimg.UseDPI(plotDPI), vgimg.UseBackgroundColor(color.White))
		dc := draw.New(c)
		p := st.panel(m)
		p.Draw(dc)
		da := p.DataCanvas(dc)
		toPx := func(l vg.Length) float64 { return float64(l) * plotDPI / 72 }
		x, y := toPx(da.X(p.X.Norm(float64(k)))), side-toPx(da.Y(p.Y.Norm(float64(len(w)-1-q))))
		r := toPx(da.Max.X-da.Min.X) / float64(len(tokens)) / 4
		img := c.Image()
		var out []color.RGBA
		for iy := int(y - r); iy <= int(y+r); iy++ {
			for ix := int(x - r); ix <= int(x+r); ix++ {
				out = append(out, color.RGBAModel.Convert(img.At(ix, iy)).(color.RGBA))
			}
		}
		return out
	}
	isHiddenGrey := func(c color.RGBA) bool {
		return c.R == c.G && c.G == c.B && c.R >= colHatch.Y && c.R <= colHidden.Y
	}
	masked := AttentionMap{Weights: w, Hidden: causal(3)}
	for _, c := range cellPixels(masked, 2, 0) {
		if c != zero {
			t.Fatalf("visible cell of weight 0: pixel %v, want the colour map's 0, %v", c, zero)
		}
	}
	hidden := cellPixels(masked, 0, 2)
	if slices.ContainsFunc(hidden, func(c color.RGBA) bool { return !isHiddenGrey(c) }) || !slices.Contains(hidden, color.RGBAModel.Convert(colHidden).(color.RGBA)) {
		t.Errorf("hidden cell: pixels %v, want the hidden greys", hidden[:8])
	}
	for _, c := range cellPixels(AttentionMap{Weights: w}, 0, 2) {
		if c != zero {
			t.Fatalf("without Hidden, cell (0, 2) of weight 0: pixel %v, want %v", c, zero)
		}
	}
}

// wantRefused fails t unless err refuses to write path, names it and says
// want, and path was not written.
func wantRefused(t *testing.T, path string, err error, want string) {
	t.Helper()
	if err == nil {
		t.Fatal("expected an error")
	}
	if prefix := "plot: " + path + ": "; !strings.HasPrefix(err.Error(), prefix) {
		t.Errorf("error %q lacks prefix %q", err, prefix)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not mention %q", err, want)
	}
	if _, serr := os.Stat(path); serr == nil {
		t.Errorf("%s written despite the error", path)
	}
}

// causal returns the n x n causal mask's hidden cells: the keys after each
// query.
func causal(n int) [][]bool {
	h := make([][]bool, n)
	for q := range h {
		h[q] = make([]bool, n)
		for k := q + 1; k < n; k++ {
			h[q][k] = true
		}
	}
	return h
}

// withHidden returns maps with the causal mask's cells marked hidden.
func withHidden(maps []AttentionMap) []AttentionMap {
	for i := range maps {
		maps[i].Hidden = causal(len(maps[i].Weights))
	}
	return maps
}

// Plots refuse what they cannot draw with an error naming it, and never
// panic.
func TestPlotErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name string
		run  func() error
		want []string
	}{
		{"Curves no path", func() error { return Curves("", "t", []CurvePoint{{Step: 1, Loss: 1}}, nil) }, []string{"no file name"}},
		{"Curves no points", func() error { return Curves(filepath.Join(dir, "c.png"), "t", nil, nil) }, []string{"plot: ", "no loss"}},
		{"Attention no maps", func() error { return Attention(filepath.Join(dir, "a.png"), "t", []string{"a"}, nil) }, []string{"plot: ", "no attention maps"}},
		{"Attention ragged", func() error {
			return Attention(filepath.Join(dir, "a.png"), "t", []string{"a", "b"}, []AttentionMap{{Weights: [][]float64{{1}}}})
		}, []string{"plot: ", "want 2"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := graphtest.NoPanic(t, c.name, c.run)
			graphtest.WantErr(t, err, c.want...)
		})
	}
}
