// Package torchref carries the PyTorch reference, torchref.py, inside the
// Go build, so that `qkv bench --torch` runs it from any directory (the
// script itself is documented in README.md beside it).
package torchref

import _ "embed"

// Script is torchref.py.
//
//go:embed torchref.py
var Script []byte
