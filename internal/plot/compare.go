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
)

// LossSeries is one run's validation loss against the training step, for
// Compare: a qkv run beside another framework's on the same windows.
type LossSeries struct {
	Name string
	Step []float64
	Loss []float64
}

// compareColours tell the runs apart, the first in qkv's loss blue.
var compareColours = []color.Color{colLossSmooth, colVal, colExactMatch, colTokenAcc}

// Compare writes a PNG to path of each series' validation loss against the
// step, one line with a point at every evaluation, each named in the
// legend with its last loss, under title (which may be empty).
func Compare(path, title string, series []LossSeries) error {
	if len(series) == 0 {
		return plotErr(path, errors.New("no series"))
	}
	p := newStyledPlot()
	p.Title.Text = "validation loss, nats per character"
	p.X.Label.Text = "step"
	p.Y.Label.Text = "loss"
	p.X.Tick.Marker = linearTicker{}
	for i, s := range series {
		if len(s.Step) == 0 || len(s.Step) != len(s.Loss) {
			return plotErr(path, fmt.Errorf("series %q: %d steps, %d losses", s.Name, len(s.Step), len(s.Loss)))
		}
		xy := make(plotter.XYs, len(s.Step))
		for j := range xy {
			if !plotFinite(s.Loss[j]) || !plotFinite(s.Step[j]) {
				return plotErr(path, fmt.Errorf("series %q: point %d is not finite", s.Name, j))
			}
			xy[j] = plotter.XY{X: s.Step[j], Y: s.Loss[j]}
		}
		c := compareColours[i%len(compareColours)]
		line, err := styledLine(xy, 1.8, c)
		if err != nil {
			return plotErr(path, err)
		}
		line.Dashes = []vg.Length{vg.Points(float64(3 * i)), vg.Points(float64(2 * i))}
		if i == 0 {
			line.Dashes = nil
		}
		pts, err := glyphs(xy, c, 3, []draw.GlyphDrawer{draw.CircleGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}}[i%3])
		if err != nil {
			return plotErr(path, err)
		}
		p.Add(line, pts)
		last := s.Loss[len(s.Loss)-1]
		p.Legend.Add(fmt.Sprintf("%s (last %.4f nats, %.3f bits)", s.Name, last, last/math.Ln2), line, pts)
	}
	p.Legend.Top = true
	return renderPNG(path, px(curvesWidthPx), px(curvesOnePanelPx), func(dc draw.Canvas) {
		dc = drawTitle(dc, title, 15, titleBandHeight(title, px(curvesTitleBandPx)))
		canvases := gplot.Align([][]*gplot.Plot{{p}}, draw.Tiles{Rows: 1, Cols: 1, PadTop: px(6), PadBottom: px(8), PadLeft: px(10), PadRight: px(20)}, dc)
		p.Draw(canvases[0][0])
	})
}
