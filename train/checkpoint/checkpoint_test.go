package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nlpodyssey/safetensors"
	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/internal/graphtest"
)

// ckParam returns a learnable matrix or vector named name holding vals,
// stored in dtype dt.
func ckParam(t testing.TB, g *G.ExprGraph, dt tensor.Dtype, name string, shape []int, vals []float64) graph.Param {
	t.Helper()
	val := graph.NewDense(dt, tensor.Shape(shape), vals)
	opts := []G.NodeConsOpt{G.WithShape(shape...), G.WithName(name), G.WithValue(val)}
	var n *G.Node
	switch len(shape) {
	case 1:
		n = G.NewVector(g, dt, opts...)
	case 2:
		n = G.NewMatrix(g, dt, opts...)
	default:
		t.Fatalf("ckParam: unsupported rank %d", len(shape))
	}
	return graph.Param{Name: name, Node: n}
}

// specials are finite values whose bits a lossy conversion would change;
// all are exactly representable as float32.
var specials = []float64{
	math.Copysign(0, -1), float64(math.MaxFloat32),
	float64(math.SmallestNonzeroFloat32), -float64(math.MaxFloat32),
	float64(float32(1.0 / 3)), float64(float32(math.Pi)),
}

// ckModel returns the params of a small model of width dim in dtype dt,
// with values drawn from seed and rounded to dt, and some specials.
func ckModel(t testing.TB, dt tensor.Dtype, dim int, seed uint64) []graph.Param {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 7))
	vals := func(n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = rng.NormFloat64()
			if dt == tensor.Float32 {
				v[i] = float64(float32(v[i]))
			}
		}
		// Models of different seeds hold the specials at different places,
		// so that every value differs between them.
		copy(v[int(seed)%n:], specials)
		return v
	}
	g := G.NewGraph()
	return []graph.Param{
		ckParam(t, g, dt, "embed", []int{5, dim}, vals(5*dim)),
		ckParam(t, g, dt, "blocks.0.attn.wq", []int{dim, dim}, vals(dim*dim)),
		ckParam(t, g, dt, "blocks.0.ln.gain", []int{dim}, vals(dim)),
		ckParam(t, g, dt, "blocks.10.attn.wq", []int{dim, dim}, vals(dim*dim)),
	}
}

// ckOptimizer returns optimizer state tensors, including a scalar, an empty
// tensor and float64 values no float32 can hold.
func ckOptimizer() []NamedTensor {
	return []NamedTensor{
		{Name: "adam.m.embed", Shape: []int{2, 3}, DType: tensor.Float64,
			Data: []float64{1e-300, 5e-324, -math.MaxFloat64, math.Copysign(0, -1), 0.1, math.Nextafter(1, 2)}},
		{Name: "adam.t", Shape: []int{}, DType: tensor.Float64, Data: []float64{42}},
		{Name: "adam.empty", Shape: []int{0, 4}, DType: tensor.Float64, Data: []float64{}},
	}
}

// saveTest saves a checkpoint of the float32 test model at step into a new
// directory and returns the directory and the checkpoint.
func saveTest(t *testing.T, step int) (string, *Checkpoint) {
	t.Helper()
	w, err := ParamTensors(ckModel(t, tensor.Float32, 4, 1))
	if err != nil {
		t.Fatal(err)
	}
	ck := &Checkpoint{
		Step:      step,
		Config:    json.RawMessage(`{"model": {"dim": 4}, "task": "copy"}`),
		State:     json.RawMessage(fmt.Sprintf(`{"step":%d,"rng":[1,2,3]}`, step)),
		Weights:   w,
		Optimizer: ckOptimizer(),
	}
	dir := filepath.Join(t.TempDir(), "run", "ckpt")
	if err := Save(dir, ck); err != nil {
		t.Fatal(err)
	}
	return dir, ck
}

// sameBits reports whether a and b hold the same float64 bit patterns.
func sameBits(a, b []float64) bool {
	return slices.EqualFunc(a, b, func(x, y float64) bool { return math.Float64bits(x) == math.Float64bits(y) })
}

// checkTensors fails unless got equals want bit for bit, ignoring order.
func checkTensors(t *testing.T, what string, got, want []NamedTensor) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d tensors, want %d", what, len(got), len(want))
	}
	for _, w := range want {
		i := slices.IndexFunc(got, func(g NamedTensor) bool { return g.Name == w.Name })
		if i < 0 {
			t.Errorf("%s: tensor %q missing", what, w.Name)
			continue
		}
		g := got[i]
		if !slices.Equal(g.Shape, w.Shape) || g.DType != w.DType || !sameBits(g.Data, w.Data) {
			t.Errorf("%s: tensor %q = %v %v %v, want %v %v %v", what, w.Name, g.Shape, g.DType, g.Data, w.Shape, w.DType, w.Data)
		}
	}
}

