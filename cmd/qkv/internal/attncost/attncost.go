package attncost

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/metrics"
	"slices"
	"sync"
	"time"

	G "gorgonia.org/gorgonia"
	"gorgonia.org/tensor"

	"github.com/qkv-dev/qkv/graph"
	"github.com/qkv-dev/qkv/layers"
)

// ErrConfig marks the errors of a Config that cannot be measured.
var ErrConfig = errors.New("attncost: invalid configuration")

// Config is one attention layer and how often to time it: self-attention
// of Batch sequences of length Seq, Heads heads of width HeadDim (the
// layer's width is Heads × HeadDim).
type Config struct {
	// Impl is the attention implementation; "" means layers.AttentionFused.
	Impl                       layers.AttentionImpl
	Seq, Batch, Heads, HeadDim int
	// DType is tensor.Float32 or tensor.Float64; the zero Dtype means
	// Float32.
	DType tensor.Dtype
	// Causal hides the future; Bias gives the projections biases.
	Causal, Bias bool
	// Window, if positive, is a sliding window of that many keys
	// (layers.AttentionVariants.Window): flash then skips the tiles outside
	// it.
	Window int
	// Mask, if not nil, hides keys besides Causal and Window
	// (layers.AttentionVariants.Mask): a sparse pattern such as
	// graph.GlobalWindow or graph.BlockLocal, whose skipped tiles flash
	// never computes.
	Mask graph.MaskMod
	// Linear makes the layer linear attention (layers.LinearAttention)
	// with LinearOptions in place of softmax attention: in its chunked
	// form for Impl "", fused or flash, in the quadratic composed form for
	// Impl composed. Window and Mask do not apply to it.
	Linear        bool
	LinearOptions layers.LinearOptions
	// Repeats is the number of timed passes, after one untimed warm-up;
	// at least 1.
	Repeats int
}

// Result is what Measure measured.
type Result struct {
	// MsPerStep is the median over the timed passes of the milliseconds of
	// one forward and backward pass.
	MsPerStep float64
	// CPUMsPerStep is the median of the CPU time the process spent in one
	// pass (user and system, all threads): the work, which other programs
	// on the machine change less than the wall time.
	CPUMsPerStep float64
	// CPUMsMin is the least CPU time of a timed pass: others' load on the
	// machine only adds to a pass's time, so the least is the steadiest.
	CPUMsMin float64
	// PeakBytes is the Go heap's high-water mark (live and not yet swept
	// objects, sampled every 200 µs after a GC) while the layer was built
	// and run, above what the process held before.
	PeakBytes int64
	// AllocBytesPerStep is the mean of the bytes allocated by one timed
	// pass: the garbage each step leaves besides what the graph keeps.
	AllocBytesPerStep int64
	// ParamBytes is the size of the parameters' values: the count of
	// parameters times the element size.
	ParamBytes int64
	// SquareBytes is the size of the tensors the graph holds after a pass
	// whose last two dimensions are (Seq, Seq) and whose rank is at least
	// 3: the (B, H, n, n) attention weights, scores and their gradients,
	// and a (B, n, n) padding mask if any. Each piece of memory counts once, however many
	// nodes share it. (It cannot tell a (B, n, D) tensor from them when D
	// equals n.)
	SquareBytes int64
	// GraphBytes is the size of every value the graph holds after a pass,
	// SquareBytes and ParamBytes included, each piece of memory once.
	GraphBytes int64
}

// Validate reports whether c can be measured: sizes at least 1, a known
// dtype, and a layer that layers.AttentionConfig.Validate accepts. Its
// errors wrap ErrConfig.
func (c Config) Validate() error {
	for _, f := range []struct {
		name string
		v    int
	}{{"Seq", c.Seq}, {"Batch", c.Batch}, {"Heads", c.Heads}, {"HeadDim", c.HeadDim}, {"Repeats", c.Repeats}} {
		if f.v < 1 {
			return fmt.Errorf("%w: %s must be at least 1, got %d", ErrConfig, f.name, f.v)
		}
	}
	if dt := c.dtype(); dt != tensor.Float32 && dt != tensor.Float64 {
		return fmt.Errorf("%w: dtype %v: want float32 or float64", ErrConfig, dt)
	}
	if c.Linear {
		return c.validateLinear()
	}
	if err := c.layer().Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	if err := graph.CheckElements(c.Batch*c.Heads, c.Seq, c.Seq); err != nil {
		return fmt.Errorf("%w: the (B, H, n, n) weights: %w", ErrConfig, err)
	}
	return nil
}

