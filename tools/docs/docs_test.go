package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

const root = "../.."

// intentionallyWrong are command lines the docs print to show an error.
var intentionallyWrong = map[string]bool{
	"qkv trian": true, // the did-you-mean example
}

// docFiles are README.md and every docs/*.md.
func docFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{filepath.Join(root, "README.md")}, files...)
}

var (
	fenceRE = regexp.MustCompile("(?ms)^```[^\n]*\n(.*?)^```")
	spanRE  = regexp.MustCompile("`([^`]+)`")
)

// commandLines returns every qkv command line of a markdown text: the lines
// of fenced code blocks that start with qkv, ./qkv or go run ./cmd/qkv
// (after an optional "$ "), and the inline code spans that do.
func commandLines(text string) []string {
	var cmds []string
	isCmd := func(s string) bool {
		return strings.HasPrefix(s, "qkv ") || strings.HasPrefix(s, "./qkv ") || s == "qkv" || s == "./qkv" ||
			strings.HasPrefix(s, "go run ./cmd/qkv")
	}
	for _, m := range fenceRE.FindAllStringSubmatch(text, -1) {
		for _, l := range strings.Split(m[1], "\n") {
			l = strings.TrimSpace(strings.TrimPrefix(l, "$ "))
			if c, _, _ := strings.Cut(l, " #"); isCmd(c) {
				cmds = append(cmds, strings.TrimSpace(c))
			}
		}
	}
	rest := fenceRE.ReplaceAllString(text, "")
	for _, m := range spanRE.FindAllStringSubmatch(rest, -1) {
		s := strings.Join(strings.Fields(m[1]), " ")
		if isCmd(s) {
			cmds = append(cmds, s)
		}
	}
	return cmds
}

// flagSets reads each command's flags from qkv CMD --help.
func flagSets(t *testing.T, bin string) map[string]map[string]bool {
	t.Helper()
	out, _ := exec.Command(bin, "--help").CombinedOutput()
	sets := map[string]map[string]bool{}
	inCmds := false
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "Commands:") {
			inCmds = true
			continue
		}
		f := strings.Fields(l)
		if !inCmds || len(f) == 0 || !strings.HasPrefix(l, "  ") {
			continue
		}
		sets[f[0]] = map[string]bool{} // flag name -> takes a value
	}
	if len(sets) == 0 {
		t.Fatalf("qkv --help names no commands:\n%s", out)
	}
	for name, set := range sets {
		help, _ := exec.Command(bin, name, "--help").CombinedOutput()
		for _, l := range strings.Split(string(help), "\n") {
			// "  --name TYPE  (default X)", or "  --name" for a bool.
			if !strings.HasPrefix(l, "  -") {
				continue
			}
			words := strings.Fields(strings.TrimLeft(strings.TrimSpace(l), "-"))
			set[words[0]] = len(words) > 1 && !strings.HasPrefix(words[1], "(")
		}
		set["help"], set["h"] = false, false
	}
	return sets
}

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "qkv-docs-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "qkv")
	build := exec.Command("go", "build", "-o", bin, "./cmd/qkv")
	build.Dir, build.Stderr = root, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "go build ./cmd/qkv:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// TestDocCommandsParse checks that every qkv command line of the docs names
// a command that exists and only flags it has, each with its value.
func TestDocCommandsParse(t *testing.T) {
	sets := flagSets(t, bin)
	n := 0
	for _, file := range docFiles(t) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range commandLines(string(text)) {
			if intentionallyWrong[line] {
				continue
			}
			n++
			if err := parses(line, sets); err != nil {
				t.Errorf("%s: %q: %v", filepath.Base(file), line, err)
			}
		}
	}
	t.Logf("%d command lines parse", n)
}

