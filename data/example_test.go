package data_test

import (
	"fmt"
	"math/rand/v2"

	"github.com/qkv-dev/qkv/data"
)

func ExampleNew() {
	task, err := data.New("sort", data.DefaultConfig("sort"))
	if err != nil {
		fmt.Println(err)
		return
	}
	v := task.Vocab()
	prompt, err := data.ParsePrompt(task, "2 0 1 1 0 2")
	if err != nil {
		fmt.Println(err)
		return
	}
	answer, err := task.Solve(prompt)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(v.Decode(prompt), v.Symbols()[v.SEP()], v.Decode(answer))
	fmt.Println("vocab:", v.Symbols(), "size", v.Size())
	fmt.Println("max len:", task.MaxLen(), "answer len:", len(task.Frame(prompt).Answer))

	_, err = data.New("sort", data.TaskConfig{Length: 6, Alphabet: 40})
	fmt.Println(err)
	// Output:
	// 2 0 1 1 0 2 | 0 0 1 1 2 2
	// vocab: [_ | 0 1 2] size 5
	// max len: 13 answer len: 6
	// data: task "sort": alphabet 40 is too large (at most 36)
}

func ExampleNew_add() {
	task, _ := data.New("add", data.TaskConfig{Digits: 2})
	prompt, _ := data.ParsePrompt(task, "8 5 5 0") // 85 + 50
	answer, _ := task.Solve(prompt)
	fmt.Println(task.Vocab().Decode(answer)) // 135, least significant digit first
	// Output: 5 3 1
}

func ExampleMakeBatch() {
	task, _ := data.New("copy", data.TaskConfig{MinLength: 1, MaxLength: 3, Alphabet: 3})
	v := task.Vocab()
	a, _ := data.ParsePrompt(task, "2 0 1")
	b, _ := data.ParsePrompt(task, "1")
	examples := []data.Example{{Prompt: a, Answer: a}, {Prompt: b, Answer: b}}
	batch, err := data.MakeBatch(examples, v.SEP(), v.PAD(), task.MaxLen()-1)
	if err != nil {
		fmt.Println(err)
		return
	}
	for i := 0; i < batch.B; i++ {
		row := batch.Inputs[i*batch.S : (i+1)*batch.S]
		tgt := batch.Targets[i*batch.S : (i+1)*batch.S]
		fmt.Printf("inputs  %s\ntargets %s\nweights %v\nlength  %d\n",
			v.Decode(row), v.Decode(tgt), batch.Weights[i*batch.S:(i+1)*batch.S], batch.Lengths[i])
	}
	// Output:
	// inputs  2 0 1 | 2 0
	// targets 0 1 | 2 0 1
	// weights [0 0 0 1 1 1]
	// length  6
	// inputs  1 | _ _ _ _
	// targets | 1 _ _ _ _
	// weights [0 1 0 0 0 0]
	// length  2
}

func ExampleNewStream() {
	task, _ := data.New("sort", data.DefaultConfig("sort"))
	s, err := data.NewStream(task, 1, 100)
	if err != nil {
		fmt.Println(err)
		return
	}
	state, _ := s.State() // saved with a checkpoint
	first := s.Next()

	resumed, _ := data.NewStream(task, 1, 100)
	if err := resumed.Restore(state); err != nil {
		fmt.Println(err)
		return
	}
	again := resumed.Next()
	fmt.Println(len(s.Test()), s.IsTest(first.Prompt), fmt.Sprint(first) == fmt.Sprint(again))

	_, err = data.NewStream(task, 1, 729)
	fmt.Println(err)
	// Output:
	// 100 false true
	// data: task "sort": test_size 729 leaves no prompt for training: the task has only 729 distinct prompts (length=6 alphabet=3); lower test_size below 729 or enlarge the task
}

func ExampleTask_Generate() {
	task, _ := data.New("recall", data.TaskConfig{Pairs: 3, Keys: 5, Values: 10})
	rng := rand.New(rand.NewPCG(1, 0))
	ex := task.Generate(rng)
	solved, _ := task.Solve(ex.Prompt)
	fmt.Println(len(ex.Prompt), len(ex.Answer), fmt.Sprint(solved) == fmt.Sprint(ex.Answer))
	// Output: 7 1 true
}

// A character vocabulary reads text character by character, white space
// included; its special tokens are spelt so as not to be characters.
func ExampleNewCharVocab() {
	v, err := data.NewCharVocab([]rune("\n (){}acfimnu"), false)
	if err != nil {
		fmt.Println(err)
		return
	}
	ids, err := v.Encode("func main() {}")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ids)
	fmt.Printf("%q\n", v.Decode(append([]int{v.SEP()}, ids...)))
	_, err = v.Encode("func main() { x }")
	fmt.Println(err)
	// Output:
	// [10 14 13 9 3 12 8 11 13 4 5 3 6 7]
	// "<bos>func main() {}"
	// data: task "chars": vocab: unknown symbol 'x' at character 14 of "func main() { x }" (the vocabulary has the 13 characters of the training text)
}
