package main

import (
	"errors"
	"flag"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/qkv-dev/qkv/data"
	"github.com/qkv-dev/qkv/internal/memprobe"
	"github.com/qkv-dev/qkv/train/config"
)

// flagFor names the flag that sets a Config field ("--lr"); fields no flag
// sets keep their JSON path. The task's parameters as a whole are written
// as the flags that give them, from cfg.
func flagFor(field string, cfg config.Config) string {
	switch field {
	case "task.params":
		return taskAsFlags(cfg.Task)
	case "model":
		m := cfg.Model
		return fmt.Sprintf("the model (--dim %d --heads %d --layers %d --hidden %d)", m.Dim, m.Heads, m.Layers, m.Hidden)
	}
	if f := fieldFlags[field]; f != "" {
		return "--" + f
	}
	return field
}

// taskAsFlags writes a task as the flags that select it, e.g.
// "--task sort --length 6 --alphabet 3".
func taskAsFlags(t config.TaskSpec) string {
	s := "--task " + t.Name
	p := t.Params
	for _, f := range []struct {
		name string
		v    int
	}{{"length", p.Length}, {"min-length", p.MinLength}, {"max-length", p.MaxLength}, {"alphabet", p.Alphabet},
		{"digits", p.Digits}, {"pairs", p.Pairs}, {"min-pairs", p.MinPairs}, {"max-pairs", p.MaxPairs},
		{"keys", p.Keys}, {"values", p.Values}, {"queries", p.Queries}, {"context", p.Context}} {
		if f.v != 0 {
			s += fmt.Sprintf(" --%s %d", f.name, f.v)
		}
	}
	if p.Data != "" {
		s += " --data " + p.Data
	}
	if p.ValFraction != 0 {
		s += " --val-fraction " + strconv.FormatFloat(p.ValFraction, 'g', -1, 64)
	}
	return s
}

// configError turns a *config.Error in err into a usage error naming
// the flags (exit 2), and a *config.MemoryError into one naming the sizes
// and --max-memory; other errors are returned as they are.
func configError(err error, cfg config.Config) error {
	var ce *config.Error
	if errors.As(err, &ce) {
		name := flagFor(ce.Field, cfg)
		if len(ce.With) > 0 {
			with := make([]string, len(ce.With))
			for i, w := range ce.With {
				with[i] = flagFor(w, cfg)
			}
			name += " (with " + strings.Join(with, ", ") + ")"
		}
		problem := ce.Problem
		if hint := didYouMean(cfg.Task.Name, "--task ", data.Names()); ce.Field == "task.name" && hint != "" {
			problem = fmt.Sprintf("unknown task %q%s; the tasks are %s", cfg.Task.Name, hint, strings.Join(data.Names(), ", "))
		}
		return fmt.Errorf("%w: %s: %s", errUsage, name, problem)
	}
	var me *config.MemoryError
	if errors.As(err, &me) {
		return memoryUsage(me.Estimate, me.Limit, cfg, "the memory limit")
	}
	return err
}

// resolve resolves cfg, whose values came from flags, and checks that
// est(cfg) fits the memory limit before anything is built. Its errors are
// usage errors naming the flags, or the sizes and --max-memory.
func (m *memoryFlag) resolve(cfg *config.Config, est func(config.Config) (config.MemoryEstimate, error)) (data.Task, error) {
	task, tooLarge, err := m.fits(cfg, est, "lower --batch, --dim, --hidden or --layers, or raise --max-memory")
	if tooLarge != "" {
		return nil, fmt.Errorf("%w: %s", errUsage, tooLarge)
	}
	if err != nil {
		return nil, configError(err, *cfg)
	}
	return task, nil
}

