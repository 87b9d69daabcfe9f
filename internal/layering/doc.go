// Package layering holds no code: its test checks the module's import
// graph. No package imports its parent directory's package or any other
// ancestor's (a subpackage sits below what it refines, never above it),
// no library package (outside cmd/, tools/ and internal/) depends on the
// plotting libraries, and train/optim, the optimizer a library user
// imports alone, depends on neither the training loop nor plotting, the
// progress bar or file locks. README.md's Layout section draws the layers.
package layering
