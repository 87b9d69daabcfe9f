package plot

import (
	"cmp"
	"errors"
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/palette"
	"gonum.org/v1/plot/palette/moreland"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// CurvePoint is one training-loss measurement: the loss observed at a
// training step. Points whose Loss is NaN or infinite are skipped when
// plotting.
type CurvePoint struct {
	Step int
	Loss float64
}

// EvalPoint is one evaluation measurement taken at a training step.
// TokenAccuracy is the fraction of target tokens predicted correctly and
// ExactMatch the fraction of examples whose whole target was correct; both
// are expected to lie in [0, 1]. Points with a NaN or infinite metric are
// skipped for that metric.
type EvalPoint struct {
	Step          int
	TokenAccuracy float64
	ExactMatch    float64
	// Loss is a language model's held-out loss, drawn with the training
	// loss (same units); 0 for a task scored by its answers alone.
	Loss float64
}

// AttentionMap is the attention pattern of one head of one layer for a single
// input sequence. Weights is Sq x Sk: Weights[q][k] is how much query
// position q attends to key position k (rows are queries, and each row of a
// softmax attention map sums to 1). Values are drawn on a fixed 0..1 colour
// scale; values outside it are clamped and NaN cells are drawn grey.
//
// Hidden, nil or Sq x Sk like Weights, marks the cells a mask hid (a causal
// mask's future keys, padding): they are drawn hatched light grey, outside
// the colour scale, so that "could not look" does not read as "looked
// elsewhere" (weight 0). A hidden cell's weight must be exactly 0, as a
// mask makes it.
//
// Sink, nil or one value per query, is the share of each row an attention
// sink took (a learnable sink logit in the softmax, dropped after it, so
// that the row's weights sum to 1 less it): it is drawn as a column
// "sink" on the colour scale, left of the keys and apart from them.
// Variant, if not empty, says on a second line of the panel's title what
// the head is beyond its layer and index (its key/value head, a window, a
// sink: "kv head 0 · window 8 · sink").
type AttentionMap struct {
	Layer, Head int
	Weights     [][]float64
	Hidden      [][]bool
	Sink        []float64
	Variant     string
}

// AttentionOptions change how Attention lays a figure out.
type AttentionOptions struct {
	// MaxWidthPx, if positive, is the width the figure is made to fit, for
	// reading at a page's width (a README's 800 to 1000 px): the panels
	// share their axes, token labels on the left column and the bottom row
	// only, and the cells shrink to fit (not below 4 px, where only every
	// k-th token is labelled).
	MaxWidthPx int
}

// plotDPI is the resolution of the PNG files written by this package; sizes
// below are given in pixels and converted to points with px.
const plotDPI = 96

// px converts a size in pixels at plotDPI to a vg.Length (points).
func px(n float64) vg.Length { return vg.Length(n * 72 / plotDPI) }

// styledLine is a line through xy, width points wide, in c.
func styledLine(xy plotter.XYs, width float64, c color.Color) (*plotter.Line, error) {
	l, err := plotter.NewLine(xy)
	if err != nil {
		return nil, err
	}
	l.Width, l.Color = vg.Points(width), c
	return l, nil
}

// glyphs marks the points of xy with shape, of radius r pixels, in c.
func glyphs(xy plotter.XYs, c color.Color, r float64, shape draw.GlyphDrawer) (*plotter.Scatter, error) {
	s, err := plotter.NewScatter(xy)
	if err != nil {
		return nil, err
	}
	s.GlyphStyle = draw.GlyphStyle{Color: c, Radius: px(r), Shape: shape}
	return s, nil
}

// Figure sizes and layout limits, in pixels.
const (
	curvesWidthPx       = 900
	curvesOnePanelPx    = 450 // height with a single panel (loss or eval only)
	curvesTwoPanelsPx   = 750 // height with loss and eval panels stacked
	curvesTitleBandPx   = 36
	curvesEMAMinPoints  = 30 // add a smoothed loss line from this many points on
	curvesMaxGlyphs     = 60 // draw point markers on eval lines up to this many points
	attnMaxImageSidePx  = 4096
	attnPanelMarginPx   = 95 // estimated room around a heatmap, for the size cap
	attnColorBarBandPx  = 100
	attnTitleBandPx     = 40
	attnDataTargetPx    = 320 // preferred side of one heatmap's data area
	attnMinLabelPitchPx = 11  // minimum distance between two token labels
	attnMinDataPx       = 160 // minimum side of one heatmap's data area
	attnHatchPitchPx    = 6   // distance between the hatch lines of hidden cells
	attnHiddenKeyPx     = 50  // room below the colour bar for the key to hidden cells
	attnHiddenKeyGapPx  = 20  // from the colour bar down to that key
	attnSinkCells       = 1.5 // width of the sink column and its gap, in cells
	attnCompactPadPx    = 8   // between two panels that share their axes
	attnCompactLabelsPx = 60  // estimated room for the left column's token labels
)

// spaceLabel is how a token label shows a space: data.Vocab labels it
// '␣' (U+2423), which the plots' font lacks and would draw blank; '˽'
// (U+02FD, modifier letter shelf) is the same open box, and in the font.
const spaceLabel = "˽"

var (
	colLossRaw    = color.NRGBA{R: 31, G: 119, B: 180, A: 255}
	colLossFaint  = color.NRGBA{R: 31, G: 119, B: 180, A: 90}
	colLossSmooth = color.NRGBA{R: 8, G: 48, B: 107, A: 255}
	colVal        = color.NRGBA{R: 214, G: 39, B: 40, A: 255} // red: apart from the loss blues and the accuracy orange
	colTokenAcc   = color.NRGBA{R: 230, G: 120, B: 20, A: 255}
	colExactMatch = color.NRGBA{R: 44, G: 160, B: 44, A: 255}
	colGrid       = color.Gray{Y: 225}
	colNaN        = color.Gray{Y: 128}
	colHidden     = color.Gray{Y: 238} // outside the attention colour map, which has no greys
	colHatch      = color.Gray{Y: 170}
)

// Curves writes a PNG line chart of a training run to path, its loss a
// cross-entropy in nats per token; CurvesPer names what the loss is
// averaged over.
func Curves(path string, title string, loss []CurvePoint, eval []EvalPoint) error {
	return CurvesPer(path, title, "token", loss, eval)
}

// CurvesPer writes a PNG line chart of a training run to path. per is what
// the loss, a cross-entropy in nats, is averaged over ("token" for a toy
// task's answer tokens, "character" for a character-level language model;
// "" is "token"): the loss axis is labelled "cross-entropy (nats per
// <per>)".
//
// The upper panel, "training loss", shows the loss over steps, on a
// logarithmic y axis labelled at three losses at least when every plotted
// loss is positive (linear otherwise), densely enough over a narrow range
// (1.4, 1.6, 1.8, 2, 2.5, 3, 4 over 1.3 to 4.4) to read the losses off it;
// with many points a smoothed
// (exponential moving average) loss is drawn over the faint raw curve, and
// a language model's validation loss (EvalPoint.Loss) over both, its last
// value in nats and bits in the legend. The lower panel, "held-out
// accuracy" ("validation: next-<per> accuracy" for a language model),
// shows token accuracy and exact match over
// steps on a 0..1 axis. A panel whose series is empty is left out, so the
// image is 900x750 pixels with both panels and 900x450 with one (e.g. before
// the first evaluation). Points are sorted by step; non-finite values are
// skipped. title is drawn above the panels and may be empty.
//
// The file is written atomically: the PNG goes to a temporary file in the
// same directory, which is then renamed over path. The directory must exist.
// It is an error if there is nothing to plot.
func CurvesPer(path string, title string, per string, loss []CurvePoint, eval []EvalPoint) error {
	per = cmp.Or(per, "token")
	lossXY := make(plotter.XYs, 0, len(loss))
	for _, p := range slices.SortedStableFunc(slices.Values(loss), func(a, b CurvePoint) int { return cmp.Compare(a.Step, b.Step) }) {
		if plotFinite(p.Loss) {
			lossXY = append(lossXY, plotter.XY{X: float64(p.Step), Y: p.Loss})
		}
	}
	var accXY, emXY, valXY plotter.XYs
	for _, p := range slices.SortedStableFunc(slices.Values(eval), func(a, b EvalPoint) int { return cmp.Compare(a.Step, b.Step) }) {
		if p.Loss != 0 && plotFinite(p.Loss) {
			valXY = append(valXY, plotter.XY{X: float64(p.Step), Y: p.Loss})
		}
		if plotFinite(p.TokenAccuracy) {
			accXY = append(accXY, plotter.XY{X: float64(p.Step), Y: p.TokenAccuracy})
		}
		if plotFinite(p.ExactMatch) {
			emXY = append(emXY, plotter.XY{X: float64(p.Step), Y: p.ExactMatch})
		}
	}
	if len(lossXY) == 0 && len(accXY) == 0 && len(emXY) == 0 {
		if len(loss) == 0 && len(eval) == 0 {
			return plotErr(path, errors.New("no loss or eval points"))
		}
		return plotErr(path, errors.New("no finite loss or eval values"))
	}

	// A shared x range so that stacked panels line up step for step.
	xmin, xmax := math.Inf(1), math.Inf(-1)
	for _, s := range []plotter.XYs{lossXY, accXY, emXY, valXY} {
		for _, p := range s {
			xmin, xmax = math.Min(xmin, p.X), math.Max(xmax, p.X)
		}
	}
	if xmin == xmax {
		xmin, xmax = xmin-1, xmax+1
	}

	var panels []*plot.Plot
	var series [][]plotter.XYs // the data of each panel, for placing legends
	// Legend corners in order of preference: loss falls, so the top right is
	// usually empty; accuracies rise, so the bottom right is.
	var prefs [][]legendCorner
	if len(lossXY) > 0 {
		p, plotted, err := lossPanel(lossXY, valXY, per)
		if err != nil {
			return plotErr(path, err)
		}
		panels = append(panels, p)
		series = append(series, plotted)
		prefs = append(prefs, []legendCorner{topRight, bottomLeft, topLeft, bottomRight})
	}
	if len(accXY) > 0 || len(emXY) > 0 {
		accName := "token accuracy"
		if per != "token" {
			accName = per + " accuracy" // "character accuracy", as the axis says "per character"
		}
		p, err := evalPanel(accXY, emXY, accName)
		if err != nil {
			return plotErr(path, err)
		}
		if len(valXY) > 0 {
			p.Title.Text = "validation: next-" + per + " accuracy"
		}
		panels = append(panels, p)
		series = append(series, []plotter.XYs{accXY, emXY})
		prefs = append(prefs, []legendCorner{bottomRight, topLeft, bottomLeft, topRight})
	}
	for i, p := range panels {
		p.X.Min, p.X.Max = xmin, xmax
		p.X.Tick.Marker = linearTicker{}
		if i == len(panels)-1 {
			p.X.Label.Text = "step"
		}
		placeLegend(p, prefs[i], 0.3, 0.25, series[i]...)
	}

	heightPx := float64(curvesOnePanelPx)
	if len(panels) == 2 {
		heightPx = curvesTwoPanelsPx
	}
	return renderPNG(path, px(curvesWidthPx), px(heightPx), func(dc draw.Canvas) {
		dc = drawTitle(dc, title, 15, titleBandHeight(title, px(curvesTitleBandPx)))
		grid := make([][]*plot.Plot, len(panels))
		for i, p := range panels {
			grid[i] = []*plot.Plot{p}
		}
		tiles := draw.Tiles{
			Rows: len(panels), Cols: 1,
			PadY:   px(18),
			PadTop: px(6), PadBottom: px(8), PadLeft: px(10), PadRight: px(20),
		}
		canvases := plot.Align(grid, tiles, dc)
		for i, p := range panels {
			p.Draw(canvases[i][0])
		}
	})
}

// lossPanel builds the training-loss panel, with a language model's
// validation loss val (possibly empty) drawn over it, and returns it with
// the series as plotted; per is what the loss is averaged over ("token",
// "character"). When every loss is positive the panel plots log10(loss) on a
// linear axis labelled with the losses themselves: a log scale that, unlike
// plot.LogScale, keeps gonum/plot's layout (which centres the axis label at
// the arithmetic mid-range) from padding the panel.
func lossPanel(xy, val plotter.XYs, per string) (*plot.Plot, []plotter.XYs, error) {
	p := newStyledPlot()
	p.Title.Text = "training loss"
	p.Y.Label.Text = "cross-entropy (nats per " + cmp.Or(per, "token") + ")"
	if len(val) > 0 {
		p.Title.Text = "training and validation loss"
	}

	positive := true
	for _, q := range append(slices.Clone(xy), val...) {
		positive = positive && q.Y > 0
	}
	smoothed := emaSmooth(xy, positive)
	if positive {
		toLog := func(in plotter.XYs) plotter.XYs {
			out := make(plotter.XYs, len(in))
			for i, q := range in {
				out[i] = plotter.XY{X: q.X, Y: math.Log10(q.Y)}
			}
			return out
		}
		xy, smoothed, val = toLog(xy), toLog(smoothed), toLog(val)
	}

	raw, err := styledLine(xy, 1, colLossRaw)
	if err != nil {
		return nil, nil, err
	}
	p.Add(raw)
	if len(xy) >= curvesEMAMinPoints {
		raw.Color = colLossFaint
		smooth, err := styledLine(smoothed, 1.8, colLossSmooth)
		if err != nil {
			return nil, nil, err
		}
		p.Add(smooth)
		p.Legend.Add("loss", raw)
		p.Legend.Add("loss (EMA)", smooth)
	} else {
		raw.Width = vg.Points(1.5)
		if len(xy) <= curvesMaxGlyphs {
			pts, err := glyphs(xy, colLossRaw, 2.5, draw.CircleGlyph{})
			if err != nil {
				return nil, nil, err
			}
			p.Add(pts)
		}
		p.Legend.Add("training loss", raw)
	}

	if len(val) > 0 {
		line, err := styledLine(val, 1.8, colVal)
		if err != nil {
			return nil, nil, err
		}
		pts, err := glyphs(val, colVal, 2.5, draw.CircleGlyph{})
		if err != nil {
			return nil, nil, err
		}
		p.Add(line, pts)
		last := math.Pow(10, val[len(val)-1].Y) // val is on the log axis when positive
		if !positive {
			last = val[len(val)-1].Y
		}
		p.Legend.Add(fmt.Sprintf("validation loss (last %.3f nats, %.3f bits)", last, last/math.Ln2), line, pts)
	}
	if positive {
		p.Title.Text += " (log scale)"
		p.Y.Tick.Marker = log10Of{logTicker{}}
		if p.Y.Min == p.Y.Max {
			p.Y.Min, p.Y.Max = p.Y.Min-math.Log10(2), p.Y.Max+math.Log10(2)
		} else {
			// A little headroom so the curve does not touch the frame.
			r := p.Y.Max - p.Y.Min
			p.Y.Min, p.Y.Max = p.Y.Min-0.03*r, p.Y.Max+0.03*r
		}
	}
	return p, []plotter.XYs{xy, val}, nil
}

// evalPanel builds the token-accuracy / exact-match panel, the first
// named accName.
func evalPanel(acc, em plotter.XYs, accName string) (*plot.Plot, error) {
	p := newStyledPlot()
	p.Title.Text = "held-out accuracy"
	p.Y.Label.Text = "accuracy"
	add := func(xy plotter.XYs, name string, c color.Color, shape draw.GlyphDrawer, dashes []vg.Length) error {
		if len(xy) == 0 {
			return nil
		}
		l, err := styledLine(xy, 1.6, c)
		if err != nil {
			return err
		}
		l.Dashes = dashes
		p.Add(l)
		if len(xy) <= curvesMaxGlyphs {
			s, err := glyphs(xy, c, 3, shape)
			if err != nil {
				return err
			}
			p.Add(s)
			p.Legend.Add(name, l, s)
		} else {
			p.Legend.Add(name, l)
		}
		return nil
	}
	if err := add(acc, accName, colTokenAcc, draw.CircleGlyph{}, nil); err != nil {
		return nil, err
	}
	if err := add(em, "exact match", colExactMatch, draw.BoxGlyph{}, []vg.Length{vg.Points(5), vg.Points(2)}); err != nil {
		return nil, err
	}
	ymin, ymax := 0.0, 1.0
	for _, s := range []plotter.XYs{acc, em} {
		for _, q := range s {
			ymin, ymax = math.Min(ymin, q.Y), math.Max(ymax, q.Y)
		}
	}
	p.Y.Min, p.Y.Max = ymin, ymax
	p.Y.Tick.Marker = plot.ConstantTicks(unitTicks())
	return p, nil
}

// legendCorner is a corner of a plot's data area.
type legendCorner struct{ top, left bool }

var (
	topRight    = legendCorner{top: true}
	topLeft     = legendCorner{top: true, left: true}
	bottomRight = legendCorner{}
	bottomLeft  = legendCorner{left: true}
)

// placeLegend puts p's legend in the corner of the data area that the data
// in series crosses least, preferring corners in the order of prefs, and
// returns how much data crosses it (0: none). The legend covers fx of the
// data area's width and fy of its height. The axis ranges of p must be
// set.
func placeLegend(p *plot.Plot, prefs []legendCorner, fx, fy float64, series ...plotter.XYs) int {
	best, bestHits := prefs[0], math.MaxInt
	for _, c := range prefs {
		y0, y1 := 0.0, fy
		if c.top {
			y0, y1 = 1-fy, 1
		}
		if h := legendHits(p, c.left, y0, y1, fx, series...); h < bestHits {
			best, bestHits = c, h
		}
	}
	p.Legend.Top, p.Legend.Left = best.top, best.left
	p.Legend.XOffs, p.Legend.YOffs = -px(6), -px(6)
	if best.left {
		p.Legend.XOffs = px(6)
	}
	if !best.top {
		p.Legend.YOffs = px(6)
	}
	return bestHits
}

// legendHits counts the points of series, and samples along the segments
// between them, that fall in a legend fx of the data area wide against its
// left (or right) side, from y0 to y1 of its height (0 the bottom).
func legendHits(p *plot.Plot, left bool, y0, y1, fx float64, series ...plotter.XYs) int {
	in := func(x, y float64) bool {
		nx, ny := p.X.Norm(x), p.Y.Norm(y)
		okX := (left && nx <= fx) || (!left && nx >= 1-fx)
		return okX && ny >= y0 && ny <= y1
	}
	n := 0
	for _, xy := range series {
		for i, q := range xy {
			if in(q.X, q.Y) {
				n++
			}
			if i == 0 {
				continue
			}
			// Samples along the segment from the previous point, so
			// that a line crossing the legend counts too.
			prev := xy[i-1]
			for k := 1; k < 8; k++ {
				t := float64(k) / 8
				if in(prev.X+t*(q.X-prev.X), prev.Y+t*(q.Y-prev.Y)) {
					n++
				}
			}
		}
	}
	return n
}

// unitTicks returns ticks for a 0..1 axis: labelled every 0.2, minor every 0.1.
func unitTicks() []plot.Tick {
	var ts []plot.Tick
	for i := 0; i <= 10; i++ {
		v := float64(i) / 10
		t := plot.Tick{Value: v}
		if i%2 == 0 {
			t.Label = strconv.FormatFloat(v, 'f', 1, 64)
		}
		ts = append(ts, t)
	}
	return ts
}

// emaSmooth returns the bias-corrected exponential moving average of xy's Y
// values (in log space when logSpace is set), with a span of about 5% of the
// points.
func emaSmooth(xy plotter.XYs, logSpace bool) plotter.XYs {
	span := math.Min(math.Max(float64(len(xy))/20, 5), 200)
	beta := 1 - 2/(span+1)
	out := make(plotter.XYs, len(xy))
	s, corr := 0.0, 1.0
	for i, q := range xy {
		v := q.Y
		if logSpace {
			v = math.Log(v)
		}
		s = beta*s + (1-beta)*v
		corr *= beta
		m := s / (1 - corr)
		if logSpace {
			m = math.Exp(m)
		}
		out[i] = plotter.XY{X: q.X, Y: m}
	}
	return out
}

// newStyledPlot returns a plot with light grid lines and the fonts and legend
// layout used by Curves and Scaling.
func newStyledPlot() *plot.Plot {
	p := plot.New()
	p.Title.TextStyle.Font.Size = vg.Points(11)
	p.Title.Padding = px(4)
	g := plotter.NewGrid()
	g.Vertical.Color, g.Horizontal.Color = colGrid, colGrid
	g.Vertical.Width, g.Horizontal.Width = vg.Points(0.6), vg.Points(0.6)
	p.Add(g)
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	p.Legend.ThumbnailWidth = px(28)
	p.Legend.Padding = px(3)
	p.X.Tick.Label.Font.Size = vg.Points(10)
	p.Y.Tick.Label.Font.Size = vg.Points(10)
	p.X.Label.TextStyle.Font.Size = vg.Points(11)
	p.Y.Label.TextStyle.Font.Size = vg.Points(11)
	return p
}

// linearTicker places labelled ticks for training steps on a 1-2-5 sequence
// (4 to 10 labels, but never closer than one step) with an unlabelled minor
// tick between neighbours.
type linearTicker struct{}

// Ticks implements plot.Ticker.
func (linearTicker) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return plot.DefaultTicks{}.Ticks(lo, hi)
	}
	mag := math.Pow(10, math.Floor(math.Log10((hi-lo)/4)))
	step := mag
	for _, m := range []float64{1, 2, 5, 10} {
		if (hi-lo)/(m*mag) <= 10 {
			step = m * mag
			break
		}
	}
	// Steps are whole: no label, nor a minor tick, between two of them.
	step = math.Max(step, 1)
	return multiples(lo, hi, step, step > 1)
}

