package par

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
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
// nothing. Each call waits for the helper goroutine it started to end: a
// helper that has not run yet when the job is over (its caller took every
// item) would otherwise still be alive at the next call, whose new helper
// the runtime then allocates instead of reusing the ended one's — the
// runtime's cost of a goroutine on a busy machine, not Run's (CI saw one
// allocation a call that way).
func TestRunAllocatesNothing(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	j := &sumJob{out: make([]float64, 64)}
	base := runtime.NumGoroutine()
	run := func() {
		Run(64, 2, j)
		for deadline := time.Now().Add(time.Second); runtime.NumGoroutine() > base && time.Now().Before(deadline); {
			runtime.Gosched()
		}
	}
	run()
	if a := testing.AllocsPerRun(200, run); a != 0 {
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

// panicJob panics in every item numbered at or above from, with a value
// naming the item.
type panicJob struct {
	from int
	ran  atomic.Int32
}

type itemPanic struct{ item int }

func (j *panicJob) Item(_, i int) {
	j.ran.Add(1)
	if i >= j.from {
		panic(itemPanic{i})
	}
}

// runRecovered runs the job and returns what Run panicked with on this
// goroutine, nil if it returned.
func runRecovered(n, workers int, job Job) (r any) {
	defer func() { r = recover() }()
	Run(n, workers, job)
	return nil
}

// TestRunPanicReachesCaller: an item that panics, on a helper or on the
// caller, makes Run panic on the calling goroutine with the item's value,
// and the package runs the next job as usual. A panic left on a helper
// goroutine would end the test binary.
func TestRunPanicReachesCaller(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, procs := range []int{1, 2, 8} {
		runtime.GOMAXPROCS(procs)
		for run := range 100 {
			for _, from := range []int{0, 1, 63} { // every item, all but the first, the last
				j := &panicJob{from: from}
				r := runRecovered(64, 8, j)
				p, ok := r.(itemPanic)
				if !ok || p.item < from {
					t.Fatalf("GOMAXPROCS %d, run %d, items from %d panic: Run panicked with %v (%T), want an itemPanic of an item >= %d", procs, run, from, r, r, from)
				}
			}
			ok := newCountJob(64, 8)
			Run(64, 8, ok)
			ok.check(t, 1)
		}
	}
}

// TestRunPanicNested: a panic in a nested Run (which runs on its caller,
// here a helper) reaches the outermost caller too.
func TestRunPanicNested(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(4))
	for range 100 {
		inner := &panicJob{from: 2}
		outer := &nestJob{inner: inner}
		if r := runRecovered(16, 4, outer); r == nil {
			t.Fatal("Run returned; want the nested item's panic")
		} else if _, ok := r.(itemPanic); !ok {
			t.Fatalf("Run panicked with %v (%T), want an itemPanic", r, r)
		}
	}
}

// nestJob runs inner from each of its items.
type nestJob struct{ inner *panicJob }

func (j *nestJob) Item(_, _ int) { Run(4, 4, j.inner) }

// waitJob's items each wait d; the first item started with block set waits
// until block is closed, recording how many items had run by then.
type waitJob struct {
	countJob
	d     time.Duration
	block chan struct{}
}

func (j *waitJob) Item(w, i int) {
	if j.block != nil && i == 0 {
		<-j.block
	}
	for s := time.Now(); time.Since(s) < j.d; {
	}
	j.countJob.Item(w, i)
}

// whoJob is a waitJob that records the worker each item ran on.
type whoJob struct {
	waitJob
	who []atomic.Int32
}

func (j *whoJob) Item(w, i int) {
	j.waitJob.Item(w, i)
	j.who[i].Store(int32(w))
}

// TestRunWhileBusy: a Run that starts while another goroutine's job holds
// the package runs its items on its caller, then, once that job is done,
// shares the rest with helpers: every item runs once, the first ones on
// the caller, later ones also on a helper.
func TestRunWhileBusy(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: no helper would run alongside")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	first := &waitJob{countJob: *newCountJob(2, 2), block: make(chan struct{})}
	done := make(chan struct{})
	epoch := pool.state.Load() >> epochShift
	go func() {
		Run(2, 2, first)
		close(done)
	}()
	// Until first's job has started: from then on it holds the package
	// until its item 0 is unblocked, whoever runs that item. Probing the
	// lock with TryLock could make first's Run find the package busy (the
	// probe holding it for an instant) and run its items without it, so
	// that nothing ever held it (CI of 22f6c46); waiting for the job to be
	// open missed it when a helper left over from an earlier test took
	// item 0 and the caller, its item 1 done, had closed the job already
	// and was waiting for that helper (CI of 9e4496b). Both spun until the
	// test binary timed out. The epoch changes when a job starts and
	// stays.
	for pool.state.Load()>>epochShift == epoch {
		runtime.Gosched()
	}
	second := &whoJob{waitJob: waitJob{countJob: *newCountJob(2000, 2), d: 20 * time.Microsecond}, who: make([]atomic.Int32, 2000)}
	var ran atomic.Int32
	go func() {
		for ran.Load() < 20 {
			ran.Store(int32(countRuns(&second.countJob)))
			runtime.Gosched()
		}
		close(first.block) // the first job ends after second has run items
	}()
	Run(2000, 2, second)
	<-done
	first.check(t, 1)
	second.check(t, 1)
	helped := 0
	for i := range second.who {
		if w := second.who[i].Load(); w != 0 {
			if i < 20 {
				t.Fatalf("item %d ran on worker %d while the package was busy, want the caller's", i, w)
			}
			helped++
		}
	}
	if helped == 0 {
		t.Error("no item ran on a helper once the package was free")
	}
}

// countRuns is how many of j's items have run.
func countRuns(j *countJob) int {
	n := 0
	for i := range j.runs {
		n += int(j.runs[i].Load())
	}
	return n
}

// TestHelp: Help takes no item with no job open, and a goroutine polling
// it takes items of the jobs another goroutine runs, which still run every
// item once.
func TestHelp(t *testing.T) {
	if Help() {
		t.Fatal("Help took an item with no job open")
	}
	if runtime.NumCPU() < 2 {
		t.Skip("one CPU: the polling goroutine would not run alongside")
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	var stop atomic.Bool
	var took atomic.Int32
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		for !stop.Load() {
			if Help() {
				took.Add(1)
			}
		}
	}()
	j := &waitJob{countJob: *newCountJob(16, 2), d: 5 * time.Microsecond}
	for range 200 {
		Run(16, 2, j)
	}
	stop.Store(true)
	<-polled
	j.check(t, 200)
	if took.Load() == 0 {
		t.Error("the goroutine polling Help took no item in 200 jobs")
	}
}
