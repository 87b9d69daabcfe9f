package main

import (
	"fmt"
	"regexp"
	"strings"
)

// The generated blocks, in the order -list prints them. A row's command is
// printed in the docs exactly as written here.

var blocks = []*block{
	{
		name: "quickstart-train", file: "README.md", kind: "output",
		rows: []row{{cmds: []string{"./qkv train", "./qkv predict --checkpoint runs/sort 2 0 1 1 0 2", "./qkv attend --checkpoint runs/sort --input \"2 0 1 1 0 2\" --out attn.png"}, estimate: 5, show: showTrain}},
	},
	{
		name: "quickstart-chars", file: "README.md", kind: "output",
		rows: []row{{cmds: []string{"./qkv train --task chars", "./qkv sample --checkpoint runs/chars --prompt \"func (c *conn) \" --tokens 200"}, slow: true, estimate: 150, show: showTrain}},
	},
	{
		name: "results-decoder", file: "docs/results.md",
		labels: []string{"task", "prompt → answer"}, cols: []column{colSteps, colExact, colParams, colWall}, cmdCol: true,
		rows: []row{
			{label: []string{"`sort`: 6 symbols over 3 (minGPT's demo, the default)", "`2 0 1 1 0 2` → `0 0 1 1 2 2`"}, cmds: []string{"qkv train"}, slow: false, estimate: 3},
			{label: []string{"`add`: 2 digits", "`8 5 5 0` → `5 3 1` (85 + 50, reversed)"}, cmds: []string{"qkv train --task add --steps 3000"}, slow: false, estimate: 8},
			{label: []string{"`reverse`: 3 to 8 symbols over 10", "`3 1 4 1` → `1 4 1 3`"}, cmds: []string{"qkv train --task reverse --steps 3000"}, slow: false, estimate: 8},
			{label: []string{"`copy`: 3 to 8 symbols over 10", "`3 1 4 1` → `3 1 4 1`"}, cmds: []string{"qkv train --task copy --steps 3000"}, slow: false, estimate: 6},
			{label: []string{"`recall`: 4 pairs, 8 keys, 10 values, every key asked back (MQAR)", "`c 4 b 1 f 1 h 6` + `f c h b` → `1 4 6 1`"}, cmds: []string{"qkv train --task recall"}, slow: false, estimate: 10},
			{label: []string{"`recall`: 8 pairs, 16 keys, 10 values", "8 pairs + 8 queries → 8 values"}, cmds: []string{"qkv train --task recall --pairs 8 --keys 16 --values 10"}, slow: true, estimate: 60},
			{label: []string{"`recall`: 8 pairs, 16 keys, 16 values", "8 pairs + 8 queries → 8 values"}, cmds: []string{"qkv train --task recall --pairs 8 --keys 16 --values 16"}, slow: true, estimate: 90},
			{label: []string{"`recall`: 4 pairs, one query (`--queries 1`)", "`c 4 b 1 f 1 h 6 f` → `1`"}, cmds: []string{"qkv train --task recall --queries 1 --steps 2000"}, slow: true, estimate: 50},
		},
	},
	{
		name: "results-encdec", file: "docs/results.md",
		labels: []string{"task"}, cols: []column{colSteps, colExact, colParams, colWall}, cmdCol: true,
		rows: []row{
			{label: []string{"`sort`"}, cmds: []string{"qkv train --arch encdec"}, slow: false, estimate: 4},
			{label: []string{"`add`: 2 digits"}, cmds: []string{"qkv train --arch encdec --task add --steps 3000"}, slow: false, estimate: 8},
			{label: []string{"`reverse`: 3 to 8 symbols"}, cmds: []string{"qkv train --arch encdec --task reverse --steps 3000"}, slow: false, estimate: 20},
			{label: []string{"`recall`: 4 pairs, causal encoder"}, cmds: []string{"qkv train --arch encdec --task recall --causal-encoder"}, slow: false, estimate: 10},
			{label: []string{"`recall`: 8 pairs, 16 keys, 16 values, causal encoder"}, cmds: []string{"qkv train --arch encdec --task recall --causal-encoder --pairs 8 --keys 16 --values 16"}, slow: true, estimate: 60},
			{label: []string{"`recall`: 4 pairs, bidirectional encoder, D96, FF384, lr 1e-3"}, cmds: []string{"qkv train --arch encdec --task recall --dim 96 --hidden 384 --lr 1e-3"}, slow: true, estimate: 60},
			{label: []string{"`recall`: 4 pairs, bidirectional encoder (the default)"}, cmds: []string{"qkv train --arch encdec --task recall"}, slow: true, estimate: 130},
		},
	},
	{
		name: "seeds-default", file: "docs/results.md",
		labels: []string{"seed"}, cols: []column{colSteps, colWall}, cmdCol: true,
		rows: []row{
			{label: []string{"1"}, cmds: []string{"qkv train --seed 1"}, slow: false, estimate: 3},
			{label: []string{"2"}, cmds: []string{"qkv train --seed 2"}, slow: false, estimate: 3},
			{label: []string{"3"}, cmds: []string{"qkv train --seed 3"}, slow: false, estimate: 3},
			{label: []string{"4"}, cmds: []string{"qkv train --seed 4"}, slow: true, estimate: 3},
			{label: []string{"5"}, cmds: []string{"qkv train --seed 5"}, slow: true, estimate: 3},
			{label: []string{"6"}, cmds: []string{"qkv train --seed 6"}, slow: true, estimate: 3},
		},
	},
	{
		name: "encdec-seeds", file: "docs/encoder-decoder.md", kind: "matrix",
		labels: []string{"`qkv train --arch encdec --task recall --seed N` and"}, matrixCols: []string{"seed 1", "seed 2", "seed 3"},
		cols: []column{colStepsShort},
		rows: []row{
			{label: []string{"`--causal-encoder`", "seed 1"}, cmds: []string{"qkv train --arch encdec --task recall --causal-encoder --seed 1"}, slow: true, estimate: 80},
			{label: []string{"`--causal-encoder`", "seed 2"}, cmds: []string{"qkv train --arch encdec --task recall --causal-encoder --seed 2"}, slow: true, estimate: 80},
			{label: []string{"`--causal-encoder`", "seed 3"}, cmds: []string{"qkv train --arch encdec --task recall --causal-encoder --seed 3"}, slow: true, estimate: 80},
			{label: []string{"`--causal-encoder --pairs 8 --keys 16 --values 16`", "seed 1"}, cmds: []string{"qkv train --arch encdec --task recall --causal-encoder --pairs 8 --keys 16 --values 16 --seed 1"}, slow: true, estimate: 80},
			{label: []string{"`--causal-encoder --pairs 8 --keys 16 --values 16`", "seed 2"}, cmds: []string{"qkv train --arch encdec --task recall --causal-encoder --pairs 8 --keys 16 --values 16 --seed 2"}, slow: true, estimate: 80},
			{label: []string{"`--causal-encoder --pairs 8 --keys 16 --values 16`", "seed 3"}, cmds: []string{"qkv train --arch encdec --task recall --causal-encoder --pairs 8 --keys 16 --values 16 --seed 3"}, slow: true, estimate: 80},
			{label: []string{"bidirectional, `--lr 1e-3`", "seed 1"}, cmds: []string{"qkv train --arch encdec --task recall --lr 1e-3 --seed 1"}, slow: true, estimate: 150},
			{label: []string{"bidirectional, `--lr 1e-3`", "seed 2"}, cmds: []string{"qkv train --arch encdec --task recall --lr 1e-3 --seed 2"}, slow: true, estimate: 150},
			{label: []string{"bidirectional, `--lr 1e-3`", "seed 3"}, cmds: []string{"qkv train --arch encdec --task recall --lr 1e-3 --seed 3"}, slow: true, estimate: 150},
			{label: []string{"bidirectional, `--dim 96 --hidden 384 --lr 1e-3`", "seed 1"}, cmds: []string{"qkv train --arch encdec --task recall --dim 96 --hidden 384 --lr 1e-3 --seed 1"}, slow: true, estimate: 150},
			{label: []string{"bidirectional, `--dim 96 --hidden 384 --lr 1e-3`", "seed 2"}, cmds: []string{"qkv train --arch encdec --task recall --dim 96 --hidden 384 --lr 1e-3 --seed 2"}, slow: true, estimate: 150},
			{label: []string{"bidirectional, `--dim 96 --hidden 384 --lr 1e-3`", "seed 3"}, cmds: []string{"qkv train --arch encdec --task recall --dim 96 --hidden 384 --lr 1e-3 --seed 3"}, slow: true, estimate: 150},
		},
	},
	{
		name: "variants", file: "docs/variants.md",
		labels: []string{"variants (default `sort` unless said)"}, cols: []column{colSteps, colParams}, cmdCol: true,
		rows: []row{
			{label: []string{"(none)"}, cmds: []string{"qkv train"}, slow: false, estimate: 3},
			{label: []string{"`--kv-heads 1` (multi-query)"}, cmds: []string{"qkv train --kv-heads 1"}, slow: false, estimate: 3},
			{label: []string{"`--kv-heads 2`"}, cmds: []string{"qkv train --kv-heads 2"}, slow: false, estimate: 3},
			{label: []string{"`--softcap 5`"}, cmds: []string{"qkv train --softcap 5"}, slow: false, estimate: 3},
			{label: []string{"`--sinks`"}, cmds: []string{"qkv train --sinks"}, slow: false, estimate: 3},
			{label: []string{"`--qk-norm`"}, cmds: []string{"qkv train --qk-norm"}, slow: false, estimate: 3},
			{label: []string{"`--head-temperature`"}, cmds: []string{"qkv train --head-temperature"}, slow: false, estimate: 3},
			{label: []string{"all four"}, cmds: []string{"qkv train --kv-heads 1 --softcap 5 --sinks --qk-norm"}, slow: false, estimate: 4},
			{label: []string{"all four, `--task recall` (MQAR, 4 pairs)"}, cmds: []string{"qkv train --task recall --kv-heads 1 --softcap 5 --sinks --qk-norm"}, slow: false, estimate: 12},
			{label: []string{"all four, `--arch encdec` (every attention, cross-attention included)"}, cmds: []string{"qkv train --arch encdec --kv-heads 1 --softcap 5 --sinks --qk-norm"}, slow: false, estimate: 6},
			{label: []string{"`--positions rope`"}, cmds: []string{"qkv train --positions rope"}, slow: false, estimate: 3},
			{label: []string{"`--positions rope-interleaved`"}, cmds: []string{"qkv train --positions rope-interleaved"}, slow: false, estimate: 3},
			{label: []string{"`--positions alibi`"}, cmds: []string{"qkv train --positions alibi"}, slow: false, estimate: 3},
			{label: []string{"`--positions rope --window 8`"}, cmds: []string{"qkv train --positions rope --window 8"}, slow: false, estimate: 4},
			{label: []string{"`--positions alibi --window 8`"}, cmds: []string{"qkv train --positions alibi --window 8"}, slow: false, estimate: 4},
			{label: []string{"`--window 8` (learned positions)"}, cmds: []string{"qkv train --window 8"}, slow: false, estimate: 30},
			{label: []string{"RoPE, 2 KV heads, window, sinks, softcap, QK-norm"}, cmds: []string{"qkv train --positions rope --kv-heads 2 --window 8 --sinks --softcap 5 --qk-norm"}, slow: false, estimate: 4},
			{label: []string{"the same without the window, `--task recall`"}, cmds: []string{"qkv train --task recall --positions rope --kv-heads 2 --sinks --softcap 5 --qk-norm"}, slow: false, estimate: 12},
			{label: []string{"ALiBi and the rest, `--arch encdec`"}, cmds: []string{"qkv train --arch encdec --positions alibi --kv-heads 2 --window 8 --sinks --softcap 5 --qk-norm"}, slow: false, estimate: 6},
			{label: []string{"`--task reverse`, learned positions"}, cmds: []string{"qkv train --task reverse --steps 3000"}, slow: false, estimate: 8},
			{label: []string{"`--task reverse --positions rope`"}, cmds: []string{"qkv train --task reverse --positions rope --steps 3000"}, slow: false, estimate: 8},
			{label: []string{"`--task reverse --positions alibi`"}, cmds: []string{"qkv train --task reverse --positions alibi --steps 3000"}, slow: true, estimate: 45},
		},
	},
	{
		name: "impls", file: "docs/variants.md",
		labels: []string{"`--attention`"}, cols: []column{colSteps, colWall}, cmdCol: true,
		rows: []row{
			{label: []string{"`fused`"}, cmds: []string{"qkv train --attention fused"}, slow: false, estimate: 3},
			{label: []string{"`composed`"}, cmds: []string{"qkv train --attention composed"}, slow: false, estimate: 3},
			{label: []string{"`flash`"}, cmds: []string{"qkv train --attention flash"}, slow: false, estimate: 3},
		},
	},
	{
		name: "scale-seeds", file: "docs/claims.md", kind: "matrix",
		labels: []string{"seed"}, matrixCols: []string{"`--attn-scale dk` (1/sqrt(d_k))", "`dmodel` (1/sqrt(d_model))", "`none` (1)"},
		cols: []column{colStepsShort},
		rows: []row{
			{label: []string{"1", "`--attn-scale dk` (1/sqrt(d_k))"}, cmds: []string{"qkv train --task reverse --min-length 3 --max-length 5 --alphabet 5 --dim 128 --heads 8 --hidden 128 --layers 1 --batch 32 --steps 600 --eval-every 20 --test-size 100 --attn-scale dk --seed 1"}, slow: true, estimate: 25},
			{label: []string{"1", "`dmodel` (1/sqrt(d_model))"}, cmds: []string{"qkv train --task reverse --min-length 3 --max-length 5 --alphabet 5 --dim 128 --heads 8 --hidden 128 --layers 1 --batch 32 --steps 600 --eval-every 20 --test-size 100 --attn-scale dmodel --seed 1"}, slow: true, estimate: 25},
			{label: []string{"1", "`none` (1)"}, cmds: []string{"qkv train --task reverse --min-length 3 --max-length 5 --alphabet 5 --dim 128 --heads 8 --hidden 128 --layers 1 --batch 32 --steps 600 --eval-every 20 --test-size 100 --attn-scale none --seed 1"}, slow: true, estimate: 25},
			{label: []string{"2", "`--attn-scale dk` (1/sqrt(d_k))"}, cmds: []string{"qkv train --task reverse --min-length 3 --max-length 5 --alphabet 5 --dim 128 --heads 8 --hidden 128 --layers 1 --batch 32 --steps 600 --eval-every 20 --test-size 100 --attn-scale dk --seed 2"}, slow: true, estimate: 25},
			{label: []string{"2", "`dmodel` (1/sqrt(d_model))"}, cmds: []string{"qkv train --task reverse --min-length 3 --max-length 5 --alphabet 5 --dim 128 --heads 8 --hidden 128 --layers 1 --batch 32 --steps 600 --eval-every 20 --test-size 100 --attn-scale dmodel --seed 2"}, slow: true, estimate: 25},
			{label: []string{"2", "`none` (1)"}, cmds: []string{"qkv train --task reverse --min-length 3 --max-length 5 --alphabet 5 --dim 128 --heads 8 --hidden 128 --layers 1 --batch 32 --steps 600 --eval-every 20 --test-size 100 --attn-scale none --seed 2"}, slow: true, estimate: 25},
			{label: []string{"3", "`--attn-scale dk` (1/sqrt(d_k))"}, cmds: []string{"qkv train --task reverse --min-length 3 --max-length 5 --alphabet 5 --dim 128 --heads 8 --hidden 128 --layers 1 --batch 32 --steps 600 --eval-every 20 --test-size 100 --attn-scale dk --seed 3"}, slow: true, estimate: 25},
			{label: []string{"3", "`dmodel` (1/sqrt(d_model))"}, cmds: []string{"qkv train --task reverse --min-length 3 --max-length 5 --alphabet 5 --dim 128 --heads 8 --hidden 128 --layers 1 --batch 32 --steps 600 --eval-every 20 --test-size 100 --attn-scale dmodel --seed 3"}, slow: true, estimate: 25},
			{label: []string{"3", "`none` (1)"}, cmds: []string{"qkv train --task reverse --min-length 3 --max-length 5 --alphabet 5 --dim 128 --heads 8 --hidden 128 --layers 1 --batch 32 --steps 600 --eval-every 20 --test-size 100 --attn-scale none --seed 3"}, slow: true, estimate: 25},
		},
	},
	{
		name: "gradcheck", file: "docs/reliability.md",
		note:   "`qkv gradcheck`: the worst error of each group of parameters (`blocks.*` over both blocks).",
		custom: gradcheckTable,
		rows:   []row{{cmds: []string{"qkv gradcheck"}, estimate: 5, exitOK: []int{1}}},
	},
	{
		name: "help", file: "docs/cli.md", kind: "output", untimed: true,
		rows: helpRows(),
	},
	{
		name: "explain", file: "docs/claims.md",
		labels: []string{"claim"}, cols: []column{colVerdict, colWhy}, cmdCol: true,
		rows: explainRows(),
	},
}

