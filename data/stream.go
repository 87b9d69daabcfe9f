package data

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
)

// The second PCG seeds of the test set and of the training stream. Separate
// PCG streams keep the test set independent of how many training examples
// are drawn, and a larger test set extends a smaller one drawn from the same
// seed rather than replacing it.
const (
	testPCGStream  = 0x7465_7374 // "test"
	trainPCGStream = 0x7472_6e00 // "trn"
)

// maxTestDraws bounds the draws spent finding nTest distinct test prompts, at
// this many per wanted prompt, so that a test set too large a share of an
// unevenly sampled task fails instead of spinning.
const maxTestDraws = 1000

// maxNextDraws bounds the draws Next spends skipping test prompts for one
// training example. NewStream keeps the training share of draws at least
// minTrainShare, so a built-in task exceeds it with probability below
// e^-1000; the bound is for a Task of another package whose generator keeps
// returning test prompts, which would otherwise hang Next.
const maxNextDraws = 1 << 20

// minTrainShare is the smallest share of a task's draws that may remain for
// training once the test prompts are skipped: below it Next would spend over
// a thousand draws per training example, a hang in practice.
const minTrainShare = 1e-3

// Caps on the sizes the stream functions allocate for. They keep a mistyped
// size (a negative number read as unsigned, 1<<40) an error naming the
// parameter instead of a crash or an out-of-memory kill, and lie far above
// what training on these tasks uses (a test set of hundreds, batches of
// tens).
const (
	// MaxTestSize bounds the held-out set of NewStream.
	// Finding it takes up to maxTestDraws draws per prompt, so the bound
	// also keeps a failing NewStream to seconds.
	MaxTestSize = 1 << 16
	// MaxExamples bounds the examples one call returns or lays out:
	// Stream.Draw and Take, MakeBatch, BatchFor
	// and Batch.PadRows rows.
	MaxExamples = 1 << 18
)

// Stream is a task's held-out test set together with an endless stream of
// training examples that never repeats a test prompt. Both are determined by
// the seed: the same task, seed and test size give the same test set and the
// same training sequence, bit for bit. A Stream is not safe for concurrent
// use. Make one with NewStream: the methods of a nil or zero Stream return
// errors, or nothing where they return no error.
type Stream struct {
	task  Task
	seed  uint64
	test  []Example
	held  map[string]struct{}
	pcg   *rand.PCG
	rng   *rand.Rand
	drawn uint64
	key   []byte // next's scratch: a drawn example's promptKey
	arena intArena
}

// arenaGenerator is a Task that can generate an example into slices of an
// intArena: a training batch then costs a few allocations instead of one
// or more per example.
type arenaGenerator interface {
	generateIn(rng *rand.Rand, a *intArena) Example
}

// intArena hands out int slices carved from blocks it allocates. Each slice
// is capped at its length, so that an append to it reallocates rather than
// writing into the next; a block is never reused, so an example stays valid
// for as long as its holder keeps it.
type intArena struct{ free []int }

// arenaBlock is how many ints an arena allocates at a time: a few batches
// of the toy tasks' examples.
const arenaBlock = 4096

// ints returns a slice of n zeros from a, or a new one for a nil arena.
func (a *intArena) ints(n int) []int {
	if a == nil {
		return make([]int, n)
	}
	if len(a.free) < n {
		a.free = make([]int, max(n, arenaBlock))
	}
	s := a.free[:n:n]
	a.free = a.free[n:]
	return s
}

