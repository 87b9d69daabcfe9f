package layering

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/qkv-dev/qkv"

// pkg is what the test reads of `go list -json`.
type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Deps         []string
}

// goList runs `go list -json args...` at the module's root and decodes
// the stream of packages it prints.
func goList(t *testing.T, args ...string) []pkg {
	t.Helper()
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), append([]string{"list", "-json"}, args...)...)
	cmd.Dir = filepath.Join("..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -json %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	var pkgs []pkg
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatalf("go list -json %s listed no package", strings.Join(args, " "))
	}
	return pkgs
}

// ancestors returns the import paths of the directories above p within
// the module, nearest first: for module/train/optim, module/train and
// module.
func ancestors(p string) []string {
	var out []string
	for d := path.Dir(p); strings.HasPrefix(d, module); d = path.Dir(d) {
		out = append(out, d)
	}
	return out
}

// runsUp returns what of p's imports is the package of a directory above
// p's own, each with "parent" or "ancestor".
func runsUp(p pkg) []string {
	var out []string
	for i, a := range ancestors(p.ImportPath) {
		if slices.Contains(p.Imports, a) {
			what := "parent"
			if i > 0 {
				what = "ancestor"
			}
			out = append(out, a+" ("+what+")")
		}
	}
	return out
}

// TestNoImportRunsUp: no package imports a package of a directory above
// its own, its parent's least of all (train/explain imported train). Only
// what a package's users get counts: a test of package infer may train a
// model with package train, since test imports are no one's dependency.
func TestNoImportRunsUp(t *testing.T) {
	// The check itself, on the import that was there.
	explain := pkg{ImportPath: module + "/train/explain", Imports: []string{module + "/train/config", module + "/train"}}
	if got := runsUp(explain); !slices.Equal(got, []string{module + "/train (parent)"}) {
		t.Errorf("runsUp(train/explain importing train) = %q", got)
	}
	pkgs := goList(t, "./...")
	if len(pkgs) < 10 {
		t.Fatalf("go list ./... gave %d packages", len(pkgs))
	}
	for _, p := range pkgs {
		if up := runsUp(p); len(up) != 0 {
			t.Errorf("%s imports %q, above it", p.ImportPath, up)
		}
	}
}

// banned reports the packages of deps that are plotting (gonum's plot,
// internal/plot) and, with loop, the training loop (package train, not
// its subpackages), its progress bar and its file lock.
func banned(deps []string, loop bool) []string {
	trees := []string{"gonum.org/v1/plot", module + "/internal/plot"}
	var exact []string
	if loop {
		trees = append(trees, "github.com/schollz/progressbar", "github.com/gofrs/flock")
		exact = append(exact, module+"/train")
	}
	var out []string
	for _, d := range deps {
		if slices.Contains(exact, d) || slices.ContainsFunc(trees, func(b string) bool { return d == b || strings.HasPrefix(d, b+"/") }) {
			out = append(out, d)
		}
	}
	return out
}

// TestOptimDeps: train/optim, the optimizer on its own, pulls in neither
// the training loop nor plotting, the progress bar or file locks.
func TestOptimDeps(t *testing.T) {
	if b := banned([]string{"gonum.org/v1/plot/vg", module + "/train", module + "/train/checkpoint", "github.com/gofrs/flock"}, true); len(b) != 3 {
		t.Errorf("banned found %q, want plot, train and flock", b)
	}
	for _, p := range goList(t, module+"/train/optim") {
		if len(p.Deps) < 5 {
			t.Fatalf("%s has %d dependencies: %q", p.ImportPath, len(p.Deps), p.Deps)
		}
		if b := banned(p.Deps, true); len(b) != 0 {
			t.Errorf("%s depends on %q", p.ImportPath, b)
		}
	}
}

// TestLibraryDrawsNothing: no package a library user imports (all but
// cmd/..., tools/... and internal/...) depends on the plotting libraries;
// curves and heatmaps are the command line's.
func TestLibraryDrawsNothing(t *testing.T) {
	n := 0
	for _, p := range goList(t, "./...") {
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		if first, _, _ := strings.Cut(rel, "/"); first == "cmd" || first == "tools" || first == "internal" {
			continue
		}
		n++
		if b := banned(p.Deps, false); len(b) != 0 {
			t.Errorf("%s depends on %q", p.ImportPath, b)
		}
	}
	if n < 5 {
		t.Errorf("%d library packages checked", n)
	}
}