// paramBits returns the bits of every param value, as uint64.
func paramBits(t *testing.T, params []graph.Param) [][]uint64 {
	t.Helper()
	var out [][]uint64
	for _, p := range params {
		var bits []uint64
		switch d := p.Node.Value().(*tensor.Dense); d.Dtype() {
		case tensor.Float32:
			for _, v := range d.Float32s() {
				bits = append(bits, uint64(math.Float32bits(v)))
			}
		case tensor.Float64:
			for _, v := range d.Float64s() {
				bits = append(bits, math.Float64bits(v))
			}
		}
		out = append(out, bits)
	}
	return out
}

// ckFiles are the files of a checkpoint, in the order os.ReadDir lists them.
var ckFiles = []string{ConfigFile, ModelFile, OptimizerFile, StateFile}

// readManifest returns the manifest of the run directory dir.
func readManifest(t testing.TB, dir string) manifest {
	t.Helper()
	path := filepath.Join(dir, ManifestFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m, err := parseManifest(path, b)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// ckFolder returns the folder of the current checkpoint of dir.
func ckFolder(t testing.TB, dir string) string {
	t.Helper()
	return filepath.Join(dir, readManifest(t, dir).Dir)
}

// ckPath returns the path of the file name of the current checkpoint of dir.
func ckPath(t testing.TB, dir, name string) string {
	t.Helper()
	return filepath.Join(ckFolder(t, dir), name)
}

// named returns the tensor of ts called name.
func named(t *testing.T, ts []NamedTensor, name string) *NamedTensor {
	t.Helper()
	for i := range ts {
		if ts[i].Name == name {
			return &ts[i]
		}
	}
	t.Fatalf("no tensor %q", name)
	return nil
}

func TestCheckpointRoundTrip(t *testing.T) {
	for _, dt := range []tensor.Dtype{tensor.Float32, tensor.Float64} {
		t.Run(dt.String(), func(t *testing.T) {
			params := ckModel(t, dt, 4, 1)
			before := paramBits(t, params)
			w, err := ParamTensors(params)
			if err != nil {
				t.Fatal(err)
			}
			for i, p := range params {
				if w[i].Name != p.Name || w[i].DType != dt || !slices.Equal(w[i].Shape, []int(p.Node.Shape())) {
					t.Fatalf("ParamTensors[%d] = %q %v %v, want %q %v %v", i, w[i].Name, w[i].Shape, w[i].DType, p.Name, p.Node.Shape(), dt)
				}
			}
			// The snapshot is a copy: changing the params does not change it.
			snapshot := slices.Clone(w[1].Data)
			if dt == tensor.Float32 {
				params[1].Node.Value().(*tensor.Dense).Float32s()[0] = 99
			} else {
				params[1].Node.Value().(*tensor.Dense).Float64s()[0] = 99
			}
			if !sameBits(w[1].Data, snapshot) {
				t.Fatal("ParamTensors shares memory with the param values")
			}

			ck := &Checkpoint{
				Step:      1234,
				Config:    json.RawMessage("{\n  \"dim\": 4,\n  \"heads\": [1, 2]\n}\n"),
				State:     json.RawMessage(`{"rng":{"pcg":[1,2]},"epoch":3}`),
				Weights:   w,
				Optimizer: ckOptimizer(),
			}
			dir := filepath.Join(t.TempDir(), "ck")
			if err := Save(dir, ck); err != nil {
				t.Fatal(err)
			}
			if got, want := graphtest.DirNames(t, dir), []string{"checkpoint-001234", ManifestFile}; !slices.Equal(got, want) {
				t.Fatalf("run dir holds %q, want %q", got, want)
			}
			if got := graphtest.DirNames(t, ckFolder(t, dir)); !slices.Equal(got, ckFiles) {
				t.Fatalf("checkpoint folder holds %q", got)
			}
			// The manifest records every file's size and SHA-256.
			for _, f := range readManifest(t, dir).Files {
				b, err := os.ReadFile(ckPath(t, dir, f.Name))
				if err != nil {
					t.Fatal(err)
				}
				if sum := sha256.Sum256(b); f.Size != int64(len(b)) || f.SHA256 != hex.EncodeToString(sum[:]) {
					t.Errorf("manifest records %s as %d bytes, sha256 %s; it has %d bytes, sha256 %x", f.Name, f.Size, f.SHA256, len(b), sum)
				}
			}
			got, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got.Step != 1234 {
				t.Errorf("Step = %d, want 1234", got.Step)
			}
			if !bytes.Equal(got.Config, ck.Config) {
				t.Errorf("Config = %q, want %q", got.Config, ck.Config)
			}
			if !bytes.Equal(got.State, ck.State) {
				t.Errorf("State = %q, want %q", got.State, ck.State)
			}
			checkTensors(t, "weights", got.Weights, ck.Weights)
			checkTensors(t, "optimizer", got.Optimizer, ck.Optimizer)

			// The files are what other tools expect.
			b, err := os.ReadFile(ckPath(t, dir, ModelFile))
			if err != nil {
				t.Fatal(err)
			}
			st, err := safetensors.Deserialize(b)
			if err != nil {
				t.Fatal(err)
			}
			_, md, _ := safetensors.ReadMetadata(b)
			configSum := sha256.Sum256(ck.Config)
			if m := md.Metadata(); m["format"] != "qkv" || m["step"] != "1234" || m["config"] != string(ck.Config) ||
				m["config_sha256"] != hex.EncodeToString(configSum[:]) || len(m) != 4 {
				t.Errorf("model metadata = %v", m)
			}
			wantDT := safetensors.F64
			if dt == tensor.Float32 {
				wantDT = safetensors.F32
			}
			v, ok := st.Tensor("blocks.0.attn.wq")
			if !ok || v.DType() != wantDT || !slices.Equal(v.Shape(), []uint64{4, 4}) || v.DataLen() != 16*wantDT.Size() {
				t.Errorf("blocks.0.attn.wq stored as %v %v, %d bytes", v.DType(), v.Shape(), v.DataLen())
			}
			b, err = os.ReadFile(ckPath(t, dir, OptimizerFile))
			if err != nil {
				t.Fatal(err)
			}
			_, md, err = safetensors.ReadMetadata(b)
			if err != nil {
				t.Fatal(err)
			}
			if m := md.Metadata(); m["step"] != "1234" || len(m) != 1 {
				t.Errorf("optimizer metadata = %v", m)
			}
			for name, info := range md.Tensors() {
				if info.DType != safetensors.F64 {
					t.Errorf("optimizer tensor %q stored as %v", name, info.DType)
				}
			}
			var state struct {
				Step  int
				State json.RawMessage
			}
			if b, err = os.ReadFile(ckPath(t, dir, StateFile)); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal(b, &state); err != nil || state.Step != 1234 || !bytes.Equal(state.State, ck.State) {
				t.Errorf("state.json = %s", b)
			}

			// Loading restores the saved values bit for bit into a model
			// holding other values.
			fresh := ckModel(t, dt, 4, 2)
			if slices.EqualFunc(paramBits(t, fresh), before, slices.Equal) {
				t.Fatal("fresh model already holds the saved values")
			}
			if err := LoadParams(fresh, got.Weights, ckPath(t, dir, ModelFile)); err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(paramBits(t, fresh), before, slices.Equal) {
				t.Errorf("loaded params differ from the saved ones:\n got %x\nwant %x", paramBits(t, fresh), before)
			}
		})
	}
}

func TestCheckpointNullJSON(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ck")
	if err := Save(dir, &Checkpoint{Step: 0}); err != nil {
		t.Fatal(err)
	}
	ck, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if ck.Step != 0 || ck.Config != nil || ck.State != nil || len(ck.Weights) != 0 || len(ck.Optimizer) != 0 {
		t.Errorf("empty checkpoint loaded as %+v", ck)
	}
}

func TestCheckpointOverwrite(t *testing.T) {
	dir, ck := saveTest(t, 10)
	ck.Step = 20
	ck.Weights[0].Data[0] = 7
	if err := Save(dir, ck); err != nil {
		t.Fatal(err)
	}
	if got, want := graphtest.DirNames(t, dir), []string{"checkpoint-000020", ManifestFile}; !slices.Equal(got, want) {
		t.Fatalf("after two saves the dir holds %q, want %q", got, want)
	}
	// Saves killed part way leave a staging folder, a temporary manifest or
	// a folder the manifest never named; none of it breaks loading. The next
	// save removes the temporary ones, and keeps the checkpoint folders of
	// its step or later that the manifest does not name (they may be all
	// that is left of a run), and anything that is not its own.
	for _, stale := range []string{".checkpoint-123.tmp", "checkpoint-000021", "checkpoint-000020-1"} {
		if err := os.MkdirAll(filepath.Join(dir, stale), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{".checkpoint.json.tmp-1-1", "notes.txt", "checkpoint-000021.txt"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Load(dir); err != nil {
		t.Fatalf("stale files break loading: %v", err)
	}
	// Saving the same step again makes a new folder, then removes the one
	// it supersedes.
	if err := Save(dir, ck); err != nil {
		t.Fatal(err)
	}
	if got, want := graphtest.DirNames(t, dir), []string{"checkpoint-000020-1", "checkpoint-000020-2", "checkpoint-000021", "checkpoint-000021.txt", ManifestFile, "notes.txt"}; !slices.Equal(got, want) {
		t.Fatalf("after a save over stale files the dir holds %q, want %q", got, want)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Step != 20 {
		t.Errorf("Step = %d, want 20", got.Step)
	}
	checkTensors(t, "weights", got.Weights, ck.Weights)
}

// rewrite replaces the file name of the current checkpoint of dir by the
// result of f, as a disk error or an editor would: the manifest still
// records the old content.
func rewrite(t *testing.T, dir, name string, f func([]byte) []byte) {
	t.Helper()
	path := ckPath(t, dir, name)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, f(b), 0o644); err != nil {
		t.Fatal(err)
	}
}

// forge rewrites the file name like rewrite and records the new content in
// the manifest, so that what the checksums would catch reaches the checks
// behind them.
func forge(t *testing.T, dir, name string, f func([]byte) []byte) {
	t.Helper()
	rewrite(t, dir, name, f)
	m := readManifest(t, dir)
	files := make(map[string][]byte)
	for _, n := range checkpointFiles {
		b, err := os.ReadFile(ckPath(t, dir, n))
		if err != nil {
			t.Fatal(err)
		}
		files[n] = b
	}
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), newManifest(m.Step, m.Dir, files).encode(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCheckpointRejectsTruncated(t *testing.T) {
	dir, _ := saveTest(t, 3)
	path := ckPath(t, dir, ModelFile)
	valid := graphtest.ReadFile(t, path)
	hdr := int(binary.LittleEndian.Uint64(valid))
	for _, n := range []int{0, 5, 8, 8 + hdr/2, 8 + hdr, 8 + hdr + 3, len(valid) - 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			// The checksum catches it first; behind it, the parser too.
			rewrite(t, dir, ModelFile, func([]byte) []byte { return valid[:n] })
			_, err := Load(dir)
			graphtest.WantErr(t, err, path+": changed since it was saved", fmt.Sprintf(": %d bytes", n))
			forge(t, dir, ModelFile, func([]byte) []byte { return valid[:n] })
			_, err = Load(dir)
			graphtest.WantErr(t, err, path+": truncated")
		})
	}
	forge(t, dir, ModelFile, func([]byte) []byte { return valid })
	forge(t, dir, OptimizerFile, func(b []byte) []byte { return b[:len(b)-8] })
	_, err := Load(dir)
	graphtest.WantErr(t, err, ckPath(t, dir, OptimizerFile)+": truncated")
}

// modelFile returns a model file with the given header and data.
func modelFile(header string, data []byte) []byte {
	b := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	return append(append(b, header...), data...)
}

func TestCheckpointRejectsCorrupt(t *testing.T) {
	dir0, ck := saveTest(t, 3)
	configSum := sha256.Sum256(ck.Config)
	meta := fmt.Sprintf(`"__metadata__":{"format":"qkv","step":"3","config_sha256":"%x"}`, configSum)
	rng := rand.New(rand.NewPCG(3, 3))
	garbage := make([]byte, 200)
	for i := range garbage {
		garbage[i] = byte(rng.Uint32())
	}
	for _, c := range []struct {
		name string
		file []byte
		want string
	}{
		{"garbage", garbage, "truncated: header length"},
		{"garbage header", modelFile(string(garbage[:64]), nil), "corrupt header"},
		{"invalid JSON", modelFile(`{"w":{"dtype":"F32",`, nil), "corrupt header"},
		{"not an object", modelFile(`[1,2,3]`, nil), "corrupt header"},
		{"bad dtype name", modelFile(`{"w":{"dtype":"F99","shape":[1],"data_offsets":[0,4]},`+meta+`}`, make([]byte, 4)), "corrupt header"},
		{"unsupported dtype", modelFile(`{"w":{"dtype":"I32","shape":[2],"data_offsets":[0,8]},`+meta+`}`, make([]byte, 8)),
			`tensor "w": unsupported dtype I32`},
		{"data length", modelFile(`{"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]},`+meta+`}`, make([]byte, 12)),
			`tensor "w": data length 12 bytes, want 16`},
		{"reversed offsets", modelFile(`{"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]},`+meta+`}`, make([]byte, 8)),
			`tensor "w": data offsets [8 0] are reversed`},
		{"huge shape", modelFile(`{"w":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,0]},`+meta+`}`, nil),
			`tensor "w": shape [4294967296 4294967296] is too large`},
		{"gap between tensors", modelFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},`+meta+`}`, make([]byte, 8)),
			"corrupt safetensors file"},
		{"trailing bytes", modelFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},`+meta+`}`, make([]byte, 9)),
			"corrupt safetensors file"},
		{"NaN", modelFile(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},`+meta+`}`, []byte{0, 0, 0x80, 0x3f, 0, 0, 0xc0, 0x7f}),
			`tensor "a": value 1 is NaN`},
		{"Inf", modelFile(`{"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]},`+meta+`}`, []byte{0, 0, 0, 0, 0, 0, 0xf0, 0xff}),
			`tensor "a": value 0 is -Inf`},
		{"no format", modelFile(`{"__metadata__":{"step":"3"}}`, nil), `metadata format "", want "qkv"`},
		{"no step", modelFile(`{"__metadata__":{"format":"qkv"}}`, nil), `no "step" in the metadata`},
		{"bad step", modelFile(`{"__metadata__":{"format":"qkv","step":"-1"}}`, nil), `metadata step "-1"`},
		{"no config binding", modelFile(`{"__metadata__":{"format":"qkv","step":"3"}}`, nil), ConfigFile + ": not the configuration"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, _ := saveTest(t, 3)
			forge(t, dir, ModelFile, func([]byte) []byte { return c.file })
			_, err := Load(dir)
			graphtest.WantErr(t, err, "checkpoint: "+ckFolder(t, dir)+"/", c.want)
		})
	}
	// A hand-made valid file loads, so the cases above fail for their own
	// reason.
	forge(t, dir0, ModelFile, func([]byte) []byte {
		return modelFile(`{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},`+meta+`}`, []byte{0, 0, 0x80, 0x3f})
	})
	got, err := Load(dir0)
	if err != nil {
		t.Fatal(err)
	}
	checkTensors(t, "weights", got.Weights, []NamedTensor{{Name: "a", Shape: []int{1}, DType: tensor.Float32, Data: []float64{1}}})

	for _, content := range []string{`{"step": 3,`, `{"state": {}}`, `{"step": -3}`, "\x00\x01"} {
		dir, _ := saveTest(t, 3)
		forge(t, dir, StateFile, func([]byte) []byte { return []byte(content) })
		_, err := Load(dir)
		graphtest.WantErr(t, err, ckPath(t, dir, StateFile)+": ")
	}
}

