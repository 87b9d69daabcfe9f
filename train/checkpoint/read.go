package checkpoint

import (
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
)

// The sizes a file of a checkpoint may have whatever its configuration:
// they bound what Load reads before it knows more, so that a damaged or
// forged file never costs more memory than this.
const (
	// MaxJSONSize is the largest ConfigFile and StateFile: Save refuses a
	// larger Config or State, and Load such a file.
	MaxJSONSize = 1 << 20
	// maxManifestSize is the largest ManifestFile: four names, sizes and
	// SHA-256s take about 600 bytes.
	maxManifestSize = 1 << 16
	// maxHeaderRead is the largest safetensors header read on its own, to
	// name the fields of an edited config.json.
	maxHeaderRead = 16 << 20
)

// Limits bound the weights files of a checkpoint by what its configuration
// implies; LoadOptions.Limits computes them.
type Limits struct {
	// Model and Optimizer are the largest sizes, in bytes, of ModelFile and
	// OptimizerFile; 0 means no bound.
	Model, Optimizer int64
}

// max returns the bound of the file name: MaxJSONSize for the JSON files,
// the limit of the weights files (unbounded if 0).
func (l Limits) max(name string) int64 {
	n := int64(MaxJSONSize)
	switch name {
	case ModelFile:
		n = l.Model
	case OptimizerFile:
		n = l.Optimizer
	}
	if n <= 0 {
		return math.MaxInt64
	}
	return n
}

// LoadOptions change what Load accepts.
type LoadOptions struct {
	// Limits, if set, is given the content of ConfigFile, verified against
	// the manifest, before any weights are read, and returns how large the
	// weights files may be; an error it returns ends the load, as it is.
	// It lets a caller that knows what the configuration means (the parameter
	// shapes, the memory it may use) refuse a forged or damaged checkpoint
	// that claims gigabytes before a byte of them is read.
	Limits func(config []byte) (Limits, error)
}

// limits returns the bounds opts gives for config.
func (opts LoadOptions) limits(config []byte) (Limits, error) {
	if opts.Limits == nil {
		return Limits{}, nil
	}
	return opts.Limits(config)
}

// statRegular returns the size of the file path, which must be a regular
// file or a symbolic link to one: a device such as /dev/zero, a FIFO or a
// folder is refused before it is opened, as reading it would never end or
// block. A missing file gives an error matching fs.ErrNotExist.
func statRegular(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, fmt.Errorf("checkpoint: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return 0, corrupt(fmt.Errorf("checkpoint: %s: not a regular file (%v): a checkpoint's files are plain files", path, fi.Mode().Type()))
	}
	return fi.Size(), nil
}

// readSized reads the regular file path, which statRegular measured as
// size bytes, bounded by max: a larger file is refused before anything of
// its size is allocated. what says where max comes from, for the error.
func readSized(path string, size, max int64, what string) ([]byte, error) {
	if size > max {
		return nil, corrupt(fmt.Errorf("checkpoint: %s: %d bytes, more than the %d bytes %s (damaged, forged or not qkv's)", path, size, max, what))
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() != size {
		return nil, fmt.Errorf("checkpoint: %s: %w", path, errChanged)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("checkpoint: %s: %w", path, err)
	}
	return b, nil
}

// readBounded reads the regular file path of at most max bytes.
func readBounded(path string, max int64, what string) ([]byte, error) {
	size, err := statRegular(path)
	if err != nil {
		return nil, err
	}
	return readSized(path, size, max, what)
}

// boundWhat says where the bound of the file name comes from.
func boundWhat(name string) string {
	if name == ModelFile || name == OptimizerFile {
		return "its " + ConfigFile + " implies"
	}
	return "a checkpoint's " + name + " may take"
}

// savedConfig returns the configuration the model file path records in its
// header (the "config" metadata), reading the header alone.
func savedConfig(path string) ([]byte, error) {
	size, err := statRegular(path)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var n [8]byte
	if _, err := io.ReadFull(f, n[:]); err != nil {
		return nil, err
	}
	h := binary.LittleEndian.Uint64(n[:])
	if h > uint64(size-8) || h > maxHeaderRead {
		return nil, fmt.Errorf("header length %d does not fit", h)
	}
	hb := make([]byte, h)
	if _, err := io.ReadFull(f, hb); err != nil {
		return nil, err
	}
	var hdr struct {
		Meta map[string]string `json:"__metadata__"`
	}
	if err := json.Unmarshal(hb, &hdr); err != nil {
		return nil, err
	}
	c, ok := hdr.Meta["config"]
	if !ok {
		return nil, errors.New("no config in the metadata")
	}
	return []byte(c), nil
}

// orphanFolder returns the newest checkpoint folder of dir ("" if none):
// the highest step, and of one step the latest save.
func orphanFolder(dir string) string {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() && checkpointDirRE.MatchString(e.Name()) {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return ""
	}
	return slices.MaxFunc(names, func(a, b string) int {
		sa, na := folderStep(a)
		sb, nb := folderStep(b)
		return cmp.Or(cmp.Compare(sa, sb), cmp.Compare(na, nb))
	})
}

// folderStep returns the step and the save counter of a checkpoint folder
// name (checkpointDirRE); a step too large for an int is math.MaxInt.
func folderStep(name string) (step, n int) {
	m := checkpointDirRE.FindStringSubmatch(name)
	if m == nil {
		return -1, 0
	}
	step, err := strconv.Atoi(m[1])
	if err != nil {
		step = math.MaxInt
	}
	if m[2] != "" {
		n, _ = strconv.Atoi(m[2][1:])
	}
	return step, n
}
