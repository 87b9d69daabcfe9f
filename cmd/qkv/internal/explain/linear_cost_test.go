package explain

import (
	"fmt"
	"math"
	"testing"
)

// The experiment runs at the small sizes: every variant is measured at
// every length (no small length is over the memory budget), its slopes
// are finite and sane (CPU time and memory neither fall much with n nor grow much faster than n³),
// the memory of fused attention, which holds (B, H, n, n) tensors, grows
// faster than linear attention's, and a crossover is reported.
func TestLinearCostMeasures(t *testing.T) {
	r := mustRun(t, "linear-cost")
	for _, v := range linVariants {
		for _, n := range linSizes(Options{Small: true}) {
			for _, name := range []string{"ms", "cpu_ms", "peak_mib"} {
				key := fmt.Sprintf("%s_%s_n%d", v.name, name, n)
				if x, ok := r.Measured[key]; !ok || x < 0 || name == "ms" && x == 0 {
					t.Errorf("%s = %v (reported %v)", key, x, ok)
				}
			}
		}
		for _, name := range []string{"time_slope", "wall_time_slope", "memory_slope"} {
			// One pass a length, at lengths where fixed costs still
			// count: the wall time of one pass on a shared machine may
			// jump, and is only required to be finite.
			lo, hi := -0.5, 3.5
			if name == "wall_time_slope" {
				lo, hi = math.Inf(-1), math.Inf(1)
			}
			x, ok := r.Measured[v.name+"_"+name]
			if !ok || math.IsNaN(x) || x < lo || x > hi {
				t.Errorf("%s_%s = %v (reported %v), want in [%v, %v]", v.name, name, x, ok, lo, hi)
			}
		}
	}
	if f, l := r.Measured["fused_memory_slope"], r.Measured["linear_elu1_memory_slope"]; f <= l {
		t.Errorf("fused memory slope %v, not above linear attention's %v", f, l)
	}
	for _, name := range []string{"linear_taylor16", "linear_elu1"} {
		if x, ok := r.Measured[name+"_crossover_n"]; !ok || x == 0 {
			t.Errorf("%s_crossover_n = %v (reported %v), want a length or -1", name, x, ok)
		}
	}
	if r.Verdict != Holds && r.Verdict != HoldsInPart && r.Verdict != DoesNotHold {
		t.Errorf("verdict %q", r.Verdict)
	}
}

// The crossover: already at the first length, interpolated in log n
// between the lengths around it, or none.
func TestCrossoverN(t *testing.T) {
	ns := []float64{256, 512, 1024, 2048}
	flash := []float64{1, 4, 16, 64}
	if x := crossoverN(ns, []float64{0.5, 1, 2, 4}, ns, flash); !x.already || x.n != 256 {
		t.Errorf("faster everywhere: %+v", x)
	}
	// The ratio is 4 at 512 and 1/4 at 1024: equal halfway in log n.
	if x := crossoverN(ns, []float64{16, 16, 4, 4}, ns, flash); x.already || math.Abs(x.n-math.Sqrt(512*1024)) > 1e-9 || x.lastRatio != 1.0/16 {
		t.Errorf("crossing between 512 and 1024: %+v, want n = %v", x, math.Sqrt(512*1024))
	}
	if x := crossoverN(ns, []float64{2, 8, 32, 128}, ns[:3], flash[:3]); x.n != -1 || x.lastN != 1024 || x.lastRatio != 2 {
		t.Errorf("slower everywhere: %+v", x)
	}
}

// The verdict follows the slopes and the crossover.
func TestLinearParts(t *testing.T) {
	good := func() (map[string]*linSeries, map[string]crossover) {
		s := map[string]*linSeries{
			"linear_taylor16": {slopes: costSlopes{time: 1, memory: 1}},
			"linear_elu1":     {slopes: costSlopes{time: 1.1, memory: 0.9}},
			"composed":        {slopes: costSlopes{time: 2, memory: 2}},
			"fused":           {slopes: costSlopes{time: 1.9, memory: 2}},
			"flash":           {slopes: costSlopes{time: 2, memory: 1}},
			"flash_window":    {slopes: costSlopes{time: 1, memory: 1}},
		}
		return s, map[string]crossover{"linear_taylor16": {n: 1500}, "linear_elu1": {n: 256, already: true}}
	}
	s, c := good()
	if p, failed := linearParts(s, c); len(failed) > 0 {
		t.Errorf("good slopes: %v failed", failed)
	} else if h, v := verdict(p...); !h {
		t.Errorf("good slopes: %q", v)
	}
	for name, change := range map[string]func(map[string]*linSeries, map[string]crossover){
		"quadratic linear":    func(s map[string]*linSeries, _ map[string]crossover) { s["linear_elu1"].slopes.time = 2 },
		"linear fused memory": func(s map[string]*linSeries, _ map[string]crossover) { s["fused"].slopes.memory = 1 },
		"quadratic flash":     func(s map[string]*linSeries, _ map[string]crossover) { s["flash"].slopes.memory = 2 },
		"window not linear":   func(s map[string]*linSeries, _ map[string]crossover) { s["flash_window"].slopes.time = 2 },
		"never faster":        func(_ map[string]*linSeries, c map[string]crossover) { c["linear_taylor16"] = crossover{n: -1} },
		"nothing measured, NaN": func(s map[string]*linSeries, _ map[string]crossover) {
			s["composed"].slopes = costSlopes{math.NaN(), 0, math.NaN()}
		},
	} {
		s, c := good()
		change(s, c)
		p, failed := linearParts(s, c)
		if h, v := verdict(p...); h || v != HoldsInPart || len(failed) != 1 {
			t.Errorf("%s: verdict %q, failed %v; want %q and one failure", name, v, failed, HoldsInPart)
		}
	}
}
