package plot

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// TestLinesFourPanelsInRows: four panels (multihead-cost.png, once a
// 2112x442 strip) are laid out two by two, within 1600 px across.
func TestLinesFourPanelsInRows(t *testing.T) {
	for n, want := range map[int][2]int{1: {1, 1}, 2: {1, 2}, 3: {1, 3}, 4: {2, 2}, 5: {2, 3}, 6: {2, 3}} {
		if r, c := linesGrid(n); r != want[0] || c != want[1] {
			t.Errorf("linesGrid(%d) = %d x %d, want %d x %d", n, r, c, want[0], want[1])
		}
	}
	var panels []Panel
	for i := range 4 {
		panels = append(panels, Panel{Title: fmt.Sprintf("p%d", i), Series: []Series{{Name: "a", X: []float64{0, 1, 2}, Y: []float64{1, 2, 1.5}}}})
	}
	path := filepath.Join(plotSampleDir(t), "lines-four.png")
	if err := Lines(path, "four panels", panels); err != nil {
		t.Fatal(err)
	}
	img := checkPNG(t, path, 0, 0)
	if b := img.Bounds(); b.Dx() > 1600 || b.Dx() > 2*b.Dy() {
		t.Errorf("four panels: %dx%d, want at most 1600 px wide and no strip", b.Dx(), b.Dy())
	}
}

// TestLinesCategorical: heads and layers are categories, drawn as points
// (no line joins head 1 to head 2) and labelled with their names; an X
// that is not a category's index is refused.
func TestLinesCategorical(t *testing.T) {
	pn := Panel{Title: "entropy per head", XLabel: "head", YLabel: "nats", Categories: []string{"0", "1", "2", "3"}, Series: []Series{
		{Name: "layer 0", X: []float64{0, 1, 2, 3}, Y: []float64{1.3, 1.6, 1.5, 1.5}},
		{Name: "layer 1", X: []float64{0, 1, 2, 3}, Y: []float64{1.4, 1.2, 1.1, 1.0}},
	}}
	p, err := pn.plot()
	if err != nil {
		t.Fatal(err)
	}
	if joined(t, Panel{Categories: []string{"a", "b"}, Series: []Series{{Name: "s", X: []float64{0, 1}, Y: []float64{0, 1}}}}) {
		t.Error("categorical panel: a line joins its points")
	}
	if !joined(t, Panel{Series: []Series{{Name: "s", X: []float64{0, 1}, Y: []float64{0, 1}}}}) {
		t.Error("line panel: no line between its points (the check is broken)")
	}
	var labels []string
	for _, tk := range p.X.Tick.Marker.Ticks(p.X.Min, p.X.Max) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if strings.Join(labels, " ") != "0 1 2 3" {
		t.Errorf("x labels %q, want the four heads", labels)
	}
	if p.X.Min > -0.4 || p.X.Max < 3.4 {
		t.Errorf("x range %g..%g, want room around the first and last category", p.X.Min, p.X.Max)
	}
	bad := pn
	bad.Series = []Series{{Name: "half", X: []float64{0.5}, Y: []float64{1}}}
	if _, err := bad.plot(); err == nil {
		t.Error("X 0.5 on a categorical axis: no error")
	}
	path := filepath.Join(plotSampleDir(t), "lines-categorical.png")
	if err := Lines(path, "", []Panel{pn}); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, path, 0, 0)
}

