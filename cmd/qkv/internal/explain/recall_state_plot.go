package explain

import (
	"cmp"
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// tab10 is matplotlib's category palette, enough for a colour a model.
var tab10 = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0xd6, 0x27, 0x28, 0xff},
	color.RGBA{0x2c, 0xa0, 0x2c, 0xff}, color.RGBA{0xff, 0x7f, 0x0e, 0xff},
	color.RGBA{0x94, 0x67, 0xbd, 0xff}, color.RGBA{0x8c, 0x56, 0x4b, 0xff},
	color.RGBA{0xe3, 0x77, 0xc2, 0xff}, color.RGBA{0x7f, 0x7f, 0x7f, 0xff},
	color.RGBA{0xbc, 0xbd, 0x22, 0xff}, color.RGBA{0x17, 0xbe, 0xcf, 0xff},
}

// glyphs are the markers, one a family or task.
var glyphs = []draw.GlyphDrawer{
	draw.CircleGlyph{}, draw.TriangleGlyph{}, draw.SquareGlyph{}, draw.PyramidGlyph{},
	draw.BoxGlyph{}, draw.RingGlyph{}, draw.CrossGlyph{}, draw.PlusGlyph{},
}

// families returns the model families of e in the plan's order.
func (e *recallExperiment) families() []string {
	var fs []string
	for _, m := range e.Plan.Models {
		if !slices.Contains(fs, m.Family) {
			fs = append(fs, m.Family)
		}
	}
	return fs
}

