package checkpoint

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/qkv-dev/qkv/internal/graphtest"
)

// FuzzManifest checks that reading checkpoint.json never panics, that what
// it accepts can only name a checkpoint folder inside the run directory and
// exactly the checkpoint files, and that it encodes back to the same.
func FuzzManifest(f *testing.F) {
	dir, _ := saveTest(&testing.T{}, 3)
	valid := graphtest.ReadFile(&testing.T{}, filepath.Join(dir, ManifestFile))
	f.Add(valid)
	f.Add(valid[:len(valid)/2])
	f.Add(bytes.Replace(valid, []byte(`"checkpoint-000003"`), []byte(`"../x"`), 1))
	f.Add(bytes.Replace(valid, []byte(`"step": 3`), []byte(`"step": 1e99`), 1))
	f.Add([]byte(`{"format":"qkv-checkpoint","version":1,"step":0,"dir":"checkpoint-000000","files":[]}`))
	f.Add([]byte(`null`))
	f.Add([]byte{})
	path := filepath.Join("run", ManifestFile)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := parseManifest(path, b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "checkpoint: "+path+": ") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if filepath.Base(m.Dir) != m.Dir || !filepath.IsLocal(m.Dir) || !checkpointDirRE.MatchString(m.Dir) {
			t.Fatalf("accepted dir %q", m.Dir)
		}
		for _, name := range checkpointFiles {
			m.file(name) // panics if missing
		}
		again, err := parseManifest(path, m.encode())
		if err != nil {
			t.Fatalf("re-encoded manifest: %v", err)
		}
		if !bytes.Equal(again.encode(), m.encode()) {
			t.Fatalf("round trip changed the manifest:\n%s\n%s", m.encode(), again.encode())
		}
	})
}

// FuzzState checks that reading state.json never panics, and that what is accepted writes back and reads the same.
func FuzzState(f *testing.F) {
	f.Add([]byte(`{"step": 35, "state": {"step":35,"stream":{"rng":[1,2],"pos":4},"wall_seconds":1.5}}`))
	f.Add([]byte(`{"step": 0, "state": null}`))
	f.Add([]byte(`{"step": -1}`))
	f.Add([]byte(`{"step": 3, "state": {"step":"x"}}`))
	f.Add([]byte(`{"step": 1e3}`))
	f.Add([]byte(`[]`))
	path := filepath.Join("run", StateFile)
	f.Fuzz(func(t *testing.T, b []byte) {
		step, state, err := parseStateFile(path, b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "checkpoint: "+path+": ") {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if step < 0 {
			t.Fatalf("accepted step %d", step)
		}
		out, err := jsonOrNull(state)
		if err != nil {
			t.Fatalf("accepted state is not JSON: %q", state)
		}
		step2, state2, err := parseStateFile(path, encodeStateFile(step, out))
		if err != nil || step2 != step || !bytes.Equal(bytes.TrimSpace(state2), bytes.TrimSpace(state)) {
			t.Fatalf("round trip: step %d, state %q, %v; want %d, %q", step2, state2, err, step, state)
		}
	})
}
