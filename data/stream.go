package data

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
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

// Stream is a task's held-out test set together with an endless stream of
// training examples that never repeats a test prompt. Both are determined by
// the seed: the same task, seed and test size give the same test set and the
// same training sequence, bit for bit. A Stream is not safe for concurrent
// use.
type Stream struct {
	task  Task
	seed  uint64
	test  []Example
	held  map[string]struct{}
	pcg   *rand.PCG
	rng   *rand.Rand
	drawn uint64
}

// NewStream draws a test set of nTest distinct examples (distinct prompts)
// from seed and returns the training stream that excludes them. It fails if
// nTest is negative, or if the task has no more than nTest distinct prompts,
// so that disjoint training data would be impossible.
func NewStream(t Task, seed uint64, nTest int) (*Stream, error) {
	if t == nil {
		return nil, fmt.Errorf("data: new stream: nil task")
	}
	if nTest < 0 {
		return nil, fmt.Errorf("data: task %q: test set size must not be negative, got %d", t.Name(), nTest)
	}
	if space := t.NumPrompts(); float64(nTest) >= space {
		return nil, fmt.Errorf("data: task %q: a test set of %d distinct prompts leaves none for training: the task has only %.0f distinct prompts (%v); lower the test size or enlarge the task", t.Name(), nTest, space, t.Params())
	}
	s := &Stream{task: t, seed: seed, held: make(map[string]struct{}, nTest)}
	testRNG := rand.New(rand.NewPCG(seed, testPCGStream))
	limit := maxTestDraws * (nTest + 1)
	for draws := 0; len(s.test) < nTest; draws++ {
		if draws == limit {
			return nil, fmt.Errorf("data: task %q: found only %d distinct test prompts in %d draws, want %d: the test set is too large a share of the task's %.0f prompts", t.Name(), len(s.test), draws, nTest, t.NumPrompts())
		}
		ex := t.Generate(testRNG)
		k := promptKey(ex.Prompt)
		if _, dup := s.held[k]; dup {
			continue
		}
		if h, ok := t.(holdOuter); ok && !h.CanHoldOut(ex.Prompt) {
			continue
		}
		s.held[k] = struct{}{}
		s.test = append(s.test, ex)
	}
	s.pcg = rand.NewPCG(seed, trainPCGStream)
	s.rng = rand.New(s.pcg)
	return s, nil
}

// holdOuter is implemented by tasks some of whose prompts must stay in
// training: those whose answer no other prompt teaches.
type holdOuter interface {
	CanHoldOut(prompt []int) bool
}

// Task returns the task the stream draws from.
func (s *Stream) Task() Task { return s.task }

// Test returns a copy of the held-out test set, in the order it was drawn.
func (s *Stream) Test() []Example {
	out := make([]Example, len(s.test))
	for i, ex := range s.test {
		out[i] = Example{Prompt: slices.Clone(ex.Prompt), Answer: slices.Clone(ex.Answer)}
	}
	return out
}

// IsTest reports whether prompt is in the test set, e.g. to tell a user that
// a prompt given to a trained model was never trained on.
func (s *Stream) IsTest(prompt []int) bool {
	_, ok := s.held[promptKey(prompt)]
	return ok
}

// Next returns the next training example, drawing again whenever the task
// generates a test prompt.
func (s *Stream) Next() Example {
	for {
		ex := s.task.Generate(s.rng)
		if _, held := s.held[promptKey(ex.Prompt)]; !held {
			s.drawn++
			return ex
		}
	}
}

// Take returns the next n training examples (none if n <= 0).
func (s *Stream) Take(n int) []Example {
	out := make([]Example, 0, max(n, 0))
	for range max(n, 0) {
		out = append(out, s.Next())
	}
	return out
}

// Drawn returns how many training examples Next has returned, counting from
// the stream's creation across State and Restore.
func (s *Stream) Drawn() uint64 { return s.drawn }

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
// stream unchanged, if the state is malformed or was saved by a stream of a
// different task, parameters, seed or test size.
func (s *Stream) Restore(state []byte) error {
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

// Split is a materialised train/test split: a fixed training set and the
// held-out test set, disjoint in prompts.
type Split struct {
	Train []Example `json:"train"`
	Test  []Example `json:"test"`
}

// MakeSplit returns the first nTrain training examples and the nTest test
// examples of NewStream(t, seed, nTest). Training examples may repeat one
// another, as a stream's do; they never repeat a test prompt.
func MakeSplit(t Task, seed uint64, nTrain, nTest int) (Split, error) {
	if nTrain < 0 {
		name := "<nil>"
		if t != nil {
			name = t.Name()
		}
		return Split{}, fmt.Errorf("data: task %q: training set size must not be negative, got %d", name, nTrain)
	}
	s, err := NewStream(t, seed, nTest)
	if err != nil {
		return Split{}, err
	}
	return Split{Train: s.Take(nTrain), Test: s.Test()}, nil
}
