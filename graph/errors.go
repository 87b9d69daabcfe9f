package graph

import (
	"errors"
	"fmt"
)

// ErrShape is matched, with errors.Is, by every error that reports inputs
// whose shapes do not fit together or do not fit the layer: a query of the
// wrong width, a mask of other sizes than the scores, a bias of the wrong
// heads. The message still says which node and which shape; ErrShape lets a
// caller tell "my tensors do not fit" from other failures without matching
// text. Package layers returns it too.
var ErrShape = errors.New("shape mismatch")

// kindError is an error that also matches a sentinel (kind) with errors.Is,
// while its message is err's alone: qkv's messages stay as they were, and
// errors.Is(err, ErrShape) works through every %w wrapping above it.
type kindError struct{ kind, err error }

func (e *kindError) Error() string { return e.err.Error() }

// Unwrap returns kind and err, so that errors.Is and errors.As see both.
func (e *kindError) Unwrap() []error { return []error{e.kind, e.err} }

// shapeErrorf is fmt.Errorf marked with ErrShape.
func shapeErrorf(format string, args ...any) error {
	return &kindError{ErrShape, fmt.Errorf(format, args...)}
}
