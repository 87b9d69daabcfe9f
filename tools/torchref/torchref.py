#!/usr/bin/env python3
"""torchref: an independent PyTorch reference for qkv checkpoints.

It rebuilds the decoder described by a checkpoint's config.json with plain
torch modules, loads model.safetensors into it (parsed by hand: header length,
JSON header, little-endian F32/F64 data), and either prints the logits for
given token ids or times training steps of the same model and batch shape.

    torchref.py logits --checkpoint DIR --ids "3 2 4 1; 2 4 0 0" [--lengths "4 2"]
    torchref.py logits --checkpoint DIR --input batch.json
    torchref.py bench  --checkpoint DIR [--steps 20]
    torchref.py bench  --config config.json [--steps 20]

Output is JSON on stdout; see README.md for the formats.

The model follows qkv's layers package (read from its code, not from its
docs); the points where a reader might guess differently:

  * qkv stores Linear weights (in, out) and computes y = x W + b; torch's
    nn.Linear stores (out, in). The loader transposes.
  * Embeddings are not scaled by sqrt(D). Positions: "learned" (the default
    for "") is a (MaxLen, D) table, "sinusoidal" the fixed sin/cos table with
    PE[p, 2i] = sin(p / 10000^(2i/D)), PE[p, 2i+1] = cos(same angle),
    "none" nothing.
  * Pre-LN blocks (default) compute x + f(LN(x)) and end with ln_f; post-LN
    blocks compute LN(x + f(x)) and have no ln_f.
  * LayerNorm: biased variance, eps 1e-5, parameters gain and bias.
  * Activation "" means ReLU; "gelu" is the tanh approximation.
  * Attention: heads split the last axis as (H, dk), scale 1/sqrt(dk);
    causal mask plus key padding (key j of row b hidden when j >= lengths[b]).
    A query that may see no key at all gets all-zero weights, not NaN.
  * Bias=false drops the attention and feed-forward biases only; the head
    always has one.
"""

import argparse
import hashlib
import json
import math
import os
import struct
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

DTYPES = {"float32": torch.float32, "float64": torch.float64, "": torch.float32}
ST_DTYPES = {"F32": ("<f4", torch.float32), "F64": ("<f8", torch.float64)}


# ----------------------------------------------------------------------------
# safetensors, by hand


def read_safetensors(path):
    """Returns (metadata dict, {name: torch tensor}) of a safetensors file."""
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < 8:
        raise ValueError(f"{path}: truncated ({len(buf)} bytes)")
    (n,) = struct.unpack("<Q", buf[:8])
    if n > len(buf) - 8:
        raise ValueError(f"{path}: header length {n} exceeds the file")
    header = json.loads(buf[8 : 8 + n].decode("utf-8"))
    data = memoryview(buf)[8 + n :]
    meta = header.pop("__metadata__", None) or {}
    tensors = {}
    for name, info in header.items():
        if info["dtype"] not in ST_DTYPES:
            raise ValueError(f"{path}: tensor {name!r}: dtype {info['dtype']} is not F32 or F64")
        npdt, tdt = ST_DTYPES[info["dtype"]]
        shape = [int(d) for d in info["shape"]]
        start, end = info["data_offsets"]
        count = math.prod(shape)
        if end - start != count * np.dtype(npdt).itemsize or end > len(data):
            raise ValueError(f"{path}: tensor {name!r}: bad data offsets {start}..{end} for shape {shape}")
        arr = np.frombuffer(data[start:end], dtype=npdt, count=count).reshape(shape)
        tensors[name] = torch.from_numpy(arr.astype(arr.dtype.newbyteorder("="), copy=True))
        assert tensors[name].dtype == tdt
    return meta, tensors


# ----------------------------------------------------------------------------
# configuration


def task_sizes(task):
    """Vocab size and model MaxLen (task max length - 1) of a qkv task, as
    data.New computes them, for config files whose model sizes are unset."""
    name, p = task["name"], task.get("params", {}) or {}
    if name in ("copy", "reverse", "sort"):
        n = p.get("length") or p.get("max_length")
        return 2 + p["alphabet"], 2 * n + 1 - 1
    if name == "add":
        return 2 + 10, 3 * p["digits"] + 2 - 1
    if name == "recall":
        pairs = p.get("pairs") or p.get("max_pairs")
        return 2 + p["values"] + p["keys"], 2 * pairs + 3 - 1
    raise ValueError(f"unknown task {name!r}")