func TestCheckpointRejectsChangedFiles(t *testing.T) {
	// One flipped bit anywhere in any file is caught, naming the file.
	for _, name := range ckFiles {
		dir, _ := saveTest(t, 3)
		size := len(graphtest.ReadFile(t, ckPath(t, dir, name)))
		for _, at := range []int{0, size / 2, size - 1} {
			rewrite(t, dir, name, func(b []byte) []byte { b[at] ^= 1; return b })
			_, err := Load(dir)
			graphtest.WantErr(t, err, ckPath(t, dir, name)+": ")
			rewrite(t, dir, name, func(b []byte) []byte { b[at] ^= 1; return b })
		}
		if _, err := Load(dir); err != nil {
			t.Fatalf("restored %s: %v", name, err)
		}
	}
}

func TestCheckpointRejectsEditedConfig(t *testing.T) {
	edit := func(b []byte) []byte {
		return bytes.Replace(bytes.Replace(b, []byte(`"dim": 4`), []byte(`"dim": 8`), 1), []byte(`"copy"`), []byte(`"sort"`), 1)
	}
	want := []string{ConfigFile + ": edited after the weights in model.safetensors were saved",
		"model.dim is 8, was 4 when saved", `task is "sort", was "copy" when saved`}
	// As an editor leaves it, and with the manifest forged to match: the
	// model file still knows the configuration it was saved with.
	dir, _ := saveTest(t, 3)
	rewrite(t, dir, ConfigFile, edit)
	_, err := Load(dir)
	graphtest.WantErr(t, err, want...)
	dir, _ = saveTest(t, 3)
	forge(t, dir, ConfigFile, edit)
	_, err = Load(dir)
	graphtest.WantErr(t, err, want...)
	// Not JSON at all.
	forge(t, dir, ConfigFile, func([]byte) []byte { return []byte("{") })
	_, err = Load(dir)
	graphtest.WantErr(t, err, ckPath(t, dir, ConfigFile)+": corrupt JSON")
}

