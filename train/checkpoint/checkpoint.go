package checkpoint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/nlpodyssey/safetensors"

	"github.com/qkv-dev/qkv/internal/fsx"
)

// The files of a checkpoint.
const (
	// ModelFile holds the model weights, one tensor per parameter.
	ModelFile = "model.safetensors"
	// OptimizerFile holds the optimizer state tensors.
	OptimizerFile = "optimizer.safetensors"
	// ConfigFile holds the caller's model and task configuration.
	ConfigFile = "config.json"
	// StateFile holds the caller's training state and the step.
	StateFile = "state.json"
)

// checkpointFormat is the value of the "format" metadata key of ModelFile.
const checkpointFormat = "qkv"

// ErrCorrupt is matched (errors.Is) by every error of Load about a
// checkpoint that is there but damaged: a truncated, changed, missing or
// undecodable file, an edited config.json, non-finite values, files of
// different steps. Errors reading the disk itself are not.
var ErrCorrupt = errors.New("corrupt checkpoint")

// corruptError marks err as one of ErrCorrupt's, keeping its message.
type corruptError struct{ error }

func (e corruptError) Is(target error) bool { return target == ErrCorrupt }
func (e corruptError) Unwrap() error        { return e.error }

// corrupt marks err as a damaged checkpoint's.
func corrupt(err error) error { return corruptError{err} }

// ErrNotFound is returned (wrapped) by Load when a directory
// holds no checkpoint at all, as opposed to a damaged one.
var ErrNotFound = errors.New("no checkpoint")

// Checkpoint is everything needed to resume training: the weights, the
// optimizer state and the caller's configuration and state, all at Step.
//
// Save writes it into a run directory as a folder of four files,
// named by ManifestFile: ModelFile (the weights as F32 or F64 safetensors,
// with metadata "format" = "qkv", "step", and "config" and "config_sha256",
// the configuration the weights belong to), OptimizerFile (F64
// safetensors, metadata "step"), ConfigFile (Config verbatim) and StateFile
// ({"step": n, "state": State}).
type Checkpoint struct {
	// Step is the number of optimizer steps taken; it must not be negative.
	Step int
	// Config is opaque JSON, typically the model and task configuration.
	// It is written verbatim; empty means JSON null, and a loaded null is
	// returned as nil.
	Config json.RawMessage
	// State is opaque JSON, typically RNG states and data positions. It is
	// stored inside state.json next to the step; whitespace around the value
	// is not preserved. Empty means null, and a loaded null is returned as
	// nil.
	State json.RawMessage
	// Weights are the model parameters (see ParamTensors), each stored with
	// its own DType, which must be tensor.Float32 or tensor.Float64. Loaded
	// weights are sorted by name. Every value must be finite.
	Weights []NamedTensor
	// Optimizer is the optimizer state. It is always stored as F64 whatever
	// DType says, and loaded with DType tensor.Float64, sorted by name. Every
	// value must be finite.
	Optimizer []NamedTensor
}

