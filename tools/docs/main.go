// Command docs regenerates the numbers in qkv's documentation.
//
// Every table of results in README.md and docs/*.md that comes from a qkv
// command sits between markers,
//
//	<!-- qkv:begin NAME -->
//	...
//	<!-- qkv:end -->
//
// and is written by this program: it builds cmd/qkv, runs each row's command
// exactly as the table prints it (in a fresh temporary directory of its
// own, so `--out runs/x` writes there), reads the numbers from the run's
// summary.json or output, and rewrites the block, stamped with the commit
// and the CPU it was made on.
//
//	go run ./tools/docs                  rerun every block and rewrite the docs
//	go run ./tools/docs -only a,b        rerun the blocks named a and b
//	go run ./tools/docs -check           rerun the deterministic rows of the fast blocks, fail listing every stale number
//	go run ./tools/docs -check -all      the same for every row (tens of minutes)
//	go run ./tools/docs -list            name every block, its file and its rows
//
// Steps, held-out scores, parameter counts, gradient-check errors and the
// verdicts of the claims that time nothing repeat bit for bit from the seed;
// wall times do not, so -check never compares them (they carry the commit
// and CPU of the run that made them).
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/qkv-dev/qkv/internal/fsx"
)

func main() {
	root := flag.String("root", ".", "the repository's root")
	check := flag.Bool("check", false, "rerun and compare instead of rewriting; exit 1 listing every stale number")
	all := flag.Bool("all", false, "with -check, also rerun the slow rows")
	only := flag.String("only", "", "comma-separated blocks to rerun (default: every block)")
	jobs := flag.Int("j", 0, "rows run at a time (default: 1 when rewriting, so the wall times are a quiet machine's; 2 with -check)")
	list := flag.Bool("list", false, "list the blocks and their rows, run nothing")
	flag.Parse()
	if *list {
		for _, b := range blocks {
			fmt.Printf("%s (%s)\n", b.name, b.file)
			for _, r := range b.rows {
				fmt.Printf("  %s%s\n", strings.Join(r.cmds, " && "), map[bool]string{true: "   [slow: -check -all]"}[r.slow])
			}
		}
		return
	}
	if *jobs <= 0 {
		*jobs = 1
		if *check {
			*jobs = 2
		}
	}
	sel, err := selectBlocks(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "docs:", err)
		os.Exit(2)
	}
	if err := run(*root, sel, *check, *all, *jobs); err != nil {
		fmt.Fprintln(os.Stderr, "docs:", err)
		os.Exit(1)
	}
}

func selectBlocks(only string) ([]*block, error) {
	if only == "" {
		return blocks, nil
	}
	var sel []*block
	for _, n := range strings.Split(only, ",") {
		i := slices.IndexFunc(blocks, func(b *block) bool { return b.name == n })
		if i < 0 {
			return nil, fmt.Errorf("no block %q (-list names them)", n)
		}
		sel = append(sel, blocks[i])
	}
	return sel, nil
}

// job is one row of one block to run.
type job struct {
	b   *block
	i   int
	out result
	err error
}