// validateLinear checks what Validate can of a linear layer: no window or
// mask, a known feature map, and the sizes of its features and, in the
// composed form, of its (B, H, n, n) weights. layers.NewLinearAttention
// checks the rest when New builds it.
func (c Config) validateLinear() error {
	switch {
	case c.Window != 0 || c.Mask != nil:
		return fmt.Errorf("%w: linear attention takes no window or mask", ErrConfig)
	case !c.Impl.Valid():
		return fmt.Errorf("%w: unknown Impl %q", ErrConfig, c.Impl)
	case c.LinearOptions.FeatureMap != "" && !c.LinearOptions.FeatureMap.Valid():
		return fmt.Errorf("%w: unknown feature map %q", ErrConfig, c.LinearOptions.FeatureMap)
	case c.LinearOptions.FeatureDim < 0 || c.LinearOptions.LinearChunk < 0:
		return fmt.Errorf("%w: FeatureDim %d and LinearChunk %d must not be negative", ErrConfig, c.LinearOptions.FeatureDim, c.LinearOptions.LinearChunk)
	}
	if err := graph.CheckElements(c.Batch, c.Seq, c.Heads*c.Features()); err != nil {
		return fmt.Errorf("%w: the (B, n, H·dφ) features: %w", ErrConfig, err)
	}
	if c.Impl == layers.AttentionComposed {
		if err := graph.CheckElements(c.Batch*c.Heads, c.Seq, c.Seq); err != nil {
			return fmt.Errorf("%w: the (B, H, n, n) weights: %w", ErrConfig, err)
		}
	}
	return nil
}

// Features is dφ, each head's width of a linear layer's features after
// the map: FeatureMap.Dim of FeatureDim (HeadDim for 0), Taylor's for "".
// It is 0 for a softmax layer.
func (c Config) Features() int {
	if !c.Linear {
		return 0
	}
	return cmp.Or(c.LinearOptions.FeatureMap, graph.FeatureTaylor).Dim(cmp.Or(c.LinearOptions.FeatureDim, c.HeadDim))
}

// EstimateBytes is a generous estimate of the bytes one forward and
// backward pass of c keeps, from this machine's measurements: composed
// softmax attention peaked at about 50 (B, H, n, n) tensors' worth at
// n = 4096 (every intermediate of gorgonia's graph is kept for backward),
// fused at about 15 (the weights, their gradient and the scratch of its
// kernels), flash at a few (B, n, D) tensors. Linear attention keeps, on
// top of those, its features and their gradients (B, n, H·dφ) a few times
// over (and, composed, as many (B, H, n, n) tensors as composed softmax).
func EstimateBytes(c Config) float64 {
	elem := float64(c.dtype().Size())
	d := float64(c.Heads * c.HeadDim)
	linear := 30 * float64(c.Batch) * float64(c.Seq) * d * elem
	square := float64(c.Batch*c.Heads) * float64(c.Seq) * float64(c.Seq) * elem
	if c.Linear {
		linear += 8 * float64(c.Batch) * float64(c.Seq) * float64(c.Heads*c.Features()) * elem
		if c.Impl == layers.AttentionComposed {
			return linear + 60*square
		}
		return linear
	}
	switch c.Impl {
	case layers.AttentionComposed:
		return linear + 60*square
	case layers.AttentionFlash:
		return linear
	}
	return linear + 20*square
}

func (c Config) dtype() tensor.Dtype {
	if c.DType == (tensor.Dtype{}) {
		return tensor.Float32
	}
	return c.DType
}

func (c Config) linearLayer() layers.LinearAttentionConfig {
	return layers.LinearAttentionConfig{Dim: c.Heads * c.HeadDim, Heads: c.Heads, Causal: c.Causal, Bias: c.Bias, LinearOptions: c.LinearOptions, Impl: c.Impl}
}

func (c Config) layer() layers.AttentionConfig {
	return layers.AttentionConfig{Dim: c.Heads * c.HeadDim, Heads: c.Heads, Causal: c.Causal, Bias: c.Bias, Impl: c.Impl,
		AttentionVariants: layers.AttentionVariants{Window: c.Window, Mask: c.Mask}}
}

