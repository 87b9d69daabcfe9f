package plot

import (
	"bytes"
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		{name: "unsorted", loss: []CurvePoint{{3, 0.1}, {1, 1}, {2, 0.4}}, eval: []EvalPoint{{3, 0.9, 0.5}, {1, 0.1, 0}}, w: 900, h: 750},
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
		{"all-nan", filepath.Join(dir, "n.png"), []CurvePoint{{1, math.NaN()}}, []EvalPoint{{1, math.NaN(), math.Inf(1)}}, "no finite"},
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
	maps := sampleAttention(2, 2, sampleTokens)
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
		{"one-head", sampleTokens, sampleAttention(1, 1, sampleTokens)},
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

func TestLogTicker(t *testing.T) {
	cases := []struct {
		min, max  float64
		minLabels int
	}{
		{0.02, 3, 3}, {0.5, 0.9, 2}, {1e-9, 1e6, 3}, {0.51, 0.515, 2}, {1, 10, 3},
	}
	for _, c := range cases {
		var labels []string
		for _, tk := range (logTicker{}).Ticks(c.min, c.max) {
			if tk.Label != "" && tk.Value >= c.min && tk.Value <= c.max {
				labels = append(labels, tk.Label)
			}
		}
		if len(labels) < c.minLabels || len(labels) > 12 {
			t.Errorf("Ticks(%g, %g): labels %v, want between %d and 12", c.min, c.max, labels, c.minLabels)
		}
		for _, l := range labels {
			if len(l) > 8 {
				t.Errorf("Ticks(%g, %g): unwieldy label %q", c.min, c.max, l)
			}
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
