package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"unicode"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
)

// helpRequest is the error parse returns for -h or --help: run prints the
// flag set's help to stdout and exits 0. The flags given besides --help
// are parsed first, so that the help shows the defaults they select
// (--task chars, --preset).
type helpRequest struct{ fs *flag.FlagSet }

func (h *helpRequest) Error() string { return "help requested" }
func (h *helpRequest) Unwrap() error { return flag.ErrHelp }

// flagGroups are the headings of a command's --help, in their order. A
// flag's group is its command's override (groupOverrides), else its entry
// in groupTable, else its configuration field's group tag, else "other".
var flagGroups = []string{"task", "model", "attention", "linear attention", "optimizer", "run",
	"checkpoint", "input", "generation", "benchmark", "experiment", "check", "output", "other"}

// groupTable groups the flags that are no configuration field's, in the
// order --help lists them (after the configuration's own flags of the same
// group, which come in their declaration order).
var groupTable = []struct {
	group string
	flags []string
}{
	{"task", []string{"task", "preset", "length", "min-length", "max-length", "alphabet", "digits",
		"pairs", "min-pairs", "max-pairs", "keys", "values", "queries", "data", "context", "val-fraction"}},
	{"run", []string{"max-memory"}},
	{"checkpoint", []string{"checkpoint"}},
	{"input", []string{"input"}},
	{"generation", []string{"prompt", "tokens", "temperature", "top-k", "top-p", "num-samples", "overflow", "decoder", "cache"}},
	{"benchmark", []string{"n", "seq", "head-dim", "causal", "generate", "torch", "huge-pages"}},
	{"check", []string{"tol"}},
	{"output", []string{"out", "resume", "force", "json", "plot", "plots", "profile", "memprofile"}},
}

// groupOverrides are the groups of flags whose role in one command is not
// their usual one, in the order they follow that group's other flags.
var groupOverrides = map[string][]struct{ flag, group string }{
	"eval":    {{"attention", "checkpoint"}, {"max-memory", "checkpoint"}},
	"predict": {{"attention", "checkpoint"}, {"max-memory", "checkpoint"}},
	"attend":  {{"attention", "checkpoint"}, {"max-memory", "checkpoint"}},
	"sample":  {{"attention", "checkpoint"}, {"max-memory", "checkpoint"}, {"seed", "generation"}},
	"explain": {{"small", "experiment"}, {"seed", "experiment"}},
}

// metavars name the value of flags whose type says too little ("--out DIR"
// rather than "--out STRING").
var metavars = map[string]string{
	"task": "NAME", "preset": "NAME", "data": "SOURCE", "out": "DIR", "resume": "DIR",
	"checkpoint": "DIR", "plots": "DIR", "plot": "FILE", "profile": "FILE", "memprofile": "FILE",
	"prompt": "TEXT", "input": "PROMPT", "torch": "PYTHON", "seq": "N[,N...]", "generate": "N[,N...]",
}

// schemaGroups are the group tags and declaration order of every
// configuration flag.
var schemaGroups = func() map[string]struct {
	group string
	rank  int
} {
	m := map[string]struct {
		group string
		rank  int
	}{}
	for i, f := range schemaOf((*config.Config)(nil)) {
		m[f.flag] = struct {
			group string
			rank  int
		}{f.group, i}
	}
	return m
}()

// flagGroup returns the group of command cmd's flag name and its rank
// within the group (lower first).
func flagGroup(cmd, name string) (string, int) {
	for i, o := range groupOverrides[cmd] {
		if o.flag == name {
			return o.group, 2000 + i
		}
	}
	for _, g := range groupTable {
		if i := slices.Index(g.flags, name); i >= 0 {
			return g.group, 1000 + i
		}
	}
	if s, ok := schemaGroups[name]; ok && s.group != "" {
		if name == s.group { // the flag naming its group leads it: --attention
			return s.group, -1
		}
		return s.group, s.rank
	}
	return "other", 3000
}