def load_config(path):
    with open(path) as f:
        cfg = json.load(f)
    m = cfg["model"]
    if not m.get("vocab") or not m.get("max_len"):
        m["vocab"], m["max_len"] = task_sizes(cfg["task"])
    return cfg


# ----------------------------------------------------------------------------
# the model, in torch's own layout


class Attention(nn.Module):
    def __init__(self, d, heads, bias, attn_dropout):
        super().__init__()
        self.h, self.dk = heads, d // heads
        self.q = nn.Linear(d, d, bias=bias)
        self.k = nn.Linear(d, d, bias=bias)
        self.v = nn.Linear(d, d, bias=bias)
        self.o = nn.Linear(d, d, bias=bias)
        self.drop = nn.Dropout(attn_dropout)

    def forward(self, x, allow):
        # x (B, S, D); allow (B, S, S) bool, True = may attend.
        b, s, d = x.shape
        split = lambda t: t.view(b, s, self.h, self.dk).transpose(1, 2)  # (B, H, S, dk)
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.dk)  # (B, H, S, S)
        a = allow.unsqueeze(1)  # (B, 1, S, S)
        w = torch.softmax(scores.masked_fill(~a, float("-inf")), dim=-1)
        # A row with no visible key is NaN after softmax; qkv defines it as 0.
        w = torch.where(a.any(dim=-1, keepdim=True), w, torch.zeros_like(w))
        y = self.drop(w) @ v  # (B, H, S, dk)
        return self.o(y.transpose(1, 2).reshape(b, s, d))


class FeedForward(nn.Module):
    def __init__(self, d, hidden, activation, bias):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden, bias=bias)
        self.fc2 = nn.Linear(hidden, d, bias=bias)
        if activation in ("", "relu"):
            self.act = F.relu
        elif activation == "gelu":
            self.act = lambda t: F.gelu(t, approximate="tanh")
        else:
            raise ValueError(f"unknown activation {activation!r}")

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, m):
        super().__init__()
        d = m["dim"]
        self.post_ln = bool(m.get("post_ln"))
        self.ln1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = Attention(d, m["heads"], bool(m.get("bias")), m.get("attn_dropout", 0.0) or 0.0)
        self.ln2 = nn.LayerNorm(d, eps=1e-5)
        self.ff = FeedForward(d, m["hidden"], m.get("activation", ""), bool(m.get("bias")))
        p = m.get("dropout", 0.0) or 0.0
        self.drop1, self.drop2 = nn.Dropout(p), nn.Dropout(p)

    def forward(self, x, allow):
        if self.post_ln:
            x = self.ln1(x + self.drop1(self.attn(x, allow)))
            return self.ln2(x + self.drop2(self.ff(x)))
        x = x + self.drop1(self.attn(self.ln1(x), allow))
        return x + self.drop2(self.ff(self.ln2(x)))


def sinusoid(max_len, d):
    pos = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)
    i = torch.arange(d)
    angle = pos / torch.pow(torch.tensor(10000.0, dtype=torch.float64), (i - i % 2).double() / d)
    return torch.where(i % 2 == 0, torch.sin(angle), torch.cos(angle))


