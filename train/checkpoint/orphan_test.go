package checkpoint

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/qkv-dev/qkv/internal/graphtest"
)

// TestCheckpointOrphanFolder: a run directory whose checkpoint.json is
// lost but whose checkpoint-000060/ is intact still holds a checkpoint: it
// exists (a fresh run must not start over it), it loads, and a save removes
// it only once a later step is committed.
func TestCheckpointOrphanFolder(t *testing.T) {
	dir, ck := saveTest(t, 60)
	if err := os.Remove(filepath.Join(dir, ManifestFile)); err != nil {
		t.Fatal(err)
	}
	orphan := filepath.Join(dir, checkpointDirName(60, 0))
	if !Exists(dir) {
		t.Fatal("Exists = false for a directory holding checkpoint-000060/")
	}
	if got, want := File(dir, ModelFile), filepath.Join(orphan, ModelFile); got != want {
		t.Errorf("File = %s, want %s", got, want)
	}
	loadsStep(t, dir, ck)

	// A save of an earlier step (a fresh run forced into the directory by a
	// library caller) commits, and keeps the later orphan.
	early := nextCheckpoint(t, ck, 10)
	if err := Save(dir, early); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(orphan, ModelFile)); err != nil {
		t.Fatalf("a save of step 10 removed checkpoint-000060: %v", err)
	}
	// A save of a later step supersedes it.
	late := nextCheckpoint(t, ck, 70)
	if err := Save(dir, late); err != nil {
		t.Fatal(err)
	}
	if got, want := graphtest.DirNames(t, dir), []string{"checkpoint-000070", ManifestFile}; !slices.Equal(got, want) {
		t.Errorf("after a save of step 70 the dir holds %q, want %q", got, want)
	}

	// The newest orphan damaged: refused naming it, not an older one.
	dir, _ = saveTest(t, 20)
	if err := os.Rename(ckFolder(t, dir), filepath.Join(dir, checkpointDirName(20, 0)+"-keep")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, ManifestFile)); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, checkpointDirName(30, 0)), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Load(dir)
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("an empty newest folder: %v, want ErrCorrupt", err)
	}
	graphtest.WantErr(t, err, "no "+ManifestFile, "checkpoint-000030, does not load", "missing file "+ConfigFile)
}

// maxRefusalAlloc is what refusing a checkpoint may allocate: a few small
// files and the messages.
const maxRefusalAlloc = 1 << 20

