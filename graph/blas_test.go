package graph

import (
	"fmt"
	"os"
	"os/exec"
	"testing"

	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
	"gonum.org/v1/gonum/blas/blas64"
	"gonum.org/v1/gonum/blas/gonum"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"
)

// globalBLAS returns the BLAS implementations a program's globals hold:
// gonum's blas64 and blas32, gorgonia's and tensor's.
func globalBLAS() []any {
	return []any{blas64.Implementation(), blas32.Implementation(), G.WhichBLAS(), tensor.WhichBLAS()}
}

// Importing graph changes no global BLAS: gonum's blas64 and blas32,
// gorgonia's and tensor's are still gonum's pure-Go implementation, as
// their packages set them. The check runs in a new process of this test
// binary running this test alone, so that no other test (TestUseFastGEMM)
// has run before it.
func TestImportLeavesBLASAlone(t *testing.T) {
	if os.Getenv("QKV_TEST_IMPORT_BLAS") == "1" {
		for i, impl := range globalBLAS() {
			if _, ok := impl.(gonum.Implementation); !ok {
				fmt.Printf("global BLAS %d (blas64, blas32, gorgonia, tensor) is %T, want gonum.Implementation\n", i, impl)
				t.Fail()
			}
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestImportLeavesBLASAlone$", "-test.count=1")
	cmd.Env = append(os.Environ(), "QKV_TEST_IMPORT_BLAS=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("importing graph changed a global BLAS: %v\n%s", err, out)
	}
}

// UseFastGEMM installs qkv's BLAS in all four globals; the test puts back
// what they held.
func TestUseFastGEMM(t *testing.T) {
	old := globalBLAS()
	defer func() {
		blas64.Use(old[0].(blas.Float64))
		blas32.Use(old[1].(blas.Float32))
		G.Use(old[2].(G.BLAS))
		tensor.Use(old[3].(tensor.BLAS))
	}()
	UseFastGEMM()
	for i, impl := range globalBLAS() {
		if _, ok := impl.(qkvBLAS); !ok {
			t.Errorf("after UseFastGEMM, global BLAS %d (blas64, blas32, gorgonia, tensor) is %T, want %T", i, impl, qkvBLAS{})
		}
	}
}
