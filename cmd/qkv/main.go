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
	"os"
	"sort"
	"strings"

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
		"train":     {"train a model on a toy task (the default: minGPT's sort demo)", runTrain},
		"eval":      {"score a checkpoint on its held-out set by greedy decoding", runEval},
		"predict":   {"print a checkpoint's answer to a prompt", runPredict},
		"attend":    {"draw every layer's and head's attention for an input as a PNG", runAttend},
		"gradcheck": {"compare every gradient of a small float64 model with finite differences", runGradcheck},
		"bench":     {"time training steps of a model configuration", runBench},
	}
}

// errUsage marks errors that are the user's: exit status 2, as flag uses.
var errUsage = errors.New("usage")

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "qkv: unknown command %q\n\n", args[0])
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
		fmt.Fprintf(stderr, "qkv %s: %v\n", args[0], err)
		return 2
	case errors.Is(err, train.ErrInterrupted):
		return 130 // as a shell reports a command ended by SIGINT
	default:
		fmt.Fprintf(stderr, "qkv %s: %v\n", args[0], err)
		return 1
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "qkv: Transformer attention as a gorgonia graph, trained on toy sequence tasks.")
	fmt.Fprintln(w, "\nUsage: qkv <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'qkv <command> --help' for a command's flags.")
}

// newFlags returns a flag set that reports errors instead of exiting.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("qkv "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: qkv %s %s\n\n%s.\n\nFlags:\n", name, synopsis, commands[name].summary)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args and returns an errUsage error for bad flags and for
// positional arguments beyond want.
func parse(fs *flag.FlagSet, args []string, want int) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > want {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, strings.Join(fs.Args()[want:], " "))
	}
	return nil
}
