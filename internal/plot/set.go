package plot

import (
	"fmt"
	"io"

	"github.com/qkv-dev/qkv/internal/fsx"
)

// Set is PNGs written together, all or none: a figure in several files,
// such as an encoder–decoder's three kinds of attention, is never left part
// new and part old. Its methods draw as the functions of the same name do
// and keep the PNG; Write writes them. Like every file qkv writes, each is
// replaced atomically, a path that is a device, FIFO or directory is
// refused, a symbolic link is written through, and a name must end in .png.
type Set struct{ files []fsx.Output }

// Attention draws as the function Attention does, to be written to path by
// Write.
func (s *Set) Attention(path string, title string, tokens []string, maps []AttentionMap) error {
	return attentionMaps(s, path, title, tokens, tokens, maps, AttentionOptions{})
}

// AttentionWith draws as the function AttentionWith does, to be written to
// path by Write.
func (s *Set) AttentionWith(path string, title string, tokens []string, maps []AttentionMap, opt AttentionOptions) error {
	return attentionMaps(s, path, title, tokens, tokens, maps, opt)
}

// CrossAttention draws as the function CrossAttention does, to be written
// to path by Write.
func (s *Set) CrossAttention(path string, title string, queries, keys []string, maps []AttentionMap) error {
	return attentionMaps(s, path, title, queries, keys, maps, AttentionOptions{})
}

// Write writes s's PNGs: all of them, or on error none, every file that
// existed keeping its content (fsx.WriteFiles).
func (s *Set) Write() error {
	if err := fsx.WriteFiles(s.files...); err != nil {
		return fmt.Errorf("plot: %w", err)
	}
	return nil
}

// add keeps the PNG wt, to be written to path.
func (s *Set) add(path string, wt io.WriterTo) {
	s.files = append(s.files, fsx.Output{Path: path, Ext: ".png", Write: func(w io.Writer) error {
		_, err := wt.WriteTo(w)
		return err
	}})
}

// writeNow writes at once the PNG that fill draws.
func writeNow(fill func(*Set) error) error {
	var s Set
	if err := fill(&s); err != nil {
		return err
	}
	return s.Write()
}