// showTrain picks the lines of each command's output an output block
// prints: a run's last lines from its summary on, a prediction or a
// sample whole, the file attend wrote.
func showTrain(k int, stdout string) []string {
	lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "task ") {
			return lines[i:]
		}
	}
	return lines
}

// timingClaims time things: their verdicts move with the machine.
var timingClaims = map[string]bool{"multihead-cost": true, "quadratic-cost": true, "memory-peak": true, "linear-cost": true}

var claimIDs = []string{"scores-variance", "softmax-saturation", "scale-dk-not-dmodel", "stable-softmax", "rows-sum-to-one",
	"multihead-cost", "causal-mask", "padding-mask", "permutation-equivariance", "self-vs-cross", "soft-lookup",
	"quadratic-cost", "memory-peak", "linear-cost"}

func explainRows() []row {
	var rows []row
	for _, id := range claimIDs {
		rows = append(rows, row{label: []string{"`" + id + "`"}, cmds: []string{"qkv explain " + id},
			estimate: 20, timing: timingClaims[id], slow: timingClaims[id]})
	}
	return rows
}

// verdictOf reads "  verdict:  VERDICT: WHY" from qkv explain's output.
func verdictOf(r *result) (string, string, error) {
	for _, l := range strings.Split(r.last(), "\n") {
		if rest, ok := strings.CutPrefix(l, "  verdict:  "); ok {
			v, why, _ := strings.Cut(rest, ": ")
			return v, why, nil
		}
	}
	return "", "", fmt.Errorf("no verdict line")
}

