package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// row is one line of a generated table (or one cell of a matrix, or one
// command of an output block): the commands it runs, one after another in
// one fresh directory.
type row struct {
	label    []string // the table's leading cells, written as given
	cmds     []string // exactly as the docs print them
	slow     bool     // rerun by -check only with -all
	estimate float64  // seconds, roughly: the longest rows start first
	exitOK   []int    // exit statuses other than 0 that are a result (gradcheck's 1)
	timing   bool     // every measured cell moves with the machine: never compared
	stderr   bool     // an output block shows standard error (--help), not standard output
	// show picks the lines of command k's output that an output block prints.
	show func(k int, stdout string) []string
}

// result is what a row's last command left.
type result struct {
	outs []string // each command's standard output
	dir  string   // the row's working directory
}

// last is the last command's standard output.
func (r *result) last() string { return r.outs[len(r.outs)-1] }

// column is a measured column of a table.
type column struct {
	title  string
	timing bool // never compared by -check
	value  func(r *result) (string, error)
}

// block is one generated region of a docs file.
type block struct {
	name, file string
	labels     []string // titles of the rows' leading cells
	cols       []column
	cmdCol     bool // a last column with the row's command
	rows       []row
	// kind is "table" (the default), "output" (a code block of commands
	// and their output) or "matrix" (rows are the cells of a table whose
	// rows are labels[0] and columns matrixCols).
	kind       string
	matrixCols []string
	note       string // a line after the stamp
	untimed    bool   // an output block whose output holds no time (--help)
	// custom, if set, writes the block's table from its results instead.
	custom func(results []*result) string
}

func (b *block) timed() bool {
	if b.kind == "output" {
		return !b.untimed
	}
	return slices.ContainsFunc(b.cols, func(c column) bool { return c.timing }) ||
		slices.ContainsFunc(b.rows, func(r row) bool { return r.timing })
}

// render writes the block's content from results (nil for rows not run).
func (b *block) render(results []*result, e env) string {
	var w strings.Builder
	w.WriteString(e.stamp(b.timed()) + "\n")
	if b.note != "" {
		w.WriteString(b.note + "\n")
	}
	w.WriteString("\n")
	switch {
	case b.custom != nil:
		w.WriteString(b.custom(results))
	case b.kind == "output":
		w.WriteString("```\n")
		for i, r := range b.rows {
			for k, c := range r.cmds {
				w.WriteString("$ " + c + "\n")
				if results == nil || results[i] == nil {
					w.WriteString(notRun + "\n")
					continue
				}
				for _, l := range r.show(k, results[i].outs[k]) {
					w.WriteString(l + "\n")
				}
			}
		}
		w.WriteString("```\n")
	case b.kind == "matrix":
		// rows sharing a label[0] form one line; label[1] is the column.
		w.WriteString("| " + b.labels[0] + " | " + strings.Join(b.matrixCols, " | ") + " |\n")
		w.WriteString("|" + strings.Repeat("---|", len(b.matrixCols)+1) + "\n")
		var order []string
		cells := map[string][]string{}
		for i, r := range b.rows {
			key := r.label[0]
			if cells[key] == nil {
				order = append(order, key)
				cells[key] = make([]string, len(b.matrixCols))
			}
			j := slices.Index(b.matrixCols, r.label[1])
			cells[key][j] = cell(b.cols[0], results, i)
		}
		for _, k := range order {
			w.WriteString("| " + k + " | " + strings.Join(cells[k], " | ") + " |\n")
		}
	default:
		head := append(slices.Clone(b.labels), titles(b.cols)...)
		if b.cmdCol {
			head = append(head, "command")
		}
		w.WriteString("| " + strings.Join(head, " | ") + " |\n")
		w.WriteString("|" + strings.Repeat("---|", len(head)) + "\n")
		for i, r := range b.rows {
			cells := slices.Clone(r.label)
			for _, c := range b.cols {
				cells = append(cells, cell(c, results, i))
			}
			if b.cmdCol {
				cells = append(cells, "`"+strings.ReplaceAll(strings.Join(r.cmds, " && "), "|", `\|`)+"`")
			}
			w.WriteString("| " + strings.Join(cells, " | ") + " |\n")
		}
	}
	return w.String()
}

// notRun marks a cell whose row -check did not rerun.
const notRun = "(not run)"

func cell(c column, results []*result, i int) string {
	if results == nil || results[i] == nil {
		return notRun
	}
	v, err := c.value(results[i])
	if err != nil {
		return "error: " + err.Error()
	}
	return strings.ReplaceAll(v, "|", `\|`)
}

func titles(cols []column) []string {
	var t []string
	for _, c := range cols {
		t = append(t, c.title)
	}
	return t
}

