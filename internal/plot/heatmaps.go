package plot

// Heatmaps turns one sequence's attention weights, [layer][head][query][key]
// (infer.Maps), into the panels Attention and CrossAttention draw, one per
// layer and head; hidden marks the cells a mask hides, nil none.
func Heatmaps(maps [][][][]float64, hidden [][]bool) []AttentionMap {
	var out []AttentionMap
	for layer, heads := range maps {
		for head, rows := range heads {
			out = append(out, AttentionMap{Layer: layer, Head: head, Weights: rows, Hidden: hidden})
		}
	}
	return out
}

// CausalHidden returns the cells of an n x n self-attention map that a
// causal mask hides: the keys after each query.
func CausalHidden(n int) [][]bool { return SelfHidden(n, true, 0) }

// SelfHidden returns the cells of an n x n self-attention map that the mask
// of a causal (or bidirectional) attention with a sliding window of w keys
// hides (w = 0: no window): the keys after each query when causal, and those
// w or more positions away (graph.Window, graph.Band); nil when nothing is
// hidden.
func SelfHidden(n int, causal bool, w int) [][]bool {
	if !causal && w == 0 {
		return nil
	}
	hidden := make([][]bool, n)
	for q := range hidden {
		hidden[q] = make([]bool, n)
		for k := range n {
			hidden[q][k] = causal && k > q || w > 0 && (q-k >= w || k-q >= w)
		}
	}
	return hidden
}
