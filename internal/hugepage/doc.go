// Package hugepage backs a process's heap with the CPU's 2 MiB pages where
// Linux allows it, for the TLB misses a training step would otherwise pay.
//
// A step of the nanoGPT preset streams about 50 MiB of activations,
// gradients, weights and Adam moments: over twelve thousand 4 KiB pages,
// several times the second-level TLB's entries, so that most of the
// memory-bound ops (residual adds, LayerNorm, Adam) and the products'
// first touch of each operand walk the page tables, and a virtual
// machine's walk is two-dimensional. Go's runtime no longer advises its
// heap to use huge pages (since Go 1.21.1), and with the kernel's default
// policy on most distributions (transparent_hugepage=madvise) it gets
// none. Collapse asks the kernel to move the heap's resident memory onto
// huge pages at once (MADV_COLLAPSE, Linux 6.1 and later), after the
// buffers a step uses have been allocated.
package hugepage
