package main

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/qkv-dev/qkv/cmd/qkv/internal/explain"
)

// runExplain runs the tutorial's claims named in args, or all of them, and
// prints each one's statement, measurement and verdict.
func runExplain(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("explain", "[flags] [CLAIM...]", stderr)
	asJSON := fs.Bool("json", false, "print one JSON object per claim and line")
	small := fs.Bool("small", false, "run each experiment at the small sizes of its tests (quick, noisier figures)")
	seed := fs.Int64("seed", 1, "random seed of the experiments' inputs")
	plots := fs.String("plots", "", "directory to write each claim's PNG figures to (created if missing)")
	if err := parse(fs, args, -1); err != nil {
		return err
	}
	if *plots != "" {
		if err := os.MkdirAll(*plots, 0o755); err != nil {
			return outputErr("plots", err)
		}
	}
	ids := fs.Args()
	known := explain.IDs()
	for _, id := range ids {
		if !slices.Contains(known, id) {
			return fmt.Errorf("%w: unknown claim %q%s; the claims are %v", errUsage, id, didYouMean(id, "", known), known)
		}
	}
	progress := len(ids) == 0
	if progress {
		ids = known
	}
	for i, id := range ids {
		if progress {
			fmt.Fprintf(stderr, "[%d/%d] %s ...\n", i+1, len(ids), id)
		}
		start := time.Now()
		r, err := explain.Run(id, explain.Options{Small: *small, Seed: *seed, Plots: *plots})
		if err != nil {
			return err
		}
		if progress { // the claims that train a model take tens of seconds
			fmt.Fprintf(stderr, "[%d/%d] %s: %s (%.1f s)\n", i+1, len(ids), id, r.Verdict, time.Since(start).Seconds())
		}
		if *asJSON {
			if err := json.NewEncoder(stdout).Encode(r); err != nil {
				return fmt.Errorf("writing %s's JSON: %w", id, err)
			}
			continue
		}
		if err := printClaim(stdout, r); err != nil {
			return err
		}
	}
	return nil
}

// printClaim writes r for a reader: the claim, how it was measured, the
// numbers by name and the verdict with its reason.
func printClaim(w io.Writer, r explain.Result) error {
	names := make([]string, 0, len(r.Measured))
	for n := range r.Measured {
		names = append(names, n)
	}
	slices.SortFunc(names, naturalCompare)
	fmt.Fprintf(w, "%s\n  claim:    %s\n  measured: %s\n", r.Claim, r.Statement, r.Method)
	for _, n := range names {
		fmt.Fprintf(w, "    %-28s %.6g\n", n, r.Measured[n])
	}
	fmt.Fprintf(w, "  verdict:  %s: %s\n", r.Verdict, r.Why)
	for _, p := range r.Plots {
		fmt.Fprintf(w, "  plot:     %s\n", p)
	}
	_, err := fmt.Fprintln(w)
	return err
}

// naturalCompare orders names as a reader counts: the numbers in them by
// value, so that var_raw_dk16 comes before var_raw_dk1024.
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		ca, ra := leadingChunk(a)
		cb, rb := leadingChunk(b)
		na, erra := strconv.Atoi(ca)
		nb, errb := strconv.Atoi(cb)
		var c int
		if erra == nil && errb == nil {
			c = cmp.Compare(na, nb)
		} else {
			c = strings.Compare(ca, cb)
		}
		if c != 0 {
			return c
		}
		a, b = ra, rb
	}
	return cmp.Compare(len(a), len(b))
}

// leadingChunk splits s after its leading run of digits or of other bytes.
func leadingChunk(s string) (chunk, rest string) {
	digit := func(c byte) bool { return '0' <= c && c <= '9' }
	i := 1
	for i < len(s) && digit(s[i]) == digit(s[0]) {
		i++
	}
	return s[:i], s[i:]
}