// Save writes ck into the run directory dir, creating it if
// needed, and makes it the directory's current checkpoint.
//
// The save is all or nothing. Every input is checked first (a non-finite
// weight or moment is refused, naming the tensor), so an invalid checkpoint
// writes nothing. The files go into a new hidden folder, each synced, which
// is synced and renamed to checkpoint-<step>; then ManifestFile, recording
// every file's size and SHA-256, is written to a temporary file, synced and
// renamed over the old manifest. That rename is the commit: a crash, a full
// disk or a failed write at any earlier point leaves the previous checkpoint
// current and intact, and only after it is the previous folder removed,
// with every checkpoint folder of an earlier step. Leftovers of an
// interrupted save (hidden temporary files and folders) are removed by the
// next one. A checkpoint folder of the same or a later step that the
// manifest does not name (its checkpoint.json lost, or a save interrupted
// between its two renames) is never removed: Load recovers the newest.
//
// One process at a time may save into dir (train.Run holds a lock on it).
func Save(dir string, ck *Checkpoint) (err error) {
	files, err := encodeCheckpoint(dir, ck)
	if err != nil {
		return err
	}
	fail := func(name string, err error) error {
		return fmt.Errorf("checkpoint: %s: %w", filepath.Join(dir, name), err)
	}
	if err := fsx.Current.MkdirAll(dir); err != nil {
		return fail("", err)
	}
	previous := currentCheckpoint(dir)
	removeTemps(dir)

	folder, err := fsx.Current.MkdirTemp(dir, ".checkpoint-*.tmp")
	if err != nil {
		return fail("", err)
	}
	committed := false
	defer func() {
		if !committed {
			fsx.Current.RemoveAll(folder)
		}
	}()
	for _, name := range checkpointFiles {
		b := files[name]
		err := fsx.WriteSynced(filepath.Join(folder, name), func(w io.Writer) error { _, err := w.Write(b); return err })
		if err != nil {
			return fail(name, err)
		}
	}
	if err := fsx.Current.SyncDir(folder); err != nil {
		return fail("", err)
	}
	name := freeCheckpointName(dir, ck.Step)
	if err := fsx.Current.Rename(folder, filepath.Join(dir, name)); err != nil {
		return fail(name, err)
	}
	folder = filepath.Join(dir, name)
	if err := fsx.Current.SyncDir(dir); err != nil {
		return fail("", err)
	}

	m := newManifest(ck.Step, name, files).encode()
	err = fsx.WriteFile(filepath.Join(dir, ManifestFile), "", func(w io.Writer) error { _, err := w.Write(m); return err })
	committed = err == nil || errors.Is(err, fsx.ErrUnsynced) // renamed: the new checkpoint is current
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	removeSuperseded(dir, name, ck.Step, previous)
	return nil
}

// encodeCheckpoint checks ck and returns the bytes of each of its files.
func encodeCheckpoint(dir string, ck *Checkpoint) (map[string][]byte, error) {
	if ck == nil {
		return nil, fmt.Errorf("checkpoint: %s: nil checkpoint", dir)
	}
	if ck.Step < 0 {
		return nil, fmt.Errorf("checkpoint: %s: negative step %d", dir, ck.Step)
	}
	config, err := jsonOrNull(ck.Config)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: Config: %w", filepath.Join(dir, ConfigFile), err)
	}
	state, err := jsonOrNull(ck.State)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: State: %w", filepath.Join(dir, StateFile), err)
	}
	if len(config) > MaxJSONSize || len(state)+64 > MaxJSONSize {
		return nil, fmt.Errorf("checkpoint: %s: Config (%d bytes) or State (%d bytes) is larger than MaxJSONSize = %d", dir, len(config), len(state), MaxJSONSize)
	}
	step := strconv.Itoa(ck.Step)
	model, err := tensorViews(filepath.Join(dir, ModelFile), ck.Weights, false)
	if err != nil {
		return nil, err
	}
	optim, err := tensorViews(filepath.Join(dir, OptimizerFile), ck.Optimizer, true)
	if err != nil {
		return nil, err
	}
	files := map[string][]byte{ConfigFile: config}
	// The model file carries the configuration it was trained with, so that
	// an edited config.json is caught and the changed field named.
	meta := map[string]string{"format": checkpointFormat, "step": step, "config": string(config), "config_sha256": sha256Hex(config)}
	if files[ModelFile], err = safetensors.Serialize(model, meta); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", filepath.Join(dir, ModelFile), err)
	}
	if files[OptimizerFile], err = safetensors.Serialize(optim, map[string]string{"step": step}); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", filepath.Join(dir, OptimizerFile), err)
	}
	files[StateFile] = encodeStateFile(ck.Step, state)
	return files, nil
}

// encodeStateFile returns the state file of step and the valid JSON state.
// It is built by hand so that the state keeps its bytes.
func encodeStateFile(step int, state []byte) []byte {
	var st bytes.Buffer
	fmt.Fprintf(&st, "{\"step\": %d, \"state\": ", step)
	st.Write(state)
	st.WriteString("}\n")
	return st.Bytes()
}

// freeCheckpointName returns the name of a folder for step's checkpoint
// that does not exist in dir yet.
func freeCheckpointName(dir string, step int) string {
	for n := 0; ; n++ {
		name := checkpointDirName(step, n)
		if _, err := os.Lstat(filepath.Join(dir, name)); errors.Is(err, fs.ErrNotExist) {
			return name
		}
	}
}