// printHelp writes command cmd's help: its synopsis and summary, which
// defaults it shows, and its flags by group.
func printHelp(w io.Writer, cmd, synopsis string, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: qkv %s %s\n\n", cmd, synopsis)
	fmt.Fprintln(w, wrap(upperFirst(commands[cmd].summary)+".", 0))
	if note := defaultsNote(cmd, fs); note != "" {
		fmt.Fprintf(w, "\n%s\n", wrap(note, 0))
	}
	type entry struct {
		f    *flag.Flag
		rank int
	}
	byGroup := map[string][]entry{}
	fs.VisitAll(func(f *flag.Flag) {
		g, r := flagGroup(cmd, f.Name)
		byGroup[g] = append(byGroup[g], entry{f, r})
	})
	for _, g := range flagGroups {
		entries := byGroup[g]
		if len(entries) == 0 {
			continue
		}
		slices.SortStableFunc(entries, func(a, b entry) int { return a.rank - b.rank }) // VisitAll's order breaks ties
		fmt.Fprintf(w, "\n%s flags:\n", upperFirst(g))
		for _, e := range entries {
			typ, usage := flagType(e.f)
			line := "  --" + e.f.Name
			if typ != "" {
				line += " " + typ
			}
			if def := shownDefault(e.f, fs); def != "" {
				line += "  (default " + def + ")"
			}
			fmt.Fprintln(w, line)
			if usage != "" {
				fmt.Fprintln(w, wrap(upperFirst(usage), 6))
			}
		}
	}
	if cmd != "help" {
		fmt.Fprintln(w, "\nFlags may come before or after the arguments; -- ends them.")
	}
}

// defaultsNote says which configuration train's and bench's defaults are
// of: they depend on --task and --preset, as startConfig chooses.
func defaultsNote(cmd string, fs *flag.FlagSet) string {
	task, preset := fs.Lookup("task"), fs.Lookup("preset")
	if task == nil || preset == nil {
		return ""
	}
	t, p := task.Value.String(), preset.Value.String()
	switch {
	case p != "":
		return fmt.Sprintf("The defaults shown are those of --preset %s, and the task parameters' those of --task %s.", p, t)
	case t == "chars":
		return fmt.Sprintf("The defaults shown are those --task chars uses: it starts from --preset %s (nanoGPT's shakespeare_char on a CPU), not from the toy tasks' defaults.", config.PresetNanoGPTCPU)
	}
	return fmt.Sprintf("The defaults shown are those of --task %s. --task chars starts from other defaults, --preset %s's: 'qkv %s --task chars --help' shows them.", t, config.PresetNanoGPTCPU, cmd)
}

// flagType returns the name of f's value ("" for a bool) and its usage
// without the back-quoted name flag.UnquoteUsage takes it from.
func flagType(f *flag.Flag) (string, string) {
	name, usage := flag.UnquoteUsage(f)
	if name == "" {
		return "", usage
	}
	if strings.Contains(f.Usage, "`") {
		return name, usage
	}
	if m, ok := metavars[f.Name]; ok {
		return m, usage
	}
	switch v := f.Value.(type) {
	case fieldFlag:
		switch v.v.Kind() {
		case reflect.String:
			if v.v.Type().Name() != "string" {
				return "NAME", usage
			}
			return "STRING", usage
		case reflect.Int, reflect.Uint64:
			return "INT", usage
		case reflect.Float64:
			return "FLOAT", usage
		}
	case kindFlag[layers.AttentionImpl]:
		return "NAME", usage
	}
	if name == "uint" {
		return "INT", usage
	}
	return strings.ToUpper(name), usage
}

// shownDefault returns the default --help shows for f: its own, or for a
// task parameter, whose 0 keeps the task's default, that default of the
// task given (or of the default task); "" for none.
func shownDefault(f *flag.Flag, fs *flag.FlagSet) string {
	if slices.Contains(taskFlagNames, f.Name) {
		task := "sort"
		if t := fs.Lookup("task"); t != nil {
			task = t.Value.String()
		}
		if def := taskDefault(task, f.Name); def != "" {
			return def + " for --task " + task
		}
		return ""
	}
	switch f.DefValue {
	case "", "0", "false":
		return ""
	}
	return f.DefValue
}