func TestCheckpointRejectsBadManifest(t *testing.T) {
	dir, _ := saveTest(t, 3)
	path := filepath.Join(dir, ManifestFile)
	valid := string(graphtest.ReadFile(t, path))
	sub := func(old, new string) string { return strings.Replace(valid, old, new, 1) }
	sum := readManifest(t, dir).file(ModelFile).SHA256
	for _, c := range []struct {
		name, content, want string
	}{
		{"empty", "", "corrupt JSON"},
		{"not JSON", "{", "corrupt JSON"},
		{"two values", valid + "{}", "data after the manifest"},
		{"unknown field", sub(`"step"`, `"extra": 1, "step"`), `unknown field "extra"`},
		{"format", sub(`"qkv-checkpoint"`, `"qkv"`), `format "qkv", want "qkv-checkpoint"`},
		{"version", sub(`"version": 1`, `"version": 2`), "version 2, want 1"},
		{"negative step", sub(`"step": 3`, `"step": -3`), "negative step -3"},
		{"other step", sub(`"step": 3`, `"step": 4`), "checkpoint.json is step 4, state.json step 3"},
		{"dir outside", sub(`"checkpoint-000003"`, `"../checkpoint-000003"`), `dir "../checkpoint-000003" is not a checkpoint folder name`},
		{"dir absolute", sub(`"checkpoint-000003"`, `"/etc"`), `dir "/etc" is not`},
		{"dir missing", sub(`"checkpoint-000003"`, `"checkpoint-000004"`), "missing file config.json"},
		{"file unknown", sub(`"state.json"`, `"notes.json"`), `unknown file "notes.json"`},
		{"file twice", sub(`"state.json"`, `"config.json"`), `file "config.json" listed twice`},
		{"no files", sub(`"files"`, `"x_files"`), `unknown field "x_files"`},
		{"negative size", strings.Replace(valid, `"size": `, `"size": -`, 1), `negative size`},
		{"bad sha", sub(sum, strings.ToUpper(sum)), "is not 64 lower-case hex digits"},
		{"wrong sha", sub(sum, strings.Repeat("0", 64)), ModelFile + ": changed since it was saved"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := os.WriteFile(path, []byte(c.content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Load(dir)
			graphtest.WantErr(t, err, "checkpoint: "+dir, c.want)
		})
	}
}

func TestCheckpointRefusesNonFinite(t *testing.T) {
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		dir, prev := saveTest(t, 10)
		ck, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		ck.Step = 20
		named(t, ck.Weights, "blocks.0.ln.gain").Data[2] = v
		graphtest.WantErr(t, Save(dir, ck), ModelFile, `tensor "blocks.0.ln.gain": value 2 is `+fmt.Sprint(v))
		loadsStep(t, dir, prev)
		named(t, ck.Weights, "blocks.0.ln.gain").Data[2] = 1
		named(t, ck.Optimizer, "adam.t").Data[0] = v
		graphtest.WantErr(t, Save(dir, ck), OptimizerFile, `tensor "adam.t": value 0 is `+fmt.Sprint(v))
		loadsStep(t, dir, prev)
	}
}