// fits resolves cfg and returns, if est(cfg) exceeds the memory limit, the
// message saying so (memoryText, ending in advice), or else the error of
// Resolve as it is. A
// model the layers refuse (e.g. more weights than a graph holds) that would
// not fit in memory either is reported as too large: the sizes and
// --max-memory say more than the layers' limit.
func (m *memoryFlag) fits(cfg *config.Config, est func(config.Config) (config.MemoryEstimate, error), advice string) (task data.Task, tooLarge string, err error) {
	task, err = cfg.Resolve()
	var ce *config.Error
	if err != nil && !(errors.As(err, &ce) && ce.Field == "model" && cfg.Model.Vocab > 0) {
		return nil, "", err
	}
	e, eerr := est(*cfg)
	if eerr != nil {
		if err == nil {
			err = eerr
		}
		return nil, "", err
	}
	if limit, from := m.limit(); e.Total() > float64(limit) {
		return nil, memoryText(e, limit, *cfg, from, advice), nil
	}
	return task, "", err
}

// memoryFlag is --max-memory: the most memory a command may estimate its
// models to need. Zero means the machine's available memory.
type memoryFlag struct{ n int64 }

func (m *memoryFlag) String() string {
	if m == nil || m.n == 0 {
		return ""
	}
	return config.FormatBytes(float64(m.n))
}

func (m *memoryFlag) Set(s string) error {
	n, err := config.ParseBytes(s)
	if err != nil {
		return err
	}
	m.n = n
	return nil
}

// registerMemory adds --max-memory to fs.
func registerMemory(fs *flag.FlagSet) *memoryFlag {
	m := &memoryFlag{}
	fs.Var(m, "max-memory", "refuse, before building, models estimated to need more memory than `SIZE`, e.g. 16GiB or 512MiB (default: the memory available to the process, "+config.FormatBytes(float64(memprobe.Probe().Bytes))+" now)")
	return m
}

// limit returns the limit in bytes and names it: --max-memory, or the
// available memory and the limit that sets it (e.g. a cgroup's).
func (m *memoryFlag) limit() (int64, string) {
	if m.n > 0 {
		return m.n, "--max-memory"
	}
	a := memprobe.Probe()
	return a.Bytes, "the available memory (" + a.Limit + ")"
}

// apply makes the library's own check (model.Build) use the limit given
// by --max-memory, if any, and returns the function that restores it.
func (m *memoryFlag) apply() func() {
	if m.n == 0 {
		return func() {}
	}
	prev := config.SetMemoryLimit(m.n)
	return func() { config.SetMemoryLimit(prev) }
}

// check refuses est (exit 2) if it exceeds the limit, before anything is
// built, with the advice what to do.
func (m *memoryFlag) check(est config.MemoryEstimate, cfg config.Config, advice string) error {
	limit, from := m.limit()
	if est.Total() <= float64(limit) {
		return nil
	}
	return fmt.Errorf("%w: %s", errUsage, memoryText(est, limit, cfg, from, advice))
}

// memoryUsage is the usage error of a model too large for the limit: it
// names the sizes that make it large and --max-memory.
func memoryUsage(est config.MemoryEstimate, limit int64, cfg config.Config, from string) error {
	return fmt.Errorf("%w: %s", errUsage, memoryText(est, limit, cfg, from, "lower --batch, --dim, --hidden or --layers, or raise --max-memory"))
}

// memoryText says that est exceeds limit, which from names, with the
// model's sizes and the advice what to do.
func memoryText(est config.MemoryEstimate, limit int64, cfg config.Config, from, advice string) string {
	m := cfg.Model
	return fmt.Sprintf("--max-memory: the model (dim %d, hidden %d, layers %d, heads %d, vocabulary %d) needs about %s; that is more than %s, %s (%s)",
		m.Dim, m.Hidden, m.Layers, m.Heads, m.Vocab, est, config.FormatBytes(float64(limit)), from, advice)
}

// taskConflicts refuses a fixed length (pairs) given together with a range
// of lengths (pairs): one would silently replace the other.
func taskConflicts(fs *flag.FlagSet) error {
	given := map[string]bool{}
	visitSet(fs, func(f *flag.Flag) { given[f.Name] = true })
	for _, p := range []struct{ fixed, lo, hi string }{{"length", "min-length", "max-length"}, {"pairs", "min-pairs", "max-pairs"}} {
		for _, r := range []string{p.lo, p.hi} {
			if given[p.fixed] && given[r] {
				return fmt.Errorf("%w: --%s and --%s conflict: give either --%s or --%s and --%s", errUsage, p.fixed, r, p.fixed, p.lo, p.hi)
			}
		}
	}
	return nil
}

