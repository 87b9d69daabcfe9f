// Package par shares a computation's independent items over the cores
// without allocating.
//
// A training step of a small model is hundreds of ops of tens of
// microseconds each; the closures and per-goroutine scratch that each
// allocated were most of qkv's own allocations. Run allocates nothing: the
// job is an interface value the caller keeps from one call to the next,
// with its scratch. The caller computes items too, and never waits for a
// helper that has not started: items not yet taken are the caller's.
//
// Which worker runs which item varies from run to run. Callers that sum
// over items must keep one partial result per item, fixed by the data, and
// add those in order: then the result does not depend on the number of
// workers, nor on GOMAXPROCS.
//
// A panic in an item is the caller's: one on a helper goroutine is
// recovered there and raised again, with the same value, on the goroutine
// that called Run, once every helper has left the job. Otherwise it would
// end the program, out of reach of the caller's recover (graph.Machine's
// turns a panicking op into an error naming its node).
package par

import (
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Job is a computation in n independent items, numbered from 0.
type Job interface {
	// Item computes item i on the goroutine numbered worker: two items
	// with the same worker never run at once, so per-worker scratch
	// indexed by worker needs no lock.
	Item(worker, i int)
}

// Workers is how many goroutines Run shares a job among now:
// runtime.GOMAXPROCS. Callers size their per-worker scratch with it and
// pass it to Run.
func Workers() int { return runtime.GOMAXPROCS(0) }

// WorkersFor is Workers for a job of the given work (values read and
// written, or multiply-adds), or 1 below minWork: such a job runs on its
// caller alone.
func WorkersFor(work int) int {
	if work < minWork {
		return 1
	}
	return Workers()
}

// minWork is the least work worth sharing: about 20 µs of one core's. A
// helper that the operating system deschedules, on a machine busy with
// other processes, keeps the item it took until it runs again, milliseconds
// later, and the caller waits for it; a job shorter than that gains less
// from the second core than it risks, and starting a helper costs the
// caller a goroutine and often the wake of a thread. The default model's LayerNorm (768 rows of 48) is just
// above it, so that train's TestSameSeedSameLosses still splits every
// kernel.
const minWork = 1 << 15

// Run calls job.Item(w, i) once for every i in [0, n), on the calling
// goroutine and up to workers-1 helper goroutines, and returns when all
// have returned. If an item panics, items not yet started are not run, and
// Run panics on the calling goroutine with that value (the first one, if
// several items panic) once the helpers have left; every w is below
// workers, which is Workers() unless the caller wants fewer. It runs every
// item on the calling goroutine, as worker 0, when workers or n is 1 or
// less. While the package is busy with another goroutine's job it runs
// items on the caller, one by one, and opens those left to helpers as
// soon as that job is done: a job never waits for another, and two ops
// that start together (graph's Machine runs independent steps at once)
// still share the cores once the first ends. A nested Run (a GEMM inside
// a parallel item) stays on its goroutine.
func Run(n, workers int, job Job) {
	workers = min(workers, n)
	if workers <= 1 {
		for i := range n {
			job.Item(0, i)
		}
		return
	}
	for i := range n {
		if pool.mu.TryLock() {
			pool.run(i, n, min(workers, n-i), job)
			return
		}
		job.Item(0, i)
	}
}

// The state word of a job: its epoch in the high 32 bits, whether it is
// open to helpers in bit 31, and the number of helpers inside it below.
// The epoch changes with every job, so a helper started for an earlier job
// cannot join a later one by mistake.
const (
	openBit    = 1 << 31
	insideMask = openBit - 1
	epochShift = 32
)

// jobPool is the state of the package's job; mu is held by the goroutine
// whose job is running, and the job's fields are written only while no
// helper is inside it.
type jobPool struct {
	mu    sync.Mutex
	state atomic.Uint64
	job   Job
	n     int
	limit int64        // helpers numbered below limit may take items
	ids   atomic.Int64 // the last number given to a helper of this job
	next  atomic.Int64 // the next item to claim
	done  chan struct{}

	// panicked is set by the first helper of the job whose item panicked,
	// which then stores the value in recovered; run raises it again on
	// the caller once the helpers have left.
	panicked  atomic.Bool
	recovered any
}

var pool = jobPool{done: make(chan struct{}, 1)}

// run is Run from item from on, with the package's job held (it releases
// it) and workers >= 1. Each helper is a new goroutine, started without
// allocating (a static function, and the Go runtime reuses goroutines),
// rather than a worker kept waiting: a new goroutine waits in the
// caller's run queue, where the caller's own thread runs it when it has
// nothing else to do and another thread takes it when it is free. On a
// machine shared with other processes, kept workers that spun or slept
// between jobs made two cores slower than one (a worker the system
// descheduled in the middle of an item made the caller wait for it), as
// starting goroutines did not. A goroutine already running and waiting
// for work of its own (graph's Machine between steps) joins with Help,
// at once.
func (p *jobPool) run(from, n, workers int, job Job) {
	defer p.mu.Unlock()
	p.job, p.n, p.limit = job, n, int64(workers)
	p.ids.Store(0)
	p.next.Store(int64(from))
	p.panicked.Store(false)
	p.recovered = nil
	epoch := (p.state.Load() >> epochShift) + 1
	p.state.Store(epoch<<epochShift | openBit)
	for range workers - 1 {
		go Help()
	}
	p.caller()
	if p.panicked.Load() {
		// close has waited for every helper, so recovered is written
		// and read in that order.
		r := p.recovered
		p.recovered = nil
		panic(r)
	}
}

// caller computes the caller's items, and closes the job when they are
// done or one of them panics: in either case no helper is inside the job
// when it returns or the panic leaves it.
func (p *jobPool) caller() {
	defer p.close()
	p.items(0)
}

// close ends the running job: it leaves no item for helpers to claim (the
// caller's item may have panicked), closes the job to helpers that have not
// joined yet, and waits for those inside, the last of which signals done
// when it leaves. Then the next job may change the job's fields.
func (p *jobPool) close() {
	p.next.Store(int64(p.n))
	for {
		s := p.state.Load()
		if p.state.CompareAndSwap(s, s&^openBit) {
			if s&insideMask != 0 {
				p.awaitHelpers()
			}
			break
		}
	}
	p.job = nil // do not keep the caller's data alive
}

// awaitHelpers waits for the helpers inside the closed job to leave; the
// last one to leave sends on done. It polls done for up to spinFor before
// it blocks: a helper inside is on its last item, most often microseconds
// from done, and a goroutine blocked on a channel lets its thread sleep,
// which on a virtual machine takes 0.1 ms or more to wake (measured here:
// a job of 48 items of 0.3 µs took 80 µs on two cores against 11 on one,
// when the caller blocked at every job). It polls done itself, not the
// count of helpers inside: the last helper sends just after it leaves the
// count, and a caller that saw the count at zero and then blocked on done
// was woken by that send as a runnable goroutine queued behind the
// helper's (the preset's step at GOMAXPROCS=2 blocked here about ten
// times a step, each 80 to 200 µs).
func (p *jobPool) awaitHelpers() {
	start := time.Now()
	for i := 1; ; i++ {
		select {
		case <-p.done:
			return
		default:
		}
		// Reading the clock costs tens of nanoseconds: once in 64 polls.
		if i%64 == 0 && time.Since(start) > spinFor {
			break
		}
	}
	<-p.done
}

// spinFor is how long awaitHelpers polls before it blocks.
const spinFor = 100 * time.Microsecond

// items claims and computes items until none is left.
func (p *jobPool) items(worker int) {
	for {
		i := int(p.next.Add(1) - 1)
		if i >= p.n {
			return
		}
		p.job.Item(worker, i)
	}
}

// Help joins the job a Run on another goroutine has open, if there is one,
// computes items of it until none is left, and reports whether it took
// any. Run's helper goroutines run it: one that starts after its job
// closed finds it closed, or another job open, which it joins as well
// (every open job is a job to help with). It is also how a goroutine that
// waits for work of its own by polling (graph's Machine, between the steps
// of a run) lends its core to the running op: Run's own helpers are new
// goroutines, and on a virtual machine the thread that runs one, idle,
// sleeps on its core and wakes 0.1 ms or more later — after a job of tens
// of microseconds is done, so that on two cores most jobs ran on one. A
// helper's number, from 1, is taken once inside; one above the caller's
// limit (more helpers than the job wanted) takes no item.
func Help() bool {
	p := &pool
	for {
		s := p.state.Load()
		if s&openBit == 0 {
			return false
		}
		if p.state.CompareAndSwap(s, s+1) {
			break
		}
	}
	id := p.ids.Add(1)
	took := id < p.limit
	if took {
		p.helperItems(int(id))
	}
	if s := p.state.Add(^uint64(0)); s&openBit == 0 && s&insideMask == 0 {
		p.done <- struct{}{}
	}
	return took
}

// helperItems is items on a helper goroutine: a panic in an item is
// recovered and kept for the caller (the first one of the job), and the
// job's remaining items are left unclaimed, so that the caller stops too.
// Then the helper leaves the job as it would have.
func (p *jobPool) helperItems(worker int) {
	defer func() {
		if r := recover(); r != nil {
			p.next.Store(int64(p.n))
			if p.panicked.CompareAndSwap(false, true) {
				p.recovered = r
			}
		}
	}()
	p.items(worker)
}