// taskDefault returns task's default of the parameter of the task flag
// name, or "" if it has none.
func taskDefault(task, name string) string {
	b, err := json.Marshal(data.DefaultConfig(task))
	if err != nil {
		return ""
	}
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return ""
	}
	v, ok := m[strings.ReplaceAll(name, "-", "_")]
	if !ok {
		return ""
	}
	return fmt.Sprint(v)
}

// wrap fills text to lines of at most 80 columns, each indented by indent
// spaces.
func wrap(text string, indent int) string {
	pad := strings.Repeat(" ", indent)
	var b strings.Builder
	col := 0
	for _, word := range strings.Fields(text) {
		switch {
		case col == 0:
			b.WriteString(pad)
			col = indent
		case col+1+len(word) > 80:
			b.WriteString("\n" + pad)
			col = indent
		default:
			b.WriteByte(' ')
			col++
		}
		b.WriteString(word)
		col += len(word)
	}
	return b.String()
}

// upperFirst returns s with its first letter upper-case.
func upperFirst(s string) string {
	for i, r := range s {
		return string(unicode.ToUpper(r)) + s[i+len(string(r)):]
	}
	return s
}

// usage writes the top-level help.
func usage(w io.Writer) {
	fmt.Fprintln(w, "qkv: Transformer attention as a gorgonia graph, trained on toy sequence tasks.")
	fmt.Fprintln(w, "\nUsage: qkv <command> [flags] [arguments]\n\nCommands:")
	for _, n := range commandNames() {
		fmt.Fprintf(w, "  %-11s%s\n", n, wrap(commands[n].summary, 13)[13:])
	}
	fmt.Fprintln(w, "\nRun 'qkv help <command>' or 'qkv <command> --help' for a command's flags,")
	fmt.Fprintln(w, "'qkv --version' for the version. Flags may come before or after a command's")
	fmt.Fprintln(w, "arguments; -- ends them.")
}

// runHelp prints the top-level help, or a command's: qkv help CMD is
// qkv CMD --help.
func runHelp(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		usage(stdout)
		return nil
	}
	if len(args) > 1 {
		return fmt.Errorf("%w: give one command: qkv help <command>", errUsage)
	}
	cmd, ok := commands[args[0]]
	if !ok {
		return fmt.Errorf("%w: unknown command %q%s; the commands are %s", errUsage, args[0], didYouMean(args[0], "", commandNames()), strings.Join(commandNames(), ", "))
	}
	return cmd.run([]string{"--help"}, stdout, stderr)
}

// runVersion prints the version line.
func runVersion(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("version", "", stderr)
	if err := parse(fs, args, 0); err != nil {
		return err
	}
	bi, ok := debug.ReadBuildInfo()
	_, err := fmt.Fprintln(stdout, versionLine(bi, ok))
	return err
}

// versionLine says which qkv this is: the main module's version ("(devel)"
// when built from a checkout without one), the VCS revision, its time and
// whether the tree was modified, and the Go toolchain and platform:
//
//	qkv (devel) (revision 4b487ac..., 2025-06-01T12:00:00Z, modified; go1.24.1 linux/amd64)
func versionLine(bi *debug.BuildInfo, ok bool) string {
	version, goVersion := "(devel)", runtime.Version()
	settings := map[string]string{}
	if ok {
		if bi.Main.Version != "" {
			version = bi.Main.Version
		}
		if bi.GoVersion != "" {
			goVersion = bi.GoVersion
		}
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
	}
	vcs := "revision unknown"
	if rev := settings["vcs.revision"]; rev != "" {
		vcs = "revision " + rev
		if t := settings["vcs.time"]; t != "" {
			vcs += ", " + t
		}
		if settings["vcs.modified"] == "true" {
			vcs += ", modified"
		}
	}
	return fmt.Sprintf("qkv %s (%s; %s %s/%s)", version, vcs, goVersion, runtime.GOOS, runtime.GOARCH)
}
