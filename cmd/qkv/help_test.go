package main

import (
	"fmt"
	"regexp"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/cmd/qkv/internal/explain"
	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/train/config"
)

// TestHelpOnStdout: help asked for goes to stdout with exit 0, in every
// spelling; qkv help CMD is qkv CMD --help; a command missing or unknown
// is a usage error on stderr, exit 2.
func TestHelpOnStdout(t *testing.T) {
	for _, a := range [][]string{{"--help"}, {"-h"}, {"help"}, {"-help"}, {"help", "help"}} {
		code, out, errOut := qkv(a...)
		if code != 0 || !strings.Contains(out, "Commands:") || errOut != "" {
			t.Errorf("qkv %q: exit %d, stdout %q, stderr %q; want the commands on stdout", a, code, out, errOut)
		}
	}
	for _, cmd := range commandNames() {
		if cmd == "help" {
			continue
		}
		code, out, errOut := qkv(cmd, "--help")
		if code != 0 || !strings.HasPrefix(out, "Usage: qkv "+cmd) || errOut != "" {
			t.Errorf("qkv %s --help: exit %d, stdout %q, stderr %q", cmd, code, out, errOut)
		}
		// The texts name the memory available now (--max-memory's
		// default), which other processes move between two calls.
		if code, short, _ := qkv(cmd, "-h"); code != 0 || memoryNow(short) != memoryNow(out) {
			t.Errorf("qkv %s -h: exit %d, and not --help's text", cmd, code)
		}
		if code, viaHelp, _ := qkv("help", cmd); code != 0 || memoryNow(viaHelp) != memoryNow(out) {
			t.Errorf("qkv help %s: exit %d, and not %s --help's text:\n%s", cmd, code, cmd, viaHelp)
		}
	}
	for _, c := range []validationCase{
		{nil, 2, []string{"Commands:"}},
		{args("help trian"), 2, []string{`qkv help: unknown command "trian" (did you mean train?)`}},
		{args("help train eval"), 2, []string{"give one command"}},
		{args("trian --help"), 2, []string{`unknown command "trian"`}},
	} {
		c.check(t)
	}
	// --help wins over the mistakes around it: the reader asked how.
	if code, out, _ := qkv("train", "--bogus", "--help"); code != 2 || out != "" {
		t.Errorf("qkv train --bogus --help: exit %d; want the usage error first", code)
	}
	if code, out, _ := qkv("train", "--help", "--bogus"); code != 0 || !strings.Contains(out, "Task flags:") {
		t.Errorf("qkv train --help --bogus: exit %d, stdout %q", code, out)
	}
}

// TestHelpGroupsFlags: a command's flags are listed by group, each as
// "--flag TYPE" and its default, in a fixed order, every flag in a group of
// its own (none under "Other").
func TestHelpGroupsFlags(t *testing.T) {
	_, out, _ := qkv("train", "--help")
	var headings []string
	for _, l := range strings.Split(out, "\n") {
		if h, ok := strings.CutSuffix(l, " flags:"); ok {
			headings = append(headings, h)
		}
	}
	want := []string{"Task", "Model", "Attention", "Linear attention", "Optimizer", "Run", "Output"}
	if !slices.Equal(headings, want) {
		t.Errorf("train --help's groups %q, want %q", headings, want)
	}
	for _, line := range []string{
		"\n  --task NAME  (default sort)\n",
		"\n  --length INT  (default 6 for --task sort)\n",
		"\n  --lr FLOAT  (default 0.003)\n",
		"\n  --bias  (default true)\n",
		"\n  --post-ln\n",
		"\n  --out DIR\n",
		"\n  --max-memory SIZE\n",
	} {
		if !strings.Contains(out, line) {
			t.Errorf("train --help lacks the line %q", strings.TrimSpace(line))
		}
	}
	if regexp.MustCompile(`(?m)^\s+-[a-z]`).MatchString(out) {
		t.Errorf("train --help writes a flag with one dash:\n%s", out)
	}
	// The order is fixed: the task first in its group, then dim, heads.
	if i, j, k := strings.Index(out, "--task NAME"), strings.Index(out, "--dim INT"), strings.Index(out, "--heads INT"); !(i < j && j < k) {
		t.Errorf("train --help's order: --task at %d, --dim at %d, --heads at %d", i, j, k)
	}
	if again := func() string { _, o, _ := qkv("train", "--help"); return o }(); again != out {
		t.Error("train --help differs between two calls")
	}
	for _, cmd := range commandNames() {
		if _, o, _ := qkv(cmd, "--help"); strings.Contains(o, "Other flags:") {
			t.Errorf("qkv %s --help lists flags under Other: give them a group in groupTable or a group tag", cmd)
		}
	}
	_, out, _ = qkv("sample", "--help")
	for _, line := range []string{"Generation flags:", "  --top-p FLOAT", "  --temperature FLOAT  (default 0.8)", "  --seed INT  (default 1337)", "Checkpoint flags:", "  --checkpoint DIR"} {
		if !strings.Contains(out, line) {
			t.Errorf("sample --help lacks %q", line)
		}
	}
}