// TestCheckpointRefusesOversizedFiles replaces the files of a checkpoint by
// a 20 GB sparse file, a link to /dev/zero and a FIFO: each is refused,
// naming the file, before anything of its size is allocated, with and
// without a manifest; and a manifest forged to record the 20 GB is refused
// by the bound the configuration gives.
func TestCheckpointRefusesOversizedFiles(t *testing.T) {
	const huge = 20 << 30
	sparse := func(t *testing.T, path string) {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		if err := f.Truncate(huge); err != nil {
			t.Skipf("no sparse files here: %v", err)
		}
	}
	link := func(t *testing.T, path string) {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("/dev/zero", path); err != nil {
			t.Skip(err)
		}
	}
	fifo := func(t *testing.T, path string) {
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Mkfifo(path, 0o644); err != nil {
			t.Skip(err)
		}
	}
	bounded := LoadOptions{Limits: func([]byte) (Limits, error) { return Limits{Model: 1 << 20, Optimizer: 1 << 20}, nil }}
	cases := []struct {
		name    string
		file    string
		replace func(*testing.T, string)
		legacy  bool
		opts    LoadOptions
		want    string
	}{
		{"sparse model", ModelFile, sparse, false, LoadOptions{}, "21474836480 bytes, checkpoint.json records"},
		{"sparse optimizer", OptimizerFile, sparse, false, LoadOptions{}, "21474836480 bytes, checkpoint.json records"},
		{"sparse state", StateFile, sparse, false, LoadOptions{}, "21474836480 bytes, checkpoint.json records"},
		{"sparse config", ConfigFile, sparse, false, LoadOptions{}, "more than the 1048576 bytes a checkpoint's config.json may take"},
		{"model links to /dev/zero", ModelFile, link, false, LoadOptions{}, "not a regular file"},
		{"model is a FIFO", ModelFile, fifo, false, LoadOptions{}, "not a regular file"},
		{"legacy sparse model", ModelFile, sparse, true, bounded, "21474836480 bytes, more than the 1048576 bytes its config.json implies"},
		{"legacy sparse state", StateFile, sparse, true, LoadOptions{}, "more than the 1048576 bytes a checkpoint's state.json may take"},
		{"legacy model links to /dev/zero", ModelFile, link, true, LoadOptions{}, "not a regular file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir, _ := saveTest(t, 3)
			path := ckPath(t, dir, c.file)
			if c.legacy {
				legacyLayout(t, dir)
				path = filepath.Join(dir, c.file)
			}
			c.replace(t, path)
			var err error
			n := graphtest.Allocated(func() { _, err = LoadWith(dir, c.opts) })
			if !errors.Is(err, ErrCorrupt) {
				t.Errorf("err = %v, want ErrCorrupt", err)
			}
			graphtest.WantErr(t, err, path, c.want)
			if n > maxRefusalAlloc {
				t.Errorf("the refusal allocated %d bytes", n)
			}
		})
	}
	t.Run("manifest forged to match", func(t *testing.T) {
		dir, _ := saveTest(t, 3)
		path := ckPath(t, dir, ModelFile)
		sparse(t, path)
		m := readManifest(t, dir)
		for i := range m.Files {
			if m.Files[i].Name == ModelFile {
				m.Files[i].Size = huge
			}
		}
		if err := os.WriteFile(filepath.Join(dir, ManifestFile), m.encode(), 0o644); err != nil {
			t.Fatal(err)
		}
		var err error
		n := graphtest.Allocated(func() { _, err = LoadWith(dir, bounded) })
		graphtest.WantErr(t, err, path, "checkpoint.json records 21474836480 bytes, more than the 1048576 bytes its config.json implies")
		if n > maxRefusalAlloc {
			t.Errorf("the refusal allocated %d bytes", n)
		}
	})
	t.Run("manifest links to /dev/zero", func(t *testing.T) {
		dir, _ := saveTest(t, 3)
		path := filepath.Join(dir, ManifestFile)
		link(t, path)
		var err error
		n := graphtest.Allocated(func() { _, err = Load(dir) })
		graphtest.WantErr(t, err, path, "not a regular file")
		if got := File(dir, ModelFile); got != filepath.Join(dir, ModelFile) {
			t.Errorf("File = %s, want the path in dir itself", got)
		}
		if n > maxRefusalAlloc {
			t.Errorf("the refusal allocated %d bytes", n)
		}
	})
	t.Logf("%d oversized or non-regular files refused", len(cases)+2)
}

// legacyLayout turns the checkpoint in dir into the layout before
// manifests: its four files directly in dir.
func legacyLayout(t *testing.T, dir string) {
	t.Helper()
	folder := ckFolder(t, dir)
	for _, name := range ckFiles {
		if err := os.Rename(filepath.Join(folder, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{folder, filepath.Join(dir, ManifestFile)} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCheckpointSaveRefusesHugeJSON: a State larger than MaxJSONSize, which
// Load would refuse, is refused by Save and writes nothing.
func TestCheckpointSaveRefusesHugeJSON(t *testing.T) {
	dir, ck := saveTest(t, 3)
	big := *ck
	big.Step = 4
	big.State = append(append([]byte(`"`), make([]byte, MaxJSONSize)...), '"')
	for i := 1; i < len(big.State)-1; i++ {
		big.State[i] = 'x'
	}
	graphtest.WantErr(t, Save(dir, &big), "larger than MaxJSONSize")
	loadsStep(t, dir, ck)
}
