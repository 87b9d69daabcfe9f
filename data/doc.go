// Package data generates the toy sequence tasks qkv trains on, their
// vocabularies, held-out test sets, training streams and padded batches.
//
// Every task is posed to a decoder-only model as one token sequence
//
//	prompt | answer
//
// where | is the separator token SEP, and each answer position is either
// given or a target (Example.Given). The model reads the prompt and the
// separator, then each given token, and must produce each target. An
// encoder–decoder reads the prompt alone in its encoder and the sequence
// SEP answer in its decoder (Model.BatchFor of package train/model lays
// the two out); the
// loss is taken at target positions only, because the prompt is random and
// cannot be predicted and a given token is not asked for. At inference
// greedy decoding fills the targets of Task.Frame(prompt), feeding the given
// tokens, and the targets are checked against Task.Solve. A prompt, as a
// user types it and Solve reads it, is an example's prompt followed by its
// given tokens (Example.Shown). Multi-query recall is
//
//	c 4 b 1 f 1 h 6 | f 1 c 4 h 6 b 1
//
// with the queries f c h b given and the values 1 4 6 1 targets; the prompt
// is c 4 b 1 f 1 h 6 f c h b. Nothing assumes one contiguous answer: a
// language-model task would be an empty prompt and an answer of targets.
//
// The tasks, made by New from a TaskConfig (DefaultConfig gives working
// values), are:
//
//	copy     n symbols over an alphabet of k; the answer is the same sequence
//	reverse  the answer is the prompt reversed
//	sort     the answer is the prompt sorted ascending (minGPT's demo: n=6, k=3)
//	recall   p key-value pairs, then keys asked back (every key in a random
//	         order by default; one, before SEP, with queries 1); the targets
//	         are their values
//	add      two a-digit numbers; the answer is their a+1-digit sum, reversed
//	chars    a character-level language model of a text (nanoGPT's
//	         shakespeare_char): windows of context+1 characters of a
//	         corpus, by default Go's own net/http source
//
// chars is the language-model case of the example mechanism: an empty
// prompt and an answer of characters c0 … cT whose first is given, so that
// the model reads SEP (which starts every window, as BOS) and c0 … c(T-1)
// and predicts c1 … cT, every position a loss. Its text is a Corpus
// (LoadCorpus: a file, a directory, a glob or go:PKG, read once into two
// bytes a character), split as nanoGPT splits it: the first
// int((1-val_fraction)·n) characters train, the rest are held out, and its
// vocabulary is the training text's characters (NewCharVocab), a
// validation character outside it read as UNK and carrying no loss. Its
// held-out set is windows evenly spaced over the held-out text, a fixed
// set scored by its loss (IsLanguageModel), not by exact match. What New
// reads of the text (its length, SHA-256 and vocabulary) is recorded in the
// TaskConfig it returns, so that a checkpoint's model can be rebuilt
// without the text, and a changed text is refused when examples are drawn.
//
// copy, reverse and sort accept a length range and recall a pairs range, so
// that batches mix sequence lengths and padding masks are exercised.
//
// Held-out evaluation needs a test set the model never trains on. NewStream
// draws nTest distinct examples from the seed, then yields training examples
// that skip every test prompt; it refuses, naming test_size and the count,
// when the task has too few prompts for that or when the prompts left would
// be drawn too rarely to train on. The stream's state can be saved and restored, so a resumed run
// sees the same examples as one that never stopped.
//
// MakeBatch lays examples out as (B, S) next-token inputs and targets with
// per-position loss weights and per-row lengths, the form that graph.IDs,
// graph.Targets and graph.KeyPadding take. For the sort example 2 0 1 → 0 1 2
// with S = 6 (shown as symbols; the slices hold their ids):
//
//	seq      2 0 1 | 0 1 2
//	Inputs   2 0 1 | 0 1
//	Targets  0 1 | 0 1 2
//	Weights  0 0 0 1 1 1
//	Lengths  6
//	Starts   3
//
// Bad input is an error, never a panic: every function and method that can
// fail returns an error naming the task, the parameter and the value at
// fault, also for nil and zero values (a nil Task, a zero Stream, Vocab or
// Batch) and for sizes that are negative or would overflow. Sizes that
// allocate are capped (MaxTestSize held-out prompts, MaxExamples examples per
// call, MaxBatchTokens positions per batch) far above what training uses, so
// that a mistyped 1<<40 is refused instead of exhausting memory. The methods
// that return no error (Stream.Next and Take, Vocab.Decode, ...) act on a nil
// or zero receiver as on an empty one; Stream.Draw is Take with the error.
//
// Token ids are small ints: PAD is always 0, so zero-filled buffers are
// padded buffers, and SEP is 1 (BOS in a character vocabulary, whose
// special tokens are spelt <pad>, <bos> and <unk>, since "_" and "|" are
// characters of a text). The task's symbols follow in order from id 2:
// copy, reverse and sort the symbols 0, 1, ... of their alphabet, add the
// digits 0-9, recall its values (hexadecimal digits 0-9, A-F) first and then
// its keys (lower-case letters).
//
// Greedy decoding (train.Greedy) takes the argmax over the whole vocabulary,
// so a model may answer with PAD or SEP; answers are always as long as the
// frame's, with no stop token.
//
// The package uses only the standard library (and the go command, to find
// GOROOT for a go:PKG corpus), and math/rand/v2's PCG for all
// randomness, so the same seed gives the same data on every platform.
package data