func run(root string, sel []*block, check, all bool, jobs int) error {
	root, err := filepath.Abs(root)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "qkv-docs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	bin := filepath.Join(tmp, "qkv")
	start := time.Now()
	fmt.Fprintf(os.Stderr, "building cmd/qkv ...\n")
	build := exec.Command("go", "build", "-o", bin, "./cmd/qkv")
	build.Dir, build.Stdout, build.Stderr = root, os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("go build ./cmd/qkv: %w", err)
	}
	var todo []*job
	skipped := map[*block][]int{}
	for _, b := range sel {
		for i, r := range b.rows {
			if check && r.slow && !all {
				skipped[b] = append(skipped[b], i)
				continue
			}
			todo = append(todo, &job{b: b, i: i})
		}
	}
	// Rewriting, the blocks whose rows take least go first, and each block
	// is written as soon as its rows are done, so that an interrupted run
	// keeps what it finished. Checking, the longest rows go first, so that a
	// slow row does not start last.
	total := map[*block]float64{}
	left := map[*block]int{}
	for _, j := range todo {
		total[j.b] += j.b.rows[j.i].estimate
		left[j.b]++
	}
	slices.SortStableFunc(todo, func(a, b *job) int {
		if check {
			return int(b.b.rows[b.i].estimate - a.b.rows[a.i].estimate)
		}
		return int(total[a.b] - total[b.b])
	})
	stamp := environment(root, jobs)
	var written []string
	var writeErr error
	ch := make(chan *job)
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				t0 := time.Now()
				dir, err := os.MkdirTemp(tmp, "row-")
				if err == nil {
					j.out, j.err = runRow(context.Background(), bin, dir, j.b.rows[j.i])
				} else {
					j.err = err
				}
				mu.Lock()
				done++
				status := "ok"
				if j.err != nil {
					status = "FAILED: " + j.err.Error()
				}
				fmt.Fprintf(os.Stderr, "[%d/%d] %s row %d (%.0f s): %s\n", done, len(todo), j.b.name, j.i+1, time.Since(t0).Seconds(), status)
				if left[j.b]--; left[j.b] == 0 && !check {
					if err := writeBlock(root, j.b, todo, stamp); err != nil {
						fmt.Fprintf(os.Stderr, "%s: %v\n", j.b.name, err)
						writeErr = err
					} else {
						written = append(written, j.b.name)
					}
				}
				mu.Unlock()
			}
		}()
	}
	for _, j := range todo {
		ch <- j
	}
	close(ch)
	wg.Wait()

	var failed []string
	for _, j := range todo {
		if j.err != nil {
			failed = append(failed, fmt.Sprintf("%s row %d (%s): %v", j.b.name, j.i+1, strings.Join(j.b.rows[j.i].cmds, " && "), j.err))
		}
	}
	var stale []string
	if check {
		for _, b := range sel {
			results, ok := resultsOf(b, todo)
			if !ok {
				continue // its rows' failures are reported below
			}
			text, err := os.ReadFile(filepath.Join(root, b.file))
			if err != nil {
				return err
			}
			old, err := extract(string(text), b.name)
			if err != nil {
				return fmt.Errorf("%s: %w", b.file, err)
			}
			stale = append(stale, compare(b, old, b.render(results, stamp), skipped[b])...)
		}
		for _, b := range sel {
			if n := len(skipped[b]); n > 0 {
				fmt.Fprintf(os.Stderr, "%s: %d slow rows not rerun (-all reruns them)\n", b.name, n)
			}
		}
		fmt.Fprintf(os.Stderr, "checked %d rows in %.0f s\n", len(todo), time.Since(start).Seconds())
	}
	if len(stale) > 0 {
		fmt.Fprintf(os.Stderr, "%d stale numbers; `go run ./tools/docs -only BLOCK` regenerates a block:\n  %s\n", len(stale), strings.Join(stale, "\n  "))
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d rows failed (their blocks are left as they were):\n  %s", len(failed), strings.Join(failed, "\n  "))
	}
	if len(stale) > 0 {
		return fmt.Errorf("%d stale numbers", len(stale))
	}
	return writeErr
}

// resultsOf gathers block b's results from the jobs run; false if a row of
// b failed.
func resultsOf(b *block, todo []*job) ([]*result, bool) {
	results := make([]*result, len(b.rows))
	for _, j := range todo {
		if j.b != b {
			continue
		}
		if j.err != nil {
			return nil, false
		}
		out := j.out
		results[j.i] = &out
	}
	return results, true
}

// writeBlock rewrites block b in its file from its jobs' results, reading
// the file just before writing so that only this block changes.
func writeBlock(root string, b *block, todo []*job, e env) error {
	results, ok := resultsOf(b, todo)
	if !ok {
		return nil
	}
	path := filepath.Join(root, b.file)
	text, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	updated, err := replace(string(text), b.name, b.render(results, e))
	if err != nil {
		return fmt.Errorf("%s: %w", b.file, err)
	}
	// Whole or not at all, as qkv writes its own outputs: an interrupted
	// run leaves the file as it was.
	if err := fsx.WriteFile(path, ".md", func(w io.Writer) error { _, err := io.WriteString(w, updated); return err }); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "rewrote %s in %s\n", b.name, b.file)
	return nil
}

