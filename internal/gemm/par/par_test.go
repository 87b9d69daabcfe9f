package par

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// countJob counts the runs of each item and records the workers seen.
type countJob struct {
	runs    []atomic.Int32
	workers int
	bad     atomic.Int32 // items run with a worker number out of range
	nested  *countJob    // run from inside each item, if not nil
}

func (j *countJob) Item(w, i int) {
	if w < 0 || w >= j.workers {
		j.bad.Add(1)
	}
	j.runs[i].Add(1)
	if j.nested != nil {
		Run(len(j.nested.runs), j.nested.workers, j.nested)
	}
}

func newCountJob(n, workers int) *countJob {
	return &countJob{runs: make([]atomic.Int32, n), workers: workers}
}

// check fails unless every item ran exactly times times, each on a worker
// numbered below workers.
func (j *countJob) check(t *testing.T, times int) {
	t.Helper()
	for i := range j.runs {
		if got := int(j.runs[i].Load()); got != times {
			t.Fatalf("item %d ran %d times, want %d", i, got, times)
		}
	}
	if b := j.bad.Load(); b != 0 {
		t.Fatalf("%d items ran on a worker numbered outside [0, %d)", b, j.workers)
	}
}

// TestRunEveryItemOnce: every item runs once, on a worker below the
// number asked for, whatever GOMAXPROCS, the number of items and workers.
func TestRunEveryItemOnce(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 2, 4} {
		runtime.GOMAXPROCS(procs)
		for _, n := range []int{0, 1, 2, 3, 17, 1000} {
			for _, workers := range []int{1, 2, 3, 8} {
				j := newCountJob(n, workers)
				for range 50 {
					Run(n, workers, j)
				}
				j.check(t, 50)
			}
		}
	}
}

// TestRunNestedAndConcurrent: Run inside an item, and from several
// goroutines at once, runs every item once and does not deadlock.
func TestRunNestedAndConcurrent(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	var wg sync.WaitGroup
	jobs := make([]*countJob, 4)
	for g := range jobs {
		jobs[g] = newCountJob(30, 4)
		jobs[g].nested = newCountJob(5, 4)
		wg.Go(func() {
			for range 20 {
				Run(30, 4, jobs[g])
			}
		})
	}
	wg.Wait()
	for _, j := range jobs {
		j.check(t, 20)
		j.nested.check(t, 20*30)
	}
}

// sumJob adds its items' values into per-item slots.
type sumJob struct{ out []float64 }

func (j *sumJob) Item(_, i int) { j.out[i] += float64(i) }

// TestRunAllocatesNothing: running a job again, helpers and all, allocates
// nothing.
func TestRunAllocatesNothing(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	j := &sumJob{out: make([]float64, 64)}
	Run(64, 2, j)
	if a := testing.AllocsPerRun(200, func() { Run(64, 2, j) }); a != 0 {
		t.Fatalf("Run allocates %v times per call, want 0", a)
	}
}

// BenchmarkRun is the cost of sharing a job of tiny items over the cores:
// what an op pays to use them.
func BenchmarkRun(b *testing.B) {
	j := &sumJob{out: make([]float64, 8)}
	for b.Loop() {
		Run(8, Workers(), j)
	}
}