// compare lists every number of old (the docs) that the fresh rendering
// contradicts, skipping timings and the rows not rerun.
func compare(b *block, old, fresh string, skipped []int) []string {
	where := fmt.Sprintf("%s [%s]", b.file, b.name)
	if b.kind == "output" {
		if len(skipped) > 0 {
			return nil // its output is one run of all its rows
		}
		return compareOutput(where, old, fresh)
	}
	ot, ft := tableRows(old), tableRows(fresh)
	if len(ot) != len(ft) {
		return []string{fmt.Sprintf("%s: the docs have %d table lines, the tool %d: regenerate the block", where, len(ot), len(ft))}
	}
	var timing []bool
	switch {
	case b.custom != nil:
	case b.kind == "matrix":
		timing = make([]bool, len(b.matrixCols)+1)
	default:
		timing = make([]bool, len(b.labels))
		for _, c := range b.cols {
			timing = append(timing, c.timing)
		}
		if b.cmdCol {
			timing = append(timing, false)
		}
	}
	var stale []string
	for i := range ft {
		if len(ot[i]) != len(ft[i]) {
			stale = append(stale, fmt.Sprintf("%s line %d: %d cells in the docs, %d rerun", where, i+1, len(ot[i]), len(ft[i])))
			continue
		}
		rowTiming := b.kind == "" && i > 0 && i-1 < len(b.rows) && b.rows[i-1].timing
		for j := range ft[i] {
			if ft[i][j] == notRun || (j < len(timing) && timing[j]) || (rowTiming && j >= len(b.labels)) || ot[i][j] == ft[i][j] {
				continue
			}
			stale = append(stale, fmt.Sprintf("%s row %q, %q: the docs say %q, the rerun gives %q", where, ot[i][0], ot[0][j], ot[i][j], ft[i][j]))
		}
	}
	return stale
}

// tableRows splits a markdown table's lines into cells on unescaped |.
func tableRows(s string) [][]string {
	var rows [][]string
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|---") {
			continue
		}
		var cells []string
		var cur strings.Builder
		for i := 1; i < len(line); i++ {
			switch {
			case line[i] == '\\' && i+1 < len(line) && line[i+1] == '|':
				cur.WriteString(`\|`)
				i++
			case line[i] == '|':
				cells = append(cells, strings.TrimSpace(cur.String()))
				cur.Reset()
			default:
				cur.WriteByte(line[i])
			}
		}
		rows = append(rows, cells)
	}
	return rows
}

// timingRE matches the durations and rates of an output block.
var timingRE = regexp.MustCompile(`[0-9][0-9.,]*( s\b| ms/step| ms\b| characters/s|s\)| min)`)

func compareOutput(where, old, fresh string) []string {
	strip := func(s string) []string {
		var lines []string
		for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
			if strings.HasPrefix(l, "<sub>") {
				continue
			}
			lines = append(lines, timingRE.ReplaceAllString(l, "T"))
		}
		return lines
	}
	ol, fl := strip(old), strip(fresh)
	var stale []string
	skip := false
	for i := 0; i < max(len(ol), len(fl)); i++ {
		var o, f string
		if i < len(ol) {
			o = ol[i]
		}
		if i < len(fl) {
			f = fl[i]
		}
		if strings.HasPrefix(f, "$ ") {
			skip = false
		}
		if f == notRun {
			skip = true
		}
		if skip || o == f {
			continue
		}
		stale = append(stale, fmt.Sprintf("%s output line %d: the docs say %q, the rerun gives %q", where, i+1, o, f))
	}
	return stale
}

// summary is the part of a run's summary.json the tables print.
type summary struct {
	Steps        int     `json:"steps"`
	WallSeconds  float64 `json:"wall_seconds"`
	Params       int     `json:"params"`
	ExactMatch   float64 `json:"exact_match"`
	ValLoss      float64 `json:"val_loss"`
	StoppedEarly bool    `json:"stopped_early"`
}

// summaryOf reads the summary.json the row's run wrote (the newest, if
// the row trained more than once).
func summaryOf(r *result) (summary, error) {
	var newest string
	var t int64
	err := filepath.WalkDir(r.dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Name() != "summary.json" {
			return err
		}
		info, err := d.Info()
		if err == nil && info.ModTime().UnixNano() >= t {
			newest, t = p, info.ModTime().UnixNano()
		}
		return err
	})
	var s summary
	if err != nil {
		return s, err
	}
	if newest == "" {
		return s, fmt.Errorf("no summary.json")
	}
	b, err := os.ReadFile(newest)
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(b, &s)
}

// The columns of the training tables.
var (
	colSteps = column{title: "steps to 1.000", value: func(r *result) (string, error) {
		s, err := summaryOf(r)
		if err != nil {
			return "", err
		}
		if s.StoppedEarly {
			return fmt.Sprint(s.Steps), nil
		}
		return fmt.Sprintf("not reached: %.3f after %d", s.ExactMatch, s.Steps), nil
	}}
	colExact = column{title: "held-out exact match", value: func(r *result) (string, error) {
		s, err := summaryOf(r)
		return fmt.Sprintf("%.3f", s.ExactMatch), err
	}}
	colParams = column{title: "parameters", value: func(r *result) (string, error) {
		s, err := summaryOf(r)
		return thousands(s.Params), err
	}}
	colWall = column{title: "wall time", timing: true, value: func(r *result) (string, error) {
		s, err := summaryOf(r)
		return fmt.Sprintf("%.1f s", s.WallSeconds), err
	}}
	// colStepsShort is a matrix cell: steps, or "not learned (exact match)".
	colStepsShort = column{title: "steps", value: func(r *result) (string, error) {
		s, err := summaryOf(r)
		if err != nil {
			return "", err
		}
		if s.StoppedEarly {
			return fmt.Sprint(s.Steps), nil
		}
		return fmt.Sprintf("not learned (%.3f)", s.ExactMatch), nil
	}}
)

func thousands(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