// NewStream draws a test set of nTest distinct examples (distinct prompts)
// from seed and returns the training stream that excludes them. nTest may be
// 0 (no held-out set). It fails, with an error naming test_size, if nTest is
// negative or above MaxTestSize, if the task has no more than nTest distinct
// prompts (so that disjoint training data would be impossible) or fewer that
// may be held out (sort keeps its constant prompts in training), or if the
// prompts left for training would be drawn less than once in 1/minTrainShare
// draws.
func NewStream(t Task, seed uint64, nTest int) (*Stream, error) {
	if t == nil {
		return nil, fmt.Errorf("data: new stream: nil task")
	}
	name := t.Name()
	if t.Vocab().usable() != nil {
		return nil, fmt.Errorf("data: task %q: new stream: the task has no vocabulary", name)
	}
	if nTest < 0 {
		return nil, fmt.Errorf("data: task %q: test_size must not be negative, got %d", name, nTest)
	}
	space := t.NumPrompts()
	if !(space >= 1) { // also NaN, from a Task of another package
		return nil, fmt.Errorf("data: task %q: new stream: the task reports %v distinct prompts, want at least 1", name, space)
	}
	if float64(nTest) >= space {
		return nil, fmt.Errorf("data: task %q: test_size %d leaves no prompt for training: the task has only %.0f distinct prompts (%v); lower test_size below %.0f or enlarge the task", name, nTest, space, t.Params(), space)
	}
	if nTest > MaxTestSize {
		return nil, fmt.Errorf("data: task %q: test_size %d is too large (at most %d)", name, nTest, MaxTestSize)
	}
	if h, ok := t.(holdCounter); ok {
		if n := h.numHoldable(); float64(nTest) > n {
			return nil, fmt.Errorf("data: task %q: test_size %d is more than the %.0f prompts that may be held out: of its %.0f distinct prompts, the %.0f whose answer no other prompt teaches stay in training (%v); lower test_size to at most %.0f", name, nTest, n, space, space-n, t.Params(), n)
		}
	}
	s := &Stream{task: t, seed: seed, held: make(map[string]struct{}, nTest)}
	if h, ok := t.(heldOutPart); ok {
		test, err := h.heldOut(nTest)
		if err != nil {
			return nil, err
		}
		s.test = test
		s.pcg = rand.NewPCG(seed, trainPCGStream)
		s.rng = rand.New(s.pcg)
		return s, nil
	}
	testRNG := rand.New(rand.NewPCG(seed, testPCGStream))
	limit := maxTestDraws * (nTest + 1)
	for draws := 0; len(s.test) < nTest; draws++ {
		if draws == limit {
			return nil, fmt.Errorf("data: task %q: test_size %d: found only %d distinct prompts in %d draws of the task's %.0f: its generator reaches the rest too rarely; lower test_size", name, nTest, len(s.test), draws, space)
		}
		ex := t.Generate(testRNG)
		k := promptKey(ex.Shown())
		if _, dup := s.held[k]; dup {
			continue
		}
		if h, ok := t.(holdOuter); ok && !h.CanHoldOut(ex.Shown()) {
			continue
		}
		s.held[k] = struct{}{}
		s.test = append(s.test, ex)
	}
	if p, ok := t.(prober); ok {
		share := 1.0
		for _, ex := range s.test {
			share -= p.promptProb(ex.Shown())
		}
		if share < minTrainShare {
			return nil, fmt.Errorf("data: task %q: test_size %d holds out prompts the task draws %.4g%% of the time, leaving training %.2g of its draws (want at least %g); lower test_size", name, nTest, 100*(1-share), share, minTrainShare)
		}
	}
	s.pcg = rand.NewPCG(seed, trainPCGStream)
	s.rng = rand.New(s.pcg)
	return s, nil
}

// heldOutPart is implemented by tasks whose held-out set is a part of their
// data of its own (chars: the end of the text) rather than prompts drawn
// and then excluded from training: NewStream takes it as the test set, and
// training never draws from it by construction.
type heldOutPart interface {
	heldOut(n int) ([]Example, error)
}

// holdOuter is implemented by tasks some of whose prompts must stay in
// training: those whose answer no other prompt teaches.
type holdOuter interface {
	CanHoldOut(prompt []int) bool
}

// holdCounter is implemented by the built-in holdOuters, which count the
// prompts CanHoldOut accepts.
type holdCounter interface {
	numHoldable() float64
}

// prober is implemented by tasks that know how likely Generate is to draw
// each prompt, which lets NewStream see that a test set leaves training
// almost no draws before Next spins on it.
type prober interface {
	promptProb(prompt []int) float64
}

// usable reports a nil or zero Stream, one not made by NewStream.
func (s *Stream) usable() error {
	if s == nil {
		return fmt.Errorf("data: stream: nil Stream (make one with NewStream)")
	}
	if s.task == nil || s.rng == nil || s.pcg == nil {
		return fmt.Errorf("data: stream: zero Stream has no task (make one with NewStream)")
	}
	return nil
}

// Task returns the task the stream draws from (nil for a nil or zero Stream).
func (s *Stream) Task() Task {
	if s == nil {
		return nil
	}
	return s.task
}

// Test returns a copy of the held-out test set, in the order it was drawn
// (nil for a nil or zero Stream).
func (s *Stream) Test() []Example {
	if s.usable() != nil {
		return nil
	}
	out := make([]Example, len(s.test))
	for i, ex := range s.test {
		out[i] = ex.clone()
	}
	return out
}

// IsTest reports whether prompt is in the test set, e.g. to tell a user that
// a prompt given to a trained model was never trained on.
func (s *Stream) IsTest(prompt []int) bool {
	if s == nil {
		return false
	}
	_, ok := s.held[promptKey(prompt)]
	return ok
}

// Next returns the next training example, drawing again whenever the task
// generates a test prompt. It returns the zero Example, which MakeBatch
// refuses, where Draw(1) would fail: for a nil or zero Stream, or a task that
// keeps drawing test prompts.
func (s *Stream) Next() Example {
	ex, err := s.next()
	if err != nil {
		return Example{}
	}
	return ex
}