func parses(line string, sets map[string]map[string]bool) error {
	args, err := commandArgs(line)
	if err != nil {
		return err
	}
	if len(args) == 0 || strings.HasSuffix(args[0], ":") || strings.ToUpper(args[0]) == args[0] {
		return nil // an error message ("qkv predict: ...") or a placeholder (qkv COMMAND)
	}
	set, ok := sets[args[0]]
	if !ok {
		return fmt.Errorf("no command %q", args[0])
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	for name, value := range set {
		if value {
			fs.String(name, "", "")
		} else {
			fs.Bool(name, false, "")
		}
	}
	err = fs.Parse(args[1:])
	if err != nil && strings.HasPrefix(err.Error(), "flag needs an argument") && strings.HasPrefix(args[len(args)-1], "-") {
		return nil // prose naming a flag: "qkv bench --seq"
	}
	return err
}

// TestMarkers checks that every block's markers are in its file once, and
// that every marker in the docs names a block of the tool.
func TestMarkers(t *testing.T) {
	for _, b := range blocks {
		text, err := os.ReadFile(filepath.Join(root, b.file))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := extract(string(text), b.name); err != nil {
			t.Errorf("%s: %v", b.file, err)
		}
	}
	begin := regexp.MustCompile(`<!-- qkv:begin (\S+) -->`)
	for _, file := range docFiles(t) {
		text, _ := os.ReadFile(file)
		for _, m := range begin.FindAllStringSubmatch(string(text), -1) {
			if !slices.ContainsFunc(blocks, func(b *block) bool { return b.name == m[1] }) {
				t.Errorf("%s: marker of block %q, which tools/docs does not write", file, m[1])
			}
		}
	}
}

// TestGeneratedCommandsAreDocumented checks that each row's commands are
// printed, as the tool runs them, in its block.
func TestGeneratedCommandsAreDocumented(t *testing.T) {
	for _, b := range blocks {
		text, _ := os.ReadFile(filepath.Join(root, b.file))
		content, err := extract(string(text), b.name)
		if err != nil {
			continue // TestMarkers reports it
		}
		if b.custom != nil || b.kind == "matrix" || strings.Contains(content, notRun) || !strings.Contains(content, "<sub>Generated") {
			continue
		}
		for _, r := range b.rows {
			for _, c := range r.cmds {
				if !strings.Contains(strings.ReplaceAll(content, `\|`, "|"), c) {
					t.Errorf("%s [%s]: the docs do not print %q; run go run ./tools/docs -only %s", b.file, b.name, c, b.name)
				}
			}
		}
	}
}

func TestShellWords(t *testing.T) {
	got, err := commandArgs(`./qkv sample --checkpoint runs/chars --prompt "func (c *conn) " --tokens 200`)
	want := []string{"sample", "--checkpoint", "runs/chars", "--prompt", "func (c *conn) ", "--tokens", "200"}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("got %q, %v; want %q", got, err, want)
	}
	if _, err := commandArgs(`qkv attend --input "2 0`); err == nil {
		t.Error("an unclosed quote is accepted")
	}
	if _, err := commandArgs(`go test ./...`); err == nil {
		t.Error("go test is taken for a qkv command")
	}
}

func TestCompareFindsStaleNumbers(t *testing.T) {
	b := &block{name: "t", file: "f.md", labels: []string{"task"}, cols: []column{colSteps, colWall}, cmdCol: true,
		rows: []row{{label: []string{"add"}, cmds: []string{"qkv train --task add"}}, {label: []string{"sort"}, cmds: []string{"qkv train"}}}}
	old := "<sub>x</sub>\n\n| task | steps to 1.000 | wall time | command |\n|---|---|---|---|\n| add | 775 | 4.5 s | `qkv train --task add` |\n| sort | 100 | 1.1 s | `qkv train` |\n"
	fresh := "<sub>y</sub>\n\n| task | steps to 1.000 | wall time | command |\n|---|---|---|---|\n| add | 800 | 9.9 s | `qkv train --task add` |\n| sort | 100 | 2.0 s | `qkv train` |\n"
	stale := compare(b, old, fresh, nil)
	if len(stale) != 1 || !strings.Contains(stale[0], `"775"`) || !strings.Contains(stale[0], `"800"`) {
		t.Errorf("compare = %q, want the one stale step count", stale)
	}
	skipped := strings.Replace(fresh, "| 800 | 9.9 s |", "| "+notRun+" | "+notRun+" |", 1)
	if s := compare(b, old, skipped, []int{0}); len(s) != 0 {
		t.Errorf("a row not rerun is reported stale: %q", s)
	}
}

func TestCompareOutputIgnoresTimes(t *testing.T) {
	old := "```\n$ ./qkv train\ntask sort: 100 steps in 1.9 s (18.5 ms/step; 0.2 s of it evaluating), 57701 params\nstopped at step 100\n```\n"
	fresh := "```\n$ ./qkv train\ntask sort: 100 steps in 3.1 s (30.2 ms/step; 0.4 s of it evaluating), 57701 params\nstopped at step 125\n```\n"
	stale := compareOutput("f", old, fresh)
	if len(stale) != 1 || !strings.Contains(stale[0], "step 125") {
		t.Errorf("compareOutput = %q, want only the step", stale)
	}
}
