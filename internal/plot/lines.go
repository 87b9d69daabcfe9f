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
type Panel struct {
	Title, XLabel, YLabel string
	LogX, LogY            bool
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

// Lines writes a PNG of panels side by side to path, each a line chart of
// its series with a legend; title, drawn above them all, may be empty. It
// is an error if there is no panel, a panel has no series, a series has no
// point or X and Y of different lengths, or a value is not finite (or not
// positive on a log axis). It is how qkv explain draws its measurements.
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
	img := vgimg.New(vg.Length(5.5*float64(len(panels)))*vg.Inch, 4.6*vg.Inch)
	dc := drawTitle(draw.New(img), title, 14, titleBandHeight(title, px(32)))
	tiles := draw.Tiles{Rows: 1, Cols: len(plots), PadX: vg.Millimeter * 6, PadTop: vg.Millimeter, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	canvases := gplot.Align([][]*gplot.Plot{plots}, tiles, dc)
	for i, p := range plots {
		p.Draw(canvases[0][i])
	}
	return writeAtomic(path, vgimg.PngCanvas{Canvas: img})
}

// plot builds the panel's chart after checking its values.
func (pn Panel) plot() (*gplot.Plot, error) {
	if len(pn.Series) == 0 {
		return nil, errors.New("no series")
	}
	p := newStyledPlot()
	p.Title.Text = pn.Title
	p.X.Label.Text, p.Y.Label.Text = pn.XLabel, pn.YLabel
	p.X.Tick.Marker, p.Y.Tick.Marker = linearAxisTicker{}, linearAxisTicker{}
	if pn.LogX {
		p.X.Scale, p.X.Tick.Marker = gplot.LogScale{}, logTicker{}
	}
	if pn.LogY {
		p.Y.Scale, p.Y.Tick.Marker = gplot.LogScale{}, logTicker{}
	}
	switch {
	case !pn.LogX && wholeX(pn.Series):
		p.X.Tick.Marker = linearTicker{} // heads, layers, steps: no 0.5
	case pn.LogX && powersOfTwoX(pn.Series):
		p.X.Tick.Marker = pow2Ticker{} // H = 1, 2, 4, 8; n = 256 … 4096
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
				(pn.LogX && x <= 0) || (pn.LogY && y <= 0) {
				return nil, fmt.Errorf("series %q: point %d (%g, %g) cannot be drawn on these axes", s.Name, j, x, y)
			}
			xy[j] = plotter.XY{X: x, Y: y}
		}
		line, points, err := plotter.NewLinePoints(xy)
		if err != nil {
			return nil, fmt.Errorf("series %q: %w", s.Name, err)
		}
		c := seriesColors[i%len(seriesColors)]
		line.Color, points.Color = c, c
		line.Width = vg.Points(1.5)
		points.Radius = vg.Points(2)
		p.Add(line, points)
		p.Legend.Add(s.Name, line, points)
		all = append(all, xy)
	}
	for _, ax := range []*gplot.Axis{&p.X, &p.Y} {
		widenNarrow(ax)
	}
	corners := []legendCorner{topRight, topLeft, bottomRight, bottomLeft}
	if placeLegend(p, corners, all...) > 0 && !pn.LogY {
		// Every corner has data under it: raise the top of the linear y
		// axis so that the legend sits above the lines. (A log axis
		// spanning many decades would need a range it has no use for.)
		p.Y.Max += (0.1 + 0.12*float64(len(pn.Series))) * (p.Y.Max - p.Y.Min) // a line of legend a series
		placeLegend(p, corners[:2], all...)
	}
	return p, nil
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