// Layer is one attention layer of a Config's sizes compiled for forward
// and backward passes of a random linear function of its output: what
// Measure times, and what a caller that interleaves the passes of several
// layers on a noisy machine times itself.
type Layer struct {
	g     *G.ExprGraph
	vm    G.VM
	nodes G.Nodes // the parameters
	cfg   Config
	ran   bool
}

// New builds c's layer, its cost sum(attn(x, x, x) ⊙ r) for fixed
// pseudo-random normal x and r, and the cost's gradient with respect to the
// parameters, and compiles them. c.Repeats is not used: the caller runs
// the passes.
func New(c Config) (*Layer, error) {
	c.Repeats = max(c.Repeats, 1)
	if err := c.Validate(); err != nil {
		return nil, err
	}
	dt := c.dtype()
	g := G.NewGraph()
	s, err := layers.NewScope(g, dt, 1)
	if err != nil {
		return nil, err
	}
	var attn mixer
	if c.Linear {
		a, err := layers.NewLinearAttention(s.Sub("attn"), c.linearLayer())
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		attn = linearMixer{a}
	} else {
		a, err := layers.NewMultiHeadAttention(s.Sub("attn"), c.layer())
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		attn = softmaxMixer{a}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	d := c.Heads * c.HeadDim
	vals := func() []float64 {
		v := make([]float64, c.Batch*c.Seq*d)
		for i := range v {
			v[i] = rng.NormFloat64()
		}
		return v
	}
	shape := tensor.Shape{c.Batch, c.Seq, d}
	x := G.NewTensor(g, dt, 3, G.WithShape(shape...), G.WithName("x"), G.WithValue(graph.NewDense(dt, shape.Clone(), vals())))
	r := G.NewTensor(g, dt, 3, G.WithShape(shape...), G.WithName("r"), G.WithValue(graph.NewDense(dt, shape.Clone(), vals())))
	vm, nodes, err := build(g, attn, x, r)
	if err != nil {
		return nil, err
	}
	return &Layer{g: g, vm: vm, nodes: nodes, cfg: c}, nil
}

// Pass runs one forward and backward pass and returns its wall time and
// the CPU time the process spent in it (user and system, all threads; 0
// where the system does not tell). The pass's values stay in the graph
// until the next pass.
func (l *Layer) Pass() (wall, cpu time.Duration, err error) {
	if l.ran {
		l.vm.Reset()
	}
	cpu0, start := cpuTime(), time.Now()
	err = l.vm.RunAll()
	wall, cpu = time.Since(start), cpuTime()-cpu0
	l.ran = true
	return wall, cpu, err
}

// Close releases the layer's machine.
func (l *Layer) Close() error { return l.vm.Close() }

// Measure builds c's layer (New), runs forward and backward once untimed
// and c.Repeats times timed, sampling the heap's high-water mark as it
// goes, and then sizes what the graph holds.
func Measure(c Config) (Result, error) {
	var res Result
	if err := c.Validate(); err != nil {
		return res, err
	}
	// Twice: what sync.Pools held survives one collection in their victim
	// caches, and would be freed during the pass, below the start.
	runtime.GC()
	runtime.GC()
	base := heapBytes()
	stop := sampleHeap()
	peak := func() int64 { return max(stop()-base, 0) }
	l, err := New(c)
	if err != nil {
		peak()
		return res, err
	}
	defer l.Close()
	times, cpu := make([]float64, 0, c.Repeats), make([]float64, 0, c.Repeats)
	var allocs int64
	for i := 0; i <= c.Repeats; i++ { // the first run warms up, untimed
		a := allocBytes()
		wall, cpuTime, err := l.Pass()
		if err != nil {
			peak()
			return res, err
		}
		if i > 0 {
			times = append(times, float64(wall.Microseconds())/1000)
			cpu = append(cpu, float64(cpuTime.Microseconds())/1000)
			allocs += allocBytes() - a
		}
	}
	res.PeakBytes = peak()
	res.MsPerStep, res.CPUMsPerStep = median(times), median(cpu)
	res.CPUMsMin = cpu[0] // sorted by median
	res.AllocBytesPerStep = allocs / int64(c.Repeats)
	for _, n := range l.nodes {
		res.ParamBytes += int64(n.Shape().TotalSize() * int(c.dtype().Size()))
	}
	res.GraphBytes, res.SquareBytes = held(l.g, c.Seq) // the last pass's values
	return res, nil
}

// mixer is the layer a Config measures: softmax or linear attention.
type mixer interface {
	forward(x *G.Node) (*G.Node, error)
	Params() []graph.Param
}

type softmaxMixer struct{ *layers.MultiHeadAttention }

func (m softmaxMixer) forward(x *G.Node) (*G.Node, error) {
	y, _, err := m.Forward(x, x, x, nil)
	return y, err
}

type linearMixer struct{ *layers.LinearAttention }

func (m linearMixer) forward(x *G.Node) (*G.Node, error) { return m.Forward(x, nil) }

// build adds cost = sum(attn(x) ⊙ r) and its gradient with respect to
// attn's parameters to g and compiles g.
func build(g *G.ExprGraph, attn mixer, x, r *G.Node) (G.VM, G.Nodes, error) {
	y, err := attn.forward(x)
	if err != nil {
		return nil, nil, err
	}
	prod, err := G.HadamardProd(y, r)
	if err != nil {
		return nil, nil, err
	}
	cost, err := G.Sum(prod)
	if err != nil {
		return nil, nil, err
	}
	nodes := graph.Nodes(attn.Params())
	if _, err := G.Grad(cost, nodes...); err != nil {
		return nil, nil, err
	}
	vm, err := graph.NewMachine(g)
	if err != nil {
		return nil, nil, err
	}
	return vm, nodes, nil
}

// median returns the median of x, the upper one of an even count; it
// sorts x.
func median(x []float64) float64 {
	slices.Sort(x)
	return x[len(x)/2]
}

// memory is a value whose backing memory can be located.
type memory interface {
	Uintptr() uintptr
	MemSize() uintptr
}

// span is a piece of memory, [lo, hi).
type span struct {
	lo, hi uintptr
	square bool
}

// held returns the bytes of memory the values of g's nodes (and their
// gradients) hold, and those of them whose value has rank at least 3 and
// (n, n) as its last two dimensions; memory that several values share
// counts once.
func held(g *G.ExprGraph, n int) (all, square int64) {
	var spans []span
	add := func(v G.Value) {
		m, ok := v.(memory)
		if !ok || m.MemSize() == 0 {
			return
		}
		sh := v.Shape()
		sq := sh.Dims() >= 3 && sh[sh.Dims()-1] == n && sh[sh.Dims()-2] == n
		spans = append(spans, span{m.Uintptr(), m.Uintptr() + m.MemSize(), sq})
	}
	for _, node := range g.AllNodes() {
		if v := node.Value(); v != nil {
			add(v)
		}
		if gv, err := node.Grad(); err == nil && gv != nil {
			add(gv)
		}
	}
	return union(spans)
}

// union returns the bytes covered by spans, and those covered by the
// square ones.
func union(spans []span) (all, square int64) {
	count := func(keep func(span) bool) int64 {
		var s []span
		for _, x := range spans {
			if keep(x) {
				s = append(s, x)
			}
		}
		slices.SortFunc(s, func(a, b span) int {
			switch {
			case a.lo < b.lo:
				return -1
			case a.lo > b.lo:
				return 1
			}
			return 0
		})
		var total int64
		var end uintptr
		for _, x := range s {
			lo := max(x.lo, end)
			if x.hi > lo {
				total += int64(x.hi - lo)
				end = x.hi
			}
		}
		return total
	}
	return count(func(span) bool { return true }), count(func(x span) bool { return x.square })
}

// heapMetric is the runtime metric of live and unswept heap objects.
const heapMetric = "/memory/classes/heap/objects:bytes"

// heapBytes reads heapMetric now.
func heapBytes() int64 { return readMetric(heapMetric) }

// allocBytes is the bytes the heap has allocated since the program began.
func allocBytes() int64 { return readMetric("/gc/heap/allocs:bytes") }

func readMetric(name string) int64 {
	s := []metrics.Sample{{Name: name}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

// sampleHeap samples the heap every 200 µs until the returned function is
// called, which returns the highest value seen.
func sampleHeap() func() int64 {
	var mu sync.Mutex
	peak := heapBytes()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(200 * time.Microsecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				v := heapBytes()
				mu.Lock()
				peak = max(peak, v)
				mu.Unlock()
			}
		}
	}()
	return func() int64 {
		close(done)
		wg.Wait()
		v := heapBytes()
		mu.Lock()
		defer mu.Unlock()
		return max(peak, v)
	}
}
