package graph

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	G "gorgonia.org/gorgonia"

	"github.com/qkv-dev/qkv/internal/gemm/par"
)

// RunConcurrently makes every run after the first that succeeded run
// independent ops at once, on up to workers goroutines (the caller's among
// them; 1, the default, runs them one after another, as the runs until
// one succeeds always do: that run settles which outputs are shared). A
// step runs once every step whose output it reads has run, so the values
// are the same as in order: each op writes only its own output, and qkv's
// ops and GEMM give the same bits whichever goroutine runs them. So is the
// error: that of the first failing op in topological order.
//
// Why: in a training step the input and weight gradients of every
// projection, the three projections of q, k and v, and the two branches of
// every residual connection do not wait for each other. Products too small
// to split well over the cores (a model of width 128) then still keep both
// busy.
func (m *Machine) RunConcurrently(workers int) {
	m.workers = max(workers, 1)
	if m.users != nil {
		return
	}
	index := make(map[*G.Node]int, len(m.steps))
	for i := range m.steps {
		index[m.steps[i].node] = i
	}
	m.users = make([][]int, len(m.steps))
	m.needs = make([]int32, len(m.steps))
	for i := range m.steps {
		seen := map[int]bool{}
		for _, c := range m.steps[i].in {
			if j, ok := index[c]; ok && !seen[j] {
				seen[j] = true
				m.users[j] = append(m.users[j], i)
				m.needs[i]++
			}
		}
	}
	m.pending = make([]atomic.Int32, len(m.steps))
	m.errs = make([]error, len(m.steps))
	m.ready = make(chan int, len(m.steps)+runtime.NumCPU()+workers)
}

// runConcurrently is one run of RunConcurrently's kind: workers take ready
// steps from a queue; a worker that completes a step's last input runs
// that step next itself, and queues any other step it made ready.
//
// Its error is the one the same run in order returns: that of the first
// failing step in topological order (the order of m.steps), whichever
// failed first in time. So after a step fails, the steps after it in that
// order are passed over, not run, and the steps before it still run: one
// of them may fail too, and then it is the one reported. A step before the
// lowest failure reads only steps before it, which all ran.
func (m *Machine) runConcurrently() error {
	n := len(m.steps)
	if n == 0 {
		// Nothing would ever be queued, nor the end of the run announced:
		// the workers would wait on the queue forever.
		return nil
	}
	m.failed.Store(int64(n))
	for i, k := range m.needs {
		m.pending[i].Store(k)
		if k == 0 {
			m.ready <- i
		}
	}
	var done atomic.Int64
	work := func() {
		i := m.take()
		for i >= 0 {
			if int64(i) < m.failed.Load() {
				if err := m.steps[i].runRecovering(); err != nil {
					m.errs[i] = err
					for f := m.failed.Load(); int64(i) < f && !m.failed.CompareAndSwap(f, int64(i)); f = m.failed.Load() {
					}
				}
			}
			// The worker runs the first step it readies itself: a chain of
			// ops stays on one core, with its data in that core's caches,
			// and an idle worker gets only the steps that can run beside
			// it. Queued, a chain's step was often taken by the polling
			// worker, and the next one handed to this worker, which had
			// blocked on the queue meanwhile and took 0.1-0.2 ms to wake
			// (the preset's two-core step: 19.0 -> 18.0 ms, medians of 4).
			next := -1
			for _, u := range m.users[i] {
				if m.pending[u].Add(-1) == 0 {
					if next < 0 {
						next = u
					} else {
						m.ready <- u
					}
				}
			}
			if done.Add(1) == int64(n) {
				for range m.workers {
					m.ready <- -1
				}
			}
			if next < 0 {
				next = m.take()
			}
			i = next
		}
	}
	var wg sync.WaitGroup
	for range m.workers - 1 {
		wg.Go(work)
	}
	work()
	wg.Wait()
	f := m.failed.Load()
	if f == int64(n) {
		return nil
	}
	err := m.errs[f]
	clear(m.errs) // keep no error, nor what it holds, until the next failure
	return err
}

// spinFor is how long a worker with no step to run polls for one before
// it blocks: the steps of a run follow each other microseconds apart,
// and a blocked worker's thread, idle, sleeps (on a virtual machine, its
// core halts) and takes 0.1 ms or more to wake.
const spinFor = 200 * time.Microsecond

// polling counts the workers, of every Machine, polling in take.
var polling atomic.Int32

// take returns the next ready step of the run, or -1 at its end. A worker
// with none ready polls the queue for spinFor, helping meanwhile with the
// split op of another worker's step (par.Help): the cores an op shares
// its items over are those of the run's idle workers, at once, where a
// helper goroutine of its own waits for its thread to wake. Only then
// does it block on the queue.
func (m *Machine) take() int {
	select {
	case i := <-m.ready:
		return i
	default:
	}
	// Polling takes a core: no more pollers than the cores left beside
	// one that works, so that with GOMAXPROCS above the machine's cores
	// (or on one core) the pollers do not take the working steps' time.
	for limit := int32(runtime.NumCPU() - 1); ; {
		p := polling.Load()
		if p >= limit {
			return <-m.ready
		}
		if polling.CompareAndSwap(p, p+1) {
			break
		}
	}
	since := time.Time{}
	for n := 0; ; n++ {
		select {
		case i := <-m.ready:
			polling.Add(-1)
			return i
		default:
		}
		if par.Help() {
			since = time.Time{}
			continue
		}
		// Reading the clock costs tens of nanoseconds: once in 64 polls.
		if n%64 != 0 {
			continue
		}
		if since.IsZero() {
			since = time.Now()
		} else if time.Since(since) > spinFor {
			polling.Add(-1) // a blocked worker leaves its core to another poller
			return <-m.ready
		}
	}
}

// runRecovering runs the step, returning a panic inside its op as an error,
// both naming the node: on another goroutine than RunAll's, a panic would
// not reach RunAll's recover.
func (s *step) runRecovering() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("graph: run: node %v (%v): panic: %v", s.node.Name(), s.op, r)
		}
	}()
	if err := s.run(); err != nil {
		return fmt.Errorf("graph: run: node %v (%v): %w", s.node.Name(), s.op, err)
	}
	return nil
}