// visitSet calls fn for each flag given on the command line in
// lexicographical order, as fs.Visit does, but skips task flags given as 0:
// they keep the task's default, as if not given.
func visitSet(fs *flag.FlagSet, fn func(*flag.Flag)) {
	fs.Visit(func(f *flag.Flag) {
		if _, task := taskFlagText(f.Name, data.TaskConfig{}); task && (f.Value.String() == "0" || f.Value.String() == "") {
			return
		}
		fn(f)
	})
}

// checkTaskFlags builds cfg's task from the task flags and refuses
// parameters the task rejects, naming the flag at fault and, of the other
// parameters its problem involves, only the flags given (fs): a task's
// defaults were not typed. An unknown task is left to Validate to name.
func checkTaskFlags(fs *flag.FlagSet, cfg config.Config) error {
	if !slices.Contains(data.Names(), cfg.Task.Name) {
		return nil
	}
	_, err := cfg.Task.New()
	var ce *config.Error
	if !errors.As(err, &ce) {
		return err
	}
	given := map[string]bool{}
	visitSet(fs, func(f *flag.Flag) { given[f.Name] = true })
	// The flag named first is one that was typed, if the problem involves
	// one: `--task copy --max-length 2` is at fault, not copy's default
	// --min-length 3.
	fields := append([]string{ce.Field}, ce.With...)
	if i := slices.IndexFunc(fields, func(f string) bool { return given[fieldFlags[f]] }); i > 0 {
		fields[0], fields[i] = fields[i], fields[0]
	}
	e := config.Error{Field: fields[0], Problem: flagWords(cfg.Task.Name, ce.Problem)}
	e.With = slices.DeleteFunc(fields[1:], func(w string) bool { return !given[fieldFlags[w]] })
	return configError(&e, cfg)
}

// taskParam is a task parameter's snake_case name in data's messages; the
// one-word names (length, keys, ...) read as English and stay.
var taskParam = regexp.MustCompile(`\b(min|max)_(length|pairs)\b`)

// flagWords rewrites a problem of task's parameters in the words of the
// command line: --min-length for min_length, and "task sort:" for data's
// `task "sort":`.
func flagWords(task, problem string) string {
	problem = strings.TrimPrefix(problem, fmt.Sprintf("task %q: ", task))
	return "task " + task + ": " + taskParam.ReplaceAllStringFunc(problem, func(name string) string {
		return "--" + fieldFlags["task.params."+name]
	})
}

// taskFlagText is the value of a data.TaskConfig field that a task flag
// compares on resume, written as the flag package writes the flag's value:
// the effective value, where a fixed length (pairs) is also the range's
// both ends. ok is false for a flag that is not a task parameter's.
func taskFlagText(name string, p data.TaskConfig) (text string, ok bool) {
	lo, hi := p.MinLength, p.MaxLength
	if p.Length != 0 {
		lo, hi = p.Length, p.Length
	}
	plo, phi := p.MinPairs, p.MaxPairs
	if p.Pairs != 0 {
		plo, phi = p.Pairs, p.Pairs
	}
	ints := map[string]int{
		"length": p.Length, "min-length": lo, "max-length": hi, "alphabet": p.Alphabet, "digits": p.Digits,
		"pairs": p.Pairs, "min-pairs": plo, "max-pairs": phi, "keys": p.Keys, "values": p.Values, "context": p.Context,
	}
	if v, ok := ints[name]; ok {
		return strconv.Itoa(v), true
	}
	switch name {
	case "data":
		return p.Data, true
	case "val-fraction":
		return strconv.FormatFloat(p.ValFraction, 'g', -1, 64), true
	}
	return "", false
}
