package plot

import (
	"errors"
	"fmt"
	"image/color"
	"math"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Series is one named line of a Panel: Y against X, point by point.
type Series struct {
	Name string
	X, Y []float64
}

// Panel is one chart of a Lines figure. LogX and LogY put an axis on a log
// scale, whose values must then be positive.
//
// Categories, if set, makes the x axis categorical (heads, layers): each X
// is the index of a category, 0 to len(Categories)-1, labelled with its
// name, and each series is drawn as points, side by side within a
// category, not joined by lines, which would read as a trend between
// categories that has no order.
type Panel struct {
	Title, XLabel, YLabel string
	LogX, LogY            bool
	Categories            []string
	Series                []Series
}

// seriesColors are the lines' colours, in order (matplotlib's first six).
var seriesColors = []color.Color{
	color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
	color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
	color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
	color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	color.RGBA{R: 0xff, G: 0x7f, B: 0x0e, A: 0xff},
	color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff},
}

// seriesShapes mark the points of a categorical panel's series, in order.
var seriesShapes = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.BoxGlyph{}, draw.PyramidGlyph{}, draw.RingGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}}

// Sizes of a Lines figure: each panel's tile, and the most panels a row
// holds.
const (
	linesPanelWidthPx  = 528
	linesPanelHeightPx = 442
	linesMaxCols       = 3
)

// Lines writes a PNG of panels to path, each a line chart of its series
// with a legend; title, drawn above them all, may be empty. Up to three
// panels stand side by side; more are laid out in rows of the fewest
// columns that need no more rows (four in two rows of two), so that the
// figure keeps a readable aspect (at most 1584 px wide, 528 a panel). It
// is an error if there is no panel, a panel has no series, a series has no
// point or X and Y of different lengths, or a value is not finite (or not
// positive on a log axis, or not a category's index on a categorical one).
// It is how qkv explain draws its measurements.
func Lines(path, title string, panels []Panel) error {
	if len(panels) == 0 {
		return plotErr(path, errors.New("no panels"))
	}
	plots := make([]*gplot.Plot, len(panels))
	for i, pn := range panels {
		p, err := pn.plot()
		if err != nil {
			return plotErr(path, fmt.Errorf("panel %d (%q): %w", i, pn.Title, err))
		}
		plots[i] = p
	}
	rows, cols := linesGrid(len(plots))
	grid := make([][]*gplot.Plot, rows)
	for r := range grid {
		grid[r] = make([]*gplot.Plot, cols)
		for c := range cols {
			if i := r*cols + c; i < len(plots) {
				grid[r][c] = plots[i]
			}
		}
	}
	band := titleBandHeight(title, px(32))
	img := vgimg.NewWith(vgimg.UseWH(px(float64(cols*linesPanelWidthPx)), px(float64(rows*linesPanelHeightPx))+band-px(32)), vgimg.UseDPI(plotDPI), vgimg.UseBackgroundColor(color.White))
	dc := drawTitle(draw.New(img), title, 14, band)
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Millimeter * 6, PadY: vg.Millimeter * 6, PadTop: vg.Millimeter, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	canvases := gplot.Align(grid, tiles, dc)
	for r := range grid {
		for c, p := range grid[r] {
			if p != nil {
				p.Draw(canvases[r][c])
			}
		}
	}
	return writeAtomic(path, vgimg.PngCanvas{Canvas: img})
}

// linesGrid lays n panels out in rows of at most linesMaxCols: the fewest
// rows, then the fewest columns that hold them.
func linesGrid(n int) (rows, cols int) {
	rows = (n + linesMaxCols - 1) / linesMaxCols
	cols = (n + rows - 1) / rows
	return rows, cols
}

// log10Of labels an axis that shows log10 of the data with the data
// values, placing the ticks as its Ticker does on the data.
type log10Of struct{ gplot.Ticker }

// Ticks implements plot.Ticker.
func (t log10Of) Ticks(lo, hi float64) []gplot.Tick {
	ts := t.Ticker.Ticks(math.Pow(10, lo), math.Pow(10, hi))
	for i := range ts {
		ts[i].Value = math.Log10(ts[i].Value)
	}
	return ts
}

