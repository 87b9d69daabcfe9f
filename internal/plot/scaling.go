package plot

import (
	"errors"
	"fmt"
	"image/color"
	"math"
	"strconv"

	gplot "gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// ScalingSeries is how one implementation's cost grows with the sequence
// length: for each length N, the milliseconds of a step and the peak bytes.
type ScalingSeries struct {
	Name  string
	N     []float64
	Ms    []float64
	Bytes []float64
}

// Slope returns the least-squares slope of log y against log x: 2 for a
// cost that quadruples when x doubles, 1 for a linear one.
func Slope(x, y []float64) float64 {
	var sx, sy, sxx, sxy float64
	for i := range x {
		lx, ly := math.Log(x[i]), math.Log(y[i])
		sx, sy, sxx, sxy = sx+lx, sy+ly, sxx+lx*lx, sxy+lx*ly
	}
	n := float64(len(x))
	return (n*sxy - sx*sy) / (n*sxx - sx*sx)
}

// Scaling writes a PNG of two log-log panels to path: time per step and
// peak memory against the sequence length, one line per series, each
// labelled with its measured slope. The lengths are labelled at each power of
// two, times and sizes at decades or 1-2-5 steps; title, drawn above both
// panels, may be empty.
func Scaling(path, title string, series []ScalingSeries) error {
	if len(series) == 0 {
		return plotErr(path, errors.New("no series"))
	}
	for _, s := range series {
		if len(s.N) == 0 || len(s.Ms) != len(s.N) || len(s.Bytes) != len(s.N) {
			return plotErr(path, fmt.Errorf("series %q: %d lengths, %d times, %d byte counts", s.Name, len(s.N), len(s.Ms), len(s.Bytes)))
		}
		for i := range s.N {
			if !(s.N[i] > 0 && s.Ms[i] > 0 && s.Bytes[i] > 0) || math.IsInf(s.Ms[i], 0) || math.IsInf(s.Bytes[i], 0) {
				return plotErr(path, fmt.Errorf("series %q: point %d is not positive and finite", s.Name, i))
			}
		}
	}
	panels, err := scalingPanels(series)
	if err != nil {
		return plotErr(path, err)
	}
	img := vgimg.New(12*vg.Inch, 5*vg.Inch)
	dc := drawTitle(draw.New(img), title, 14, titleBandHeight(title, px(32)))
	tiles := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Millimeter * 6, PadTop: vg.Millimeter * 1, PadBottom: vg.Millimeter * 2, PadLeft: vg.Millimeter * 2, PadRight: vg.Millimeter * 4}
	canvases := gplot.Align([][]*gplot.Plot{panels}, tiles, dc)
	for i, p := range panels {
		p.Draw(canvases[0][i])
	}
	return writeAtomic(path, vgimg.PngCanvas{Canvas: img})
}

// scalingPanels builds Scaling's two panels, time and memory, from valid
// series.
func scalingPanels(series []ScalingSeries) ([]*gplot.Plot, error) {
	colors := []color.Color{
		color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff},
		color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff},
		color.RGBA{R: 0x2c, G: 0xa0, B: 0x2c, A: 0xff},
		color.RGBA{R: 0x94, G: 0x67, B: 0xbd, A: 0xff},
	}
	panel := func(title, ylabel string, y func(ScalingSeries) []float64, unit float64) (*gplot.Plot, error) {
		p := newStyledPlot()
		p.Title.Text = title
		p.X.Label.Text = "sequence length n"
		p.Y.Label.Text = ylabel
		p.X.Scale, p.Y.Scale = gplot.LogScale{}, gplot.LogScale{}
		p.X.Tick.Marker, p.Y.Tick.Marker = pow2Ticker{}, logTicker{}
		p.Legend.Top, p.Legend.Left = true, true
		p.Legend.XOffs, p.Legend.YOffs = px(6), -px(6)
		for i, s := range series {
			ys := y(s)
			xy := make(plotter.XYs, len(s.N))
			for j := range s.N {
				xy[j] = plotter.XY{X: s.N[j], Y: ys[j] / unit}
			}
			line, points, err := plotter.NewLinePoints(xy)
			if err != nil {
				return nil, err
			}
			line.Color, points.Color = colors[i%len(colors)], colors[i%len(colors)]
			line.Width = vg.Points(1.5)
			p.Add(line, points)
			label := s.Name
			if len(s.N) > 1 {
				label = fmt.Sprintf("%s (slope %.2f)", s.Name, Slope(s.N, ys))
			}
			p.Legend.Add(label, line, points)
		}
		return p, nil
	}
	tp, err := panel("time per forward + backward pass", "milliseconds", func(s ScalingSeries) []float64 { return s.Ms }, 1)
	if err != nil {
		return nil, err
	}
	mp, err := panel("peak Go heap", "MiB", func(s ScalingSeries) []float64 { return s.Bytes }, 1<<20)
	if err != nil {
		return nil, err
	}
	return []*gplot.Plot{tp, mp}, nil
}

// pow2Ticker labels a log axis of sequence lengths, which are powers of two,
// at each power of two in range (every k-th when there are more than ten).
// A range holding fewer than two powers of two is labelled as logTicker
// labels it.
type pow2Ticker struct{}

// Ticks implements plot.Ticker.
func (pow2Ticker) Ticks(min, max float64) []gplot.Tick {
	if !(min > 0) || !(max > min) || math.IsInf(max, 0) {
		return logTicker{}.Ticks(min, max)
	}
	// The slack keeps a bound that is a power of two but for rounding in.
	lo := int(math.Ceil(math.Log2(min) - 1e-9))
	hi := int(math.Floor(math.Log2(max) + 1e-9))
	if hi-lo < 1 || hi-lo > 2000 {
		return logTicker{}.Ticks(min, max)
	}
	every := (hi-lo)/10 + 1
	var ts []gplot.Tick
	for e := lo; e <= hi; e++ {
		t := gplot.Tick{Value: math.Ldexp(1, e)}
		if (e-lo)%every == 0 {
			t.Label = strconv.FormatFloat(t.Value, 'f', -1, 64)
		}
		ts = append(ts, t)
	}
	return ts
}
