package train

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"

	"github.com/nlpodyssey/safetensors"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
)

// The files of a checkpoint directory.
const (
	// ModelFile holds the model weights, one tensor per parameter.
	ModelFile = "model.safetensors"
	// OptimizerFile holds the optimizer state tensors.
	OptimizerFile = "optimizer.safetensors"
	// ConfigFile holds the caller's model and task configuration.
	ConfigFile = "config.json"
	// StateFile holds the caller's training state and the step. It is
	// written last.
	StateFile = "state.json"
)

// checkpointFormat is the value of the "format" metadata key of ModelFile.
const checkpointFormat = "qkv"

// Checkpoint is everything needed to resume training: the weights, the
// optimizer state and the caller's configuration and state, all at Step.
//
// SaveCheckpoint writes it to a directory of four files: ModelFile (the
// weights as F32 or F64 safetensors, with metadata {"format": "qkv",
// "step": "<n>"}), OptimizerFile (F64 safetensors, metadata {"step": "<n>"}),
// ConfigFile (Config verbatim) and StateFile ({"step": n, "state": State}).
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
	// weights are sorted by name.
	Weights []NamedTensor
	// Optimizer is the optimizer state. It is always stored as F64 whatever
	// DType says, and loaded with DType tensor.Float64, sorted by name.
	Optimizer []NamedTensor
}

// SaveCheckpoint writes ck to the directory dir, creating it if needed.
//
// Every input is checked before anything is written, so an invalid
// checkpoint leaves dir untouched. Each file is written atomically: to a
// temporary file in dir that is synced and then renamed over the final name,
// after which dir itself is synced. StateFile is written last, so a crash
// part way leaves files that disagree on the step, which LoadCheckpoint
// reports. No temporary file is left behind, whatever the outcome, and those
// of a save killed part way are removed.
func SaveCheckpoint(dir string, ck *Checkpoint) error {
	if ck == nil {
		return fmt.Errorf("train: checkpoint %s: nil checkpoint", dir)
	}
	if ck.Step < 0 {
		return fmt.Errorf("train: checkpoint %s: negative step %d", dir, ck.Step)
	}
	config, err := jsonOrNull(ck.Config)
	if err != nil {
		return fmt.Errorf("train: checkpoint %s: Config: %w", filepath.Join(dir, ConfigFile), err)
	}
	state, err := jsonOrNull(ck.State)
	if err != nil {
		return fmt.Errorf("train: checkpoint %s: State: %w", filepath.Join(dir, StateFile), err)
	}
	step := strconv.Itoa(ck.Step)
	model, err := tensorViews(filepath.Join(dir, ModelFile), ck.Weights, false)
	if err != nil {
		return err
	}
	optim, err := tensorViews(filepath.Join(dir, OptimizerFile), ck.Optimizer, true)
	if err != nil {
		return err
	}
	// Build the state file by hand so that State keeps its bytes.
	var stateFile bytes.Buffer
	fmt.Fprintf(&stateFile, "{\"step\": %d, \"state\": ", ck.Step)
	stateFile.Write(state)
	stateFile.WriteString("}\n")
	if !json.Valid(stateFile.Bytes()) { // cannot happen: state is valid
		return fmt.Errorf("train: checkpoint %s: invalid JSON", filepath.Join(dir, StateFile))
	}

	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("train: checkpoint %s: %w", dir, err)
	}
	removeStaleTemps(dir)
	files := []struct {
		name  string
		write func(io.Writer) error
	}{
		{ConfigFile, func(w io.Writer) error { _, err := w.Write(config); return err }},
		{ModelFile, func(w io.Writer) error {
			return safetensors.SerializeToWriter(model, map[string]string{"format": checkpointFormat, "step": step}, w)
		}},
		{OptimizerFile, func(w io.Writer) error {
			return safetensors.SerializeToWriter(optim, map[string]string{"step": step}, w)
		}},
		{StateFile, func(w io.Writer) error { _, err := w.Write(stateFile.Bytes()); return err }},
	}
	for _, f := range files {
		if err := writeFileAtomic(dir, f.name, f.write); err != nil {
			return fmt.Errorf("train: checkpoint %s: %w", filepath.Join(dir, f.name), err)
		}
	}
	return nil
}

// tempPattern is the os.CreateTemp pattern of the temporary file of name.
func tempPattern(name string) string { return "." + name + ".tmp-*" }

