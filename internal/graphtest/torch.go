package graphtest

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
)

// SkipTorchEnv, set to 1, skips the PyTorch comparisons. Without it they are
// required: a machine where torch cannot run fails the test rather than
// passing it unchecked, so CI cannot be green without them.
const SkipTorchEnv = "QKV_SKIP_TORCH"

// TorchPython returns a Python interpreter that imports torch and numpy,
// after checking that script (a reference under tools/torchref) exists. It
// fails the test when there is none, unless $QKV_SKIP_TORCH is 1, which
// skips it. $QKV_TORCH_PYTHON overrides the default /usr/bin/python3
// (Debian's, where `apt-get install python3-torch python3-numpy` puts
// torch; the python3 on PATH may be another one without it).
func TorchPython(t testing.TB, script string) string {
	t.Helper()
	if os.Getenv(SkipTorchEnv) == "1" {
		t.Skipf("%s=1: the PyTorch reference comparison is skipped", SkipTorchEnv)
	}
	py := os.Getenv("QKV_TORCH_PYTHON")
	if py == "" {
		py = "/usr/bin/python3"
	}
	if _, err := os.Stat(script); err != nil {
		t.Fatalf("reference script: %v", err)
	}
	out, err := exec.Command(py, "-c", "import torch, numpy; print(torch.__version__)").CombinedOutput()
	if err != nil {
		t.Fatalf("no PyTorch reference: %s cannot import torch and numpy (%v): %s\n"+
			"install them with `apt-get install -y python3-torch python3-numpy libopenblas0-pthread`, "+
			"point QKV_TORCH_PYTHON at a python that has them, or set %s=1 to skip this comparison",
			py, err, bytes.TrimSpace(out), SkipTorchEnv)
	}
	t.Logf("reference: %s, torch %s", py, bytes.TrimSpace(out))
	return py
}