// joined renders pn, whose one series runs from (0, 0) to (1, 1), and
// reports whether the series' colour is drawn halfway between the points.
func joined(t *testing.T, pn Panel) bool {
	t.Helper()
	p, err := pn.plot()
	if err != nil {
		t.Fatal(err)
	}
	const w, h = 400, 300
	c := vgimg.NewWith(vgimg.UseWH(px(w), px(h)), vgimg.UseDPI(plotDPI), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(c)
	p.Draw(dc)
	da := p.DataCanvas(dc)
	toPx := func(l vg.Length) int { return int(math.Round(float64(l) * plotDPI / 72)) }
	x, y := toPx(da.X(p.X.Norm(0.5))), h-toPx(da.Y(p.Y.Norm(0.5)))
	want := color.RGBAModel.Convert(seriesColors[0]).(color.RGBA)
	img := c.Image()
	for iy := y - 3; iy <= y+3; iy++ {
		for ix := x - 3; ix <= x+3; ix++ {
			if color.RGBAModel.Convert(img.At(ix, iy)).(color.RGBA) == want {
				return true
			}
		}
	}
	return false
}

// TestLinesLogLabels: a log axis of a Lines panel, now log10 on a linear
// one, is labelled with the values themselves (MiB from 0.06 to 460), and
// its axis label does not pad the panel: the data area of a panel whose
// values span 17 decades is as tall as its neighbour's.
func TestLinesLogLabels(t *testing.T) {
	pn := Panel{Title: "memory", XLabel: "sequence length n", YLabel: "MiB", LogX: true, LogY: true, Series: []Series{
		{Name: "peak", X: []float64{256, 512, 1024, 2048}, Y: []float64{9.2, 27, 100, 460}},
		{Name: "parameters", X: []float64{256, 512, 1024, 2048}, Y: []float64{0.0625, 0.0625, 0.0625, 0.0625}},
	}}
	p, err := pn.plot()
	if err != nil {
		t.Fatal(err)
	}
	vs := checkLabels(t, "MiB axis", p.Y.Tick.Marker.Ticks(p.Y.Min, p.Y.Max), p.Y.Min, p.Y.Max, 3, func(v float64) float64 { return math.Pow(10, v) })
	if why := onNiceGrid(vs); why != "" {
		t.Errorf("MiB labels %v: %s", vs, why)
	}
	var xs []string
	for _, tk := range p.X.Tick.Marker.Ticks(p.X.Min, p.X.Max) {
		if tk.Label != "" {
			xs = append(xs, tk.Label)
		}
	}
	if strings.Join(xs, " ") != "256 512 1024 2048" {
		t.Errorf("n labels %q, want the powers of two", xs)
	}
	wide := Panel{Title: "error", YLabel: "max abs difference", LogY: true, Series: []Series{{Name: "e", X: []float64{1, 2, 3, 4}, Y: []float64{1e-17, 1e-17, 2e-17, 3}}}}
	flat := Panel{Title: "match", YLabel: "exact match", Series: []Series{{Name: "m", X: []float64{1, 2, 3, 4}, Y: []float64{0, 0.5, 0.9, 1}}}}
	a, err := wide.plot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := flat.plot()
	if err != nil {
		t.Fatal(err)
	}
	probe := draw.Canvas{Rectangle: vg.Rectangle{Max: vg.Point{X: px(linesPanelWidthPx), Y: px(linesPanelHeightPx)}}}
	da, db := a.DataCanvas(probe), b.DataCanvas(probe)
	if ha, hb := da.Max.Y-da.Min.Y, db.Max.Y-db.Min.Y; math.Abs(float64(ha-hb)) > 10 {
		t.Errorf("data area %v tall under a 17-decade log axis, %v beside it: the axis label pads the panel", ha, hb)
	}
}

// charsTokens are a character model's labels: BOS, then "func (c *conn) "
// as data.Vocab labels it.
func charsTokens() []string {
	out := []string{"BOS"}
	for _, r := range "func (c *conn) " {
		s := string(r)
		if r == ' ' {
			s = "␣"
		}
		out = append(out, s)
	}
	return out
}

// TestAttentionFitsWidth: a character model's 4 x 4 heads over a prompt
// fit the width asked (the chars attend PNG was 3974 px across), its
// panels sharing their axes, and spaces are labelled with a glyph the font
// has ('␣' drew blank).
func TestAttentionFitsWidth(t *testing.T) {
	toks := charsTokens()
	maps := sampleAttention(4, 4, toks)
	path := filepath.Join(plotSampleDir(t), "attention-chars.png")
	if err := AttentionWith(path, "chars: attention over \"func (c *conn) \"", toks, maps, AttentionOptions{MaxWidthPx: 1000}); err != nil {
		t.Fatal(err)
	}
	img := checkPNG(t, path, 0, 0)
	if b := img.Bounds(); b.Dx() > 1000 || b.Dx() < 700 {
		t.Errorf("chars attention: %d px wide, want 700 to 1000", b.Dx())
	}
	st := newHeatmapStyle(toks, toks, 4, 4, false, AttentionOptions{MaxWidthPx: 1000}, math.Inf(1))
	outer, inner := st.panelAt(maps[0], 3, 0), st.panelAt(maps[0], 0, 1)
	labelled := func(ts []gplot.Tick) (n int) {
		for _, tk := range ts {
			if tk.Label != "" {
				n++
			}
		}
		return n
	}
	if n := labelled(outer.Y.Tick.Marker.Ticks(outer.Y.Min, outer.Y.Max)); n != len(toks) {
		t.Errorf("bottom-left panel labels %d of %d queries", n, len(toks))
	}
	if n := labelled(inner.X.Tick.Marker.Ticks(inner.X.Min, inner.X.Max)) + labelled(inner.Y.Tick.Marker.Ticks(inner.Y.Min, inner.Y.Max)); n != 0 {
		t.Errorf("an inner panel labels %d tokens, want none (shared axes)", n)
	}
	for _, tk := range st.xTicks {
		if strings.Contains(tk.Label, "␣") {
			t.Errorf("space labelled %q, which the font lacks", tk.Label)
		}
	}
	if !slices.ContainsFunc(st.xTicks, func(tk gplot.Tick) bool { return tk.Label == spaceLabel }) {
		t.Errorf("no space labelled %q among %v", spaceLabel, st.xTicks)
	}
	// Without the option the same figure is as wide as the panels need.
	wide := filepath.Join(plotSampleDir(t), "attention-chars-wide.png")
	if err := Attention(wide, "", toks, maps); err != nil {
		t.Fatal(err)
	}
	if b := checkPNG(t, wide, 0, 0).Bounds(); b.Dx() <= 1000 {
		t.Errorf("without MaxWidthPx: %d px wide; the test no longer tests the option", b.Dx())
	}
}

// TestAttentionSink: a sink's share of each row is drawn as a column
// "sink" left of the keys, on the colour scale; the panel names its
// variant; a sink of the wrong length is refused.
func TestAttentionSink(t *testing.T) {
	toks := []string{"2", "0", "1", "SEP", "0", "1", "2"}
	maps := sampleAttention(1, 2, toks)
	for i := range maps {
		maps[i].Variant = fmt.Sprintf("kv head %d · sink", i)
		maps[i].Sink = make([]float64, len(toks))
		for q, row := range maps[i].Weights {
			maps[i].Sink[q] = 0.9 - 0.1*float64(q)
			for k := range row {
				row[k] *= 1 - maps[i].Sink[q]
			}
		}
	}
	st := newHeatmapStyle(toks, toks, 1, 2, true, AttentionOptions{}, math.Inf(1))
	p := st.panelAt(maps[0], 0, 0)
	if p.X.Min >= -1.5 {
		t.Errorf("x axis starts at %g: no room for the sink column", p.X.Min)
	}
	if !slices.ContainsFunc(p.X.Tick.Marker.Ticks(p.X.Min, p.X.Max), func(tk gplot.Tick) bool { return tk.Label == "sink" && tk.Value < -0.5 }) {
		t.Error("no tick labelled sink left of the keys")
	}
	if !strings.Contains(p.Title.Text, "kv head 0 · sink") {
		t.Errorf("title %q does not name the variant", p.Title.Text)
	}
	// The sink cell of query 0 (0.9) is drawn in the colour of 0.9.
	const side = 400
	c := vgimg.NewWith(vgimg.UseWH(px(side), px(side)), vgimg.UseDPI(plotDPI), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(c)
	p.Draw(dc)
	da := p.DataCanvas(dc)
	toPx := func(l vg.Length) int { return int(math.Round(float64(l) * plotDPI / 72)) }
	x, y := toPx(da.X(p.X.Norm(-attnSinkCells))), side-toPx(da.Y(p.Y.Norm(float64(len(toks)-1))))
	cols := st.pal.Colors()
	want := color.RGBAModel.Convert(cols[int(math.Round(0.9*float64(len(cols)-1)))]).(color.RGBA)
	if got := color.RGBAModel.Convert(c.Image().At(x, y)).(color.RGBA); got != want {
		t.Errorf("sink cell of query 0: %v, want %v (the colour of 0.9)", got, want)
	}
	path := filepath.Join(plotSampleDir(t), "attention-sink.png")
	if err := Attention(path, "sinks", toks, maps); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, path, 0, 0)
	maps[1].Sink = maps[1].Sink[:3]
	if err := Attention(filepath.Join(t.TempDir(), "x.png"), "", toks, maps); err == nil || !strings.Contains(err.Error(), "sink") {
		t.Errorf("a sink of 3 rows for 7 queries: %v, want an error", err)
	}
}