// plot builds the panel's chart after checking its values. A log axis
// plots log10 of the values on a linear axis labelled with the values
// themselves, as the loss panel of Curves does: gonum/plot centres an axis
// label at the arithmetic mid-range, which on a log scale spanning many
// decades is near the axis's end, and pads the panel to make room for it.
func (pn Panel) plot() (*gplot.Plot, error) {
	if len(pn.Series) == 0 {
		return nil, errors.New("no series")
	}
	cat := len(pn.Categories) > 0
	p := newStyledPlot()
	p.Title.Text = pn.Title
	p.X.Label.Text, p.Y.Label.Text = pn.XLabel, pn.YLabel
	p.X.Tick.Marker, p.Y.Tick.Marker = linearAxisTicker{}, linearAxisTicker{}
	switch {
	case cat:
		var ts []gplot.Tick
		for i, name := range pn.Categories {
			ts = append(ts, gplot.Tick{Value: float64(i), Label: name})
		}
		p.X.Tick.Marker = gplot.ConstantTicks(ts)
	case pn.LogX && powersOfTwoX(pn.Series):
		p.X.Tick.Marker = log10Of{pow2Ticker{}} // H = 1, 2, 4, 8; n = 256 … 4096
	case pn.LogX:
		p.X.Tick.Marker = log10Of{logTicker{}}
	case wholeX(pn.Series):
		p.X.Tick.Marker = linearTicker{} // heads, layers, steps: no 0.5
	}
	if pn.LogY {
		p.Y.Tick.Marker = log10Of{logTicker{}}
	}
	var all []plotter.XYs
	for i, s := range pn.Series {
		if len(s.X) == 0 || len(s.X) != len(s.Y) {
			return nil, fmt.Errorf("series %q: %d x values and %d y values", s.Name, len(s.X), len(s.Y))
		}
		xy := make(plotter.XYs, len(s.X))
		for j := range s.X {
			x, y := s.X[j], s.Y[j]
			if math.IsNaN(x) || math.IsInf(x, 0) || math.IsNaN(y) || math.IsInf(y, 0) ||
				(pn.LogX && !cat && x <= 0) || (pn.LogY && y <= 0) ||
				(cat && (x != math.Trunc(x) || x < 0 || int(x) >= len(pn.Categories))) {
				return nil, fmt.Errorf("series %q: point %d (%g, %g) cannot be drawn on these axes", s.Name, j, x, y)
			}
			if pn.LogX && !cat {
				x = math.Log10(x)
			}
			if pn.LogY {
				y = math.Log10(y)
			}
			xy[j] = plotter.XY{X: x, Y: y}
		}
		c := seriesColors[i%len(seriesColors)]
		if cat {
			// Side by side within the category, a point per series.
			k := float64(len(pn.Series))
			off := (float64(i) - (k-1)/2) * math.Min(0.15, 0.6/k)
			for j := range xy {
				xy[j].X += off
			}
			points, err := glyphs(xy, c, 4.5, seriesShapes[i%len(seriesShapes)])
			if err != nil {
				return nil, fmt.Errorf("series %q: %w", s.Name, err)
			}
			p.Add(points)
			p.Legend.Add(s.Name, points)
			for _, q := range xy { // points, not joined: nothing between them
				all = append(all, plotter.XYs{q})
			}
			continue
		}
		line, points, err := plotter.NewLinePoints(xy)
		if err != nil {
			return nil, fmt.Errorf("series %q: %w", s.Name, err)
		}
		line.Color, points.Color = c, c
		line.Width = vg.Points(1.5)
		points.Radius = vg.Points(2)
		p.Add(line, points)
		p.Legend.Add(s.Name, line, points)
		all = append(all, xy)
	}
	if cat {
		p.X.Min, p.X.Max = -0.5, float64(len(pn.Categories))-0.5
		p.X.Padding = 0
	}
	if !pn.LogX || cat {
		widenNarrow(&p.X)
	}
	if !pn.LogY {
		widenNarrow(&p.Y)
	}
	if cat {
		// Points, unlike lines, sit at the frame: a margin above and below.
		r := p.Y.Max - p.Y.Min
		p.Y.Min, p.Y.Max = p.Y.Min-0.06*r, p.Y.Max+0.06*r
		if !pn.LogY && p.Y.Min < 0 && p.Y.Min+0.06*r >= 0 {
			p.Y.Min = 0 // no negative margin below a quantity that cannot be negative
		}
	}
	fx, fy := legendFraction(p)
	if placeLegendAnywhere(p, fx, fy, all...) > 0 && !pn.LogY {
		// Every place has data under it: raise the top of the linear y
		// axis so that the legend sits above the lines. (A log axis
		// spanning many decades would need a range it has no use for.)
		p.Y.Max += (fy + 0.05) / (1 - fy - 0.05) * (p.Y.Max - p.Y.Min)
		p.Legend.Top, p.Legend.YOffs = true, -px(6)
		placeLegend(p, []legendCorner{topRight, topLeft}, fx, fy, all...)
	}
	return p, nil
}

