package graph

import (
	"github.com/qkv-dev/qkv/internal/gemm/par"
)

// Ops share their work over the cores with internal/gemm/par's Run, in
// items fixed by the data (rows, heads, chunks), never by the
// number of workers: a sum over items is kept per item and added in item
// order, so results do not depend on GOMAXPROCS.
//
// An op on the training path keeps its job (a struct with its inputs,
// output and per-worker scratch, whose Item method computes one item) in
// its output from run to run, so that a run allocates nothing; jobOf
// returns it.

// jobOf returns buf's job of type *J, made at the op's first run; an op
// without an output of its own gets a new one.
func jobOf[J any](buf *output) *J {
	if buf == nil {
		return new(J)
	}
	if j, ok := buf.job.(*J); ok {
		return j
	}
	j := new(J)
	buf.job = j
	return j
}

// perWorker returns s with a slice of size elements for each of workers
// goroutines, reusing what s already holds.
func perWorker[T any](s [][]T, workers, size int) [][]T {
	for len(s) < workers {
		s = append(s, nil)
	}
	for w := range s[:workers] {
		if cap(s[w]) < size {
			s[w] = make([]T, size)
		}
		s[w] = s[w][:size]
	}
	return s
}

// sized returns s with n elements, all zero, reusing its array when it is
// long enough.
func sized[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// closureJob is parallel's job: work on per-worker scratch made by scratch
// at a worker's first item.
type closureJob struct {
	scratch func() any
	work    func(s any, i int)
	state   []any
	made    []bool
}

func (j *closureJob) Item(w, i int) {
	if !j.made[w] {
		j.state[w], j.made[w] = j.scratch(), true
	}
	j.work(j.state[w], i)
}

// parallel calls work(s, i) for every i in [0, n) over the cores (par.Run),
// where s is the calling worker's scratch, made by scratch. Which worker
// runs an item varies from run to run, so work must write only what item i
// owns. It allocates its closures and scratch at every call: ops on the
// training path keep a job of their own instead (jobOf).
func parallel(n int, scratch func() any, work func(s any, i int)) {
	workers := min(par.Workers(), n)
	j := &closureJob{scratch: scratch, work: work, state: make([]any, max(workers, 1)), made: make([]bool, max(workers, 1))}
	par.Run(n, workers, j)
}
