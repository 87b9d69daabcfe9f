#!/usr/bin/python3
"""PyTorch's nanoGPT-style generate on a qkv checkpoint, timed: the
reference for `qkv sample` and `qkv bench --generate` (docs/generation.md).

The model is tools/torchref's rebuild of the checkpoint (the same weights,
plain torch modules); the loop is nanoGPT's `GPT.generate` (model.py at
3adf61e): crop the sequence to the model's positions, run the whole window,
take the last position's logits, divide by the temperature, keep the top k,
softmax, torch.multinomial, append. nanoGPT keeps no key/value cache: every
character recomputes its window. qkv's windows start with BOS, so the crop
keeps BOS and the last max_len-1 characters (as `qkv sample --overflow
crop`).

    /usr/bin/python3 tools/nanogpt/generate.py --checkpoint /tmp/n \\
        --tokens 500 --num-samples 1 --threads 1,2 --repeats 3

prints one JSON line per thread count: the best of --repeats runs, in
characters per second (all samples' characters over the wall time).
"""
import argparse
import json
import os
import sys
import time

# torchref first: it chooses OpenBLAS's kernels for this CPU before torch
# loads OpenBLAS (torchref.openblas_core_for_this_cpu).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torchref"))
import torchref  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


@torch.no_grad()
def generate(model, idx, max_new_tokens, block_size, temperature=1.0, top_k=None, keep=1):
    """nanoGPT's GPT.generate, its crop keeping the first `keep` ids (BOS)."""
    for _ in range(max_new_tokens):
        if idx.size(1) <= block_size:
            idx_cond = idx
        else:
            idx_cond = torch.cat((idx[:, :keep], idx[:, -(block_size - keep):]), dim=1)
        lengths = torch.full((idx_cond.size(0),), idx_cond.size(1), dtype=torch.long)
        logits = model(idx_cond, lengths)
        logits = logits[:, -1, :] / temperature
        if top_k is not None:
            v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
            logits[logits < v[:, [-1]]] = -float("Inf")
        probs = F.softmax(logits, dim=-1)
        idx_next = torch.multinomial(probs, num_samples=1)
        idx = torch.cat((idx, idx_next), dim=1)
    return idx


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--tokens", type=int, default=500)
    p.add_argument("--num-samples", type=int, default=1)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=200)
    p.add_argument("--threads", default="1,2", help="comma-separated torch.set_num_threads values; the best is reported per value")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=1337)
    a = p.parse_args(argv)
    cfg, model, dt = torchref.load_checkpoint(a.checkpoint)
    model.eval()
    m = cfg["model"]
    block = m["max_len"]
    bos = 1  # qkv's SEP/BOS id of a chars vocabulary; any id times the same
    for n in [int(t) for t in a.threads.split(",")]:
        torch.set_num_threads(n)
        torchref.set_blas_threads(torchref.blas_library(), n)  # OpenBLAS's own pool too
        best = None
        for r in range(a.repeats + 1):  # the first run warms up
            torch.manual_seed(a.seed)
            idx = torch.full((a.num_samples, 1), bos, dtype=torch.long)
            t0 = time.perf_counter()
            generate(model, idx, a.tokens, block, a.temperature, a.top_k)
            secs = time.perf_counter() - t0
            if r > 0:
                best = secs if best is None else min(best, secs)
        chars = a.tokens * a.num_samples
        print(json.dumps({
            "impl": "pytorch nanoGPT generate (no KV cache, crop)", "torch": torch.__version__, "threads": n,
            "num_samples": a.num_samples, "tokens": a.tokens, "dtype": str(dt), "best_s": round(best, 4),
            "chars_per_s": round(chars / best, 1), "ms_per_char": round(1000 * best / chars, 4),
        }))


if __name__ == "__main__":
    main()