// removeStaleTemps removes the temporary files a save killed part way left
// in dir. Saving to one directory from two processes at once is not
// supported.
func removeStaleTemps(dir string) {
	for _, name := range []string{ConfigFile, ModelFile, OptimizerFile, StateFile} {
		stale, _ := filepath.Glob(filepath.Join(dir, tempPattern(name)))
		for _, f := range stale {
			os.Remove(f)
		}
	}
}

// testHookBeforeRename, when set by tests, runs before a temporary file is
// renamed to name; an error it returns aborts the save as if the rename had
// failed.
var testHookBeforeRename func(name string) error

// writeFileAtomic writes dir/name through a synced temporary file renamed
// over it, then syncs dir. On error the temporary file is removed.
func writeFileAtomic(dir, name string, write func(io.Writer) error) (err error) {
	tmp, err := os.CreateTemp(dir, tempPattern(name))
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err := write(bw); err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if testHookBeforeRename != nil {
		if err := testHookBeforeRename(name); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes the renames in dir durable.
func syncDir(dir string) error {
	if runtime.GOOS == "windows" {
		return nil // directories cannot be synced there
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
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

// rawView is a safetensors.View over encoded tensor data. It is used instead
// of safetensors.TensorView because NewTensorView counts zero elements for a
// scalar (shape []), while the file format, and the library's own reader,
// count one.
type rawView struct {
	dtype safetensors.DType
	shape []uint64
	data  []byte
}

func (v rawView) DType() safetensors.DType { return v.dtype }
func (v rawView) Shape() []uint64          { return v.shape }
func (v rawView) Data() []byte             { return v.data }
func (v rawView) DataLen() uint64          { return uint64(len(v.data)) }

// tensorViews checks tensors and encodes them as little-endian safetensors
// views, as F64 if allF64, else each in its own DType.
func tensorViews(file string, tensors []NamedTensor, allF64 bool) (map[string]rawView, error) {
	views := make(map[string]rawView, len(tensors))
	for _, t := range tensors {
		if t.Name == "" {
			return nil, fmt.Errorf("train: checkpoint %s: tensor with an empty name", file)
		}
		if t.Name == "__metadata__" {
			return nil, fmt.Errorf("train: checkpoint %s: tensor %q: the name is reserved by safetensors", file, t.Name)
		}
		if _, dup := views[t.Name]; dup {
			return nil, fmt.Errorf("train: checkpoint %s: tensor %q: duplicate name", file, t.Name)
		}
		n, err := numElements(t.Shape)
		if err != nil {
			return nil, fmt.Errorf("train: checkpoint %s: tensor %q: %w", file, t.Name, err)
		}
		if n != len(t.Data) {
			return nil, fmt.Errorf("train: checkpoint %s: tensor %q: %d values, want %d for shape %v", file, t.Name, len(t.Data), n, t.Shape)
		}
		dt := safetensors.F64
		if !allF64 {
			switch t.DType {
			case tensor.Float64:
			case tensor.Float32:
				dt = safetensors.F32
			default:
				return nil, fmt.Errorf("train: checkpoint %s: tensor %q: dtype %v is not supported: use float32 or float64", file, t.Name, t.DType)
			}
		}
		shape := make([]uint64, len(t.Shape)) // never nil: nil is written as null
		for i, d := range t.Shape {
			shape[i] = uint64(d)
		}
		var data []byte
		if dt == safetensors.F32 {
			data = make([]byte, 0, 4*len(t.Data))
			for _, v := range t.Data {
				data = binary.LittleEndian.AppendUint32(data, math.Float32bits(float32(v)))
			}
		} else {
			data = make([]byte, 0, 8*len(t.Data))
			for _, v := range t.Data {
				data = binary.LittleEndian.AppendUint64(data, math.Float64bits(v))
			}
		}
		views[t.Name] = rawView{dtype: dt, shape: shape, data: data}
	}
	return views, nil
}

// numElements returns the number of elements of shape, checking that no
// dimension is negative and the product does not overflow.
func numElements(shape []int) (int, error) {
	n := 1
	for _, d := range shape {
		if d < 0 {
			return 0, fmt.Errorf("negative dimension in shape %v", shape)
		}
		if d != 0 && n > math.MaxInt/d {
			return 0, fmt.Errorf("shape %v is too large", shape)
		}
		n *= d
	}
	return n, nil
}

// LoadCheckpoint reads the checkpoint SaveCheckpoint wrote to dir.
//
// It fails, naming the file and where relevant the tensor, if a file is
// missing, truncated or corrupt, if a tensor's data does not match its shape
// and dtype, if a dtype is not F32 or F64, or if the files disagree on the
// step (an interrupted save). It never panics, whatever the files hold.
func LoadCheckpoint(dir string) (*Checkpoint, error) {
	read := func(name string) ([]byte, string, error) {
		path := filepath.Join(dir, name)
		b, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) {
			return nil, path, fmt.Errorf("train: checkpoint %s: missing file %s", dir, name)
		}
		if err != nil {
			return nil, path, fmt.Errorf("train: checkpoint %s: %w", path, err)
		}
		return b, path, nil
	}
	ck := &Checkpoint{}

	b, path, err := read(ConfigFile)
	if err != nil {
		return nil, err
	}
	if !json.Valid(b) {
		return nil, fmt.Errorf("train: checkpoint %s: corrupt JSON", path)
	}
	if !isNull(b) {
		ck.Config = json.RawMessage(b)
	}

	b, path, err = read(StateFile)
	if err != nil {
		return nil, err
	}
	var st struct {
		Step  *int            `json:"step"`
		State json.RawMessage `json:"state"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("train: checkpoint %s: corrupt JSON: %w", path, err)
	}
	if st.Step == nil {
		return nil, fmt.Errorf("train: checkpoint %s: no \"step\"", path)
	}
	if *st.Step < 0 {
		return nil, fmt.Errorf("train: checkpoint %s: negative step %d", path, *st.Step)
	}
	ck.Step = *st.Step
	if !isNull(st.State) {
		ck.State = st.State
	}

	b, path, err = read(ModelFile)
	if err != nil {
		return nil, err
	}
	modelStep, weights, err := parseModelFile(path, b)
	if err != nil {
		return nil, err
	}
	ck.Weights = weights

	b, path, err = read(OptimizerFile)
	if err != nil {
		return nil, err
	}
	meta, optim, err := parseSafetensors(path, b)
	if err != nil {
		return nil, err
	}
	optimStep, err := metadataStep(path, meta)
	if err != nil {
		return nil, err
	}
	ck.Optimizer = optim

	for _, f := range []struct {
		name string
		step int
	}{{ModelFile, modelStep}, {OptimizerFile, optimStep}} {
		if f.step != ck.Step {
			return nil, fmt.Errorf("train: checkpoint %s: incomplete checkpoint: %s is step %d, %s step %d",
				dir, f.name, f.step, StateFile, ck.Step)
		}
	}
	return ck, nil
}

// isNull reports whether the JSON value b is null.
func isNull(b []byte) bool { return string(bytes.TrimSpace(b)) == "null" }

// parseModelFile decodes the bytes b of the model file path: its step and
// weights.
func parseModelFile(path string, b []byte) (int, []NamedTensor, error) {
	meta, tensors, err := parseSafetensors(path, b)
	if err != nil {
		return 0, nil, err
	}
	if f := meta["format"]; f != checkpointFormat {
		return 0, nil, fmt.Errorf("train: checkpoint %s: metadata format %q, want %q", path, f, checkpointFormat)
	}
	step, err := metadataStep(path, meta)
	if err != nil {
		return 0, nil, err
	}
	return step, tensors, nil
}

// metadataStep returns the "step" entry of the safetensors metadata of path.
func metadataStep(path string, meta map[string]string) (int, error) {
	s, ok := meta["step"]
	if !ok {
		return 0, fmt.Errorf("train: checkpoint %s: no \"step\" in the metadata", path)
	}
	step, err := strconv.Atoi(s)
	if err != nil || step < 0 {
		return 0, fmt.Errorf("train: checkpoint %s: metadata step %q is not a step number", path, s)
	}
	return step, nil
}

// parseSafetensors decodes the safetensors bytes b of the file path into
// its metadata and its tensors, sorted by name. Only F32 and F64 tensors
// are accepted. It never panics.
func parseSafetensors(path string, b []byte) (meta map[string]string, out []NamedTensor, err error) {
	defer func() {
		if r := recover(); r != nil {
			meta, out = nil, nil
			err = fmt.Errorf("train: checkpoint %s: corrupt safetensors file: %v", path, r)
		}
	}()
	fail := func(format string, args ...any) error {
		return fmt.Errorf("train: checkpoint %s: "+format, append([]any{path}, args...)...)
	}
	if len(b) < 8 {
		return nil, nil, fail("truncated: %d bytes, shorter than the 8-byte header length", len(b))
	}
	n := binary.LittleEndian.Uint64(b)
	if n > uint64(len(b)-8) {
		return nil, nil, fail("truncated: header length %d, but only %d bytes follow it", n, len(b)-8)
	}
	// Decode the header first to report problems by tensor; Deserialize
	// below checks the layout as a whole.
	var md safetensors.Metadata
	if err := json.Unmarshal(b[8:8+n], &md); err != nil {
		return nil, nil, fail("corrupt header: %v", err)
	}
	infos := md.Tensors()
	names := make([]string, 0, len(infos))
	for name := range infos {
		names = append(names, name)
	}
	slices.Sort(names)
	dataLen := uint64(len(b)) - 8 - n
	for _, name := range names {
		info := infos[name]
		if name == "" {
			return nil, nil, fail("tensor with an empty name")
		}
		if info.DType != safetensors.F32 && info.DType != safetensors.F64 {
			return nil, nil, fail("tensor %q: unsupported dtype %v: want F32 or F64", name, info.DType)
		}
		want := info.DType.Size()
		for _, d := range info.Shape {
			if d > math.MaxInt {
				return nil, nil, fail("tensor %q: dimension %d of shape %v is too large", name, d, info.Shape)
			}
			if d != 0 && want > math.MaxInt64/d {
				return nil, nil, fail("tensor %q: shape %v is too large", name, info.Shape)
			}
			want *= d
		}
		s, e := info.DataOffsets[0], info.DataOffsets[1]
		if e < s {
			return nil, nil, fail("tensor %q: data offsets [%d %d] are reversed", name, s, e)
		}
		if e-s != want {
			return nil, nil, fail("tensor %q: data length %d bytes, want %d for shape %v and dtype %v", name, e-s, want, info.Shape, info.DType)
		}
		if e > dataLen {
			return nil, nil, fail("truncated: tensor %q ends at data byte %d, but the data is %d bytes", name, e, dataLen)
		}
	}
	st, err := safetensors.Deserialize(b)
	if err != nil {
		return nil, nil, fail("corrupt safetensors file: %v", err)
	}
	out = make([]NamedTensor, 0, len(names))
	for _, name := range names {
		v, ok := st.Tensor(name)
		if !ok {
			return nil, nil, fail("tensor %q: listed in the header but not found", name)
		}
		t := NamedTensor{Name: name, Shape: make([]int, len(v.Shape()))}
		for i, d := range v.Shape() {
			t.Shape[i] = int(d)
		}
		data := v.Data()
		switch v.DType() {
		case safetensors.F32:
			t.DType = tensor.Float32
			t.Data = make([]float64, len(data)/4)
			for i := range t.Data {
				t.Data[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(data[4*i:])))
			}
		case safetensors.F64:
			t.DType = tensor.Float64
			t.Data = make([]float64, len(data)/8)
			for i := range t.Data {
				t.Data[i] = math.Float64frombits(binary.LittleEndian.Uint64(data[8*i:]))
			}
		}
		if n, err := numElements(t.Shape); err != nil || n != len(t.Data) {
			return nil, nil, fail("tensor %q: %d values do not fill shape %v", name, len(t.Data), t.Shape)
		}
		out = append(out, t)
	}
	return md.Metadata(), out, nil
}

// ParamTensors snapshots the values of params, which must be float32 or
// float64 *tensor.Dense, into NamedTensors named after the params, in the
// same order. The data is copied.
func ParamTensors(params []graph.Param) ([]NamedTensor, error) {
	out := make([]NamedTensor, 0, len(params))
	seen := make(map[string]bool, len(params))
	for _, p := range params {
		if seen[p.Name] {
			return nil, fmt.Errorf("train: param %q: duplicate name", p.Name)
		}
		seen[p.Name] = true
		d, err := paramDense(p)
		if err != nil {
			return nil, err
		}
		if d.IsMaterializable() {
			m, ok := d.Materialize().(*tensor.Dense)
			if !ok {
				return nil, fmt.Errorf("train: param %q: cannot materialize its view", p.Name)
			}
			d = m
		}
		t := NamedTensor{Name: p.Name, Shape: append([]int{}, d.Shape()...), DType: d.Dtype()}
		switch d.Dtype() {
		case tensor.Float32:
			src := d.Float32s()
			t.Data = make([]float64, len(src))
			for i, v := range src {
				t.Data[i] = float64(v)
			}
		case tensor.Float64:
			t.Data = append([]float64(nil), d.Float64s()...)
		}
		if n := d.Shape().TotalSize(); n != len(t.Data) {
			return nil, fmt.Errorf("train: param %q: %d values for shape %v", p.Name, len(t.Data), t.Shape)
		}
		out = append(out, t)
	}
	return out, nil
}

// paramDense returns the float32 or float64 *tensor.Dense value of p.
func paramDense(p graph.Param) (*tensor.Dense, error) {
	if p.Node == nil {
		return nil, fmt.Errorf("train: param %q: nil node", p.Name)
	}
	v := p.Node.Value()
	if v == nil {
		return nil, fmt.Errorf("train: param %q: no value", p.Name)
	}
	d, ok := v.(*tensor.Dense)
	if !ok {
		return nil, fmt.Errorf("train: param %q: value of type %T, want *tensor.Dense", p.Name, v)
	}
	if err := graph.CheckFloat(d.Dtype()); err != nil {
		return nil, fmt.Errorf("train: param %q: %w", p.Name, err)
	}
	return d, nil
}

// maxLoadErrors bounds how many problems LoadParams reports.
const maxLoadErrors = 10

// LoadParams copies tensors into the values of params in place. file names
// where the tensors come from, for the errors.
//
// Every param must have a tensor of the same name, with the same shape and
// dtype, and every tensor must belong to a param. Otherwise LoadParams
// returns an error listing the mismatches, each naming file and tensor and
// stating what was found and what was wanted, and modifies nothing.
func LoadParams(params []graph.Param, tensors []NamedTensor, file string) error {
	byName := make(map[string]*NamedTensor, len(tensors))
	for i := range tensors {
		t := &tensors[i]
		if _, dup := byName[t.Name]; dup {
			return fmt.Errorf("train: checkpoint %s: tensor %q: duplicate name", file, t.Name)
		}
		byName[t.Name] = t
	}
	var errs []error
	report := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("train: checkpoint %s: "+format, append([]any{file}, args...)...))
	}
	dense := make([]*tensor.Dense, len(params))
	used := make(map[string]bool, len(params))
	for i, p := range params {
		if used[p.Name] {
			return fmt.Errorf("train: param %q: duplicate name", p.Name)
		}
		used[p.Name] = true
		d, err := paramDense(p)
		if err != nil {
			return err
		}
		if d.IsMaterializable() {
			return fmt.Errorf("train: param %q: value is a view; cannot load into it in place", p.Name)
		}
		dense[i] = d
		t, ok := byName[p.Name]
		if !ok {
			report("tensor %q: missing, want shape %v %v", p.Name, []int(d.Shape()), d.Dtype())
			continue
		}
		if !slices.Equal(t.Shape, []int(d.Shape())) {
			report("tensor %q: shape %v, want %v", p.Name, t.Shape, []int(d.Shape()))
			continue
		}
		if t.DType != d.Dtype() {
			report("tensor %q: dtype %v, want %v", p.Name, t.DType, d.Dtype())
			continue
		}
		if n := d.Shape().TotalSize(); len(t.Data) != n {
			report("tensor %q: %d values, want %d for shape %v", p.Name, len(t.Data), n, t.Shape)
			continue
		}
		var have int
		if d.Dtype() == tensor.Float32 {
			have = len(d.Float32s())
		} else {
			have = len(d.Float64s())
		}
		if have != len(t.Data) {
			return fmt.Errorf("train: param %q: %d values for shape %v", p.Name, have, []int(d.Shape()))
		}
	}
	var extra []string
	for name := range byName {
		if !used[name] {
			extra = append(extra, name)
		}
	}
	slices.Sort(extra)
	for _, name := range extra {
		t := byName[name]
		report("tensor %q: unknown to the model (shape %v %v)", name, t.Shape, t.DType)
	}
	if len(errs) > 0 {
		if len(errs) > maxLoadErrors {
			more := len(errs) - maxLoadErrors
			errs = append(errs[:maxLoadErrors], fmt.Errorf("train: checkpoint %s: and %d more mismatched tensors", file, more))
		}
		return errors.Join(errs...)
	}
	for i, p := range params {
		src := byName[p.Name].Data
		switch d := dense[i]; d.Dtype() {
		case tensor.Float32:
			dst := d.Float32s()
			for j, v := range src {
				dst[j] = float32(v)
			}
		case tensor.Float64:
			copy(d.Float64s(), src)
		}
	}
	return nil
}
