package decode

import (
	"sync/atomic"
	"time"
)

// A team runs each phase of a step on two cores: the phase is cut into
// units (a few panels of a weight, or a row's head of the attention), and
// the calling goroutine takes them one by one from the front, up to its
// share, the first half, while a helper goroutine takes them from the back;
// the phase ends when every unit is done. Each unit computes its outputs
// with the same calls whoever runs it, so the results do not depend on the
// split. With both cores free, each runs its share, so each reads the same
// part of every weight at every step and keeps it in its own cache; if the
// helper's thread is held up (a busy machine), the caller takes the units
// it has not claimed and waits only for one it is in the middle of.
//
// The helper is started by the first phase that needs it, and runs until
// it has had nothing to do for idleExit; then it returns (a later phase
// starts it again). So a Decoder needs no Close: one dropped mid-use keeps
// its helper, and through it its buffers, for idleExit at most, and then
// the garbage collector has them.
//
// Waiting is spin-then-block: a goroutine polls an atomic counter for up
// to spinFor (phases are microseconds apart, far less than waking a parked
// goroutine costs), then parks on a channel, so that an idle decoder, or a
// machine with no core to spare, does not have a core burnt on polling.
type team struct {
	work func(unit, who int) // runs one unit of the current phase on goroutine who: 0 the caller, 1 the helper
	// start's counter is the current phase and its unclaimed units
	// [front, back): phase<<32 | front<<16 | back, so that the helper
	// learns of a phase and its units in one read of one cache line. A
	// claim is a compare-and-swap of it, so that a helper late for a phase
	// cannot claim a unit of the next. done counts the units the helper
	// has finished.
	start, done event

	// The back-off, for a helper whose thread the machine does not run
	// promptly (other processes on its core): after a chunk of phases in
	// which the helper took no unit, or once it had taken one, took less
	// than a quarter of the units or made the caller park waiting for it,
	// the next skip chunks run on the caller alone, skip doubling from 1 to
	// maxSkip at each such chunk and back to 0 after one where it kept up.
	// units and helped count this chunk's phases from the helper's first
	// unit on: waking a parked helper takes tens of microseconds, which a
	// chunk after a back-off pays once and a busy machine at every phase.
	skip, backoff, units, helped int
	// backOff is false for a team that always splits (the tests').
	backOff bool
}

const (
	// spinFor is how long a waiting goroutine polls before it parks.
	spinFor = 50 * time.Microsecond
	// idleExit is how long a parked helper waits for a phase before it
	// returns.
	idleExit = time.Second
	// stealAfter is how long the caller, done with its share of a phase,
	// lets the helper go without finishing a unit before it takes one of
	// the helper's: some units last several microseconds.
	stealAfter = 10 * time.Microsecond
	// maxUnits bounds a phase's units, for the 16-bit fields of start's
	// counter.
	maxUnits = 1<<16 - 1
	// maxSkip bounds the back-off: a busy machine costs a chunk in
	// maxSkip+1 the split's delays at most.
	maxSkip = 64
)

// newTeam returns a team running work.
func newTeam(work func(unit, who int)) *team {
	t := &team{work: work, backOff: true}
	t.start.init(stateGone) // started by the first phase
	t.done.init(stateAwake)
	return t
}

// run runs work(u, who) for every unit u < units, units at most maxUnits, on this
// goroutine and the helper, and returns when all are done. Whatever the
// caller wrote before run, the units see, and what they wrote the caller
// sees after it (the counters' atomic operations order them).
func (t *team) run(units int) {
	// The helper's count before the phase is published: a helper still
	// in its loop of claims may take a unit as soon as it is.
	base := t.done.seq.Load()
	phase := t.start.seq.Load()>>32 + 1
	if t.start.set(phase<<32|uint64(units)) == stateGone {
		go t.serve()
	}
	// This goroutine's share is the first ⌈units/2⌉, the helper's the rest:
	// the same units, so the same weights, at every step. It goes past its
	// share only for a helper that has not started on the phase, or that
	// has made no progress for stealAfter.
	mid, mine := units-units/2, 0
	for t.claimFront(&mine, func(front, back int) bool { return front < mid || back == units }) {
	}
	last, since := t.done.seq.Load(), time.Now()
	for i := 1; ; i++ {
		d := t.done.seq.Load()
		if d >= base+uint64(units-mine) {
			break
		}
		if d != last {
			last, since = d, time.Now()
			continue
		}
		if i%64 != 0 || time.Since(since) < stealAfter {
			continue
		}
		if !t.claimFront(&mine, func(int, int) bool { return true }) {
			// Nothing left to claim: the helper is on its last units.
			t.done.wait(base+uint64(units-mine), 0, nil)
			break
		}
		since = time.Now()
	}
	if h := units - mine; h > 0 || t.helped > 0 {
		t.units += units
		t.helped += h
	}
}