func TestCheckpointLegacyLayout(t *testing.T) {
	// A run directory of the layout before manifests: the four files in it.
	dir, ck := saveTest(t, 7)
	folder := ckFolder(t, dir)
	for _, name := range ckFiles {
		if err := os.Rename(filepath.Join(folder, name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(folder); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, ManifestFile)); err != nil {
		t.Fatal(err)
	}
	loadsStep(t, dir, ck)
	// The next save writes the new layout and removes the old files.
	ck.Step = 8
	ck.State = json.RawMessage(`{"step":8}`)
	if err := Save(dir, ck); err != nil {
		t.Fatal(err)
	}
	if got, want := graphtest.DirNames(t, dir), []string{"checkpoint-000008", ManifestFile}; !slices.Equal(got, want) {
		t.Errorf("after a save the dir holds %q, want %q", got, want)
	}
	loadsStep(t, dir, ck)
}

func TestCheckpointRejectsMissingFile(t *testing.T) {
	for _, name := range ckFiles {
		t.Run(name, func(t *testing.T) {
			dir, _ := saveTest(t, 3)
			if err := os.Remove(ckPath(t, dir, name)); err != nil {
				t.Fatal(err)
			}
			_, err := Load(dir)
			graphtest.WantErr(t, err, ckFolder(t, dir), "missing file "+name)
		})
	}
	for _, d := range []string{t.TempDir(), filepath.Join(t.TempDir(), "nowhere")} {
		_, err := Load(d)
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("Load(%s) = %v, want ErrNotFound", d, err)
		}
		graphtest.WantErr(t, err, d, "no checkpoint.json")
	}
}

