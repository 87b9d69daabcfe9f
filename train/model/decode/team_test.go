package decode

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// TestTeamRunsEachUnitOnce: at GOMAXPROCS 2, every unit of every phase
// runs exactly once, the caller sees what the units wrote (plain writes:
// the race detector checks the ordering), and the helper takes a share;
// also across the wrap of the phase number.
func TestTeamRunsEachUnitOnce(t *testing.T) {
	for _, first := range []uint64{0, 1<<32 - 1000} {
		testTeamRuns(t, first)
	}
}

func testTeamRuns(t *testing.T, first uint64) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	counts := make([]int, 40)
	var byHelper atomic.Int64
	tm := newTeam(func(unit, who int) {
		counts[unit]++
		if who == 1 {
			byHelper.Add(1)
		}
	})
	tm.start.seq.Store(first << 32)
	total := 0
	for phase := range 2000 {
		units := 1 + phase%len(counts)
		clear(counts)
		tm.run(units)
		total += units
		for u, c := range counts {
			if want := map[bool]int{true: 1, false: 0}[u < units]; c != want {
				t.Fatalf("from phase %d: phase %d of %d units: unit %d ran %d times", first, phase, units, u, c)
			}
		}
	}
	t.Logf("from phase %d: the helper ran %d of %d units", first, byHelper.Load(), total)
}

// TestTeamHelperExits: a helper with nothing to do returns (after idleExit,
// waited for here up to 30 s), and the next phase starts another; also
// when the phase number has just wrapped.
func TestTeamHelperExits(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	var ran atomic.Int64
	tm := newTeam(func(unit, who int) { ran.Add(1) })
	tm.start.seq.Store((1<<32 - 2) << 32) // the first phase is the last before the wrap, the second wraps
	for range 2 {
		tm.run(8)
		for deadline := time.Now().Add(30 * time.Second); tm.start.state.Load() != stateGone; {
			if time.Now().After(deadline) {
				t.Fatal("the helper did not return when idle")
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if ran.Load() != 16 {
		t.Errorf("%d units ran, want 16", ran.Load())
	}
}

// TestTeamBackOff: chunks where the helper falls behind make the team skip
// 1, 2, 4, … up to maxSkip chunks before it splits again, and one where it
// keeps up ends the back-off.
func TestTeamBackOff(t *testing.T) {
	tm := newTeam(func(unit, who int) {})
	var skips []int
	for range 9 {
		if !tm.use() {
			t.Fatal("a chunk after a back-off is not split")
		}
		tm.units, tm.helped = 100, 10 // fell behind
		tm.judge()
		n := 0
		for !tm.use() {
			n++
		}
		skips = append(skips, n)
	}
	want := []int{1, 2, 4, 8, 16, 32, 64, 64, 64}
	for i := range want {
		if skips[i] != want[i] {
			t.Fatalf("skipped %v, want %v", skips, want)
		}
	}
	tm.units, tm.helped = 100, 50
	tm.judge()
	if !tm.use() {
		t.Error("after a chunk the helper kept up, the next is not split")
	}
	tm.units, tm.helped = 0, 0 // the helper never came
	tm.judge()
	if tm.use() {
		t.Error("after a chunk the helper took no unit in, the next is split")
	}
	tm.skip = 0
	tm.units, tm.helped, tm.done.parks = 100, 50, 1 // the caller parked
	tm.judge()
	if tm.use() {
		t.Error("after a chunk the caller parked in, the next is split")
	}
	tm.skip, tm.backOff = 0, false
	tm.units, tm.helped = 100, 0
	tm.judge()
	if !tm.use() {
		t.Error("without the back-off, a chunk after one the helper missed is not split")
	}
}

// BenchmarkHandOver times a phase of two units of about 2.5 µs of
// arithmetic each (a step of nanoGPT's preset model is some twenty phases
// of about twice that): "serial" runs both on the caller, "split" hands one
// to the helper at GOMAXPROCS 2. What a hand-over costs is split's time
// less half serial's.
func BenchmarkHandOver(b *testing.B) {
	x := make([]float32, 2*2048)
	for i := range x {
		x[i] = float32(i%7) / 7
	}
	var sums [2]float32
	work := func(unit, who int) {
		var s float32 // 2048 dependent additions, about 2.5 µs
		for _, v := range x[unit*2048 : (unit+1)*2048] {
			s += v
		}
		sums[unit] = s
	}
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			work(0, 0)
			work(1, 0)
		}
	})
	b.Run("split", func(b *testing.B) {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
		var helped atomic.Int64
		tm := newTeam(func(unit, who int) {
			work(unit, who)
			if who == 1 {
				helped.Add(1)
			}
		})
		for b.Loop() {
			tm.run(2)
		}
		b.ReportMetric(float64(helped.Load())/float64(b.N), "helper-units/op")
	})
}
