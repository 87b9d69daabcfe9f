//go:build !unix

package memprobe

import "errors"

// addressSpaceLimit reports that this system has no address-space limit to
// read.
func addressSpaceLimit() (uint64, error) {
	return 0, errors.New("memprobe: no address-space limit on this system")
}