// TestHelpShowsTheTasksDefaults: train --help shows the defaults the
// chosen task really uses, and says whose they are: --task chars starts
// from the nanogpt-cpu preset (startConfig), whichever side of --help the
// flag is on.
func TestHelpShowsTheTasksDefaults(t *testing.T) {
	_, def, _ := qkv("train", "--help")
	if def := strings.Join(strings.Fields(def), " "); !strings.Contains(def, "The defaults shown are those of --task sort.") || !strings.Contains(def, "'qkv train --task chars --help'") {
		t.Errorf("train --help does not say whose defaults it shows:\n%s", def)
	}
	cfg, err := startConfig(args("--task chars"))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range [][]string{args("train --task chars --help"), args("train --help --task chars")} {
		_, out, _ := qkv(a...)
		if !strings.Contains(strings.Join(strings.Fields(out), " "), "The defaults shown are those --task chars uses: it starts from --preset nanogpt-cpu") {
			t.Errorf("qkv %q does not say its defaults are nanogpt-cpu's", a)
		}
		for _, line := range []string{
			"  --lr FLOAT  (default " + fieldString(cfg.LR) + ")",
			"  --dim INT  (default " + fieldString(cfg.Model.Dim) + ")",
			"  --context INT  (default 64 for --task chars)",
		} {
			if !strings.Contains(out, line) {
				t.Errorf("qkv %q lacks %q:\n%s", a, line, out)
			}
		}
	}
	_, out, _ := qkv("train", "--task", "recall", "--help")
	if !strings.Contains(out, "  --pairs INT  (default 4 for --task recall)") || strings.Contains(out, "for --task sort") {
		t.Errorf("train --task recall --help does not show recall's parameters:\n%s", out)
	}
}

// fieldString formats a default as the flags do.
func fieldString(v any) string {
	switch x := v.(type) {
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case int:
		return strconv.Itoa(x)
	}
	return fmt.Sprint(v)
}

// TestVersion: --version and qkv version print one line: the module's
// version, "(devel)" when none, the VCS revision, its time and whether the
// tree was modified, and the toolchain.
func TestVersion(t *testing.T) {
	for _, a := range [][]string{{"--version"}, {"version"}, {"-version"}} {
		code, out, errOut := qkv(a...)
		if code != 0 || !regexp.MustCompile(`^qkv \S+ \(revision [^;]+; go\S* \S+/\S+\)\n$`).MatchString(out) || errOut != "" {
			t.Errorf("qkv %q: exit %d, stdout %q, stderr %q", a, code, out, errOut)
		}
	}
	bi := &debug.BuildInfo{GoVersion: "go1.99", Main: debug.Module{Path: "github.com/qkv-dev/qkv", Version: "(devel)"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "4b487acee030b56188908cd01d21df5ace90146c"},
		{Key: "vcs.time", Value: "2025-06-01T12:00:00Z"},
		{Key: "vcs.modified", Value: "true"},
	}}
	if got := versionLine(bi, true); !strings.HasPrefix(got, "qkv (devel) (revision 4b487acee030b56188908cd01d21df5ace90146c, 2025-06-01T12:00:00Z, modified; go1.99 ") {
		t.Errorf("versionLine: %q", got)
	}
	bi.Main.Version, bi.Settings = "v1.2.3", bi.Settings[:2]
	if got := versionLine(bi, true); !strings.HasPrefix(got, "qkv v1.2.3 (revision 4b487acee030b56188908cd01d21df5ace90146c, 2025-06-01T12:00:00Z; go1.99 ") {
		t.Errorf("versionLine of a tagged, clean build: %q", got)
	}
	if got := versionLine(nil, false); !strings.HasPrefix(got, "qkv (devel) (revision unknown; go") {
		t.Errorf("versionLine without build info: %q", got)
	}
}

