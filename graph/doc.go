// Package graph holds the verified gorgonia primitives that the rest of qkv
// builds on: Linear, embedding lookup, numerically stable log-softmax,
// attention masks, scaled dot-product attention, LayerNorm, cross-entropy,
// dropout, GELU and ReLU, a copying reshape, validated token-id inputs and a
// reusable finite-difference gradient checker, GradCheck, and Machine, the
// executor that runs a gorgonia graph without the tape machine's per-run
// allocations (machine.go). The cross-entropy, embedding lookup, position
// add and residual add are ops of qkv's too (crossentropy.go, embed.go,
// add.go): gorgonia's forms of them allocated at every step.
//

// gorgonia v0.9.18 has ops whose forward pass or gradient is wrong: SoftMax
// forward, Log(SoftMax) rewritten in place, middle-axis reductions of 4-D
// tensors, InverseSqrt's gradient, Dropout's backward scale, out-of-range
// ByIndices ids, and Reshape's untracked memory alias. Every workaround for
// them lives in this package and nowhere else (attention and LayerNorm compute
// their softmax, reductions and inverse square root inside their own ops,
// LogSoftmax reduces rows of a matrix); each is pinned by a test
// (defects_test.go, reshape_test.go) that shows the raw op is wrong and a
// correct composition right, so an engine upgrade that changes the behaviour
// is noticed. Layers call these functions instead of the gorgonia ops they
// wrap.
//
// Attention is one call, Attend(q, k, v, spec) (attend.go), and the Spec
// says everything else: the heads and key/value heads, the implementation,
// the masks and the modifiers. It comes three ways, one function of the
// same inputs, tested equal: Composed (composed.go) is the formula as a
// learner reads it, built from gorgonia's own ops so that gorgonia derives
// the backward pass: read it first. Fused (attention.go) is the custom op
// qkv trains with by default; Flash (flash.go) tiles the keys and never
// forms the (Sq, Sk) weights, so its memory grows linearly with the
// sequence.
//
// The attention of recent models enters once, through Spec's Mods
// (mods.go): a mask modifier by position (Causal, Window, Band, And, or
// one of your own), a score modifier with its derivative (ALiBi, Softcap,
// Chain, or yours), grouped-query key/value heads and gpt-oss's sinks.
// Every implementation honours them alike, with gradients; causality is
// the mask modifier Causal(), which flash lowers to tiles never visited and
// the fused op to runs of keys hidden without a call per entry. What acts
// on q and k before the scores is an op of its own: RoPE (rope.go,
// half-split or interleaved pairs, angles in float64 for both dtypes) and
// RMSNorm / HeadRMSNorm (rmsnorm.go, QK-norm over each head).
//
// Linear attention (linear_attention.go, features.go, linear_step.go) is
// the other family: LinearAttend(φq, φk, v, LinearSpec) replaces the
// softmax weight by φ(q)·φ(k), so that the keys enter through a (dφ, dv)
// state instead of (Sq, Sk) weights. Features applies a feature map
// (elu1, relu, Based's Taylor map, identity) to each head first. The fused
// op is the chunked form, O(n dφ dv) time and memory linear in n, with a
// hand-written backward pass; the composed one is the O(n²) masked
// formula in gorgonia's ops, the reference it is tested equal to; and
// LinearStep is the recurrent form for generation, one position per call.
// Padding is KeyLengths (MaskNode.KeyLengths), not a (Sq, Sk) mask.
//
// Attention, LayerNorm, RMSNorm, RoPE, Linear and the activations are custom
// gorgonia ops (attention.go, layernorm.go, rmsnorm.go, rope.go, linear.go,
// activation.go): one op each way
// instead of tens of reshapes, transposes, broadcasts and elementwise ops.
// Their kernels (kernel.go) split the work over the cores, keep their output
// tensor from one run of the graph to the next (so a node's value is valid
// until the graph runs again: copy what you keep, as G.Read, Float64s, train
// and infer do), and compute in the data's dtype:
//   - matrix products on internal/gemm, a packed GEMM in Go assembly
//     (AVX-512, or AVX2 and FMA), called directly (Linear's on OpenBLAS
//     instead with the openblas build tag, blas_openblas.go). Importing
//     graph leaves gorgonia's and gonum's global BLAS alone; UseFastGEMM
//     installs qkv's there too, opting the whole program in, for
//     gorgonia's own matrix products (ComposedAttention's); UseBF16Linear,
//     also opt-in and process-wide, moves Linear's float32 products to bf16
//     operands with float32 sums on AMX (internal/gemm's GemmBF16).
//     Attention multiplies each head where it lies in the (B, S, D)
//     tensors, rows D apart, without gathering it;
//   - float32 elementwise work (GELU, ReLU, softmax's exponentials, layer
//     norm's rows) on internal/vec's vector kernels (AVX-512, or AVX2).
//
// Each is tested against plain-loop references and finite differences in
// float64, and runs in float32 too. Without AVX2 and FMA (other CPUs and
// architectures, or the purego build tag) the products run on gonum's GEMM
// and the elementwise kernels on Go loops, tested the same way.
//
// Bad input is an error, never a panic: a panic inside the engine happens,
// on gorgonia's tape machine, in the VM's goroutine, where the caller cannot
// recover it (Machine returns it as an error naming the node), so every exported
// function checks its nodes (CheckNode), masks (MaskNode.Check), ids
// (IDs.Check) and targets (Targets.Check) while the graph is built, and every
// size it will allocate against MaxElements (CheckElements), the one cap on
// the element count of a tensor in graph and layers. NewDense is the
// exception: a length that does not match its shape is a mistake in the
// calling code, and it panics like an out-of-range index.
//
// Shapes follow gorgonia's row-major convention. "Last axis" always means the
// innermost, contiguous axis.
package graph