// legendFraction returns the fractions of a Lines panel's data area that
// p's legend covers across and down, measured on a probe canvas of a
// panel's size.
func legendFraction(p *gplot.Plot) (fx, fy float64) {
	probe := draw.Canvas{Rectangle: vg.Rectangle{Max: vg.Point{X: px(linesPanelWidthPx - 30), Y: px(linesPanelHeightPx - 50)}}}
	d := p.DataCanvas(probe)
	r := p.Legend.Rectangle(probe)
	w, h := float64(d.Max.X-d.Min.X), float64(d.Max.Y-d.Min.Y)
	if w <= 0 || h <= 0 {
		return 0.3, 0.25
	}
	pad := float64(px(10))
	return math.Min(1, (float64(r.Max.X-r.Min.X)+pad)/w), math.Min(1, (float64(r.Max.Y-r.Min.Y)+pad)/h)
}

// placeLegendAnywhere puts p's legend where the data in series crosses it
// least, fx by fy of the data area: in a corner if one is free (top right,
// top left, bottom right, bottom left), else at the height along the right
// or left side that is, and returns how much data crosses it there. The
// axis ranges of p must be set.
func placeLegendAnywhere(p *gplot.Plot, fx, fy float64, series ...plotter.XYs) int {
	corners := []legendCorner{topRight, topLeft, bottomRight, bottomLeft}
	best := placeLegend(p, corners, fx, fy, series...)
	if best == 0 || fy >= 0.9 {
		return best
	}
	top, left := p.Legend.Top, p.Legend.Left
	xoffs, yoffs := p.Legend.XOffs, p.Legend.YOffs
	bestTop := -1.0
	for _, l := range []bool{false, true} {
		for t := 0.95; t-fy >= 0.05; t -= 0.025 {
			if h := legendHits(p, l, t-fy, t, fx, series...); h < best {
				best, bestTop, left = h, t, l
			}
		}
	}
	if bestTop < 0 {
		p.Legend.Top, p.Legend.Left, p.Legend.XOffs, p.Legend.YOffs = top, left, xoffs, yoffs
		return best
	}
	// Top-aligned, moved down to the window's top: YOffs is in the
	// canvas the legend is drawn in, about the data area.
	probe := draw.Canvas{Rectangle: vg.Rectangle{Max: vg.Point{X: px(linesPanelWidthPx - 30), Y: px(linesPanelHeightPx - 50)}}}
	d := p.DataCanvas(probe)
	p.Legend.Top, p.Legend.Left = true, left
	p.Legend.YOffs = -vg.Length((1-bestTop)*float64(d.Max.Y-d.Min.Y)) - px(3)
	p.Legend.XOffs = -px(6)
	if left {
		p.Legend.XOffs = px(6)
	}
	return best
}

// wholeX reports whether every x of series is a whole number.
func wholeX(series []Series) bool {
	for _, s := range series {
		for _, x := range s.X {
			if x != math.Trunc(x) {
				return false
			}
		}
	}
	return true
}

// powersOfTwoX reports whether every x of series is a power of two.
func powersOfTwoX(series []Series) bool {
	for _, s := range series {
		for _, x := range s.X {
			if frac, _ := math.Frexp(x); frac != 0.5 {
				return false
			}
		}
	}
	return true
}

// widenNarrow widens a linear axis whose range is within rounding of one
// value (row sums all 1 but for 1e-16) to ±0.1% of it: the flat line is what
// the reader should see, and ticks a few ulps apart would be neither
// readable nor finitely many to step through.
func widenNarrow(ax *gplot.Axis) {
	if _, log := ax.Scale.(gplot.LogScale); log {
		return
	}
	mid := (ax.Min + ax.Max) / 2
	half := 1e-3 * max(1, math.Abs(mid))
	if ax.Max-ax.Min < 2*half*1e-3 {
		ax.Min, ax.Max = mid-half, mid+half
	}
}

// linearAxisTicker labels a linear axis of any range, fractional or not, on
// a 1-2-5 step giving 4 to 10 labels, with a minor tick between them.
type linearAxisTicker struct{}

// Ticks implements plot.Ticker.
func (linearAxisTicker) Ticks(lo, hi float64) []gplot.Tick {
	if !(hi > lo) || math.IsInf(hi-lo, 0) {
		return gplot.DefaultTicks{}.Ticks(lo, hi)
	}
	mag := math.Pow(10, math.Floor(math.Log10((hi-lo)/4)))
	step := 10 * mag
	for _, m := range []float64{1, 2, 5} {
		if (hi-lo)/(m*mag) <= 10 {
			step = m * mag
			break
		}
	}
	return multiples(lo, hi, step, true)
}