// claimFront claims the first unclaimed unit and runs it, if there is one
// and ok(front, back) of the unclaimed [front, back), counting it in mine;
// it reports whether there was one to try for.
func (t *team) claimFront(mine *int, ok func(front, back int) bool) bool {
	for {
		c := t.start.seq.Load()
		front, back := int(c>>16&0xffff), int(c&0xffff)
		if front >= back || !ok(front, back) {
			return false
		}
		if t.start.seq.CompareAndSwap(c, c+1<<16) {
			t.work(front, 0)
			*mine++
			return true
		}
	}
}

// use reports whether the next chunk is split, counting down the
// back-off.
func (t *team) use() bool {
	if t.skip > 0 {
		t.skip--
		return false
	}
	t.units, t.helped, t.done.parks = 0, 0, 0
	return true
}

// judge sets the back-off after a split chunk.
func (t *team) judge() {
	if !t.backOff {
		return
	}
	if t.helped > 0 && t.done.parks == 0 && 4*t.helped >= t.units {
		t.backoff = 0
		return
	}
	t.backoff = min(max(2*t.backoff, 1), maxSkip)
	t.skip = t.backoff
}

// serve is the helper: it takes units from the back of each phase, until
// no phase has come for idleExit.
func (t *team) serve() {
	timer := time.NewTimer(idleExit)
	defer timer.Stop()
	seen := t.start.seq.Load()>>32 - 1 // the phase that started it is to be served
	for {
		if !t.start.wait((seen+1)<<32, idleExit, timer) {
			return
		}
		seen = t.start.seq.Load() >> 32
		for {
			c := t.start.seq.Load()
			front, back := int(c>>16&0xffff), int(c&0xffff)
			if front >= back {
				break
			}
			if t.start.seq.CompareAndSwap(c, c-1) {
				t.work(back-1, 1)
				t.done.signal()
			}
		}
	}
}

// The states of an event's waiter.
const (
	stateAwake  int32 = iota // polling, or busy
	stateAsleep              // parked on wake
	stateGone                // a helper that returned, or was never started
)

// event is a counter one goroutine increments (signal) and another waits
// on (wait), with the waiter's state so that the signaller knows whether to
// wake it.
type event struct {
	seq   atomic.Uint64
	state atomic.Int32
	wake  chan struct{} // one token per wake-up of a parked waiter
	parks int           // how often the waiter parked; the waiter's alone
}

func (e *event) init(state int32) {
	e.state.Store(state)
	e.wake = make(chan struct{}, 1)
}

// signal increments the counter; set sets it to v, larger. Either wakes
// the waiter if it is parked and returns its state before: stateGone asks
// the caller to start a helper.
func (e *event) signal() int32 {
	e.seq.Add(1)
	return e.wakeUp()
}

func (e *event) set(v uint64) int32 {
	e.seq.Store(v)
	return e.wakeUp()
}

// wakeUp is signal's and set's waking.
func (e *event) wakeUp() int32 {
	// A waiter stores its state before it reads the counter, which was
	// written before this read (sequentially consistent atomics): if it is
	// still awake here, it will see the new count, and the swap, a locked
	// instruction, is not needed.
	if s := e.state.Load(); s == stateAwake {
		return s
	}
	s := e.state.Swap(stateAwake)
	if s == stateAsleep {
		e.wake <- struct{}{}
	}
	return s
}

// reached reports whether the counter has reached target, modulo 2⁶⁴:
// start's counter, its phase in the upper 32 bits, wraps after 2³² phases,
// some hours of steps.
func (e *event) reached(target uint64) bool { return int64(e.seq.Load()-target) >= 0 }

// wait returns true once the counter reaches target: it polls for
// spinFor, then parks. With idle > 0 and timer, a waiter parked that long
// gives up and returns false, its state then stateGone, unless a signal
// came first.
func (e *event) wait(target uint64, idle time.Duration, timer *time.Timer) bool {
	var t0 time.Time
	for i := 0; !e.reached(target); i++ {
		// Reading the clock costs tens of nanoseconds: once in 64 polls.
		if i%64 != 0 {
			continue
		}
		if i == 0 {
			t0 = time.Now()
		} else if time.Since(t0) > spinFor {
			return e.park(target, idle, timer)
		}
	}
	return true
}

// park is wait's blocking part.
func (e *event) park(target uint64, idle time.Duration, timer *time.Timer) bool {
	e.parks++
	for {
		e.state.Store(stateAsleep)
		if e.reached(target) {
			// Reached meanwhile: take back the sleep, unless a signaller
			// saw it and sent a token, which is then consumed.
			if !e.state.CompareAndSwap(stateAsleep, stateAwake) {
				<-e.wake
			}
			return true
		}
		if idle == 0 {
			<-e.wake
		} else {
			timer.Reset(idle)
			select {
			case <-e.wake:
				timer.Stop()
			case <-timer.C:
				if e.state.CompareAndSwap(stateAsleep, stateGone) {
					return false
				}
				<-e.wake // a signal came as the timer fired
			}
		}
		if e.reached(target) {
			return true
		}
	}
}