class Decoder(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m
        v, d, n = m["vocab"], m["dim"], m["max_len"]
        self.tok_emb = nn.Embedding(v, d)
        self.positions = m.get("positions") or "learned"
        if self.positions == "learned":
            self.pos_emb = nn.Parameter(torch.zeros(n, d))
        elif self.positions == "sinusoidal":
            self.register_buffer("pos_emb", sinusoid(n, d).float(), persistent=False)
        elif self.positions != "none":
            raise ValueError(f"unknown positions {self.positions!r}")
        self.drop = nn.Dropout(m.get("dropout", 0.0) or 0.0)
        self.blocks = nn.ModuleList(Block(m) for _ in range(m["layers"]))
        self.ln_f = None if m.get("post_ln") else nn.LayerNorm(d, eps=1e-5)
        self.head = nn.Linear(d, v, bias=True)

    def forward(self, ids, lengths):
        # ids (B, S) int64, lengths (B) int64 -> logits (B, S, V)
        b, s = ids.shape
        if s > self.m["max_len"]:
            raise ValueError(f"sequence length {s} exceeds max_len {self.m['max_len']}")
        j = torch.arange(s)
        causal = j.unsqueeze(0) <= j.unsqueeze(1)  # (S, S): key j <= query i
        keys = j.unsqueeze(0) < lengths.unsqueeze(1)  # (B, S): key j < length
        allow = causal.unsqueeze(0) & keys.unsqueeze(1)  # (B, S, S)
        x = self.tok_emb(ids)
        if self.positions != "none":
            x = x + self.pos_emb[:s]
        x = self.drop(x)
        for blk in self.blocks:
            x = blk(x, allow)
        if self.ln_f is not None:
            x = self.ln_f(x)
        return self.head(x)


def build(cfg):
    dt = DTYPES[cfg.get("dtype", "")]
    model = Decoder(cfg["model"]).to(dt)
    if model.positions == "sinusoidal":  # computed in float64, then rounded once
        model.pos_emb = sinusoid(cfg["model"]["max_len"], cfg["model"]["dim"]).to(dt)
    return model, dt


# qkv name -> (torch name, transpose)
def name_map(m):
    out = {"tok_emb.table": ("tok_emb.weight", False), "head.w": ("head.weight", True), "head.b": ("head.bias", False)}
    if (m.get("positions") or "learned") == "learned":
        out["pos_emb.table"] = ("pos_emb", False)
    if not m.get("post_ln"):
        out["ln_f.gain"], out["ln_f.bias"] = ("ln_f.weight", False), ("ln_f.bias", False)
    for i in range(m["layers"]):
        p = f"blocks.{i}."
        for ln in ("ln1", "ln2"):
            out[p + ln + ".gain"] = (p + ln + ".weight", False)
            out[p + ln + ".bias"] = (p + ln + ".bias", False)
        for x in "qkvo":
            out[p + "attn.w" + x] = (p + "attn." + x + ".weight", True)
            if m.get("bias"):
                out[p + "attn.b" + x] = (p + "attn." + x + ".bias", False)
        for n in "12":
            out[p + "ff.w" + n] = (p + "ff.fc" + n + ".weight", True)
            if m.get("bias"):
                out[p + "ff.b" + n] = (p + "ff.fc" + n + ".bias", False)
    return out


def load_weights(model, dt, tensors, m):
    names = name_map(m)
    extra = sorted(set(tensors) - set(names))
    missing = sorted(set(names) - set(tensors))
    if extra or missing:
        raise ValueError(f"checkpoint does not fit config: extra {extra}, missing {missing}")
    state = {}
    for qname, (tname, transpose) in names.items():
        t = tensors[qname]
        if t.dtype != dt:
            raise ValueError(f"tensor {qname!r} is {t.dtype}, config says {dt}")
        state[tname] = t.t().contiguous() if transpose else t
    model.load_state_dict(state, strict=True)


def checkpoint_folder(d):
    """The folder holding the current checkpoint of the run directory d.

    checkpoint.json names it and records each file's SHA-256, which is
    verified here too; a run directory of the older layout holds the files
    itself.
    """
    manifest = os.path.join(d, "checkpoint.json")
    if not os.path.exists(manifest):
        return d
    with open(manifest) as f:
        m = json.load(f)
    if m.get("format") != "qkv-checkpoint" or m.get("version") != 1:
        raise ValueError(f"{manifest}: not a qkv checkpoint manifest of version 1")
    folder = m["dir"]
    if os.path.basename(folder) != folder or folder in ("", ".", ".."):
        raise ValueError(f"{manifest}: dir {folder!r} is not a folder of the run directory")
    folder = os.path.join(d, folder)
    for rec in m["files"]:
        path = os.path.join(folder, os.path.basename(rec["name"]))
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        if digest != rec["sha256"]:
            raise ValueError(f"{path}: sha256 {digest}, {manifest} records {rec['sha256']}")
    return folder


def load_checkpoint(d):
    folder = checkpoint_folder(d)
    cfg = load_config(os.path.join(folder, "config.json"))
    model, dt = build(cfg)
    meta, tensors = read_safetensors(os.path.join(folder, "model.safetensors"))
    if meta.get("format") != "qkv":
        raise ValueError(f"{folder}/model.safetensors: metadata format {meta.get('format')!r}, want 'qkv'")
    load_weights(model, dt, tensors, cfg["model"])
    return cfg, model, dt


# ----------------------------------------------------------------------------
# commands


def parse_rows(s, what):
    """'3 2 4 1; 2 4 0 0' (rows by ';' or ',', tokens by spaces) or JSON."""
    s = s.strip()
    if s.startswith("["):
        return json.loads(s)
    rows = [r for r in s.replace(",", ";").split(";") if r.strip()]
    out = [[int(t) for t in r.split()] for r in rows]
    if not out:
        raise ValueError(f"empty {what}")
    return out


def cmd_logits(a):
    cfg, model, dt = load_checkpoint(a.checkpoint)
    if a.input:
        with open(a.input) as f:
            inp = json.load(f)
        ids, lengths = inp["ids"], inp.get("lengths")
    else:
        ids = parse_rows(a.ids, "ids")
        lengths = None
        if a.lengths:
            lengths = [int(x) for x in a.lengths.replace(",", " ").replace("[", " ").replace("]", " ").split()]
    if len({len(r) for r in ids}) != 1:
        raise ValueError("every row of ids must have the same length")
    s = len(ids[0])
    if lengths is None:
        lengths = [s] * len(ids)
    if len(lengths) != len(ids) or any(not 0 <= n <= s for n in lengths):
        raise ValueError(f"lengths {lengths}: want one per row, each in [0, {s}]")
    v = cfg["model"]["vocab"]
    if any(not 0 <= t < v for r in ids for t in r):
        raise ValueError(f"ids must be in [0, {v})")
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor(ids, dtype=torch.int64), torch.tensor(lengths, dtype=torch.int64))
    out = {
        "shape": list(logits.shape),
        "dtype": str(dt).replace("torch.", ""),
        "torch": torch.__version__,
        "logits": logits.double().tolist(),
    }
    json.dump(out, sys.stdout, allow_nan=False)
    sys.stdout.write("\n")