// env is what a block's stamp says about where it was made.
type env struct {
	commit string // short hash, "-dirty" when Go files differ from it
	cpu    string // /proc/cpuinfo's model name
	cores  int
	jobs   int
}

func environment(root string, jobs int) env {
	e := env{commit: "unknown", cpu: cpuModel(), cores: runtime.NumCPU(), jobs: jobs}
	if out, err := gitOut(root, "rev-parse", "--short=7", "HEAD"); err == nil {
		e.commit = out
		if d := exec.Command("git", "diff", "--quiet", "HEAD", "--", "*.go", "go.mod", "go.sum"); true {
			d.Dir = root
			if d.Run() != nil {
				e.commit += "-dirty"
			}
		}
	}
	return e
}

func gitOut(root string, args ...string) (string, error) {
	c := exec.Command("git", args...)
	c.Dir = root
	out, err := c.Output()
	return strings.TrimSpace(string(out)), err
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				return strings.TrimSpace(v)
			}
		}
	}
	return runtime.GOARCH + " CPU"
}

// stamp is the first line of every generated block.
func (e env) stamp(timed bool) string {
	s := fmt.Sprintf("<sub>Generated by `go run ./tools/docs` at commit %s", e.commit)
	if timed {
		s += fmt.Sprintf("; times on %s, %d cores", e.cpu, e.cores)
		if e.jobs > 1 {
			s += fmt.Sprintf(", %d rows at a time", e.jobs)
		}
	}
	return s + ".</sub>"
}

const beginFmt, endMarker = "<!-- qkv:begin %s -->", "<!-- qkv:end -->"

// span returns the byte range of block name's content in text, between
// its markers.
func span(text, name string) (int, int, error) {
	begin := fmt.Sprintf(beginFmt, name)
	i := strings.Index(text, begin)
	if i < 0 {
		return 0, 0, fmt.Errorf("no %s", begin)
	}
	if strings.Contains(text[i+len(begin):], begin) {
		return 0, 0, fmt.Errorf("%s twice", begin)
	}
	i += len(begin)
	j := strings.Index(text[i:], endMarker)
	if j < 0 {
		return 0, 0, fmt.Errorf("%s has no %s", begin, endMarker)
	}
	return i, i + j, nil
}

func extract(text, name string) (string, error) {
	i, j, err := span(text, name)
	if err != nil {
		return "", err
	}
	return text[i:j], nil
}

func replace(text, name, content string) (string, error) {
	i, j, err := span(text, name)
	if err != nil {
		return "", err
	}
	return text[:i] + "\n" + strings.TrimSpace(content) + "\n" + text[j:], nil
}

// runRow runs a row's commands one after another in dir; each command's
// first word is qkv (or ./qkv, or go run ./cmd/qkv) and runs bin.
func runRow(ctx context.Context, bin, dir string, r row) (result, error) {
	var res result
	for _, c := range r.cmds {
		args, err := commandArgs(c)
		if err != nil {
			return res, err
		}
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "NO_COLOR=1")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err = cmd.Run()
		var exit *exec.ExitError
		if err != nil && !(errors.As(err, &exit) && slices.Contains(r.exitOK, exit.ExitCode())) {
			return res, fmt.Errorf("%s: %v\n%s", c, err, tail(stderr.String(), 5))
		}
		out := stdout.String()
		if r.stderr {
			out = stderr.String()
		}
		res.outs, res.dir = append(res.outs, out), dir
	}
	return res, nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// commandArgs splits a documented command line into qkv's arguments: the
// program (qkv, ./qkv or go run ./cmd/qkv) dropped, single and double
// quotes honoured as a shell does for these plain words.
func commandArgs(line string) ([]string, error) {
	words, err := shellWords(line)
	if err != nil {
		return nil, err
	}
	switch {
	case len(words) >= 1 && (words[0] == "qkv" || words[0] == "./qkv"):
		return words[1:], nil
	case len(words) >= 3 && words[0] == "go" && words[1] == "run" && words[2] == "./cmd/qkv":
		return words[3:], nil
	}
	return nil, fmt.Errorf("%q is not a qkv command", line)
}

func shellWords(line string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, c := range line {
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteRune(c)
			}
		case c == '"' || c == '\'':
			quote, inWord = c, true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(c)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unclosed quote in %q", line)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}
