package main

import (
	"errors"
	"fmt"

	"github.com/qkv-dev/qkv/internal/fsx"
)

// outputErr is err, from writing the file that flag names, as the
// command's error. A name the writer refuses (a device, FIFO or directory,
// an extension other than the format's) is the user's mistake: exit 2,
// naming the flag. err names the file.
func outputErr(flag string, err error) error {
	if errors.Is(err, fsx.ErrRefused) {
		return fmt.Errorf("%w: --%s: %v", errUsage, flag, err)
	}
	return err
}

// checkOutput refuses, before any work towards it, a file name for flag
// that its writer would refuse; ext is the extension of the format written,
// or "" for any.
func checkOutput(flag, path, ext string) error {
	if path == "" {
		return nil
	}
	return outputErr(flag, fsx.CheckOutput(path, ext))
}
