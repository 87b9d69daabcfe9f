package plot

import (
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Compare draws two runs' validation losses as a 900x450 PNG, and refuses
// no series, mismatched lengths and non-finite points, naming the series.
func TestCompare(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cmp.png")
	series := []LossSeries{
		{Name: "qkv", Step: []float64{250, 500, 750}, Loss: []float64{2.6, 2.3, 2.1}},
		{Name: "PyTorch 1 thread", Step: []float64{250, 500, 750}, Loss: []float64{2.65, 2.38, 2.12}},
	}
	if err := Compare(path, "a title", series); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != curvesWidthPx || b.Dy() != curvesOnePanelPx {
		t.Errorf("image %v, want %dx%d", b, curvesWidthPx, curvesOnePanelPx)
	}
	for _, c := range []struct {
		series []LossSeries
		want   string
	}{
		{nil, "no series"},
		{[]LossSeries{{Name: "short", Step: []float64{1, 2}, Loss: []float64{1}}}, `"short": 2 steps, 1 losses`},
		{[]LossSeries{{Name: "nan", Step: []float64{1}, Loss: []float64{math.NaN()}}}, `"nan": point 0 is not finite`},
	} {
		if err := Compare(filepath.Join(dir, "bad.png"), "", c.series); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want one saying %q", err, c.want)
		}
	}
}