// familyLabel is family f with its variants, as "linear taylor d'=4, 8, 16".
func (e *recallExperiment) familyLabel(f string) string {
	var vs []string
	for _, m := range e.Plan.Models {
		if m.Family == f && m.Variant != "" {
			v := m.Variant
			if len(vs) > 0 {
				v = v[strings.Index(v, "=")+1:]
			}
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return f
	}
	return f + " " + strings.Join(vs, ", ")
}

// bytesTicker labels a log axis of bytes at 1, 2 and 5 times the powers of
// ten, as "500 B", "2 kB", with minor ticks at the other mantissas.
type bytesTicker struct{}

// Ticks implements gplot.Ticker.
func (bytesTicker) Ticks(lo, hi float64) []gplot.Tick { return logTicks(lo, hi, bytesLabel) }

// logTicks places ticks on a log axis from lo to hi at every mantissa 1 to
// 9 of the powers of ten, labelling those at 1, 2 and 5 with label.
func logTicks(lo, hi float64, label func(float64) string) []gplot.Tick {
	var ts []gplot.Tick
	for e := math.Floor(math.Log10(lo)); e <= math.Ceil(math.Log10(hi)); e++ {
		for m := 1.0; m <= 9; m++ {
			v := m * math.Pow(10, e)
			if v < lo*0.999 || v > hi*1.001 {
				continue
			}
			t := gplot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = label(v)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// bytesLabel writes n bytes in B, kB or MB (powers of ten).
func bytesLabel(n float64) string {
	switch {
	case n >= 1e6:
		return fmt.Sprintf("%g MB", n/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%g kB", n/1e3)
	}
	return fmt.Sprintf("%g B", n)
}

// unitTicker labels a 0..1 axis at every 0.2.
type unitTicker struct{}

// Ticks implements gplot.Ticker.
func (unitTicker) Ticks(lo, hi float64) []gplot.Tick {
	var ts []gplot.Tick
	for i := 0; i <= 10; i++ {
		v := float64(i) / 10
		t := gplot.Tick{Value: v}
		if i%2 == 0 {
			t.Label = fmt.Sprintf("%.1f", v)
		}
		ts = append(ts, t)
	}
	return ts
}

// logCountTicker labels a log axis of counts (tokens/s) at 1, 2 and 5
// times the powers of ten.
type logCountTicker struct{}

// Ticks implements gplot.Ticker.
func (logCountTicker) Ticks(lo, hi float64) []gplot.Tick {
	return logTicks(lo, hi, func(v float64) string { return fmt.Sprintf("%g", v) })
}

// newPanel is a chart with a light grid and readable fonts.
func newPanel(title, xLabel, yLabel string) *gplot.Plot {
	p := gplot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(12)
	p.X.Label.Text, p.Y.Label.Text = xLabel, yLabel
	p.X.Label.TextStyle.Font.Size, p.Y.Label.TextStyle.Font.Size = vg.Points(11), vg.Points(11)
	p.X.Tick.Label.Font.Size, p.Y.Tick.Label.Font.Size = vg.Points(10), vg.Points(10)
	g := plotter.NewGrid()
	g.Vertical.Color, g.Horizontal.Color = color.Gray{Y: 225}, color.Gray{Y: 225}
	p.Add(g)
	p.Y.Min, p.Y.Max = -0.03, 1.03
	p.Y.Tick.Marker = unitTicker{}
	return p
}

// errPoints are points with error bars: Low and High below and above Y.
type errPoints struct {
	plotter.XYs
	plotter.YErrors
}

// legendEntry is one line of a figure's legend.
type legendEntry struct {
	name   string
	thumbs []gplot.Thumbnailer
}

// figure draws panels side by side with the legend in a column of its own
// on the right, and a title above, into the PNG path.
func figure(path, title string, panels []*gplot.Plot, legend []legendEntry, panelW, legendW, h vg.Length) error {
	w := panelW*vg.Length(len(panels)) + legendW
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(96), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	band := vg.Points(26)
	sty := text.Style{Color: color.Black, Font: font.From(gplot.DefaultFont, vg.Points(13)), XAlign: draw.XCenter, YAlign: draw.YCenter, Handler: gplot.DefaultTextHandler}
	sty.Font.Weight = 700
	dc.FillText(sty, vg.Point{X: dc.Center().X, Y: dc.Max.Y - band/2}, title)
	body := draw.Crop(dc, 0, 0, 0, -band)
	left := draw.Crop(body, 0, -legendW, 0, 0)
	tiles := draw.Tiles{Rows: 1, Cols: len(panels), PadX: vg.Millimeter * 6, PadTop: vg.Millimeter, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 2}
	canvases := gplot.Align([][]*gplot.Plot{panels}, tiles, left)
	for i, p := range panels {
		p.Draw(canvases[0][i])
	}
	l := gplot.NewLegend()
	l.TextStyle.Font.Size = vg.Points(10)
	l.ThumbnailWidth = vg.Points(22)
	l.Top, l.Left = true, true
	l.YOffs = -vg.Points(30)
	l.XOffs = vg.Points(6)
	for _, e := range legend {
		l.Add(e.name, e.thumbs...)
	}
	l.Draw(draw.Crop(body, w-legendW, 0, 0, 0))
	if err := writeAtomicPNG(path, img); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

// drawRecall writes recall-vs-state.png: accuracy against state bytes, a
// panel a task, a line a model family through its means (error bars the
// range over seeds, hollow markers each seed).
func (e *recallExperiment) drawRecall(r *Result, o Options) error {
	path := o.plotPath("recall-vs-state", "")
	if path == "" {
		return nil
	}
	fams := e.families()
	var panels []*gplot.Plot
	var legend []legendEntry
	for ti, t := range e.Plan.Tasks {
		p := newPanel(fmt.Sprintf("%d pairs (%d keys, %d values), n = %d, %d seed(s)", t.Pairs, t.Keys, t.Values, 4*t.Pairs, t.Seeds),
			"state per sequence while generating (bytes, log)", "held-out recall accuracy (per query)")
		p.X.Scale, p.X.Tick.Marker = gplot.LogScale{}, bytesTicker{}
		lo, hi := math.Inf(1), math.Inf(-1)
		for fi, f := range fams {
			var sums []recallSummary
			for _, s := range e.Sums {
				if s.Task.Pairs == t.Pairs && s.Model.Family == f {
					sums = append(sums, s)
				}
			}
			if len(sums) == 0 {
				continue
			}
			slices.SortFunc(sums, func(a, b recallSummary) int { return cmp.Compare(a.StateBytes, b.StateBytes) })
			c, g := tab10[fi%len(tab10)], glyphs[fi%len(glyphs)]
			var pts errPoints
			var seeds plotter.XYs
			for _, s := range sums {
				x := float64(s.StateBytes)
				lo, hi = min(lo, x), max(hi, x)
				pts.XYs = append(pts.XYs, plotter.XY{X: x, Y: s.Acc})
				pts.YErrors = append(pts.YErrors, struct{ Low, High float64 }{s.Acc - s.AccMin, s.AccMax - s.Acc})
				for _, a := range s.PerSeed {
					seeds = append(seeds, plotter.XY{X: x, Y: a})
				}
			}
			line, points, err := plotter.NewLinePoints(pts.XYs)
			if err != nil {
				return err
			}
			line.Color, line.Width = c, vg.Points(1.8)
			points.Color, points.Shape, points.Radius = c, g, vg.Points(3.5)
			bars, err := plotter.NewYErrorBars(pts)
			if err != nil {
				return err
			}
			bars.Color, bars.Width, bars.CapWidth = c, vg.Points(1.2), vg.Points(6)
			each, err := plotter.NewScatter(seeds)
			if err != nil {
				return err
			}
			each.Color, each.Shape, each.Radius = c, draw.RingGlyph{}, vg.Points(2.2)
			p.Add(line, bars, each, points)
			if ti == 0 {
				legend = append(legend, legendEntry{e.familyLabel(f), []gplot.Thumbnailer{line, points}})
			}
		}
		p.X.Min, p.X.Max = lo/1.6, hi*1.6
		panels = append(panels, p)
	}
	ring, _ := plotter.NewScatter(plotter.XYs{{}})
	ring.Color, ring.Shape, ring.Radius = color.Gray{Y: 90}, draw.RingGlyph{}, vg.Points(2.2)
	legend = append(legend, legendEntry{"one seed (bars: range)", []gplot.Thumbnailer{ring}})
	title := fmt.Sprintf("MQAR recall against the state a model keeps while generating (D=%d, %d heads, %d layers, equal shapes)", e.Plan.Dim, e.Plan.Heads, e.Plan.Layers)
	if err := figure(path, title, panels, legend, 4.6*vg.Inch, 3.1*vg.Inch, 4.9*vg.Inch); err != nil {
		return err
	}
	r.Plots = append(r.Plots, path)
	return nil
}

// drawThroughput writes throughput-vs-recall.png: recall against the
// trained models' tokens/s at the tasks' contexts (a point a seed, the
// marker the task), and against each architecture's tokens/s at the long
// context (the largest task's mean recall, bars the range).
func (e *recallExperiment) drawThroughput(r *Result, o Options) error {
	path := o.plotPath("throughput-vs-recall", "")
	if path == "" {
		return nil
	}
	short := newPanel("trained models at the task's context (n = 4·pairs)", "generation tokens/s (cached, one row, log)", "held-out recall accuracy (per query)")
	short.X.Scale, short.X.Tick.Marker = gplot.LogScale{}, logCountTicker{}
	at := e.judgedPairs()
	long := newPanel(fmt.Sprintf("same architectures at a context of %d; recall at %d pairs", e.Plan.LongContext, at), "generation tokens/s (cached, one row, log)", "held-out recall accuracy (per query)")
	long.X.Scale, long.X.Tick.Marker = gplot.LogScale{}, logCountTicker{}
	var legend []legendEntry
	sLo, sHi, lLo, lHi := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for mi, m := range e.Plan.Models {
		c := tab10[mi%len(tab10)]
		var thumb gplot.Thumbnailer
		for ti, t := range e.Plan.Tasks {
			var xy plotter.XYs
			for _, run := range e.Runs {
				if run.Model.Name == m.Name && run.Task.Pairs == t.Pairs {
					xy = append(xy, plotter.XY{X: run.TokensPerS, Y: run.Accuracy})
					sLo, sHi = min(sLo, run.TokensPerS), max(sHi, run.TokensPerS)
				}
			}
			if len(xy) == 0 {
				continue
			}
			sc, err := plotter.NewScatter(xy)
			if err != nil {
				return err
			}
			sc.Color, sc.Shape, sc.Radius = c, glyphs[ti%len(glyphs)], vg.Points(3.2)
			short.Add(sc)
			if thumb == nil {
				thumb = sc
			}
		}
		if s, ok := e.sum(m.Name, at); ok && s.LongTokensPerS > 0 {
			pts := errPoints{XYs: plotter.XYs{{X: s.LongTokensPerS, Y: s.Acc}}, YErrors: plotter.YErrors{{Low: s.Acc - s.AccMin, High: s.AccMax - s.Acc}}}
			lLo, lHi = min(lLo, s.LongTokensPerS), max(lHi, s.LongTokensPerS)
			sc, err := plotter.NewScatter(pts.XYs)
			if err != nil {
				return err
			}
			sc.Color, sc.Shape, sc.Radius = c, draw.CircleGlyph{}, vg.Points(4.5)
			bars, err := plotter.NewYErrorBars(pts)
			if err != nil {
				return err
			}
			bars.Color, bars.Width, bars.CapWidth = c, vg.Points(1.2), vg.Points(6)
			long.Add(bars, sc)
		}
		dot, _ := plotter.NewScatter(plotter.XYs{{}})
		dot.Color, dot.Shape, dot.Radius = c, draw.CircleGlyph{}, vg.Points(4)
		legend = append(legend, legendEntry{m.Name, []gplot.Thumbnailer{dot}})
	}
	for ti, t := range e.Plan.Tasks {
		g, _ := plotter.NewScatter(plotter.XYs{{}})
		g.Color, g.Shape, g.Radius = color.Gray{Y: 60}, glyphs[ti%len(glyphs)], vg.Points(3.2)
		legend = append(legend, legendEntry{fmt.Sprintf("left: %d pairs (n = %d)", t.Pairs, 4*t.Pairs), []gplot.Thumbnailer{g}})
	}
	short.X.Min, short.X.Max = sLo/1.3, sHi*1.3
	panels := []*gplot.Plot{short}
	if lHi > 0 {
		long.X.Min, long.X.Max = lLo/1.3, lHi*1.3
		panels = append(panels, long)
	}
	if err := figure(path, "Generation throughput against MQAR recall, same models", panels, legend, 4.9*vg.Inch, 2.9*vg.Inch, 4.9*vg.Inch); err != nil {
		return err
	}
	r.Plots = append(r.Plots, path)
	return nil
}

// writeAtomicPNG writes img as a PNG to a temporary file beside path, then
// renames it over path.
func writeAtomicPNG(path string, img *vgimg.Canvas) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		os.Remove(f.Name())
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Chmod(f.Name(), 0o644); err != nil {
		os.Remove(f.Name())
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		os.Remove(f.Name())
		return err
	}
	return nil
}