// File returns the path of the file name (ModelFile, ConfigFile, ...) of
// the current checkpoint of the run directory dir, the one Load reads:
// inside the folder its manifest names; without a manifest, in dir itself
// for the layout before manifests, or else in its newest checkpoint folder.
// It reads only the manifest or the directory and is meant for messages
// and for other tools; Load is what verifies the files.
func File(dir, name string) string {
	return filepath.Join(dir, currentFolder(dir), name)
}

// currentFolder returns the folder of dir that holds the checkpoint Load
// reads, "" for dir itself.
func currentFolder(dir string) string {
	if current := currentCheckpoint(dir); current != "" {
		return current
	}
	if _, err := os.Lstat(filepath.Join(dir, ManifestFile)); err == nil {
		return "" // a manifest that cannot be read: Load says why
	}
	if _, err := os.Lstat(filepath.Join(dir, StateFile)); err == nil {
		return ""
	}
	return orphanFolder(dir)
}

// Exists reports whether dir holds a checkpoint, complete or not, of either
// layout: a manifest, a checkpoint folder (named or not: a run whose
// manifest was lost still has its checkpoints), or a file of the layout
// before manifests. It is what a fresh run must not overwrite.
func Exists(dir string) bool {
	for _, name := range []string{ManifestFile, ModelFile, OptimizerFile, StateFile} {
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return orphanFolder(dir) != ""
}

// currentCheckpoint returns the folder the manifest of dir names: "" if
// there is no manifest or it cannot be read (Load says why).
func currentCheckpoint(dir string) string {
	path := filepath.Join(dir, ManifestFile)
	b, err := readBounded(path, maxManifestSize, "a manifest may take")
	if err != nil {
		return ""
	}
	m, err := parseManifest(path, b)
	if err != nil {
		return ""
	}
	return m.Dir
}

// isTempEntry reports whether name is a temporary file or folder of a save:
// what a save killed part way leaves, never a complete checkpoint.
func isTempEntry(name string) bool {
	return strings.HasPrefix(name, ".checkpoint-") && strings.HasSuffix(name, ".tmp") || fsx.IsTemp(name, ManifestFile)
}

// removeTemps removes the temporary files and folders of interrupted saves
// from dir. Nothing else is touched.
func removeTemps(dir string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if isTempEntry(e.Name()) {
			fsx.Current.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// removeSuperseded removes, after the save of step into the folder keep
// committed, what that save superseded: the folder previous the manifest
// named before it, every checkpoint folder of an earlier step, and a
// checkpoint of the layout before manifests if there was no manifest (it
// was the current one). A checkpoint folder of step or later that the
// manifest never named is kept: it may be all that is left of a run.
func removeSuperseded(dir, keep string, step int, previous string) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	legacy := 0
	for _, e := range ents {
		name := e.Name()
		old := false
		if e.IsDir() && name != keep && checkpointDirRE.MatchString(name) {
			s, _ := folderStep(name)
			old = name == previous || s < step
		}
		if old || isTempEntry(name) {
			fsx.Current.RemoveAll(filepath.Join(dir, name))
		}
		if slices.Contains(checkpointFiles, name) {
			legacy++
		}
	}
	if previous == "" && legacy == len(checkpointFiles) {
		for _, name := range checkpointFiles {
			fsx.Current.RemoveAll(filepath.Join(dir, name))
		}
	}
}

// maxLoadAttempts bounds how often a load that raced with saves is retried.
const maxLoadAttempts = 10

// errChanged marks a load that raced with a save: the manifest changed
// while the files were read.
var errChanged = errors.New("the checkpoint changed while it was read")

// Load reads the current checkpoint of the run directory dir.
//
// It checks every file before reading it: a regular file (a device, a
// FIFO or a link to one is refused), of the size ManifestFile records
// (config.json and state.json at most MaxJSONSize); then verifies its
// SHA-256 before decoding it, and fails, naming the file and where relevant
// the tensor or field, if a file is missing, truncated, corrupt or changed
// since it was saved; if config.json is not the configuration the weights
// were saved with (naming the fields that differ); if a tensor's data does
// not match its shape and dtype, a dtype is not F32 or F64, or a value is
// NaN or infinite; or if the files disagree on the step. A directory with no
// checkpoint gives an error wrapping ErrNotFound. A checkpoint written
// before manifests existed (the four files directly in dir) still loads,
// without the checksums, and so does the newest checkpoint folder of a
// directory whose manifest was lost, its files checked against each other
// (steps, and the configuration the weights record). Load never panics,
// whatever the files hold, and a save that commits while it reads is
// retried.
//
// Load bounds the weights files by the manifest alone; LoadWith can bound
// them by what the configuration implies too, as the config package's
// LoadCheckpoint does.
func Load(dir string) (*Checkpoint, error) {
	return LoadWith(dir, LoadOptions{})
}

// LoadWith is Load with options.
func LoadWith(dir string, opts LoadOptions) (*Checkpoint, error) {
	for attempt := 1; ; attempt++ {
		ck, err := load(dir, opts)
		if err == nil || attempt == maxLoadAttempts || !errors.Is(err, errChanged) {
			return ck, err
		}
	}
}

func load(dir string, opts LoadOptions) (*Checkpoint, error) {
	path := filepath.Join(dir, ManifestFile)
	mb, err := readBounded(path, maxManifestSize, "a manifest may take")
	if errors.Is(err, fs.ErrNotExist) {
		return loadUnnamed(dir, opts)
	}
	if err != nil {
		return nil, err
	}
	m, err := parseManifest(path, mb)
	if err != nil {
		return nil, corrupt(err)
	}
	folder := filepath.Join(dir, m.Dir)
	changed := func() bool {
		now, _ := readBounded(path, maxManifestSize, "")
		return !bytes.Equal(now, mb)
	}
	var limits Limits
	files := make(map[string][]byte, len(checkpointFiles))
	for _, name := range checkpointFiles {
		path := filepath.Join(folder, name)
		rec := m.file(name)
		gone := func(err error) error {
			if changed() {
				return fmt.Errorf("checkpoint: %s: %w", dir, errChanged)
			}
			if errors.Is(err, fs.ErrNotExist) {
				return corrupt(fmt.Errorf("checkpoint: %s: missing file %s (%s names it)", folder, name, ManifestFile))
			}
			return err
		}
		size, err := statRegular(path)
		if err != nil {
			return nil, gone(err)
		}
		if max := limits.max(name); rec.Size > max {
			return nil, corrupt(fmt.Errorf("checkpoint: %s: %s records %d bytes, more than the %d bytes %s (damaged, forged or not qkv's)", path, ManifestFile, rec.Size, max, boundWhat(name)))
		}
		if size != rec.Size && name != ConfigFile {
			return nil, corrupt(fmt.Errorf("checkpoint: %s: changed since it was saved (corrupt or edited): %d bytes, %s records %d bytes", path, size, ManifestFile, rec.Size))
		}
		b, err := readSized(path, size, limits.max(name), boundWhat(name))
		if err != nil {
			return nil, gone(err)
		}
		if sum := sha256Hex(b); int64(len(b)) != rec.Size || sum != rec.SHA256 {
			err := fmt.Errorf("checkpoint: %s: changed since it was saved (corrupt or edited): %d bytes with sha256 %s, %s records %d bytes with sha256 %s",
				path, len(b), sum, ManifestFile, rec.Size, rec.SHA256)
			if name == ConfigFile {
				err = editedConfig(folder, b, err)
			}
			return nil, corrupt(err)
		}
		files[name] = b
		if name == ConfigFile {
			if limits, err = opts.limits(b); err != nil {
				return nil, err
			}
		}
	}
	ck, err := decodeCheckpoint(folder, files, true)
	if err != nil {
		return nil, corrupt(err)
	}
	if ck.Step != m.Step {
		return nil, corrupt(fmt.Errorf("checkpoint: %s: %s is step %d, %s step %d", dir, ManifestFile, m.Step, StateFile, ck.Step))
	}
	return ck, nil
}

// editedConfig is the error for the config.json now of the checkpoint
// folder, which is not the one its manifest records (err says so): the
// fields that differ from the configuration the model file records, if its
// header can say.
func editedConfig(folder string, now []byte, err error) error {
	saved, serr := savedConfig(filepath.Join(folder, ModelFile))
	if serr != nil {
		return err
	}
	return configMismatch(filepath.Join(folder, ConfigFile), saved, now)
}

// loadUnnamed reads the checkpoint of a run directory without a manifest:
// the four files directly in dir (the layout before manifests), or else
// its newest checkpoint folder, whose manifest was lost. There are no
// checksums to verify them against; the files must agree with each other.
func loadUnnamed(dir string, opts LoadOptions) (*Checkpoint, error) {
	if _, err := os.Lstat(filepath.Join(dir, StateFile)); err == nil {
		return loadFolder(dir, opts, false)
	}
	folder := orphanFolder(dir)
	if folder == "" {
		return nil, fmt.Errorf("checkpoint: %s: %w (no %s)", dir, ErrNotFound, ManifestFile)
	}
	ck, err := loadFolder(filepath.Join(dir, folder), opts, true)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %s: no %s; its newest checkpoint folder, %s, does not load: %w", dir, ManifestFile, folder, err)
	}
	return ck, nil
}

// loadFolder reads the four files of a checkpoint in folder with nothing
// to verify them against but each other; bound says the model file must
// record its configuration.
func loadFolder(folder string, opts LoadOptions, bound bool) (*Checkpoint, error) {
	var limits Limits
	files := make(map[string][]byte, len(checkpointFiles))
	for _, name := range checkpointFiles {
		b, err := readBounded(filepath.Join(folder, name), limits.max(name), boundWhat(name))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, corrupt(fmt.Errorf("checkpoint: %s: missing file %s", folder, name))
		}
		if err != nil {
			return nil, err
		}
		files[name] = b
		if name == ConfigFile {
			if limits, err = opts.limits(b); err != nil {
				return nil, err
			}
		}
	}
	ck, err := decodeCheckpoint(folder, files, bound)
	if err != nil {
		return nil, corrupt(err)
	}
	return ck, nil
}

