// Package hugepage backs a process's heap with the CPU's 2 MiB pages where
// Linux allows it, for the TLB misses a training step would otherwise pay.
//
// A step of the nanoGPT preset touches about 94 MiB of activations,
// gradients, weights and Adam moments: some 24,000 pages of 4 KiB, several
// times the second-level TLB's entries, so the memory-bound ops and the
// products' first touch of each operand miss it often, and a virtual
// machine's page walk is two-dimensional. On 2 MiB pages the preset's step
// at GOMAXPROCS=1 took 45.7 ms against 46.5 (docs/speed.md). Go's runtime no longer advises its
// heap to use huge pages (since Go 1.21.1), and with the kernel's default
// policy on most distributions (transparent_hugepage=madvise) it gets
// none. Collapse asks the kernel to move the heap's resident memory onto
// huge pages at once (MADV_COLLAPSE, Linux 6.1 and later), after the
// buffers a step uses have been allocated.
package hugepage
