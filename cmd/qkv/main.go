// Command qkv trains small Transformers on toy sequence tasks and inspects
// what they learned.
//
//	qkv train                      train the default model on the sort task
//	qkv eval --checkpoint DIR      score a checkpoint on its held-out set
//	qkv predict --checkpoint DIR "2 0 1 1 0 2"
//	qkv attend --checkpoint DIR --input "2 0 1 1 0 2" --out attn.png
//	qkv gradcheck                  check every gradient of a small model
//	qkv bench                      time training steps
//	qkv help CMD                   print a command's flags, as qkv CMD --help
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
		"train":      {"train a model on a toy task (the default: minGPT's sort demo) or a text (--task chars)", runTrain},
		"eval":       {"score a checkpoint on its held-out set by greedy decoding", runEval},
		"predict":    {"print a checkpoint's answer to a prompt", runPredict},
		"sample":     {"continue a text with a character-level language model (task chars), printing each character as it is drawn", runSample},
		"attend":     {"draw every layer's and head's attention for an input as a PNG", runAttend},
		"gradcheck":  {"compare every gradient of a small float64 model with finite differences", runGradcheck},
		"explain":    {"measure the attention tutorial's claims on qkv's own graph code and give each a verdict", runExplain},
		"bench":      {"time training steps of a configuration, one attention layer over sequence lengths (--seq), or generation (--generate)", runBench},
		"help":       {"print the commands, or a command's flags: qkv help <command>", runHelp},
		"version":    {"print qkv's version, the revision it was built from and the Go toolchain", runVersion},
		"completion": {"print a shell completion script: source <(qkv completion bash)", runCompletion},
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
	if len(args) == 0 { // no command: a usage error
		usage(stderr)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help":
		args = append([]string{"help"}, args[1:]...)
	case "-version", "--version":
		args = append([]string{"version"}, args[1:]...)
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "qkv: unknown command %q%s\n\n", args[0], didYouMean(args[0], "", commandNames()))
		usage(stderr)
		return 2
	}
	err := cmd.run(args[1:], stdout, stderr)
	name := args[0]
	var help *helpRequest
	switch {
	case err == nil:
		return 0
	case errors.As(err, &help): // asked for: on stdout, to be read or grepped
		help.fs.SetOutput(stdout)
		help.fs.Usage()
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		if _, ok := commands[args[min(1, len(args)-1)]]; name == "help" && len(args) > 1 && ok {
			name = args[1] // qkv help CMD is qkv CMD --help
		}
		fmt.Fprintf(stderr, "qkv %s: %s\n", name, strings.TrimPrefix(err.Error(), errUsage.Error()+": "))
		return 2
	case errors.Is(err, train.ErrInterrupted):
		return 130 // as a shell reports a command ended by SIGINT
	default:
		// "qkv train: train: ..." says the command twice: package train's
		// errors begin with the command's name.
		fmt.Fprintf(stderr, "qkv %s: %s\n", name, strings.TrimPrefix(err.Error(), name+": "))
		return 1
	}
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

// newFlags returns a flag set that reports errors instead of exiting, and
// whose Usage writes the command's help (printHelp) to its output.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("qkv "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { printHelp(fs.Output(), name, synopsis, fs) }
	return fs
}

// flagError rewrites an error of the flag package in qkv's words, naming
// the flag as --flag first, with didYouMean's hint for a flag fs does not
// define.
func flagError(fs *flag.FlagSet, err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		var known []string
		fs.VisitAll(func(f *flag.Flag) { known = append(known, f.Name) })
		return fmt.Sprintf("unknown flag --%s%s", name, didYouMean(name, "--", known))
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return fmt.Sprintf("--%s needs a value", name)
	}
	// invalid value "x" for flag -name: problem
	// invalid boolean value "x" for -name: problem
	for _, pre := range []string{"invalid value ", "invalid boolean value "} {
		rest, ok := strings.CutPrefix(msg, pre)
		if !ok {
			continue
		}
		val, after, ok := cutQuoted(rest)
		if !ok {
			break
		}
		after = strings.TrimPrefix(strings.TrimPrefix(after, " for flag -"), " for -")
		name, problem, _ := strings.Cut(after, ": ")
		return fmt.Sprintf("--%s: invalid value %s: %s", name, val, problem)
	}
	return msg
}

// cutQuoted splits s after its leading Go-quoted string.
func cutQuoted(s string) (quoted, rest string, ok bool) {
	if !strings.HasPrefix(s, `"`) {
		return "", "", false
	}
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return s[:i+1], s[i+1:], true
		}
	}
	return "", "", false
}

// parse parses args and returns an errUsage error for bad flags and for
// positional arguments beyond want (any number if want < 0), or a
// *helpRequest for -h or --help. Flags may come before or after the
// positional arguments, interleaved (qkv predict "2 0 1" --checkpoint
// DIR); "--" ends the flags. fs.Args() returns the positional arguments.
func parse(fs *flag.FlagSet, args []string, want int) error {
	// The flag package prints its error and then every flag; a mistyped
	// flag gets one line instead, saying where the list is.
	out := fs.Output()
	fs.SetOutput(io.Discard)
	defer fs.SetOutput(out)
	var pos []string
	help := false
	for {
		err := fs.Parse(args)
		if errors.Is(err, flag.ErrHelp) {
			// The flags after --help are parsed too: they choose the
			// defaults the help shows (--task chars).
			help, args = true, fs.Args()
			continue
		}
		if err != nil {
			if help {
				break
			}
			return fmt.Errorf("%w: %s; '%s --help' lists the flags", errUsage, flagError(fs, err), fs.Name())
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	if help {
		return &helpRequest{fs}
	}
	if err := fs.Parse(append([]string{"--"}, pos...)); err != nil { // fs.Args() = pos
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if want >= 0 && fs.NArg() > want {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, strings.Join(fs.Args()[want:], " "))
	}
	return nil
}