// decodeCheckpoint decodes the files of the checkpoint folder dir. bound
// says the model file must record the configuration it belongs to.
func decodeCheckpoint(dir string, files map[string][]byte, bound bool) (*Checkpoint, error) {
	ck := &Checkpoint{}
	config := files[ConfigFile]
	if !json.Valid(config) {
		return nil, fmt.Errorf("checkpoint: %s: corrupt JSON", filepath.Join(dir, ConfigFile))
	}
	if !isNull(config) {
		ck.Config = json.RawMessage(config)
	}

	var err error
	if ck.Step, ck.State, err = parseStateFile(filepath.Join(dir, StateFile), files[StateFile]); err != nil {
		return nil, err
	}

	path := filepath.Join(dir, ModelFile)
	meta, modelStep, weights, err := parseModelFile(path, files[ModelFile])
	if err != nil {
		return nil, err
	}
	ck.Weights = weights
	if sum, ok := meta["config_sha256"]; ok || bound {
		if sum != sha256Hex(config) {
			return nil, configMismatch(filepath.Join(dir, ConfigFile), []byte(meta["config"]), config)
		}
	}

	path = filepath.Join(dir, OptimizerFile)
	optMeta, optim, err := parseSafetensors(path, files[OptimizerFile])
	if err != nil {
		return nil, err
	}
	optimStep, err := metadataStep(path, optMeta)
	if err != nil {
		return nil, err
	}
	ck.Optimizer = optim

	for _, f := range []struct {
		name string
		step int
	}{{ModelFile, modelStep}, {OptimizerFile, optimStep}} {
		if f.step != ck.Step {
			return nil, fmt.Errorf("checkpoint: %s: incomplete checkpoint: %s is step %d, %s step %d",
				dir, f.name, f.step, StateFile, ck.Step)
		}
	}
	return ck, nil
}