var (
	colVerdict = column{title: "verdict", value: func(r *result) (string, error) {
		v, _, err := verdictOf(r)
		return v, err
	}}
	colWhy = column{title: "why (the numbers measured)", value: func(r *result) (string, error) {
		_, why, err := verdictOf(r)
		return why, err
	}}
)

var gradLine = regexp.MustCompile(`^(\S+)\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)$`)
var blockIndex = regexp.MustCompile(`blocks\.\d+\.`)

// gradcheckTable groups qkv gradcheck's lines by parameter, blocks merged,
// and prints each group's worst errors.
func gradcheckTable(results []*result) string {
	var w strings.Builder
	w.WriteString("| parameters | weights | worst max abs error | worst norm-relative error |\n|---|---|---|---|\n")
	if results == nil || results[0] == nil {
		return w.String()
	}
	type agg struct {
		n        int
		abs, rel float64
	}
	var order []string
	groups := map[string]*agg{}
	for _, l := range strings.Split(results[0].last(), "\n") {
		m := gradLine.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil || m[1] == "param" {
			continue
		}
		name := blockIndex.ReplaceAllString(m[1], "blocks.*.")
		g := groups[name]
		if g == nil {
			g = &agg{}
			groups[name] = g
			order = append(order, name)
		}
		var n int
		var abs, rel float64
		fmt.Sscan(m[2], &n)
		fmt.Sscan(m[4], &abs)
		fmt.Sscan(m[5], &rel)
		g.n += n
		g.abs, g.rel = max(g.abs, abs), max(g.rel, rel)
	}
	for _, name := range order {
		g := groups[name]
		fmt.Fprintf(&w, "| `%s` | %d | %.1e | %.1e |\n", name, g.n, g.abs, g.rel)
	}
	return w.String()
}

// helpRows prints every command's --help.
func helpRows() []row {
	var rows []row
	for _, c := range []string{"train", "eval", "predict", "sample", "attend", "gradcheck", "explain", "bench"} {
		rows = append(rows, row{cmds: []string{"qkv " + c + " --help"}, estimate: 1,
			show: func(_ int, out string) []string {
				// The memory limit's default is this machine's.
				out = availableRE.ReplaceAllString(out, ")")
				return strings.Split(strings.TrimRight(out, "\n"), "\n")
			}})
	}
	return rows
}

var availableRE = regexp.MustCompile(`, [0-9.]+\s+[KMGT]?i?B now\)`) // the help wraps its lines