// TestInterleavedFlags: flags may follow the positional arguments, and --
// ends them.
func TestInterleavedFlags(t *testing.T) {
	fs := newFlags("explain", "", nil)
	asJSON := fs.Bool("json", false, "")
	seed := fs.Int("seed", 1, "")
	if err := parse(fs, args("soft-lookup --json scaling --seed 3"), -1); err != nil {
		t.Fatal(err)
	}
	if !*asJSON || *seed != 3 || !slices.Equal(fs.Args(), []string{"soft-lookup", "scaling"}) {
		t.Errorf("interleaved: json %v, seed %d, args %q", *asJSON, *seed, fs.Args())
	}
	fs = newFlags("explain", "", nil)
	asJSON = fs.Bool("json", false, "")
	if err := parse(fs, args("a -- --json b"), -1); err != nil {
		t.Fatal(err)
	}
	if *asJSON || !slices.Equal(fs.Args(), []string{"a", "--json", "b"}) {
		t.Errorf("after --: json %v, args %q", *asJSON, fs.Args())
	}
	// explain takes its flags after a claim, which it would otherwise call
	// an unknown claim "--json".
	validationCase{args("explain soft-lookup --jsn"), 2, []string{"unknown flag --jsn (did you mean --json?)"}}.check(t)
	validationCase{args("explain sotf-lookup --json"), 2, []string{`unknown claim "sotf-lookup" (did you mean soft-lookup?)`}}.check(t)
	dir := trainedRun(t) // sort, length 3
	code, out, errOut := qkv("predict", "2 0 1", "--checkpoint", dir)
	if code != 0 || len(strings.Fields(out)) != 3 {
		t.Errorf("predict PROMPT --checkpoint DIR: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// TestSuggestionsAndExitCodes: the did-you-mean hints for tasks and claims,
// the sampler's errors naming their flag once, and exit 2 for every usage
// mistake, a --checkpoint that is not there among them.
func TestSuggestionsAndExitCodes(t *testing.T) {
	empty := t.TempDir()
	for _, c := range []validationCase{
		{args("train --task sotr"), 2, []string{`qkv train: --task: unknown task "sotr" (did you mean --task sort?); the tasks are ` + strings.Join(data.Names(), ", ")}},
		{args("bench --task revrse"), 2, []string{"(did you mean --task reverse?)"}},
		{args("train --task juggle"), 2, []string{`unknown task "juggle" (known tasks:`}},
		{args("sample --checkpoint x --top-p 2"), 2, []string{"qkv sample: --top-p must be in [0, 1]"}},
		{args("sample --checkpoint x --top-k -1"), 2, []string{"qkv sample: --top-k must be at least 0"}},
		{args("sample --checkpoint x --temperature -1"), 2, []string{"qkv sample: --temperature must be"}},
		{args("eval --checkpoint /nonexistent"), 2, []string{"qkv eval: --checkpoint /nonexistent: no such directory"}},
		{args("predict 1 2 --checkpoint /nonexistent"), 2, []string{"--checkpoint /nonexistent: no such directory"}},
		{[]string{"sample", "--checkpoint", empty}, 2, []string{"holds no checkpoint"}},
		{args("train --steps"), 2, []string{"qkv train: --steps needs a value"}},
		{args("train --bias=maybe"), 2, []string{`qkv train: --bias: invalid value "maybe"`}},
		{args("version extra"), 2, []string{`unexpected arguments "extra"`}},
		{args("completion"), 2, []string{"qkv completion bash"}},
		{args("completion zsh"), 2, []string{`unknown shell "zsh"`}},
	} {
		c.check(t)
		_, _, stderr := qkv(c.args...)
		if strings.Contains(stderr, "sampler") || strings.Contains(stderr, "infer:") {
			t.Errorf("qkv %q: %q repeats a library's prefix", c.args, stderr)
		}
	}
	for _, id := range explain.IDs() {
		typo := id[1:] + id[:1]
		if len(id) > 6 {
			typo = id[:2] + id[3:] // one letter dropped
		}
		if hint := didYouMean(typo, "", explain.IDs()); len(id) > 6 && hint != " (did you mean "+id+"?)" {
			t.Errorf("claim %q: the slip %q suggests %q", id, typo, hint)
		}
	}
}

// TestCompletionBash: the script names every command, each command's
// flags, the tasks and the claims, and registers itself with complete.
func TestCompletionBash(t *testing.T) {
	code, out, errOut := qkv("completion", "bash")
	if code != 0 || errOut != "" {
		t.Fatalf("completion bash: exit %d, stderr %q", code, errOut)
	}
	if !strings.Contains(out, "complete -o default -F _qkv qkv") {
		t.Error("the script does not register _qkv")
	}
	for _, cmd := range commandNames() {
		if !strings.Contains(out, "\n        "+cmd+") words=") {
			t.Errorf("the script has no case for %s", cmd)
		}
		if cmd == "help" { // its words are the commands
			continue
		}
		for _, f := range commandFlags(cmd) {
			if !regexp.MustCompile(`(?m)^        ` + cmd + `\) words="[^"]*` + regexp.QuoteMeta(f) + `[ "]`).MatchString(out) {
				t.Errorf("the script's %s lacks %s", cmd, f)
			}
		}
	}
	for _, w := range append(data.Names(), "--checkpoint", "--top-p", "--version", explain.IDs()[0]) {
		if !strings.Contains(out, w) {
			t.Errorf("the script lacks %q", w)
		}
	}
	if len(commandFlags("train")) < 60 {
		t.Errorf("train's flags for completion: %q", commandFlags("train"))
	}
}

// TestSchemaGroupTags: every configuration flag has a group tag that
// --help knows, so that a new option is listed under its heading.
func TestSchemaGroupTags(t *testing.T) {
	for _, f := range schemaOf((*config.Config)(nil)) {
		if !slices.Contains(flagGroups, f.group) || f.group == "other" {
			t.Errorf("%s (--%s) has group tag %q, want one of %q", f.path, f.flag, f.group, flagGroups[:len(flagGroups)-1])
		}
	}
}

// memoryNow replaces in a help text the memory available now ("22.4 GiB
// now"), which changes from call to call, by a fixed word.
func memoryNow(help string) string {
	return availableNow.ReplaceAllString(help, "SIZE now")
}

var availableNow = regexp.MustCompile(`[0-9.]+\s+[KMGT]?i?B\s+now`)
