// Package graph holds the verified gorgonia primitives that the rest of qkv
// builds on: numerically stable softmax and log-softmax, attention masks,
// cross-entropy, reductions, inverse square root, dropout, GELU, validated
// token-id inputs and a reusable finite-difference gradient checker.
//
// gorgonia v0.9.18 has ops whose forward pass or gradient is wrong (SoftMax
// forward, middle-axis reductions on 4-D tensors, InverseSqrt, Dropout,
// LogSumExp, out-of-range ByIndices ids, ...). Every workaround for those
// defects lives in this package and nowhere else; each one is pinned by a test
// in defects_test.go that shows the raw op is wrong and ours is right, so an
// engine upgrade that changes the behaviour is noticed. Layers call these
// functions instead of the gorgonia ops they wrap.
//
// Shapes follow gorgonia's row-major convention. "Last axis" always means the
// innermost, contiguous axis.
package graph
