package explain

import "github.com/qkv-dev/qkv/train/infer"

// ask is one query row of an attention map and the key column it ought to
// point at: where a head that looks the answer up puts its weight.
type ask struct{ Query, Key int }

// pointing is how well one head's rows point at their right keys, over a
// set of asks: the fraction whose largest weight is the right key (a tie
// with another key does not count), the mean weight on the right key and
// the mean of the largest weight on any other key.
type pointing struct {
	N             int
	ArgmaxRight   float64
	MeanRight     float64
	MeanBestWrong float64
	Layer, Head   int
}

// pointerStats measures head (layer, head) of maps[e] on asks[e], every
// example e: maps are [layer][head][query][key] as infer returns them.
func pointerStats(maps []infer.Maps, asks [][]ask, layer, head int) pointing {
	p := pointing{Layer: layer, Head: head}
	right := 0
	for e, as := range asks {
		for _, a := range as {
			row := maps[e][layer][head][a.Query]
			w := row[a.Key]
			wrong := 0.0
			for k, x := range row {
				if k != a.Key {
					wrong = max(wrong, x)
				}
			}
			p.N++
			p.MeanRight += w
			p.MeanBestWrong += wrong
			if w > wrong {
				right++
			}
		}
	}
	if p.N > 0 {
		p.ArgmaxRight = float64(right) / float64(p.N)
		p.MeanRight /= float64(p.N)
		p.MeanBestWrong /= float64(p.N)
	}
	return p
}

// bestPointer returns the head of maps whose mean weight on the right keys
// of asks is largest (the fraction of right argmaxes breaks ties; then the
// first head), with its figures. maps must hold at least one layer and
// head.
func bestPointer(maps []infer.Maps, asks [][]ask) pointing {
	var best pointing
	first := true
	for layer := range maps[0] {
		for head := range maps[0][layer] {
			p := pointerStats(maps, asks, layer, head)
			if first || p.MeanRight > best.MeanRight || p.MeanRight == best.MeanRight && p.ArgmaxRight > best.ArgmaxRight {
				best, first = p, false
			}
		}
	}
	return best
}

// halves splits examples into those a head is chosen on (even indices) and
// those it is measured on (odd ones), so that the figures reported are not
// those the choice maximised.
func halves[T any](xs []T) (choose, measure []T) {
	for i, x := range xs {
		if i%2 == 0 {
			choose = append(choose, x)
		} else {
			measure = append(measure, x)
		}
	}
	return choose, measure
}