func TestCheckpointRejectsStepMismatch(t *testing.T) {
	dir10, _ := saveTest(t, 10)
	for _, name := range []string{ModelFile, OptimizerFile} {
		t.Run(name, func(t *testing.T) {
			dir20, _ := saveTest(t, 20)
			forge(t, dir20, name, func([]byte) []byte { return graphtest.ReadFile(t, ckPath(t, dir10, name)) })
			_, err := Load(dir20)
			graphtest.WantErr(t, err, ckFolder(t, dir20), "incomplete checkpoint: "+name+" is step 10, state.json step 20")
		})
	}
}

func TestCheckpointLoadParamsMismatch(t *testing.T) {
	dir, ck := saveTest(t, 3) // a float32 model of width 4
	file := ckPath(t, dir, ModelFile)
	loaded, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		params  []graph.Param
		tensors []NamedTensor
		want    []string
	}{
		{"wrong shape", ckModel(t, tensor.Float32, 8, 5), loaded.Weights,
			[]string{file + `: tensor "blocks.0.attn.wq": shape [4 4], want [8 8]`, `tensor "embed": shape [5 4], want [5 8]`}},
		{"dtype", ckModel(t, tensor.Float64, 4, 5), loaded.Weights,
			[]string{file + `: tensor "blocks.0.attn.wq": dtype float32, want float64`}},
		{"missing tensor", ckModel(t, tensor.Float32, 4, 5),
			slices.DeleteFunc(slices.Clone(loaded.Weights), func(t NamedTensor) bool { return t.Name == "blocks.0.ln.gain" }),
			[]string{file + `: tensor "blocks.0.ln.gain": missing, want shape [4] float32`}},
		{"extra tensor", ckModel(t, tensor.Float32, 4, 5),
			append(slices.Clone(loaded.Weights), NamedTensor{Name: "blocks.1.attn.wq", Shape: []int{1}, DType: tensor.Float32, Data: []float64{1}}),
			[]string{file + `: tensor "blocks.1.attn.wq": unknown to the model (shape [1] float32)`}},
		{"short data", ckModel(t, tensor.Float32, 4, 5),
			[]NamedTensor{ck.Weights[0], ck.Weights[1], ck.Weights[2], {Name: ck.Weights[3].Name, Shape: ck.Weights[3].Shape, DType: tensor.Float32, Data: []float64{1}}},
			[]string{file + `: tensor "blocks.10.attn.wq": 1 values, want 16 for shape [4 4]`}},
		{"duplicate tensor", ckModel(t, tensor.Float32, 4, 5), append(slices.Clone(loaded.Weights), loaded.Weights[0]),
			[]string{file + `: tensor "` + loaded.Weights[0].Name + `": duplicate name`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := paramBits(t, c.params)
			err := LoadParams(c.params, c.tensors, file)
			graphtest.WantErr(t, err, c.want...)
			if !slices.EqualFunc(paramBits(t, c.params), before, slices.Equal) {
				t.Error("a failed LoadParams modified the params")
			}
		})
	}
}

