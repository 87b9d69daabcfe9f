package main

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/internal/gemm"
	"github.com/qkv-dev/qkv/layers"
	"github.com/qkv-dev/qkv/train/config"
)

// stepFLOPs counts the floating-point operations of one training step's
// matrix products, 2 per multiply-add, for a decoder of s positions (an
// encoder–decoder is counted as if every weight saw the decoder's tokens
// and its attention were the decoder's). Two terms:
//
// Projections. Every RoleWeight parameter (in, out), and a tied head's
// token embedding (V, D), is one product per token: forward 2·in·out
// operations a token; backward two products as large, the input's gradient
// (dX = dY W^T) and the weight's (dW = X^T dY). So 6·N·tokens, N the
// multiply-adds of a token through every projection, tokens = B·s. (The
// embedding lookups are no product; the first projection's input gradient
// is computed, for the embeddings', so 6 holds for every weight.)
//
// Attention, per softmax block: each head's two products, S = Q K^T and
// O = P V, dk multiply-adds for each (query, key) pair the implementation
// computes, so over the H heads 2·2·B·pairs·D forward (H·dk = D). Backward,
// the fused and composed ops take four products as large (dP = dO V^T,
// dV = P^T dO, dQ = dS K, dK = dS^T Q): 3 times the forward in all.
// Composed computes every pair, the causally hidden ones too: pairs = s².
// Fused does too, but under a causal mask alone (a decoder without a
// window, sparse pattern, ALiBi or softcap: the Causal modifier with
// nothing else, as layers builds it), where from 128 positions on it
// multiplies each block of 64 queries by the keys up to its last only,
// and within a block skips the kernels' tiles wholly past the diagonal
// and each tile's sums past (or before) it: graph.FusedCausalPairs
// counts what each of the six products computes. Flash
// visits only the tiles (64 x 64, graph.DefaultFlashTile) with a visible
// pair, causal and window ones, but computes the whole of each, and its
// backward recomputes S first: 5 products, 7/2 times the forward in all.
// Linear attention blocks (--layer-kinds linear) have no s² term and are
// not counted.
func stepFLOPs(params []graph.Param, cfg config.Config, s int) float64 {
	tokens := float64(cfg.Batch * s)
	var n float64 // multiply-adds of one token through the projections
	for _, p := range params {
		shape := p.Node.Shape()
		switch {
		case p.Role == graph.RoleWeight:
			n += float64(shape[0] * shape[1])
		case p.Role == graph.RoleEmbedding && cfg.Model.TieEmbeddings && strings.HasSuffix(p.Name, "tok_emb.table") && !strings.Contains(p.Name, "encoder"):
			n += float64(shape[0] * shape[1]) // the tied head, logits = x table^T
		}
	}
	flops := 6 * n * tokens
	kinds := strings.Split(cfg.Model.LayerKinds, ",")
	for l := range cfg.Model.Layers {
		kind, window := strings.TrimSpace(kinds[l%len(kinds)]), cfg.Model.Window
		switch {
		case kind == "linear":
			continue
		case strings.HasPrefix(kind, "window:"):
			window, _ = strconv.Atoi(strings.TrimPrefix(kind, "window:"))
		}
		forward := 2 * 2 * float64(cfg.Batch) * float64(cfg.Model.Dim)
		switch {
		case cfg.Model.Attention == layers.AttentionFlash:
			flops += 3.5 * forward * flashPairs(s, graph.DefaultFlashTile, window)
		case cfg.Model.Attention != layers.AttentionComposed && causalOnly(cfg, window):
			dt, _ := cfg.DType.Tensor() // the model was built: its dtype is valid
			flops += forward / 2 * graph.FusedCausalPairs(s, dt)
		default:
			flops += 3 * forward * float64(s) * float64(s)
		}
	}
	return flops
}

// causalOnly reports whether a softmax block of cfg with a window of w
// hides keys by the Causal modifier alone: a decoder-only model's block
// without a window, global tokens, block-local attention, ALiBi or a
// softcap (layers' (*MultiHeadAttention).spec adds a modifier for each).
func causalOnly(cfg config.Config, w int) bool {
	m := cfg.Model
	return cfg.ArchOrDefault() == config.ArchDecoder && w == 0 && m.GlobalTokens == 0 && m.BlockLocal == 0 &&
		m.Positions != layers.PositionsALiBi && m.Softcap == 0
}

// flashPairs counts the (query, key) pairs of the tiles causal flash
// attention computes over s positions, tile x tile, with a sliding window
// of w keys (0: none): every pair of each tile holding a pair it shows,
// j <= i and j > i-w.
func flashPairs(s, tile, w int) float64 {
	var pairs float64
	for i0 := 0; i0 < s; i0 += tile {
		i1 := min(i0+tile, s)
		for j0 := 0; j0 < s; j0 += tile {
			j1 := min(j0+tile, s)
			// The tile shows a pair if its first key is at or before its
			// last query and, with a window, its last key is within the
			// window of its first query.
			if j0 <= i1-1 && (w == 0 || j1-1 > i0-w) {
				pairs += float64((i1 - i0) * (j1 - j0))
			}
		}
	}
	return pairs
}

// reportFLOPs prints bench's line on the step's use of the machine: the
// step's time, its matrix products' operations and their rate, and that
// rate as a fraction of the FMA peak of the kernels Gemm runs, on one core
// and on all of them, measured by gemm.ActivePeak on this CPU.
func reportFLOPs(w io.Writer, flops float64, per time.Duration, dtype config.DType) {
	p := gemm.ActivePeak()
	one, all := p.F32, p.F32All
	if dtype == config.Float64 {
		one, all = p.F64, p.F64All
	}
	rate := flops / per.Seconds() / 1e9
	fmt.Fprintf(w, "matrix products:     %7.1f ms/step, %.3f GFLOP/step, %.1f GFLOP/s: %.1f%% of one core's %s FMA peak (%.0f GFLOP/s), %.1f%% of %d cores' (%.0f); %s, %s%s\n",
		float64(per.Microseconds())/1000, flops/1e9, rate, 100*rate/one, dtype, one, 100*rate/all, p.Threads, all, p.Set, gemm.CPUModel(), loadNote())
}

// loadNote is ", load average L" with /proc/loadavg's last minute, or ""
// where the system does not say: above the core count, other processes
// took some of the step's time.
func loadNote() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return ", load average " + f[0]
	}
	return ""
}