// parseStateFile decodes the state file b at path: the step, and the
// caller's state (nil for null).
func parseStateFile(path string, b []byte) (int, json.RawMessage, error) {
	var st struct {
		Step  *int            `json:"step"`
		State json.RawMessage `json:"state"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return 0, nil, fmt.Errorf("checkpoint: %s: corrupt JSON: %w", path, err)
	}
	if st.Step == nil {
		return 0, nil, fmt.Errorf("checkpoint: %s: no \"step\"", path)
	}
	if *st.Step < 0 {
		return 0, nil, fmt.Errorf("checkpoint: %s: negative step %d", path, *st.Step)
	}
	if isNull(st.State) {
		return *st.Step, nil, nil
	}
	return *st.Step, st.State, nil
}

// maxConfigDiffs bounds how many changed fields an error lists.
const maxConfigDiffs = 5

// configMismatch is the error for a config.json at path that is not the
// configuration saved with the weights: it names the fields that differ
// when both are JSON.
func configMismatch(path string, saved, now []byte) error {
	var a, b any
	if json.Unmarshal(saved, &a) != nil || json.Unmarshal(now, &b) != nil {
		return fmt.Errorf("checkpoint: %s: not the configuration %s was saved with (edited after the save?)", path, ModelFile)
	}
	var diffs []string
	jsonDiff("", a, b, &diffs)
	if len(diffs) == 0 { // same values, other formatting
		diffs = []string{"formatting"}
	}
	if len(diffs) > maxConfigDiffs {
		diffs = append(diffs[:maxConfigDiffs], fmt.Sprintf("and %d more", len(diffs)-maxConfigDiffs))
	}
	return fmt.Errorf("checkpoint: %s: edited after the weights in %s were saved: %s", path, ModelFile, strings.Join(diffs, "; "))
}

// jsonDiff appends to out, for every leaf where the decoded JSON values a
// (saved) and b (now) differ, "path is B, was A when saved".
func jsonDiff(path string, a, b any, out *[]string) {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok && bok {
		keys := make([]string, 0, len(am)+len(bm))
		for k := range am {
			keys = append(keys, k)
		}
		for k := range bm {
			if _, ok := am[k]; !ok {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := k
			if path != "" {
				p = path + "." + k
			}
			jsonDiff(p, am[k], bm[k], out)
		}
		return
	}
	if !reflect.DeepEqual(a, b) {
		show := func(v any) string {
			if v == nil {
				return "absent"
			}
			s, _ := json.Marshal(v)
			return string(s)
		}
		if path == "" {
			path = "the configuration"
		}
		*out = append(*out, fmt.Sprintf("%s is %s, was %s when saved", path, show(b), show(a)))
	}
}

// jsonOrNull returns raw, or null if raw is empty, after checking it is
// valid JSON.
func jsonOrNull(raw json.RawMessage) ([]byte, error) {
	if len(raw) == 0 {
		return []byte("null"), nil
	}
	if !json.Valid(raw) {
		return nil, errors.New("invalid JSON")
	}
	return raw, nil
}

// isNull reports whether the JSON value b is null.
func isNull(b []byte) bool { return string(bytes.TrimSpace(b)) == "null" }

// parseModelFile decodes the bytes b of the model file path: its metadata,
// step and weights.
func parseModelFile(path string, b []byte) (map[string]string, int, []NamedTensor, error) {
	meta, tensors, err := parseSafetensors(path, b)
	if err != nil {
		return nil, 0, nil, err
	}
	if f := meta["format"]; f != checkpointFormat {
		return nil, 0, nil, fmt.Errorf("checkpoint: %s: metadata format %q, want %q", path, f, checkpointFormat)
	}
	step, err := metadataStep(path, meta)
	if err != nil {
		return nil, 0, nil, err
	}
	return meta, step, tensors, nil
}

// metadataStep returns the "step" entry of the safetensors metadata of path.
func metadataStep(path string, meta map[string]string) (int, error) {
	s, ok := meta["step"]
	if !ok {
		return 0, fmt.Errorf("checkpoint: %s: no \"step\" in the metadata", path)
	}
	step, err := strconv.Atoi(s)
	if err != nil || step < 0 {
		return 0, fmt.Errorf("checkpoint: %s: metadata step %q is not a step number", path, s)
	}
	return step, nil
}