// multiples returns a labelled tick at every multiple of step in [lo, hi],
// with an unlabelled one halfway between neighbours if minor is set. Labels
// have as many decimals as step needs, so 0.1 * 3 reads "0.3".
func multiples(lo, hi, step float64, minor bool) []plot.Tick {
	decimals := max(0, -int(math.Floor(math.Log10(step)+1e-9)))
	slack := step * 1e-9 // lets in a bound that is a multiple but for rounding
	first := math.Ceil((lo - slack) / step)
	var ts []plot.Tick
	for i := first - 1; i*step <= hi+slack; i++ {
		v := i * step
		if i >= first {
			ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', decimals, 64)})
		}
		if m := v + step/2; minor && m >= lo && m <= hi {
			ts = append(ts, plot.Tick{Value: m})
		}
	}
	return ts
}

// logTicker places ticks on a log-scale axis, at least three labels whatever
// the range: on powers of ten when the range holds three (every k-th over
// many decades), else on the 1-2-5 mantissas when they give four; over a
// range narrower than that (about a decade and a half and less, a loss
// falling from 4.4 to 1.3) on the densest of the log-spaced mantissa sets
// denseMantissas that gives at most eight labels, so that 1.4 and 1.6
// stand between 1 and 2; else — a range narrower than about a factor of
// 1.5, where a log axis is nearly linear — on the multiples of the largest
// 1-2-5 step that gives three (2.22, 2.24 … for losses between 2.2 and
// 2.4). Unlabelled minor ticks go on the other integer mantissas, or on
// denseMinors'.
type logTicker struct{}