func (s *Stream) next() (Example, error) {
	if err := s.usable(); err != nil {
		return Example{}, err
	}
	for range maxNextDraws {
		var ex Example
		if a, ok := s.task.(arenaGenerator); ok {
			ex = a.generateIn(s.rng, &s.arena)
		} else {
			ex = s.task.Generate(s.rng)
		}
		s.key = appendShownKey(s.key[:0], ex)
		if _, held := s.held[string(s.key)]; !held { // no string allocated to look it up
			s.drawn++
			return ex, nil
		}
	}
	return Example{}, fmt.Errorf("data: task %q: stream: %d draws in a row were test prompts", s.task.Name(), maxNextDraws)
}

// Draw returns the next n training examples, or an error naming n if it is
// negative or above MaxExamples, or if the stream is nil or zero. On an error
// the stream has not advanced past the examples drawn before it.
func (s *Stream) Draw(n int) ([]Example, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	if n < 0 || n > MaxExamples {
		return nil, fmt.Errorf("data: task %q: stream: cannot draw %d examples (want 0 to %d)", s.task.Name(), n, MaxExamples)
	}
	out := make([]Example, 0, n)
	for range n {
		ex, err := s.next()
		if err != nil {
			return nil, err
		}
		out = append(out, ex)
	}
	return out, nil
}

// Take is Draw without the error, for callers that pass the result straight
// to BatchFor: it returns nil (which BatchFor refuses as "no examples") where
// Draw fails, including for n <= 0 or n > MaxExamples.
func (s *Stream) Take(n int) []Example {
	out, err := s.Draw(n)
	if err != nil || len(out) == 0 {
		return nil
	}
	return out
}

// Drawn returns how many training examples Next has returned, counting from
// the stream's creation across State and Restore (0 for a nil Stream).
func (s *Stream) Drawn() uint64 {
	if s == nil {
		return 0
	}
	return s.drawn
}

// streamState is the saved form of a Stream. It names the task, parameters,
// seed and test size so that Restore can refuse a state from another run,
// whose generator position would mean nothing here.
type streamState struct {
	Task   string     `json:"task"`
	Params TaskConfig `json:"params"`
	Seed   uint64     `json:"seed"`
	NTest  int        `json:"n_test"`
	Drawn  uint64     `json:"drawn"`
	PCG    []byte     `json:"pcg"`
}

// State returns the stream's position as JSON, to store in a checkpoint.
// Restoring it into a Stream made by NewStream with the same task, seed and
// test size continues the exact sequence this stream would have produced.
func (s *Stream) State() ([]byte, error) {
	if err := s.usable(); err != nil {
		return nil, err
	}
	pcg, err := s.pcg.MarshalBinary()
	if err != nil {
		return nil, fmt.Errorf("data: task %q: stream state: %w", s.task.Name(), err)
	}
	b, err := json.Marshal(streamState{
		Task: s.task.Name(), Params: s.task.Params(), Seed: s.seed,
		NTest: len(s.test), Drawn: s.drawn, PCG: pcg,
	})
	if err != nil {
		return nil, fmt.Errorf("data: task %q: stream state: %w", s.task.Name(), err)
	}
	return b, nil
}

// Restore sets the stream's position from a State. It fails, leaving the
// stream unchanged, if the stream is nil or zero, if the state is malformed,
// or if it was saved by a stream of a different task, parameters, seed or
// test size.
func (s *Stream) Restore(state []byte) error {
	if err := s.usable(); err != nil {
		return err
	}
	name := s.task.Name()
	var st streamState
	if err := json.Unmarshal(state, &st); err != nil {
		return fmt.Errorf("data: task %q: restore stream: %w", name, err)
	}
	switch {
	case st.Task != name:
		return fmt.Errorf("data: task %q: restore stream: state is for task %q", name, st.Task)
	case st.Params != s.task.Params():
		return fmt.Errorf("data: task %q: restore stream: state has params %v, stream has %v", name, st.Params, s.task.Params())
	case st.Seed != s.seed:
		return fmt.Errorf("data: task %q: restore stream: state has seed %d, stream has %d", name, st.Seed, s.seed)
	case st.NTest != len(s.test):
		return fmt.Errorf("data: task %q: restore stream: state has a test set of %d, stream has %d", name, st.NTest, len(s.test))
	}
	pcg := new(rand.PCG)
	if err := pcg.UnmarshalBinary(st.PCG); err != nil {
		return fmt.Errorf("data: task %q: restore stream: %w", name, err)
	}
	s.pcg = pcg
	s.rng = rand.New(pcg)
	s.drawn = st.Drawn
	return nil
}