func TestCheckpointParamTensorsErrors(t *testing.T) {
	g := G.NewGraph()
	p := ckParam(t, g, tensor.Float32, "w", []int{2}, []float64{1, 2})
	if _, err := ParamTensors([]graph.Param{p, p}); err == nil || !strings.Contains(err.Error(), `"w": duplicate`) {
		t.Errorf("duplicate params: err = %v", err)
	}
	noValue := graph.Param{Name: "nv", Node: G.NewMatrix(g, tensor.Float64, G.WithShape(2, 2), G.WithName("nv"))}
	if _, err := ParamTensors([]graph.Param{noValue}); err == nil || !strings.Contains(err.Error(), `"nv": no value`) {
		t.Errorf("param without value: err = %v", err)
	}
}

// noTemps fails if the run directory dir holds anything but its manifest
// and the checkpoint folder it names.
func noTemps(t *testing.T, dir string) {
	t.Helper()
	want := []string{readManifest(t, dir).Dir, ManifestFile}
	if got := graphtest.DirNames(t, dir); !slices.Equal(got, want) {
		t.Errorf("%s holds %q, want %q", dir, got, want)
	}
}

// loadsStep fails unless dir holds a valid checkpoint equal to ck.
func loadsStep(t *testing.T, dir string, ck *Checkpoint) {
	t.Helper()
	got, err := Load(dir)
	if err != nil {
		t.Fatalf("the previous checkpoint no longer loads: %v", err)
	}
	if got.Step != ck.Step {
		t.Errorf("Step = %d, want the previous %d", got.Step, ck.Step)
	}
	checkTensors(t, "weights", got.Weights, ck.Weights)
	checkTensors(t, "optimizer", got.Optimizer, ck.Optimizer)
}

func TestCheckpointFailedSave(t *testing.T) {
	// Invalid checkpoints are refused before anything is written.
	for _, c := range []struct {
		name   string
		modify func(*Checkpoint)
		want   string
	}{
		{"config JSON", func(ck *Checkpoint) { ck.Config = json.RawMessage(`{"dim":`) }, ConfigFile + ": Config: invalid JSON"},
		{"state JSON", func(ck *Checkpoint) { ck.State = json.RawMessage(`nope`) }, StateFile + ": State: invalid JSON"},
		{"negative step", func(ck *Checkpoint) { ck.Step = -1 }, "negative step -1"},
		{"data length", func(ck *Checkpoint) { w := named(t, ck.Weights, "blocks.0.ln.gain"); w.Data = w.Data[1:] },
			ModelFile + `: tensor "blocks.0.ln.gain": 3 values, want 4 for shape [4]`},
		{"dtype", func(ck *Checkpoint) { named(t, ck.Weights, "embed").DType = tensor.Int },
			ModelFile + `: tensor "embed": dtype int is not supported`},
		{"duplicate", func(ck *Checkpoint) { ck.Optimizer = append(ck.Optimizer, *named(t, ck.Optimizer, "adam.t")) },
			OptimizerFile + `: tensor "adam.t": duplicate name`},
		{"reserved name", func(ck *Checkpoint) { named(t, ck.Optimizer, "adam.t").Name = "__metadata__" },
			OptimizerFile + `: tensor "__metadata__": the name is reserved`},
		{"negative dim", func(ck *Checkpoint) { named(t, ck.Optimizer, "adam.empty").Shape = []int{-1, 0} },
			OptimizerFile + `: tensor "adam.empty": negative dimension`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, prev := saveTest(t, 10)
			ck, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			ck.Step = 20
			c.modify(ck)
			graphtest.WantErr(t, Save(dir, ck), c.want)
			noTemps(t, dir)
			loadsStep(t, dir, prev)
		})
	}

	t.Run("dir is a file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		graphtest.WantErr(t, Save(file, &Checkpoint{Step: 1}), "checkpoint: "+file)
		graphtest.WantErr(t, Save(filepath.Join(file, "sub"), &Checkpoint{Step: 1}), "checkpoint: "+file)
	})

	t.Run("unwritable dir", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root ignores file permissions")
		}
		dir, prev := saveTest(t, 10)
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		defer os.Chmod(dir, 0o755)
		next := *prev
		next.Step = 20
		graphtest.WantErr(t, Save(dir, &next), "checkpoint: "+dir)
		noTemps(t, dir)
		loadsStep(t, dir, prev)
	})
}