def bench_batch(cfg, gen):
    """A batch shaped like data.BatchFor's: full rows of S = max_len inputs,
    loss weight 1 on the answer half, as for the copy/reverse/sort tasks."""
    m = cfg["model"]
    b, s, v = cfg.get("batch", 64), m["max_len"], m["vocab"]
    ids = torch.randint(2, v, (b, s), generator=gen)
    targets = torch.randint(2, v, (b, s), generator=gen)
    weights = torch.zeros(b, s)
    weights[:, s // 2 :] = 1
    lengths = torch.full((b,), s, dtype=torch.int64)
    return ids, lengths, targets, weights


def param_groups(model):
    # qkv's AdamW decays parameters of 2+ dims whose name lacks "emb": the
    # projection matrices and the head, not embeddings, gains or biases.
    decay, rest = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() >= 2 and "emb" not in name else rest).append(p)
    return decay, rest


def blas_library():
    """The BLAS shared library torch loaded (Debian's torch is built with
    BLAS_INFO=generic and links libblas.so.3, whichever alternative that is:
    reference BLAS from libblas3, or OpenBLAS from libopenblas0-*)."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if ".so" in line}
    except OSError:
        return None
    for p in sorted(paths):
        name = os.path.basename(p)
        if name.startswith(("libblas.so", "libopenblas", "libblis", "libmkl_rt")):
            return os.path.realpath(p)
    return None


def set_blas_threads(path, n):
    """OpenBLAS keeps its own thread pool, which torch.set_num_threads does
    not reach with a generic-BLAS build; set it too so that "1 thread" means
    one thread."""
    if not path:
        return
    try:
        import ctypes

        lib = ctypes.CDLL(path)
        if hasattr(lib, "openblas_set_num_threads"):
            lib.openblas_set_num_threads(ctypes.c_int(n))
    except OSError:
        pass


def time_steps(cfg, model, dt, steps, warmup, seed):
    gen = torch.Generator().manual_seed(seed)
    ids, lengths, targets, weights = bench_batch(cfg, gen)
    weights = weights.to(dt)
    decay, rest = param_groups(model)
    wd = cfg.get("weight_decay", 0.01) if cfg.get("optimizer", "adamw") == "adamw" else 0.0
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": wd}, {"params": rest, "weight_decay": 0.0}],
        lr=cfg.get("lr", 3e-3), betas=(0.9, 0.999), eps=1e-8,
    )
    clip = cfg.get("clip_norm", 1.0) or float("inf")
    model.train()

    def step():
        logits = model(ids, lengths)
        logp = F.log_softmax(logits.view(-1, logits.shape[-1]), dim=-1)
        nll = -logp.gather(1, targets.view(-1, 1)).squeeze(1)
        w = weights.view(-1)
        loss = (nll * w).sum() / w.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        return loss

    for _ in range(warmup):
        step()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    return 1000 * (time.perf_counter() - t0) / steps


def cmd_bench(a):
    if a.checkpoint:
        cfg, _, _ = load_checkpoint(a.checkpoint)  # checks the weights load
    else:
        cfg = load_config(a.config)
    if a.batch:
        cfg["batch"] = a.batch
    if a.dtype:
        cfg["dtype"] = a.dtype
    # torch's default is one thread per physical core; os.cpu_count() counts
    # logical CPUs. Time 1 thread, the default, and every logical CPU.
    default_threads = torch.get_num_threads()
    results = []
    blas = blas_library()
    for threads in sorted({1, default_threads, os.cpu_count() or 1}):
        torch.set_num_threads(threads)
        set_blas_threads(blas, threads)
        torch.manual_seed(a.seed)
        model, dt = build(cfg)  # torch's own init: timing does not depend on values
        ms = time_steps(cfg, model, dt, a.steps, a.warmup, a.seed)
        results.append({"threads": threads, "ms_per_step": round(ms, 3)})
    m = cfg["model"]
    b, s = cfg.get("batch", 64), m["max_len"]
    out = {
        "torch": torch.__version__,
        "dtype": cfg.get("dtype") or "float32",
        "batch": b, "seq": s, "vocab": m["vocab"], "dim": m["dim"], "heads": m["heads"],
        "layers": m["layers"], "hidden": m["hidden"],
        "params": sum(p.numel() for p in model.parameters()),
        "steps": a.steps, "warmup": a.warmup,
        "default_threads": default_threads,
        "cpu_count": os.cpu_count(),
        "blas": blas,
        "results": results,
        "step": "forward, weighted cross-entropy, backward, clip_grad_norm_, AdamW",
    }
    json.dump(out, sys.stdout, allow_nan=False)
    sys.stdout.write("\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    lg = sub.add_parser("logits", help="print the logits (B, S, V) of a checkpoint for token ids as JSON")
    lg.add_argument("--checkpoint", required=True, help="qkv checkpoint directory")
    lg.add_argument("--ids", help='token ids: rows separated by ";" or ",", ids by spaces; or a JSON list of lists')
    lg.add_argument("--lengths", help="unpadded length of each row (default: full rows); keys at >= length are hidden")
    lg.add_argument("--input", help='JSON file {"ids": [[...]], "lengths": [...]} instead of --ids/--lengths')
    bn = sub.add_parser("bench", help="time training steps of a checkpoint's or config's model")
    src = bn.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="qkv checkpoint directory (its config.json)")
    src.add_argument("--config", help="a qkv config.json (train.Config as JSON)")
    bn.add_argument("--steps", type=int, default=20, help="timed steps")
    bn.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    bn.add_argument("--batch", type=int, help="override the config's batch size")
    bn.add_argument("--dtype", choices=["float32", "float64"], help="override the config's dtype")
    bn.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    if a.cmd == "logits" and not (a.ids or a.input):
        ap.error("logits needs --ids or --input")
    try:
        {"logits": cmd_logits, "bench": cmd_bench}[a.cmd](a)
    except (ValueError, KeyError, OSError) as e:
        print(f"torchref: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