// denseMantissas are mantissa sets in [1, 10), each denser than the last
// and each spaced about evenly on a log scale, for the labels of a log axis
// spanning less than a decade or two; denseMinors are the mantissas of
// each set's minor ticks (the labelled ones among them).
var (
	denseMantissas = [][]float64{
		{1, 1.5, 2, 3, 5, 7},
		{1, 1.2, 1.4, 1.6, 1.8, 2, 2.5, 3, 4, 5, 6, 8},
		{1, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9, 2, 2.2, 2.4, 2.6, 2.8, 3, 3.5, 4, 4.5, 5, 6, 7, 8, 9},
	}
	denseMinors = [][]float64{
		{1, 1.5, 2, 3, 4, 5, 6, 7, 8, 9},
		{1, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9, 2, 2.5, 3, 3.5, 4, 4.5, 5, 6, 7, 8, 9},
		{1, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9, 2, 2.2, 2.4, 2.6, 2.8, 3, 3.5, 4, 4.5, 5, 6, 7, 8, 9},
	}
)

// logDenseMaxLabels is the most labels denseLogTicks puts on an axis.
const logDenseMaxLabels = 8

// Ticks implements plot.Ticker.
func (logTicker) Ticks(min, max float64) []plot.Tick {
	if !(min > 0) || !(max > min) || math.IsInf(max, 0) {
		return plot.DefaultTicks{}.Ticks(min, max)
	}
	lo := int(math.Floor(math.Log10(min)))
	hi := int(math.Ceil(math.Log10(max)))
	if hi-lo > 60 {
		return plot.DefaultTicks{}.Ticks(min, max)
	}
	count := func(ms []float64) int {
		n := 0
		for e := lo; e <= hi; e++ {
			for _, m := range ms {
				if v := mantissaValue(m, e); v >= min && v <= max {
					n++
				}
			}
		}
		return n
	}
	var labelled []float64
	switch {
	case count([]float64{1}) >= 3:
		labelled = []float64{1}
	case count([]float64{1, 2, 5}) >= 4:
		labelled = []float64{1, 2, 5}
	default:
		if ts := denseLogTicks(min, max, lo, hi, count); ts != nil {
			return ts
		}
		if count([]float64{1, 2, 5}) >= 3 {
			labelled = []float64{1, 2, 5}
		} else {
			return narrowTicks(min, max)
		}
	}
	every := 1
	if len(labelled) == 1 {
		every = (hi-lo)/8 + 1
	}
	minors := 9 // over many decades, minor ticks on powers of ten only
	if hi-lo > 6 {
		minors = 1
	}
	var ts []plot.Tick
	for e := lo; e <= hi; e++ {
		for m := 1; m <= minors; m++ {
			v := mantissaValue(float64(m), e)
			t := plot.Tick{Value: v}
			if slices.Contains(labelled, float64(m)) && (e-lo)%every == 0 {
				t.Label = strconv.FormatFloat(v, 'g', 6, 64)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// denseLogTicks labels [min, max], decades lo to hi, on the densest set of
// denseMantissas that gives three to logDenseMaxLabels labels (count
// counts a set's labels), with minor ticks on denseMinors' mantissas; nil
// if no set gives three to logDenseMaxLabels.
func denseLogTicks(min, max float64, lo, hi int, count func([]float64) int) []plot.Tick {
	pick := -1
	for i, ms := range denseMantissas {
		if n := count(ms); n >= 3 && n <= logDenseMaxLabels {
			pick = i
		}
	}
	if pick < 0 {
		return nil
	}
	labelled := denseMantissas[pick]
	var ts []plot.Tick
	for e := lo; e <= hi; e++ {
		for _, m := range denseMinors[pick] {
			v := mantissaValue(m, e)
			t := plot.Tick{Value: v}
			if slices.Contains(labelled, m) {
				t.Label = strconv.FormatFloat(v, 'g', 6, 64)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// mantissaValue is m·10^e, parsed from its decimal text rather than
// multiplied so that 3e-1 is the float nearest 0.3, giving clean labels.
func mantissaValue(m float64, e int) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(m, 'g', -1, 64)+"e"+strconv.Itoa(e), 64)
	return v
}

// narrowTicks labels the multiples of the largest 1-2-5 step that puts at
// least three of them in [min, max] (max > min).
func narrowTicks(min, max float64) []plot.Tick {
	e := math.Pow(10, math.Floor(math.Log10(max-min)))
	for _, step := range []float64{5 * e, 2 * e, e, e / 2, e / 5} {
		if ts := multiples(min, max, step, true); labelledCount(ts) >= 3 {
			return ts
		}
	}
	// A tenth of e is at most a tenth of the range: ten multiples at least.
	return multiples(min, max, e/10, true)
}

// labelledCount counts the ticks of ts that carry a label.
func labelledCount(ts []plot.Tick) int {
	n := 0
	for _, t := range ts {
		if !t.IsMinor() {
			n++
		}
	}
	return n
}

// Attention writes a PNG grid of attention heatmaps to path: one panel per
// map, rows are layers and columns heads (both in increasing order; a missing
// layer×head combination leaves its cell empty). Each panel, titled
// "layer L head H", shows Weights with the key tokens along the x axis and the
// query tokens down the y axis, query 0 at the top. All panels share one
// 0..1 colour scale, shown by a colour bar on the right, with a key to the
// hatched hidden cells under it when a map has some. title is drawn above
// the grid and may be empty. The image grows with the grid and the sequence
// (about 320 px per heatmap, cells of 4 to 40 px, and with very long
// sequences only every other or every k-th token labelled) and is kept
// within about 4096 px a side.
//
// tokens labels the sequence positions: every map must be
// len(tokens) x len(tokens). It is an error if tokens or maps is empty, if a
// matrix (Weights or Hidden) is ragged or does not match the token count, if
// a hidden cell's weight is not 0, or if a layer/head pair occurs twice. The
// file is written atomically like Curves.
func Attention(path string, title string, tokens []string, maps []AttentionMap) error {
	return writeNow(func(s *Set) error { return s.Attention(path, title, tokens, maps) })
}

// AttentionWith is Attention laid out as opt says.
func AttentionWith(path string, title string, tokens []string, maps []AttentionMap, opt AttentionOptions) error {
	return writeNow(func(s *Set) error { return s.AttentionWith(path, title, tokens, maps, opt) })
}

// CrossAttention is Attention for queries and keys of two sequences, as in
// an encoder–decoder's cross-attention: each map is len(queries) x
// len(keys), queries on the vertical axis and keys on the horizontal one.
func CrossAttention(path string, title string, queries, keys []string, maps []AttentionMap) error {
	return writeNow(func(s *Set) error { return s.CrossAttention(path, title, queries, keys, maps) })
}

func attentionMaps(s *Set, path string, title string, queries, keys []string, maps []AttentionMap, opt AttentionOptions) error {
	nq, nk := len(queries), len(keys)
	if nq == 0 || nk == 0 {
		return plotErr(path, errors.New("no tokens"))
	}
	if len(maps) == 0 {
		return plotErr(path, errors.New("no attention maps"))
	}
	type key struct{ layer, head int }
	seen := map[key]bool{}
	var layers, heads []int
	anyHidden, anySink := false, false
	for i, m := range maps {
		k := key{m.Layer, m.Head}
		if seen[k] {
			return plotErr(path, fmt.Errorf("map %d: duplicate layer %d head %d", i, m.Layer, m.Head))
		}
		seen[k] = true
		if err := m.check(nq, nk); err != nil {
			return plotErr(path, err)
		}
		anyHidden = anyHidden || slices.ContainsFunc(m.Hidden, func(row []bool) bool { return slices.Contains(row, true) })
		anySink = anySink || m.Sink != nil
		if !slices.Contains(layers, m.Layer) {
			layers = append(layers, m.Layer)
		}
		if !slices.Contains(heads, m.Head) {
			heads = append(heads, m.Head)
		}
	}
	slices.Sort(layers)
	slices.Sort(heads)
	// Lay the grid out and size it; a figure made to fit a width is laid
	// out again with the cells shrunk by what it overshot.
	var (
		st            heatmapStyle
		grid          [][]*plot.Plot
		tiles         draw.Tiles
		width, height vg.Length
		titleBand     vg.Length
	)
	cellCap := math.Inf(1)
	for range 4 {
		st, grid, tiles, width, height, titleBand = layoutAttention(title, queries, keys, maps, layers, heads, anySink, opt, cellCap)
		over := float64(width)*plotDPI/72 - float64(opt.MaxWidthPx)
		if opt.MaxWidthPx <= 0 || over <= 0 || st.cell <= 4 {
			break
		}
		cellCap = st.cell - over/(float64(len(heads))*st.keysWidth()) - 0.01
	}

	bar := plot.New()
	bar.Add(&plotter.ColorBar{ColorMap: attentionColorMap(), Vertical: true, Colors: 256})
	bar.HideX()
	bar.Y.Padding = 0
	bar.Y.Min, bar.Y.Max = 0, 1
	bar.Y.Tick.Marker = plot.ConstantTicks(unitTicks())
	bar.Y.Tick.Label.Font.Size = vg.Points(9)
	bar.Title.Text = "weight"
	bar.Title.TextStyle.Font.Size = vg.Points(10)
	bar.Title.Padding = px(6)

	return s.render(path, width, height, func(dc draw.Canvas) {
		dc = drawTitle(dc, title, 14, titleBand)
		gridC := draw.Crop(dc, 0, -px(attnColorBarBandPx), 0, 0)
		canvases := plot.Align(grid, tiles, gridC)
		for r := range grid {
			for c, p := range grid[r] {
				if p != nil {
					p.Draw(canvases[r][c])
				}
			}
		}
		// The colour bar: a narrow strip right of the grid, at most 340 px
		// tall, with the key to hidden cells below it if any map has
		// some; the two vertically centred together.
		band := draw.Crop(dc, dc.Max.X-dc.Min.X-px(attnColorBarBandPx), 0, 0, 0)
		var keyH vg.Length
		if anyHidden {
			keyH = px(attnHiddenKeyPx)
		}
		h := band.Max.Y - band.Min.Y
		want := min(h-px(20)-keyH, px(340))
		pad := (h - want - keyH) / 2
		barC := draw.Crop(band, px(22), -px(40), pad+keyH, -pad)
		bar.Draw(barC)
		if anyHidden {
			drawHiddenKey(dc, vg.Point{X: barC.Min.X, Y: barC.Min.Y - px(attnHiddenKeyGapPx)})
		}
	})
}

// layoutAttention builds the panels of an attention figure of maps, in
// rows of layers and columns of heads, and measures the image they need
// with cells of at most cellCap pixels.
func layoutAttention(title string, queries, keys []string, maps []AttentionMap, layers, heads []int, anySink bool, opt AttentionOptions, cellCap float64) (st heatmapStyle, grid [][]*plot.Plot, tiles draw.Tiles, width, height, titleBand vg.Length) {
	nq := len(queries)
	rows, cols := len(layers), len(heads)
	st = newHeatmapStyle(queries, keys, rows, cols, anySink, opt, cellCap)

	grid = make([][]*plot.Plot, rows)
	for r := range grid {
		grid[r] = make([]*plot.Plot, cols)
	}
	for _, m := range maps {
		r, c := slices.Index(layers, m.Layer), slices.Index(heads, m.Head)
		grid[r][c] = st.panelAt(m, r, c)
	}

	tiles = draw.Tiles{
		Rows: rows, Cols: cols,
		PadX: px(18), PadY: px(14),
		PadTop: px(4), PadBottom: px(6), PadLeft: px(8), PadRight: px(4),
	}
	if st.compact {
		tiles.PadX, tiles.PadY = px(attnCompactPadPx), px(attnCompactPadPx)
	}
	// Size the image so that every heatmap's data area is n*cell pixels
	// square: measure the room the panels need around their data areas
	// (title, tick labels, axis labels) on a probe canvas, per column and
	// row as plot.Align lays them out.
	left, right := make([]vg.Length, cols), make([]vg.Length, cols)
	below, above := make([]vg.Length, rows), make([]vg.Length, rows)
	probe := draw.Canvas{Rectangle: vg.Rectangle{Max: vg.Point{X: 10000, Y: 10000}}}
	for r, row := range grid {
		for c, p := range row {
			if p != nil {
				d := p.DataCanvas(probe)
				left[c], right[c] = max(left[c], d.Min.X-probe.Min.X), max(right[c], probe.Max.X-d.Max.X)
				below[r], above[r] = max(below[r], d.Min.Y-probe.Min.Y), max(above[r], probe.Max.Y-d.Max.Y)
			}
		}
	}
	var marginW, marginH vg.Length
	for c := range cols {
		marginW += left[c] + right[c]
	}
	for r := range rows {
		marginH += below[r] + above[r]
	}
	sideW, sideH := px(st.keysWidth()*st.cell), px(float64(nq)*st.cell)
	titleBand = titleBandHeight(title, px(attnTitleBandPx))
	width = vg.Length(cols)*sideW + marginW + vg.Length(cols-1)*tiles.PadX + tiles.PadLeft + tiles.PadRight + px(attnColorBarBandPx)
	height = vg.Length(rows)*sideH + marginH + vg.Length(rows-1)*tiles.PadY + tiles.PadTop + tiles.PadBottom + titleBand
	// Whole pixels, rounding up; the fraction is spread over the panels.
	width = px(math.Ceil(float64(width) * plotDPI / 72))
	height = px(math.Ceil(float64(height) * plotDPI / 72))

	return st, grid, tiles, width, height, titleBand
}

// check says what is wrong with m as a map of nq queries and nk keys.
func (m AttentionMap) check(nq, nk int) error {
	if len(m.Weights) != nq {
		return fmt.Errorf("layer %d head %d: %d query rows, want %d (one per token)", m.Layer, m.Head, len(m.Weights), nq)
	}
	for q, row := range m.Weights {
		if len(row) != nk {
			return fmt.Errorf("layer %d head %d: query row %d has %d keys, want %d (one per token)", m.Layer, m.Head, q, len(row), nk)
		}
	}
	if m.Sink != nil && len(m.Sink) != nq {
		return fmt.Errorf("layer %d head %d: %d sink weights, want %d (one per query)", m.Layer, m.Head, len(m.Sink), nq)
	}
	if m.Hidden == nil {
		return nil
	}
	if len(m.Hidden) != nq {
		return fmt.Errorf("layer %d head %d: Hidden has %d query rows, want %d like Weights", m.Layer, m.Head, len(m.Hidden), nq)
	}
	for q, row := range m.Hidden {
		if len(row) != nk {
			return fmt.Errorf("layer %d head %d: Hidden row %d has %d keys, want %d like Weights", m.Layer, m.Head, q, len(row), nk)
		}
		for k, hid := range row {
			// A mask gives what it hides a weight of exactly 0; anything
			// else means the mask is not the one the weights came from.
			if hid && m.Weights[q][k] != 0 {
				return fmt.Errorf("layer %d head %d: query %d key %d is hidden but has weight %g, want 0", m.Layer, m.Head, q, k, m.Weights[q][k])
			}
		}
	}
	return nil
}

// heatmapStyle is what the panels of one attention figure share: the cell
// size, the token ticks and their font, the palette, whether a sink column
// stands left of the keys, and whether the panels share their axes.
type heatmapStyle struct {
	nq, nk         int
	rows, cols     int
	cell           float64 // side of a cell, pixels
	fontPt         float64
	rotateX        bool // key labels vertical
	sink           bool // a sink column left of the keys
	compact        bool // token labels on the outer panels only
	xTicks, yTicks []plot.Tick
	pal            palette.Palette
}

// keysWidth is the width of a heatmap in cells: the keys, and the sink
// column and its gap if any.
func (st heatmapStyle) keysWidth() float64 {
	if st.sink {
		return float64(st.nk) + attnSinkCells
	}
	return float64(st.nk)
}

// newHeatmapStyle lays out a figure of rows x cols heatmaps of queries x
// keys, with a sink column if sink is set, and cells of at most cellCap
// pixels (but 4 at least).
func newHeatmapStyle(queries, keys []string, rows, cols int, sink bool, opt AttentionOptions, cellCap float64) heatmapStyle {
	nq, nk := len(queries), len(keys)
	nkw := float64(nk)
	if sink {
		nkw += attnSinkCells
	}
	// Size the cells: about attnDataTargetPx per heatmap (at least
	// attnMinDataPx for very short sequences), 14 to 40 px per cell, but at
	// least 4 px and small enough to keep the image within
	// attnMaxImageSidePx, or opt.MaxWidthPx.
	n := max(float64(nq), nkw)
	cell := math.Min(math.Max(attnDataTargetPx/n, 14), math.Max(40, attnMinDataPx/n))
	maxCellW := (float64(attnMaxImageSidePx-attnColorBarBandPx)/float64(cols) - attnPanelMarginPx) / nkw
	maxCellH := (float64(attnMaxImageSidePx-attnTitleBandPx)/float64(rows) - attnPanelMarginPx) / float64(nq)
	cell = math.Min(cell, math.Min(maxCellW, maxCellH))
	compact := opt.MaxWidthPx > 0
	if compact {
		avail := float64(opt.MaxWidthPx-attnColorBarBandPx-attnCompactLabelsPx-12) - float64(cols-1)*attnCompactPadPx - float64(cols)*4
		cell = math.Min(cell, avail/float64(cols)/nkw)
	}
	cell = math.Min(cell, cellCap)
	cell = math.Max(cell, 4)
	// Token labels: the font follows the cell size; when cells are too small
	// to label every token, label every labelEvery-th one. Key labels are
	// turned vertical when two neighbours would not fit side by side.
	fontPt := math.Min(math.Max(cell*0.55*72/plotDPI, 7), 11)
	if compact && cell >= 12 {
		fontPt = math.Max(fontPt, 8) // the labels of the outer panels alone: they may fill the pitch
	}
	labelEvery := int(math.Ceil(attnMinLabelPitchPx / cell))
	rotated := func(fontPt float64) bool {
		sty := text.Style{Font: font.From(plot.DefaultFont, vg.Points(fontPt)), Handler: plot.DefaultTextHandler}
		widthPx := func(label string) float64 {
			return float64(sty.Width(strings.ReplaceAll(label, "␣", spaceLabel))) * plotDPI / 72
		}
		for i := labelEvery; i < nk; i += labelEvery {
			// Two neighbours, each centred on its cell, touch at most (a
			// label's width holds its glyphs' side bearings: their ink
			// does not).
			if (widthPx(keys[i-labelEvery])+widthPx(keys[i]))/2 > cell*float64(labelEvery) {
				return true
			}
		}
		return false
	}
	rotateX := rotated(fontPt)
	if rotateX && compact && fontPt > 7 && !rotated(7) {
		fontPt, rotateX = 7, false // a point smaller rather than on end
	}
	st := heatmapStyle{nq: nq, nk: nk, rows: rows, cols: cols, cell: cell, fontPt: fontPt, rotateX: rotateX, sink: sink, compact: compact, pal: attentionColorMap().Palette(256)}
	label := func(i int, t string) string {
		if i%labelEvery == 0 {
			return strings.ReplaceAll(t, "␣", spaceLabel)
		}
		return ""
	}
	if sink {
		st.xTicks = append(st.xTicks, plot.Tick{Value: -attnSinkCells, Label: "sink"})
	}
	for i, t := range keys {
		st.xTicks = append(st.xTicks, plot.Tick{Value: float64(i), Label: label(i, t)})
	}
	for i, t := range queries {
		st.yTicks = append(st.yTicks, plot.Tick{Value: float64(nq - 1 - i), Label: label(i, t)})
	}
	return st
}

// panel returns the heatmap panel of m, titled "layer L head H", with
// every axis labelled.
func (st heatmapStyle) panel(m AttentionMap) *plot.Plot {
	return st.panelAt(m, st.rows-1, 0)
}

// panelAt returns the heatmap panel of m at row r and column c of the
// grid, titled "layer L head H" (and m.Variant under it). Panels that
// share their axes label the tokens on the left column and the bottom row
// only.
func (st heatmapStyle) panelAt(m AttentionMap, r, c int) *plot.Plot {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("layer %d head %d", m.Layer, m.Head)
	if m.Variant != "" {
		p.Title.Text += "\n" + m.Variant
	}
	p.Title.TextStyle.Font.Size = vg.Points(11)
	if st.compact {
		p.Title.TextStyle.Font.Size = vg.Points(math.Min(11, math.Max(8, st.fontPt+1)))
	}
	p.Title.Padding = px(6)
	colors := st.pal.Colors()
	hm := plotter.NewHeatMap(attnGrid{w: m.Weights}, st.pal)
	hm.Min, hm.Max = 0, 1
	hm.Underflow, hm.Overflow, hm.NaN = colors[0], colors[len(colors)-1], colNaN
	p.Add(hm)
	if m.Hidden != nil {
		p.Add(hiddenCells(m.Hidden))
	}
	if m.Sink != nil {
		p.Add(sinkCells{w: m.Sink, pal: st.pal})
	}
	p.X.Padding, p.Y.Padding = 0, 0
	p.X.Min, p.X.Max = -0.5, float64(st.nk)-0.5
	if st.sink {
		p.X.Min = -0.5 - attnSinkCells
	}
	p.Y.Min, p.Y.Max = -0.5, float64(st.nq)-0.5
	xTicks, yTicks := st.xTicks, st.yTicks
	xLabel, yLabel := "key", "query"
	if st.compact && r < st.rows-1 {
		xTicks, xLabel = unlabelled(xTicks), ""
	}
	if st.compact && c > 0 {
		yTicks, yLabel = unlabelled(yTicks), ""
	}
	p.X.Tick.Marker = plot.ConstantTicks(xTicks)
	p.Y.Tick.Marker = plot.ConstantTicks(yTicks)
	p.X.Tick.Label.Font.Size = vg.Points(st.fontPt)
	p.Y.Tick.Label.Font.Size = vg.Points(st.fontPt)
	if st.rotateX {
		p.X.Tick.Label.Rotation = math.Pi / 2
		p.X.Tick.Label.XAlign = draw.XRight
		p.X.Tick.Label.YAlign = draw.YCenter
	}
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	p.X.Label.TextStyle.Font.Size = vg.Points(9)
	p.Y.Label.TextStyle.Font.Size = vg.Points(9)
	p.X.Label.Padding = px(2)
	p.Y.Label.Padding = px(2)
	return p
}

// unlabelled returns ts without their labels: the tick marks alone.
func unlabelled(ts []plot.Tick) []plot.Tick {
	out := make([]plot.Tick, len(ts))
	for i, t := range ts {
		out[i] = plot.Tick{Value: t.Value}
	}
	return out
}

// sinkCells is a plotter.Plotter drawing an attention sink's share of each
// row (query-major, query 0 at the top) as a column of cells on the
// heatmap's colour scale, one cell wide, left of key 0 with half a cell of
// white between.
type sinkCells struct {
	w   []float64
	pal palette.Palette
}

// Plot implements plot.Plotter.
func (s sinkCells) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	colors := s.pal.Colors()
	x0, x1 := trX(-0.5-attnSinkCells), trX(-0.5-attnSinkCells+1)
	for q, v := range s.w {
		var col color.Color = colNaN
		if !math.IsNaN(v) {
			i := int(math.Round(math.Min(math.Max(v, 0), 1) * float64(len(colors)-1)))
			col = colors[i]
		}
		y := float64(len(s.w) - 1 - q)
		r := vg.Rectangle{Min: vg.Point{X: x0, Y: trY(y-0.5) - px(0.5)}, Max: vg.Point{X: x1, Y: trY(y+0.5) + px(0.5)}}
		c.FillPolygon(col, []vg.Point{r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}})
	}
}

// hiddenCells is a plotter.Plotter drawing, over a heatmap, the cells of an
// attention map (query-major, query 0 at the top) that a mask hid: their
// weight is 0 because the query could not look there, which the colour of a
// weight of 0 — looking elsewhere — would not say.
type hiddenCells [][]bool

// Plot implements plot.Plotter.
func (h hiddenCells) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	// Each fill reaches a hair into its neighbours so that no seam of the
	// heatmap below shows between two hidden cells.
	hair := px(0.5)
	for q, row := range h {
		y := float64(len(h) - 1 - q)
		for k, hid := range row {
			if hid {
				x := float64(k)
				drawHidden(c, vg.Rectangle{
					Min: vg.Point{X: trX(x-0.5) - hair, Y: trY(y-0.5) - hair},
					Max: vg.Point{X: trX(x+0.5) + hair, Y: trY(y+0.5) + hair},
				})
			}
		}
	}
}

// drawHidden fills r in the colour of hidden cells, hatched with lines
// rising to the right. The hatch is in phase with the canvas's origin, so
// that it runs on across neighbouring cells.
func drawHidden(c draw.Canvas, r vg.Rectangle) {
	c.FillPolygon(colHidden, []vg.Point{r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}})
	sty := draw.LineStyle{Color: colHatch, Width: px(1)}
	pitch := px(attnHatchPitchPx)
	// The lines x - y = d, d a multiple of pitch, that cross r.
	for d := vg.Length(math.Ceil(float64((r.Min.X-r.Max.Y)/pitch))) * pitch; d < r.Max.X-r.Min.Y; d += pitch {
		y0, y1 := max(r.Min.Y, r.Min.X-d), min(r.Max.Y, r.Max.X-d)
		if y1 > y0 {
			c.StrokeLine2(sty, y0+d, y0, y1+d, y1)
		}
	}
}

// drawHiddenKey draws the key to hidden cells: a hatched swatch with its top
// left corner at top and "hidden (masked)" beside it, on two lines.
func drawHiddenKey(c draw.Canvas, top vg.Point) {
	s := px(16)
	r := vg.Rectangle{Min: vg.Point{X: top.X, Y: top.Y - s}, Max: vg.Point{X: top.X + s, Y: top.Y}}
	drawHidden(c, r)
	c.StrokeLines(draw.LineStyle{Color: colHatch, Width: px(1)}, []vg.Point{r.Min, {X: r.Max.X, Y: r.Min.Y}, r.Max, {X: r.Min.X, Y: r.Max.Y}, r.Min})
	sty := text.Style{
		Color:   color.Black,
		Font:    font.From(plot.DefaultFont, vg.Points(9)),
		XAlign:  draw.XLeft,
		YAlign:  draw.YTop,
		Handler: plot.DefaultTextHandler,
	}
	c.FillText(sty, vg.Point{X: r.Max.X + px(5), Y: top.Y + px(2)}, "hidden\n(masked)")
}

// viridisControls are control colours of matplotlib's viridis colour map
// (dark purple at 0, yellow at 1); its luminance increases monotonically.
var viridisControls = []color.Color{
	color.NRGBA{0x44, 0x01, 0x54, 0xff},
	color.NRGBA{0x47, 0x2d, 0x7b, 0xff},
	color.NRGBA{0x3b, 0x52, 0x8b, 0xff},
	color.NRGBA{0x2c, 0x72, 0x8e, 0xff},
	color.NRGBA{0x21, 0x91, 0x8c, 0xff},
	color.NRGBA{0x28, 0xae, 0x80, 0xff},
	color.NRGBA{0x5e, 0xc9, 0x62, 0xff},
	color.NRGBA{0xad, 0xdc, 0x30, 0xff},
	color.NRGBA{0xfd, 0xe7, 0x25, 0xff},
}

// attentionColorMap returns the 0..1 colour map of attention heatmaps: a
// viridis-like map (neither end is white, so a weight of 1 never looks like an
// empty cell), or moreland's Kindlmann map should the controls be rejected.
func attentionColorMap() palette.ColorMap {
	cm, err := moreland.NewLuminance(viridisControls)
	if err != nil {
		cm = moreland.Kindlmann()
	}
	cm.SetMin(0)
	cm.SetMax(1)
	return cm
}

// attnGrid adapts an Sq x Sk attention matrix to plotter.GridXYZ. Column c is
// key c at x = c; grid row r is query Sq-1-r at y = r, so that query 0 is
// drawn at the top.
type attnGrid struct{ w [][]float64 }

func (g attnGrid) Dims() (c, r int)   { return len(g.w[0]), len(g.w) }
func (g attnGrid) Z(c, r int) float64 { return g.w[len(g.w)-1-r][c] }
func (g attnGrid) X(c int) float64    { return float64(c) }
func (g attnGrid) Y(r int) float64    { return float64(r) }

func plotFinite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

// plotErr wraps err as "plot: <path>: err".
func plotErr(path string, err error) error {
	return fmt.Errorf("plot: %s: %w", path, err)
}

// titleBandHeight is the height drawTitle reserves at the top of a figure:
// band for a title, a small margin without one.
func titleBandHeight(title string, band vg.Length) vg.Length {
	if title == "" {
		return px(8)
	}
	return band
}

// drawTitle draws title centred in a band at the top of dc and returns the
// canvas below the band; band is the title's height as returned by
// titleBandHeight.
func drawTitle(dc draw.Canvas, title string, sizePt float64, band vg.Length) draw.Canvas {
	if title == "" {
		return draw.Crop(dc, 0, 0, 0, -band)
	}
	sty := text.Style{
		Color:   color.Black,
		Font:    font.From(plot.DefaultFont, vg.Points(sizePt)),
		XAlign:  draw.XCenter,
		YAlign:  draw.YCenter,
		Handler: plot.DefaultTextHandler,
	}
	sty.Font.Weight = 700 // font.WeightBold; falls back to regular if unavailable
	dc.FillText(sty, vg.Point{X: dc.Center().X, Y: dc.Max.Y - band/2}, title)
	return draw.Crop(dc, 0, 0, 0, -band)
}

// renderPNG draws onto a white w x h canvas with fn and writes it to path as
// a PNG, at once.
func renderPNG(path string, w, h vg.Length, fn func(draw.Canvas)) error {
	return writeNow(func(s *Set) error { return s.render(path, w, h, fn) })
}

// render draws onto a white w x h canvas with fn and adds it to s as the
// PNG for path. gonum/plot reports some problems by panicking; those are
// returned as errors.
func (s *Set) render(path string, w, h vg.Length, fn func(draw.Canvas)) (err error) {
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(plotDPI), vgimg.UseBackgroundColor(color.White))
	func() {
		defer func() {
			if r := recover(); r != nil {
				err = plotErr(path, fmt.Errorf("render: %v", r))
			}
		}()
		fn(draw.New(img))
	}()
	if err != nil {
		return err
	}
	s.add(path, vgimg.PngCanvas{Canvas: img})
	return nil
}

// writeAtomic writes the PNG wt to path at once.
func writeAtomic(path string, wt io.WriterTo) error {
	return writeNow(func(s *Set) error { s.add(path, wt); return nil })
}