// FuzzLoadModel checks that reading a model file never panics, whatever it
// holds, and that what it accepts is consistent and saves back the same. It
// calls parseModelFile, which is all Load does with the bytes of
// ModelFile, to skip the file system and fuzz faster.
func FuzzLoadModel(f *testing.F) {
	g := G.NewGraph()
	params := []graph.Param{
		ckParam(f, g, tensor.Float32, "a", []int{2, 3}, []float64{1, 2, 3, 4, 5, 6}),
		ckParam(f, g, tensor.Float64, "b", []int{2}, []float64{-1, 0.5}),
	}
	w, err := ParamTensors(params)
	if err != nil {
		f.Fatal(err)
	}
	dir := filepath.Join(f.TempDir(), "ck")
	if err := Save(dir, &Checkpoint{Step: 3, Weights: w, Optimizer: ckOptimizer()}); err != nil {
		f.Fatal(err)
	}
	if _, err := Load(dir); err != nil {
		f.Fatal(err)
	}
	path := ckPath(f, dir, ModelFile)
	valid, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add(valid[:len(valid)-1])
	f.Add(valid[:20])
	f.Add(modelFile(`{"__metadata__":{"format":"qkv","step":"3"}}`, nil))
	f.Add(modelFile(`{"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]},"__metadata__":{"format":"qkv","step":"3"}}`, make([]byte, 8)))
	f.Add(modelFile(`{"s":{"dtype":"F32","shape":[0,9],"data_offsets":[0,0]},"__metadata__":{"format":"qkv","step":"3"}}`, nil))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, step, ws, err := parseModelFile(path, b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "checkpoint: "+path+": ") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		for _, w := range ws {
			n, err := numElements(w.Shape)
			if err != nil || n != len(w.Data) || (w.DType != tensor.Float32 && w.DType != tensor.Float64) {
				t.Fatalf("accepted tensor %q: shape %v, %d values, dtype %v", w.Name, w.Shape, len(w.Data), w.DType)
			}
		}
		// What loads encodes again as Save would, and reads back
		// the same.
		views, err := tensorViews(path, ws, false)
		if err != nil {
			t.Fatalf("re-encoding accepted tensors: %v", err)
		}
		b2, err := safetensors.Serialize(views, map[string]string{"format": "qkv", "step": fmt.Sprint(step)})
		if err != nil {
			t.Fatal(err)
		}
		_, step2, ws2, err := parseModelFile(path, b2)
		if err != nil || step2 != step {
			t.Fatalf("reading back: step %d, want %d: %v", step2, step, err)
		}
		checkTensors(t, "weights", ws2, ws)
	})
}

// TestErrCorrupt: every kind of damage matches ErrCorrupt, and an empty
// directory matches ErrNotFound instead.
func TestErrCorrupt(t *testing.T) {
	for _, c := range []struct {
		name   string
		damage func(t *testing.T, dir string)
	}{
		{"flipped bit", func(t *testing.T, dir string) {
			rewrite(t, dir, ModelFile, func(b []byte) []byte { b[len(b)/2] ^= 1; return b })
		}},
		{"truncated", func(t *testing.T, dir string) {
			forge(t, dir, OptimizerFile, func(b []byte) []byte { return b[:len(b)-3] })
		}},
		{"edited config", func(t *testing.T, dir string) {
			rewrite(t, dir, ConfigFile, func([]byte) []byte { return []byte(`{"dim": 5}`) })
		}},
		{"missing file", func(t *testing.T, dir string) {
			if err := os.Remove(ckPath(t, dir, StateFile)); err != nil {
				t.Fatal(err)
			}
		}},
		{"bad manifest", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, ManifestFile), []byte("{"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
		{"state", func(t *testing.T, dir string) { forge(t, dir, StateFile, func([]byte) []byte { return []byte(`{}`) }) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, _ := saveTest(t, 3)
			c.damage(t, dir)
			_, err := Load(dir)
			if !errors.Is(err, ErrCorrupt) || errors.Is(err, ErrNotFound) {
				t.Errorf("%v: errors.Is ErrCorrupt %v, ErrNotFound %v; want true, false", err, errors.Is(err, ErrCorrupt), errors.Is(err, ErrNotFound))
			}
		})
	}
	_, err := Load(t.TempDir())
	if !errors.Is(err, ErrNotFound) || errors.Is(err, ErrCorrupt) {
		t.Errorf("empty directory: %v: want ErrNotFound only", err)
	}
}
