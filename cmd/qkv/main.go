// Command qkv trains small Transformers on toy sequence tasks and inspects
// what they learned.
//
//	qkv train                      train the default model on the sort task
//	qkv eval --checkpoint DIR      score a checkpoint on its held-out set
//	qkv predict --checkpoint DIR "2 0 1 1 0 2"
//	qkv attend --checkpoint DIR --input "2 0 1 1 0 2" --out attn.png
//	qkv gradcheck                  check every gradient of a small model
//	qkv bench                      time training steps
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/train"
)

// command is one subcommand: run parses args and does the work, writing
// results to stdout and progress to stderr.
type command struct {
	summary string
	run     func(args []string, stdout, stderr io.Writer) error
}

// commands is filled in init: the subcommands' flag usage reads it, which a
// plain initialiser would make a cycle.
var commands map[string]command

func init() {
	commands = map[string]command{
		"train":     {"train a model on a toy task (the default: minGPT's sort demo) or a text (--task chars)", runTrain},
		"eval":      {"score a checkpoint on its held-out set by greedy decoding", runEval},
		"predict":   {"print a checkpoint's answer to a prompt", runPredict},
		"sample":    {"continue a text with a character-level language model (task chars), printing each character as it is drawn", runSample},
		"attend":    {"draw every layer's and head's attention for an input as a PNG", runAttend},
		"gradcheck": {"compare every gradient of a small float64 model with finite differences", runGradcheck},
		"explain":   {"measure the attention tutorial's claims on qkv's own graph code and give each a verdict", runExplain},
		"bench":     {"time training steps of a configuration, one attention layer over sequence lengths (--seq), or generation (--generate)", runBench},
	}
}

// errUsage marks errors that are the user's: exit status 2, as flag uses.
// It is wrapped first, fmt.Errorf("%w: --flag: ...", errUsage, ...), and
// run prints the message without it: the mark is no word of the sentence.
var errUsage = errors.New("usage")

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	// The program's choice, which a library cannot make for its importers:
	// gorgonia's own matrix products (--attention composed, explain's
	// claims) on qkv's GEMM too, as qkv's ops are.
	graph.UseFastGEMM()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "qkv: unknown command %q%s\n\n", args[0], didYouMean(args[0], "", commandNames()))
		usage(stderr)
		return 2
	}
	err := cmd.run(args[1:], stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "qkv %s: %s\n", args[0], strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		return 2
	case errors.Is(err, train.ErrInterrupted):
		return 130 // as a shell reports a command ended by SIGINT
	default:
		// "qkv train: train: ..." says the command twice: package train's
		// errors begin with the command's name.
		fmt.Fprintf(stderr, "qkv %s: %s\n", args[0], strings.TrimPrefix(err.Error(), args[0]+": "))
		return 1
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "qkv: Transformer attention as a gorgonia graph, trained on toy sequence tasks.")
	fmt.Fprintln(w, "\nUsage: qkv <command> [flags]\n\nCommands:")
	for _, n := range commandNames() {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'qkv <command> --help' for a command's flags.")
}

// commandNames returns the subcommands' names, sorted.
func commandNames() []string { return slices.Sorted(maps.Keys(commands)) }

// didYouMean returns " (did you mean <prefix>X?)" for the name X among known
// nearest to typo, if it is near enough to be a slip (fewer than a third of
// its letters differ, plus one), else "".
func didYouMean(typo, prefix string, known []string) string {
	best, dist := "", len(typo)/3+1
	for _, k := range known {
		if d := editDistance(typo, k); d < dist {
			best, dist = k, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %s%s?)", prefix, best)
}

// editDistance is the Damerau–Levenshtein distance of a and b with adjacent
// transpositions (optimal string alignment): "trian" is one from "train".
func editDistance(a, b string) int {
	prev2, prev, cur := make([]int, len(b)+1), make([]int, len(b)+1), make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("qkv "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: qkv %s %s\n\n%s.\n\nFlags:\n", name, synopsis, commands[name].summary)
		fs.PrintDefaults()
	}
	return fs
}

// flagSuggestion returns didYouMean's hint for the flag an "flag provided
// but not defined" error of fs names, written as --flag.
func flagSuggestion(fs *flag.FlagSet, err error) string {
	name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: -")
	if !ok {
		return ""
	}
	var known []string
	fs.VisitAll(func(f *flag.Flag) { known = append(known, f.Name) })
	return didYouMean(name, "--", known)
}

// parse parses args and returns an errUsage error for bad flags and for
// positional arguments beyond want (any number if want < 0).
func parse(fs *flag.FlagSet, args []string, want int) error {
	// The flag package prints its error and then every flag; a mistyped
	// flag gets one line instead, saying where the list is.
	out := fs.Output()
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	fs.SetOutput(out)
	if errors.Is(err, flag.ErrHelp) {
		fs.Usage()
		return err
	}
	if err != nil {
		return fmt.Errorf("%w: %v%s; '%s --help' lists the flags", errUsage, err, flagSuggestion(fs, err), fs.Name())
	}
	if want >= 0 && fs.NArg() > want {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, strings.Join(fs.Args()[want:], " "))
	}
	return nil
}
