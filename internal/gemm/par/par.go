// Package par shares a computation's independent items over the cores on a
// pool of worker goroutines that is started once and kept, instead of
// goroutines started for every call.
//
// A training step of a small model is hundreds of ops of tens of
// microseconds each; starting goroutines for each, and the closures and
// scratch they share, cost microseconds and allocations per op. Feeding the
// pool a job allocates nothing: the job is an interface value the caller
// keeps from one call to the next. The caller computes items too, and never
// waits for a worker that has not started: a job too short for a sleeping
// worker to wake in time runs on the caller alone.
//
// Which worker runs which item varies from run to run. Callers that sum
// over items must keep one partial result per item, fixed by the data, and
// add those in order: then the result does not depend on the number of
// workers, nor on GOMAXPROCS.
package par

import (
	"runtime"
	"sync"
	"sync/atomic"
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
// worker that the operating system deschedules, on a machine busy with
// other processes, keeps the item it took until it runs again, milliseconds
// later, and the caller waits for it; a job shorter than that gains less
// from the second core than it risks, and waking a worker costs the caller
// a system call. The default model's LayerNorm (768 rows of 48) is just
// above it, so that train's TestSameSeedSameLosses still splits every
// kernel.
const minWork = 1 << 15

// Run calls job.Item(w, i) once for every i in [0, n), on the calling
// goroutine and up to workers-1 of the pool's, and returns when all have
// returned; every w is below workers, which is Workers() unless the caller
// wants fewer. It runs every item on the calling goroutine, as worker 0,
// when workers or n is 1 or less, and when the pool is busy: with another goroutine's job, or with
// the job whose item calls Run. A job thus never waits for a pool that
// cannot serve it, and a nested Run (a GEMM inside a parallel item) stays
// on its goroutine.
func Run(n, workers int, job Job) {
	workers = min(workers, n)
	if workers <= 1 || !pool.mu.TryLock() {
		for i := range n {
			job.Item(0, i)
		}
		return
	}
	defer pool.mu.Unlock()
	pool.run(n, workers, job)
}

// spinLooks is how many times a worker that found no job looks again
// before it sleeps: a few microseconds, enough for a job that follows at
// once (the next GEMM of a layer), and no more. A worker that keeps looking
// is a busy thread, which on a machine shared with other processes takes
// CPU from them and from the caller; worse, the operating system may
// deschedule it in the middle of an item it took, and the caller waits for
// that item for milliseconds. With workers that looked for 200 µs, and with
// 50, the small models' steps took twice as long on two cores as on one
// while other processes kept the machine busy; a sleeping worker joins
// only jobs long enough to outlast its waking.
const spinLooks = 1 << 10

// The state word of the pool: the job's epoch in the high 32 bits, whether
// it is open to workers in bit 31, and the number of workers inside it
// below. The epoch changes with every job, so a worker that read the state
// of an earlier job cannot join a later one by mistake.
const (
	openBit    = 1 << 31
	insideMask = openBit - 1
	epochShift = 32
)

// workerPool is the package's one pool; mu is held by the goroutine whose
// job is running, the job's fields are written only while no worker is
// inside it.
type workerPool struct {
	mu      sync.Mutex
	state   atomic.Uint64
	job     Job
	n       int
	limit   atomic.Int64 // workers numbered below limit may join
	next    atomic.Int64 // the next item to claim
	done    chan struct{}
	workers []*worker
}

// worker is one goroutine of the pool, numbered from 1 (0 is the caller).
type worker struct {
	id     int
	asleep atomic.Bool
	wake   chan struct{}
}

var pool = workerPool{done: make(chan struct{}, 1)}

// run is Run with the pool held and workers >= 2.
func (p *workerPool) run(n, workers int, job Job) {
	for len(p.workers) < workers-1 {
		w := &worker{id: len(p.workers) + 1, wake: make(chan struct{}, 1)}
		p.workers = append(p.workers, w)
		go p.loop(w)
	}
	p.job, p.n = job, n
	p.limit.Store(int64(workers))
	p.next.Store(0)
	epoch := (p.state.Load() >> epochShift) + 1
	p.state.Store(epoch<<epochShift | openBit)
	for _, w := range p.workers[:workers-1] {
		// A worker sets asleep before its last look at the state, and the
		// state is open before this reads asleep: either it sees the job
		// or it is woken. A wake it does not need is harmless.
		if w.asleep.Load() {
			select {
			case w.wake <- struct{}{}:
			default: // a wake is already pending
			}
		}
	}
	defer p.close()
	p.items(0)
}

// close ends the running job: it leaves no item for workers to claim (the
// caller's item may have panicked), closes the job to workers that have not
// joined yet, and waits for those inside, the last of which signals done
// when it leaves. Then the next job may change the job's fields.
func (p *workerPool) close() {
	p.next.Store(int64(p.n))
	for {
		s := p.state.Load()
		if p.state.CompareAndSwap(s, s&^openBit) {
			if s&insideMask != 0 {
				<-p.done
			}
			break
		}
	}
	p.job = nil // do not keep the caller's data alive
}

// items claims and computes items until none is left.
func (p *workerPool) items(worker int) {
	for {
		i := int(p.next.Add(1) - 1)
		if i >= p.n {
			return
		}
		p.job.Item(worker, i)
	}
}

// loop is a worker's life: join the open job, if any, and compute its
// items; look for the next spinLooks times; then sleep until woken.
func (p *workerPool) loop(w *worker) {
	for {
		for looks := 0; !p.join(w); looks++ {
			if looks < spinLooks {
				continue
			}
			w.asleep.Store(true)
			if !p.join(w) {
				<-w.wake
			}
			w.asleep.Store(false)
			looks = 0
		}
	}
}

// join enters the open job, computes items and leaves, reporting whether
// there was a job to join. A worker numbered limit or above stays out: the
// caller's scratch has no room for it (GOMAXPROCS went down, or the job
// has fewer items). limit may already be the next job's when s is not the
// state any more, but then the swap fails and the worker looks again.
func (p *workerPool) join(w *worker) bool {
	for {
		s := p.state.Load()
		if s&openBit == 0 || int64(w.id) >= p.limit.Load() {
			return false
		}
		if p.state.CompareAndSwap(s, s+1) {
			break
		}
	}
	p.items(w.id)
	if s := p.state.Add(^uint64(0)); s&openBit == 0 && s&insideMask == 0 {
		p.done <- struct{}{}
	}
	return true
}
