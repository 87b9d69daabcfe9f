package plot

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLines(t *testing.T) {
	path := filepath.Join(plotSampleDir(t), "lines.png")
	panels := []Panel{
		{Title: "variance", XLabel: "d_k", YLabel: "Var(q·k)", LogX: true, LogY: true, Series: []Series{
			{Name: "raw", X: []float64{4, 16, 64, 256}, Y: []float64{4.1, 15.8, 63, 260}},
			{Name: "scaled", X: []float64{4, 16, 64, 256}, Y: []float64{1.02, 0.99, 0.98, 1.01}},
		}},
		{Title: "loss", XLabel: "step", YLabel: "loss", Series: []Series{
			{Name: "a", X: []float64{0, 1, 2}, Y: []float64{0.9, 0.5, 0.25}},
		}},
	}
	if err := Lines(path, "two panels", panels); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, path, 0, 0)
}

func TestLinesErrors(t *testing.T) {
	ok := Series{Name: "ok", X: []float64{1, 2}, Y: []float64{1, 2}}
	for _, c := range []struct {
		name   string
		panels []Panel
		want   string
	}{
		{"no panels", nil, "no panels"},
		{"no series", []Panel{{Title: "p"}}, "no series"},
		{"empty series", []Panel{{Series: []Series{{Name: "e"}}}}, `series "e": 0 x values`},
		{"ragged", []Panel{{Series: []Series{{Name: "r", X: []float64{1, 2}, Y: []float64{1}}}}}, "2 x values and 1 y values"},
		{"NaN", []Panel{{Series: []Series{ok, {Name: "n", X: []float64{1}, Y: []float64{math.NaN()}}}}}, `series "n": point 0`},
		{"Inf", []Panel{{Series: []Series{{Name: "i", X: []float64{math.Inf(1)}, Y: []float64{1}}}}}, "cannot be drawn"},
		{"zero on log axis", []Panel{{LogY: true, Series: []Series{{Name: "z", X: []float64{1}, Y: []float64{0}}}}}, "cannot be drawn"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "x.png")
			err := Lines(path, "t", c.panels)
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("Lines = %v, want an error naming %s and %q", err, path, c.want)
			}
			if _, serr := os.Stat(path); !os.IsNotExist(serr) {
				t.Fatalf("a refused figure left %s behind (%v)", path, serr)
			}
		})
	}
}

// A line flat within rounding (row sums of 1 ± 1e-16) is drawn, on a range
// widened around it, and not ticked a few ulps apart.
func TestLinesFlat(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flat.png")
	one := math.Nextafter(1, 2)
	err := Lines(path, "", []Panel{{Title: "sums", Series: []Series{{Name: "sum", X: []float64{0, 1, 2}, Y: []float64{1, one, 1}}}}})
	if err != nil {
		t.Fatal(err)
	}
	checkPNG(t, path, 0, 0)
}

// A panel whose lines cross every place a legend could go gets headroom
// above them for its legend; one with a free corner keeps its range, and
// so does one free only between its lines (the legend goes there).
func TestLinesLegendHeadroom(t *testing.T) {
	var crowded Panel
	for _, y := range []float64{0, 1.5, 3, 4.5, 6, 7.5, 9} {
		crowded.Series = append(crowded.Series, Series{Name: "level", X: []float64{1, 2, 3, 4, 5}, Y: []float64{y, y, y, y, y + 0.5}})
	}
	p, err := crowded.plot()
	if err != nil {
		t.Fatal(err)
	}
	if p.Y.Max <= 9.5*1.2 {
		t.Errorf("crowded panel: y axis ends at %v, want headroom above 9.5", p.Y.Max)
	}
	free := Panel{Series: []Series{{Name: "rise", X: []float64{1, 2, 3, 4, 5}, Y: []float64{0, 1, 2, 3, 4}}}}
	if p, err = free.plot(); err != nil {
		t.Fatal(err)
	}
	if p.Y.Max != 4 {
		t.Errorf("panel with a free corner: y axis ends at %v, want 4", p.Y.Max)
	}
	// permutation-equivariance.png's exact match: curves near 1, near 0.45
	// and near 0, the corners all crossed; the axis stays within the data
	// (the old one ran to 1.5 to put the legend above it).
	between := Panel{Series: []Series{
		{Name: "decoder, learned positions", X: []float64{50, 100, 150, 200, 250, 300, 350, 400}, Y: []float64{0.06, 0.22, 0.41, 0.67, 0.84, 0.93, 0.95, 0.96}},
		{Name: "decoder, no positions", X: []float64{50, 100, 150, 200, 250, 300, 350, 400}, Y: []float64{0.01, 0.02, 0.14, 0.34, 0.43, 0.43, 0.43, 0.47}},
		{Name: "encoder–decoder, learned positions", X: []float64{50, 100, 150, 200, 250}, Y: []float64{0.05, 0.86, 0.9, 0.98, 1}},
		{Name: "encoder–decoder, no positions", X: []float64{50, 100, 150, 200, 250, 300, 350, 400}, Y: []float64{0.07, 0.06, 0.03, 0.04, 0, 0.03, 0.04, 0.02}},
	}}
	if p, err = between.plot(); err != nil {
		t.Fatal(err)
	}
	if p.Y.Max > 1.05 {
		t.Errorf("exact match panel: y axis ends at %v, want 1 (the data's top)", p.Y.Max)
	}
}

func TestPowersOfTwoX(t *testing.T) {
	if !powersOfTwoX([]Series{{X: []float64{1, 2, 4, 8, 4096}}}) || powersOfTwoX([]Series{{X: []float64{1, 3}}}) {
		t.Error("powersOfTwoX: {1 2 4 8 4096} must be, {1 3} must not be")
	}
}
