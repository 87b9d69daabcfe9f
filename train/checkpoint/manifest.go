package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
)

// ManifestFile is the file of a run directory that names its current
// checkpoint. Writing it (atomically, by rename) is the single step that
// commits a checkpoint: before it the previous checkpoint is current, after
// it the new one.
const ManifestFile = "checkpoint.json"

// manifestFormat and manifestVersion identify a manifest.
const (
	manifestFormat  = "qkv-checkpoint"
	manifestVersion = 1
)

// manifest is ManifestFile: the step, the folder of the run directory that
// holds the checkpoint's files, and each file's size and SHA-256, which
// Load verifies before reading anything.
type manifest struct {
	Format  string         `json:"format"`
	Version int            `json:"version"`
	Step    int            `json:"step"`
	Dir     string         `json:"dir"`
	Files   []manifestFile `json:"files"`
}

// manifestFile is one file of a checkpoint as the manifest records it.
type manifestFile struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// checkpointFiles are the files of every checkpoint, in the order they are
// written and listed.
var checkpointFiles = []string{ConfigFile, ModelFile, OptimizerFile, StateFile}

// checkpointDirRE matches the folders that hold checkpoints: step, then a
// counter when one step is saved twice. Nothing else in a run directory is
// ever removed as an old checkpoint.
var checkpointDirRE = regexp.MustCompile(`^checkpoint-([0-9]{6,})(-[0-9]+)?$`)

// checkpointDirName returns the folder name of step's checkpoint; n > 0
// tells a second save of the same step from the first.
func checkpointDirName(step, n int) string {
	if n == 0 {
		return fmt.Sprintf("checkpoint-%06d", step)
	}
	return fmt.Sprintf("checkpoint-%06d-%d", step, n)
}

// sha256Hex returns the SHA-256 of b in lower-case hex.
func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// newManifest records files (name to content) of step's checkpoint in dir.
func newManifest(step int, dir string, files map[string][]byte) manifest {
	m := manifest{Format: manifestFormat, Version: manifestVersion, Step: step, Dir: dir}
	for _, name := range checkpointFiles {
		b := files[name]
		m.Files = append(m.Files, manifestFile{Name: name, Size: int64(len(b)), SHA256: sha256Hex(b)})
	}
	return m
}

// encode returns the manifest as indented JSON.
func (m manifest) encode() []byte {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		panic(err) // strings and ints always marshal
	}
	return append(b, '\n')
}

// file returns the record of name.
func (m manifest) file(name string) manifestFile {
	i := slices.IndexFunc(m.Files, func(f manifestFile) bool { return f.Name == name })
	return m.Files[i] // parseManifest checked every name is there
}

// sha256HexRE matches a SHA-256 in lower-case hex.
var sha256HexRE = regexp.MustCompile(`^[0-9a-f]{64}$`)

// parseManifest decodes and checks the manifest bytes b of the file path:
// the format and version, a step, a folder name that can only be a
// checkpoint folder of the run directory (so a manifest can never point a
// load outside it), and exactly the checkpoint files, each once, with a size
// and a SHA-256. It never panics.
func parseManifest(path string, b []byte) (manifest, error) {
	fail := func(format string, args ...any) (manifest, error) {
		return manifest{}, fmt.Errorf("checkpoint: %s: "+format, append([]any{path}, args...)...)
	}
	var m manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return fail("corrupt JSON: %v", err)
	}
	if dec.More() {
		return fail("corrupt JSON: data after the manifest")
	}
	if m.Format != manifestFormat {
		return fail("format %q, want %q", m.Format, manifestFormat)
	}
	if m.Version != manifestVersion {
		return fail("version %d, want %d (written by another version of qkv?)", m.Version, manifestVersion)
	}
	if m.Step < 0 {
		return fail("negative step %d", m.Step)
	}
	if !checkpointDirRE.MatchString(m.Dir) {
		return fail("dir %q is not a checkpoint folder name such as %q", m.Dir, checkpointDirName(m.Step, 0))
	}
	if len(m.Files) != len(checkpointFiles) {
		return fail("%d files, want %d: %v", len(m.Files), len(checkpointFiles), checkpointFiles)
	}
	seen := make(map[string]bool, len(m.Files))
	for _, f := range m.Files {
		if !slices.Contains(checkpointFiles, f.Name) {
			return fail("unknown file %q, want %v", f.Name, checkpointFiles)
		}
		if seen[f.Name] {
			return fail("file %q listed twice", f.Name)
		}
		seen[f.Name] = true
		if f.Size < 0 {
			return fail("file %q: negative size %d", f.Name, f.Size)
		}
		if !sha256HexRE.MatchString(f.SHA256) {
			return fail("file %q: sha256 %q is not 64 lower-case hex digits", f.Name, f.SHA256)
		}
	}
	return m, nil
}
