//go:build !linux

package hugepage

import "errors"

// Collapse does nothing but on Linux.
func Collapse() (moved int64, err error) {
	return 0, errors.New("hugepage: huge pages are asked for on Linux only")
}
