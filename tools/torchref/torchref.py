#!/usr/bin/env python3
"""torchref: an independent PyTorch reference for qkv checkpoints.

It rebuilds the model described by a checkpoint's config.json (the
decoder-only model, or the encoder-decoder when "arch" is "encdec") with plain
torch modules, loads model.safetensors into it (parsed by hand: header length,
JSON header, little-endian F32/F64 data), and either prints the logits for
given token ids or times training steps of the same model and batch shape
(decoder-only models only).

    torchref.py logits --checkpoint DIR --ids "3 2 4 1; 2 4 0 0" [--lengths "4 2"]
    torchref.py logits --checkpoint DIR --input batch.json
    torchref.py logits --checkpoint ENCDEC --src "3 2 4; 2 0 0" --src-lengths "3 1" \
                       --tgt "1 4 2; 1 0 0" --tgt-lengths "3 1"
    torchref.py logits --checkpoint ENCDEC --input batch.json   # src/tgt and their lengths
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
  * Attention: heads split the last axis as (H, dk), scale 1/sqrt(dk)
    (model.attn_scale "dk" or absent; "dmodel" is 1/sqrt(D), "none" 1);
    causal mask plus key padding (key j of row b hidden when j >= lengths[b]).
    A query that may see no key at all gets all-zero weights, not NaN.
  * Bias=false drops the attention and feed-forward biases only; the head
    has one unless tied. model.tie_embeddings: no head.w/head.b tensors;
    head.weight = tok_emb.weight, logits = x E^T (decoder-only; refused for
    encdec, as qkv does). model.bias_free_norm: every LayerNorm has a gain
    and no bias (no ln*.bias tensors), written by hand (GainNorm): torch
    1.13's nn.LayerNorm has no bias=False. model.init changes only the
    initial values, which a checkpoint replaces, so it is not read here
    (bench times steps of torch's own initialisation).
  * Attention variants (issue 15), each off when its model field is absent:
    positions "rope" / "rope-interleaved" (half-split pairs (m, m+dk/2) as
    Hugging Face's rotate_half, or interleaved (2m, 2m+1) as Meta's; base
    model.rope_base, default 10000; angles in float64; self-attention q and
    k only, after qk_norm) and "alibi" (-m_h*(i-j) added to the scaled
    scores of self-attention, -m_h*|i-j| in an encoder; the paper's slopes);
    none of the three adds a position table. model.kv_heads G: wk, wv are
    (D, G*dk) and query head h reads KV head h // (H/G). model.window w:
    self-attention query i sees keys i-w < j <= i (|i-j| < w in an
    encoder); model.global_tokens g (with a window): keys j < g join every
    query's window, and in an encoder queries i < g see every key;
    model.block_local B: query i sees the keys of its own block of B
    positions (floor(i/B) = floor(j/B)) only. model.softcap c: scores c*tanh(s/c) before ALiBi and the
    mask. model.sinks: attn.sinks (H), a logit per head that joins each
    row's softmax and is dropped. model.qk_norm: attn.q_norm.gain and
    attn.k_norm.gain (dk), RMSNorm (eps 1e-6) of each head's q and k.
    model.head_temperature: attn.temperature (H), a factor per head that
    multiplies the head's scaled scores before the softcap (every
    attention, cross-attention too).
  * Encoder-decoder (layers.EncoderDecoder as config.Config.EncDec builds
    it): both halves have the task's vocab and max_len and model.layers
    blocks, and their own embeddings and positions (enc.*, dec.*). The
    encoder's blocks are the decoder-only blocks without the causal mask:
    source key padding only (model.causal_encoder true: the causal mask as
    well). Each decoder block runs causal self-attention
    with target key padding (self_attn, ln1), cross-attention with queries
    from the decoder's states and keys and values from the encoder's output,
    source key padding (cross_attn, ln2), then the feed-forward (ff, ln3).
    Pre-LN ends each half with its ln_f (enc.ln_f, dec.ln_f); post-LN
    normalises every residual sum and has no ln_f. One head, "head".
  * Per-layer attention kinds and linear attention (issue 24):
    model.layer_kinds is a comma-separated string (spaces around an entry
    are ignored, an empty entry is an error) cycled over the blocks: block
    i takes kinds[i % len(kinds)]. "softmax" is the attention above with
    every variant; "window:W" (W an integer >= 1) is that attention with
    model.window replaced by W for this block; "linear" is linear
    attention. Absent or "" means every block "softmax". In an
    encoder-decoder the kinds apply to the encoder's blocks and to the
    decoder's self-attention alike (block i of each half takes kinds[i %
    len]); cross-attention is always softmax. A linear block keeps the
    tensor names of a softmax one (attn.wq, ..., self_attn.wq in a decoder
    block) with other shapes: wq, wk (D, H*d'), wv, wo (D, D), biases bq,
    bk (H*d') and bv, bo (D) when model.bias, and nothing else (no sinks,
    norms, temperatures); d' = model.feature_dim (0 or absent: dk = D/H).
    q = x wq + bq, k = x wk + bk, v = x wv + bv, split into H heads (q, k
    d' per head, v dk per head), then phi per head, model.feature_map:
    "elu1" F.elu(x)+1, "relu", "identity", "taylor" (the default when
    absent; Based's phi(x) = [1, x/d'^(1/4), vec(x outer x)/(sqrt(2)
    sqrt(d'))], vec row-major, index a*d'+b holding x_a x_b, so that
    phi(q).phi(k) = 1 + s + s^2/2, s = q.k/sqrt(d')). With A_ij =
    phi(q_i).phi(k_j) over the keys j visible to query i (the self-
    attention's mask: causal plus key padding in a decoder; key padding
    only in an encoder, plus causal with model.causal_encoder),
    out_i = sum_j A_ij v_j, divided, when model.linear_norm is "sum" or
    absent, by (sum_j A_ij + 1e-12); "none": not divided. A query with no
    visible key gets 0. y = concat(heads) wo + bo. No attention dropout
    and no positions inside linear attention: learned and sinusoidal tables
    are still added at the embeddings; rope, alibi, sinks, softcap,
    qk_norm, kv_heads, head_temperature and window act on softmax blocks
    only. tools/torchref/linear_ref.py holds the same attention in its
    naive and recurrent forms, with a self-test.
"""

import argparse
import hashlib
import json
import math
import os
import struct
import subprocess
import sys
import time

# OpenBLAS cores with AVX2 kernels or better (OPENBLAS_CORETYPE's names).
OPENBLAS_AVX2_CORES = {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids"}

# OPENBLAS_PROBE prints the core the BLAS torch links (Debian's libblas.so.3,
# OpenBLAS from libopenblas0-*) chooses for this CPU, or nothing.
OPENBLAS_PROBE = """
import ctypes
for name in ("libblas.so.3", "libopenblas.so.0"):
    try:
        lib = ctypes.CDLL(name)
    except OSError:
        continue
    if hasattr(lib, "openblas_get_corename"):
        lib.openblas_get_corename.restype = ctypes.c_char_p
        print(lib.openblas_get_corename().decode())
    break
"""


def openblas_core_for_this_cpu():
    """Makes OpenBLAS use this CPU's vector kernels when it would not.

    OpenBLAS picks its kernels by the CPU's family and model, and a CPU it
    does not know, such as a virtual machine's "Intel(R) Xeon(R) Processor"
    with AVX-512, gets Prescott's SSE3 kernels: there PyTorch's float32
    matmul ran 4x slower (32 against 123 GFLOP/s, 780x512x128, one thread),
    and every ratio against qkv flattered qkv. Unless OPENBLAS_CORETYPE is
    set, a core without AVX2 is replaced, before torch loads OpenBLAS, by
    SkylakeX where /proc/cpuinfo shows AVX-512 (F, DQ, BW, VL) or Haswell
    where it shows AVX2 and FMA. Returns what it did, for the output."""
    if "OPENBLAS_CORETYPE" in os.environ:
        return "OPENBLAS_CORETYPE=%s (set by the caller)" % os.environ["OPENBLAS_CORETYPE"]
    try:
        with open("/proc/cpuinfo") as f:
            flags = set(next((l.split(":", 1)[1].split() for l in f if l.startswith("flags")), []))
        core = subprocess.run([sys.executable, "-c", OPENBLAS_PROBE], capture_output=True, text=True, timeout=120).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    if not core or core.lower() in OPENBLAS_AVX2_CORES:
        return core
    want = ""
    if {"avx512f", "avx512dq", "avx512bw", "avx512vl"} <= flags:
        want = "SkylakeX"
    elif {"avx2", "fma"} <= flags:
        want = "Haswell"
    if not want:
        return core
    os.environ["OPENBLAS_CORETYPE"] = want
    return "%s (OPENBLAS_CORETYPE, set here: OpenBLAS chose %s for this CPU)" % (want, core)


OPENBLAS_CORE = openblas_core_for_this_cpu()

import numpy as np  # noqa: E402 (after OpenBLAS's core is chosen)
import torch  # noqa: E402
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


# model.positions that add nothing to the embeddings: none, and the ones that
# act inside attention instead.
TABLELESS = ("none", "rope", "rope-interleaved", "alibi")


def alibi_slopes(h):
    """The ALiBi paper's get_slopes: 2^(-8/h), its powers, for h a power of
    two; otherwise those of the largest power of two below h, then every
    other slope of twice that."""
    def pow2(n):
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start ** i for i in range(n)]
    if math.log2(h).is_integer():
        return pow2(h)
    c = 2 ** math.floor(math.log2(h))
    return pow2(c) + alibi_slopes(2 * c)[0::2][: h - c]


def rms_norm(x, gain, eps=1e-6):
    """Qwen3's RMSNorm over the last axis, computed in x's dtype."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * gain


def rope(x, base, interleaved):
    """Rotates x (B, H, S, dk) by position s: half-split pairs (m, m+dk/2),
    Hugging Face's rotate_half, or interleaved pairs (2m, 2m+1), Meta's.
    Angles in float64 whatever x's dtype."""
    s, dk = x.shape[2], x.shape[3]
    inv = base ** (-torch.arange(0, dk, 2, dtype=torch.float64) / dk)  # (dk/2)
    ang = torch.arange(s, dtype=torch.float64).unsqueeze(1) * inv  # (S, dk/2)
    cos, sin = torch.cos(ang).to(x.dtype), torch.sin(ang).to(x.dtype)
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
    cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    half = dk // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), -1)  # rotate_half
    return x * cos + rot * sin


class Attention(nn.Module):
    """kind is "decoder" (causal self-attention), "encoder" (bidirectional
    self-attention) or "cross". The variants of the model config act in this
    order: q, k projected (k, v at kv_heads heads); qk_norm (per head, before
    RoPE); RoPE (self-attention only); k, v repeated to the query heads
    (repeat_interleave); scores / scale; softcap c*tanh(s/c); ALiBi
    -m_h*(i-j), -m_h*|i-j| in an encoder (self-attention only); the mask
    (padding, causal, window: i-w < j <= i, |i-j| < w in an encoder; self-
    attention only); a sink logit per head joins the softmax and is dropped."""

    def __init__(self, d, heads, bias, attn_dropout, scale="", m=None, kind="decoder"):
        super().__init__()
        m = m or {}
        self.h, self.dk = heads, d // heads
        self.g = m.get("kv_heads") or heads
        self.kind = kind
        self.self_attn = kind != "cross"
        # model.attn_scale: the scores are divided by sqrt(dk), sqrt(D) or 1
        # (layers.AttentionScale).
        if scale in ("", "dk"):
            self.div = math.sqrt(self.dk)
        elif scale == "dmodel":
            self.div = math.sqrt(d)
        elif scale == "none":
            self.div = 1.0
        else:
            raise ValueError(f"unknown attn_scale {scale!r}")
        pos = m.get("positions") or "learned"
        self.rope = pos in ("rope", "rope-interleaved") and self.self_attn
        self.interleaved = pos == "rope-interleaved"
        self.base = float(m.get("rope_base") or 10000.0)
        self.alibi = pos == "alibi" and self.self_attn
        self.window = (m.get("window") or 0) if self.self_attn else 0
        self.global_tokens = (m.get("global_tokens") or 0) if self.self_attn else 0
        self.block_local = (m.get("block_local") or 0) if self.self_attn else 0
        self.softcap = m.get("softcap") or 0.0
        self.q = nn.Linear(d, d, bias=bias)
        self.k = nn.Linear(d, self.g * self.dk, bias=bias)
        self.v = nn.Linear(d, self.g * self.dk, bias=bias)
        self.o = nn.Linear(d, d, bias=bias)
        self.sinks = nn.Parameter(torch.zeros(heads)) if m.get("sinks") else None
        self.temperature = nn.Parameter(torch.ones(heads)) if m.get("head_temperature") else None
        if m.get("qk_norm"):
            self.q_norm = nn.Parameter(torch.ones(self.dk))
            self.k_norm = nn.Parameter(torch.ones(self.dk))
        else:
            self.q_norm = self.k_norm = None
        self.drop = nn.Dropout(attn_dropout)

    def plain(self):
        """Whether the layer is the 2017 formula with nothing that
        _scaled_dot_product_attention lacks: sqrt(dk) scale, no variant
        that changes scores or weights, no dropout."""
        return (self.div == math.sqrt(self.dk) and self.temperature is None and not self.softcap and not self.alibi
                and not self.window and not self.block_local and self.sinks is None and self.drop.p == 0)

    def forward(self, x, allow, memory=None):
        # x (B, Sq, D); allow (B, Sq, Sk) bool, True = may attend. Keys and
        # values are projected from memory (B, Sk, D) when given
        # (cross-attention), else from x (self-attention, Sk = Sq).
        kv = x if memory is None else memory
        b, sq, d = x.shape
        sk = kv.shape[1]
        split = lambda t, n, h: t.view(b, n, h, self.dk).transpose(1, 2)  # (B, h, n, dk)
        q, k, v = split(self.q(x), sq, self.h), split(self.k(kv), sk, self.g), split(self.v(kv), sk, self.g)
        if self.q_norm is not None:
            q, k = rms_norm(q, self.q_norm), rms_norm(k, self.k_norm)
        if self.rope:
            q, k = rope(q, self.base, self.interleaved), rope(k, self.base, self.interleaved)
        k = k.repeat_interleave(self.h // self.g, dim=1)  # (B, H, Sk, dk): head h reads KV head h // (H/G)
        v = v.repeat_interleave(self.h // self.g, dim=1)
        if SDPA and self.plain() and self.kind == "decoder" and torch.equal(allow, torch.ones_like(allow).tril()):
            # PyTorch's own attention call (1.13's private
            # _scaled_dot_product_attention, its math path): the same
            # softmax(QK^T/sqrt(dk)) V with the causal mask, for bench's
            # timing only. It divides by sqrt(dk) itself.
            y, _ = F._scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.o(y.transpose(1, 2).reshape(b, sq, d))
        scores = q @ k.transpose(-2, -1) / self.div  # (B, H, Sq, Sk)
        if self.temperature is not None:
            scores = scores * self.temperature.view(1, self.h, 1, 1)
        if self.softcap:
            scores = self.softcap * torch.tanh(scores / self.softcap)
        i = torch.arange(sq).unsqueeze(1)  # (Sq, 1)
        j = torch.arange(sk).unsqueeze(0)  # (1, Sk)
        if self.alibi:
            dist = (i - j).abs() if self.kind == "encoder" else (i - j)
            m = torch.tensor(alibi_slopes(self.h), dtype=scores.dtype).view(1, self.h, 1, 1)
            scores = scores - m * dist.to(scores.dtype)
        a = allow.unsqueeze(1)  # (B, 1, Sq, Sk)
        if self.window:
            near = (i - j).abs() < self.window if self.kind == "encoder" else (i - j) < self.window
            if self.global_tokens:
                # Longformer/BigBird: every query sees the global tokens; in
                # an encoder they see every key (the allow mask keeps a
                # causal model causal).
                near = near | (j < self.global_tokens)
                if self.kind == "encoder":
                    near = near | (i < self.global_tokens)
            a = a & near
        if self.block_local:
            a = a & (torch.div(i, self.block_local, rounding_mode="floor") == torch.div(j, self.block_local, rounding_mode="floor"))
        logits = scores.masked_fill(~a, float("-inf"))
        if self.sinks is not None:
            sink = self.sinks.view(1, self.h, 1, 1).expand(b, self.h, sq, 1)
            w = torch.softmax(torch.cat((logits, sink), dim=-1), dim=-1)[..., :-1]
        else:
            w = torch.softmax(logits, dim=-1)
            # A row with no visible key is NaN after softmax; qkv defines it as 0.
            w = torch.where(a.any(dim=-1, keepdim=True), w, torch.zeros_like(w))
        y = self.drop(w) @ v  # (B, H, Sq, dk)
        return self.o(y.transpose(1, 2).reshape(b, sq, d))


def layer_kinds(m):
    """model.layer_kinds as one (kind, window) per block: ("softmax", None),
    ("window", W) or ("linear", None); block i takes kinds[i % len(kinds)].
    Absent or "" (or only spaces): every block softmax."""
    s = m.get("layer_kinds") or ""
    if not isinstance(s, str):
        raise ValueError(f"model.layer_kinds {s!r}: want a comma-separated string")
    n = m["layers"]
    if not s.strip():
        return [("softmax", None)] * n
    kinds = []
    for part in s.split(","):
        p = part.strip()
        if p in ("softmax", "linear"):
            kinds.append((p, None))
        elif p.startswith("window:") and p[len("window:"):].isdigit() and int(p[len("window:"):]) >= 1:
            kinds.append(("window", int(p[len("window:"):])))
        else:
            raise ValueError(f"model.layer_kinds {s!r}: entry {p!r} is not softmax, window:W (W >= 1) or linear")
    return [kinds[i % len(kinds)] for i in range(n)]


FEATURE_MAPS = ("taylor", "elu1", "relu", "identity")
LINEAR_NORMS = ("sum", "none")


def feature_map(name, x):
    """phi over the last axis (d') of x: model.feature_map."""
    if name == "elu1":
        return F.elu(x) + 1
    if name == "relu":
        return F.relu(x)
    if name == "identity":
        return x
    if name == "taylor":  # Based: [1, x/d'^(1/4), vec(x x^T)/(sqrt(2) sqrt(d'))], row-major
        d = x.shape[-1]
        outer = (x.unsqueeze(-1) * x.unsqueeze(-2)).flatten(-2)  # index a*d'+b: x_a x_b
        return torch.cat((torch.ones_like(x[..., :1]), x / d ** 0.25, outer / (math.sqrt(2) * math.sqrt(d))), dim=-1)
    raise ValueError(f"unknown feature_map {name!r}: want one of {', '.join(FEATURE_MAPS)}")


class LinearAttention(nn.Module):
    """Linear attention (layer kind "linear"): q, k (H heads of d'), v (H
    heads of dk), phi per head, out_i = sum_{j visible} (phi(q_i).phi(k_j))
    v_j, divided by (sum_{j visible} phi(q_i).phi(k_j) + 1e-12) with
    linear_norm "sum", 0 for a query with no visible key; then wo. Written
    in its naive O(S^2) masked form, with the mask of the softmax
    self-attention it replaces. Self-attention only."""

    def __init__(self, m):
        super().__init__()
        d, h = m["dim"], m["heads"]
        bias = bool(m.get("bias"))
        self.h, self.dk = h, d // h
        self.fd = m.get("feature_dim") or self.dk
        if not isinstance(self.fd, int) or self.fd < 1:
            raise ValueError(f"model.feature_dim {self.fd!r}: want a positive integer (0 or absent: D/H)")
        self.fmap = m.get("feature_map") or "taylor"
        if self.fmap not in FEATURE_MAPS:
            raise ValueError(f"unknown feature_map {self.fmap!r}: want one of {', '.join(FEATURE_MAPS)}")
        self.norm = m.get("linear_norm") or "sum"
        if self.norm not in LINEAR_NORMS:
            raise ValueError(f"unknown linear_norm {self.norm!r}: want sum or none")
        self.q = nn.Linear(d, h * self.fd, bias=bias)
        self.k = nn.Linear(d, h * self.fd, bias=bias)
        self.v = nn.Linear(d, d, bias=bias)
        self.o = nn.Linear(d, d, bias=bias)

    def forward(self, x, allow, memory=None):
        # x (B, S, D); allow (B, S, S) bool, True = key j visible to query i.
        if memory is not None:
            raise ValueError("linear attention is self-attention only")
        b, s, d = x.shape
        split = lambda t, n: t.view(b, s, self.h, n).transpose(1, 2)  # (B, H, S, n)
        q, k, v = split(self.q(x), self.fd), split(self.k(x), self.fd), split(self.v(x), self.dk)
        pq, pk = feature_map(self.fmap, q), feature_map(self.fmap, k)  # (B, H, S, F)
        a = allow.unsqueeze(1)  # (B, 1, S, S)
        w = (pq @ pk.transpose(-2, -1)).masked_fill(~a, 0.0)  # (B, H, S, S)
        y = w @ v  # (B, H, S, dk)
        if self.norm == "sum":
            y = y / (w.sum(-1, keepdim=True) + 1e-12)
        y = torch.where(a.any(dim=-1, keepdim=True), y, torch.zeros_like(y))  # no visible key: 0
        return self.o(y.transpose(1, 2).reshape(b, s, d))


def self_attention(m, kind, lk):
    """The self-attention of a block of layer kind lk ((kind, window), from
    layer_kinds): kind is "decoder" or "encoder", as for Attention."""
    if lk[0] == "linear":
        return LinearAttention(m)
    if lk[0] == "window":
        m = dict(m, window=lk[1])
    return Attention(m["dim"], m["heads"], bool(m.get("bias")), m.get("attn_dropout", 0.0) or 0.0, m.get("attn_scale", ""), m, kind)


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


class GainNorm(nn.Module):
    """LayerNorm without its bias (model.bias_free_norm; nanoGPT's
    LayerNorm(bias=False)). torch 1.13's nn.LayerNorm has no bias=False, so
    it is written here: weight only, F.layer_norm with bias None."""

    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return F.layer_norm(x, (x.shape[-1],), self.weight, None, self.eps)


def layer_norm(d, m):
    return GainNorm(d) if m.get("bias_free_norm") else nn.LayerNorm(d, eps=1e-5)


class Block(nn.Module):
    def __init__(self, m, kind="decoder", lk=("softmax", None)):
        super().__init__()
        d = m["dim"]
        self.post_ln = bool(m.get("post_ln"))
        self.ln1 = layer_norm(d, m)
        self.attn = self_attention(m, kind, lk)
        self.ln2 = layer_norm(d, m)
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


def embed_init(mod, m, vocab, max_len):
    """Gives mod a token embedding and positions: the decoder-only model, and
    each half of the encoder-decoder, which has its own."""
    d = m["dim"]
    mod.max_len = max_len
    mod.tok_emb = nn.Embedding(vocab, d)
    mod.positions = m.get("positions") or "learned"
    if mod.positions == "learned":
        mod.pos_emb = nn.Parameter(torch.zeros(max_len, d))
    elif mod.positions == "sinusoidal":
        mod.register_buffer("pos_emb", sinusoid(max_len, d).float(), persistent=False)
    elif mod.positions not in TABLELESS:
        raise ValueError(f"unknown positions {mod.positions!r}")
    mod.drop = nn.Dropout(m.get("dropout", 0.0) or 0.0)


def embed(mod, ids, what):
    s = ids.shape[1]
    if s > mod.max_len:
        raise ValueError(f"{what} length {s} exceeds max_len {mod.max_len}")
    x = mod.tok_emb(ids)
    if mod.positions in ("learned", "sinusoidal"):
        x = x + mod.pos_emb[:s]
    return mod.drop(x)


class Decoder(nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m
        v, d = m["vocab"], m["dim"]
        embed_init(self, m, v, m["max_len"])
        self.blocks = nn.ModuleList(Block(m, "decoder", lk) for lk in layer_kinds(m))
        self.ln_f = None if m.get("post_ln") else layer_norm(d, m)
        self.tied = bool(m.get("tie_embeddings"))
        if self.tied:  # logits = x E^T: the head's weight is the table itself
            self.head = nn.Linear(d, v, bias=False)
            self.head.weight = self.tok_emb.weight
        else:
            self.head = nn.Linear(d, v, bias=True)

    def forward(self, ids, lengths):
        # ids (B, S) int64, lengths (B) int64 -> logits (B, S, V)
        x = embed(self, ids, "sequence")
        j = torch.arange(ids.shape[1])
        causal = j.unsqueeze(0) <= j.unsqueeze(1)  # (S, S): key j <= query i
        keys = j.unsqueeze(0) < lengths.unsqueeze(1)  # (B, S): key j < length
        allow = causal.unsqueeze(0) & keys.unsqueeze(1)  # (B, S, S)
        for blk in self.blocks:
            x = blk(x, allow)
        if self.ln_f is not None:
            x = self.ln_f(x)
        return self.head(x)


def build(cfg):
    dt = DTYPES[cfg.get("dtype", "")]
    m = cfg["model"]
    if is_encdec(cfg):
        model = EncoderDecoder(m).to(dt)
        halves = (model.enc, model.dec)
    else:
        model = Decoder(m).to(dt)
        halves = (model,)
    for half in halves:
        if half.positions == "sinusoidal":  # computed in float64, then rounded once
            half.pos_emb = sinusoid(half.max_len, m["dim"]).to(dt)
    return model, dt


# ----------------------------------------------------------------------------
# the encoder-decoder ("arch": "encdec"), in torch's own layout


def key_allow(lengths, sq, sk):
    """(B, Sq, Sk) bool: key j of row b visible when j < lengths[b]."""
    keys = torch.arange(sk).unsqueeze(0) < lengths.unsqueeze(1)  # (B, Sk)
    return keys.unsqueeze(1).expand(-1, sq, -1)


class Encoder(nn.Module):
    """The decoder-only stack's blocks without the causal mask: every source
    position sees every real source key; with model.causal_encoder, the real
    keys up to its own position. Pre-LN ends with ln_f."""

    def __init__(self, m, vocab, max_len):
        super().__init__()
        embed_init(self, m, vocab, max_len)
        self.blocks = nn.ModuleList(Block(m, "encoder", lk) for lk in layer_kinds(m))
        self.ln_f = None if m.get("post_ln") else layer_norm(m["dim"], m)
        self.causal = bool(m.get("causal_encoder"))

    def forward(self, ids, lengths):
        s = ids.shape[1]
        allow = key_allow(lengths, s, s)
        if self.causal:
            j = torch.arange(s)
            allow = allow & (j.unsqueeze(0) <= j.unsqueeze(1)).unsqueeze(0)  # key j <= query i
        x = embed(self, ids, "source")
        for blk in self.blocks:
            x = blk(x, allow)
        return x if self.ln_f is None else self.ln_f(x)


class DecoderBlock(nn.Module):
    """Causal self-attention, cross-attention (queries from the target, keys
    and values from the encoder output), feed-forward; each sublayer
    x + f(LN(x)) (pre-LN) or LN(x + f(x)) (post-LN)."""

    def __init__(self, m, lk=("softmax", None)):
        super().__init__()
        d, bias = m["dim"], bool(m.get("bias"))
        ad = m.get("attn_dropout", 0.0) or 0.0
        self.post_ln = bool(m.get("post_ln"))
        self.ln1 = layer_norm(d, m)
        self.self_attn = self_attention(m, "decoder", lk)
        self.ln2 = layer_norm(d, m)
        self.cross_attn = Attention(d, m["heads"], bias, ad, m.get("attn_scale", ""), m, "cross")
        self.ln3 = layer_norm(d, m)
        self.ff = FeedForward(d, m["hidden"], m.get("activation", ""), bias)
        p = m.get("dropout", 0.0) or 0.0
        self.drops = nn.ModuleList(nn.Dropout(p) for _ in range(3))

    def forward(self, x, memory, self_allow, cross_allow):
        subs = (
            (self.ln1, lambda h: self.self_attn(h, self_allow)),
            (self.ln2, lambda h: self.cross_attn(h, cross_allow, memory)),
            (self.ln3, self.ff),
        )
        for (ln, f), drop in zip(subs, self.drops):
            x = ln(x + drop(f(x))) if self.post_ln else x + drop(f(ln(x)))
        return x


class TargetDecoder(nn.Module):
    def __init__(self, m, vocab, max_len):
        super().__init__()
        embed_init(self, m, vocab, max_len)
        self.blocks = nn.ModuleList(DecoderBlock(m, lk) for lk in layer_kinds(m))
        self.ln_f = None if m.get("post_ln") else layer_norm(m["dim"], m)

    def forward(self, ids, lengths, memory, src_lengths):
        st, ss = ids.shape[1], memory.shape[1]
        j = torch.arange(st)
        causal = j.unsqueeze(0) <= j.unsqueeze(1)  # (St, St): key j <= query i
        self_allow = causal.unsqueeze(0) & key_allow(lengths, st, st)  # (B, St, St)
        cross_allow = key_allow(src_lengths, st, ss)  # (B, St, Ss): source padding only
        x = embed(self, ids, "target")
        for blk in self.blocks:
            x = blk(x, memory, self_allow, cross_allow)
        return x if self.ln_f is None else self.ln_f(x)


class EncoderDecoder(nn.Module):
    """qkv's layers.EncoderDecoder as config.Config.EncDec builds it: both
    halves over the task's vocabulary and max_len, model.layers blocks each."""

    def __init__(self, m):
        super().__init__()
        if m.get("tie_embeddings"):
            raise ValueError("model.tie_embeddings is for decoder-only models; qkv refuses it with arch encdec")
        v, n = m["vocab"], m["max_len"]
        self.enc = Encoder(m, v, n)
        self.dec = TargetDecoder(m, v, n)
        self.head = nn.Linear(m["dim"], v, bias=True)

    def forward(self, src, src_lengths, tgt, tgt_lengths):
        # src (B, Ss), tgt (B, St) int64; lengths (B) -> logits (B, St, V)
        memory = self.enc(src, src_lengths)  # (B, Ss, D)
        return self.head(self.dec(tgt, tgt_lengths, memory, src_lengths))


def is_encdec(cfg):
    arch = cfg.get("arch") or "decoder"
    if arch not in ("decoder", "encdec"):
        raise ValueError(f"unknown arch {arch!r}")
    return arch == "encdec"


def attn_names(m, p, lk=("softmax", None)):
    """qkv -> torch names of one attention under prefix p: its projections,
    and with model.sinks, model.qk_norm and model.head_temperature its sinks
    (H), norm gains (dk) and temperatures (H). A linear attention (lk, from
    layer_kinds) has its projections only."""
    out = {}
    for x in "qkvo":
        out[p + "w" + x] = (p + x + ".weight", True)
        if m.get("bias"):
            out[p + "b" + x] = (p + x + ".bias", False)
    if lk[0] == "linear":
        return out
    if m.get("sinks"):
        out[p + "sinks"] = (p + "sinks", False)
    if m.get("qk_norm"):
        out[p + "q_norm.gain"] = (p + "q_norm", False)
        out[p + "k_norm.gain"] = (p + "k_norm", False)
    if m.get("head_temperature"):
        out[p + "temperature"] = (p + "temperature", False)
    return out


def block_names(m, p, attns, lns, lk=("softmax", None)):
    """qkv -> torch names of one block under prefix p; its first attention
    (the self-attention) is of layer kind lk, any other softmax."""
    out = {}
    for ln in lns:
        out[p + ln + ".gain"] = (p + ln + ".weight", False)
        if not m.get("bias_free_norm"):
            out[p + ln + ".bias"] = (p + ln + ".bias", False)
    for n, attn in enumerate(attns):
        out.update(attn_names(m, p + attn + ".", lk if n == 0 else ("softmax", None)))
    for n in "12":
        out[p + "ff.w" + n] = (p + "ff.fc" + n + ".weight", True)
        if m.get("bias"):
            out[p + "ff.b" + n] = (p + "ff.fc" + n + ".bias", False)
    return out


def encdec_name_map(m):
    out = {"head.w": ("head.weight", True), "head.b": ("head.bias", False)}
    for half in ("enc", "dec"):
        out[half + ".tok_emb.table"] = (half + ".tok_emb.weight", False)
        if (m.get("positions") or "learned") == "learned":
            out[half + ".pos_emb.table"] = (half + ".pos_emb", False)
        if not m.get("post_ln"):
            out[half + ".ln_f.gain"] = (half + ".ln_f.weight", False)
            if not m.get("bias_free_norm"):
                out[half + ".ln_f.bias"] = (half + ".ln_f.bias", False)
    for i, lk in enumerate(layer_kinds(m)):
        out.update(block_names(m, f"enc.blocks.{i}.", ["attn"], ["ln1", "ln2"], lk))
        out.update(block_names(m, f"dec.blocks.{i}.", ["self_attn", "cross_attn"], ["ln1", "ln2", "ln3"], lk))
    return out


# qkv name -> (torch name, transpose)
def name_map(m):
    out = {"tok_emb.table": ("tok_emb.weight", False)}
    if not m.get("tie_embeddings"):  # a tied model has no head tensors
        out["head.w"], out["head.b"] = ("head.weight", True), ("head.bias", False)
    if (m.get("positions") or "learned") == "learned":
        out["pos_emb.table"] = ("pos_emb", False)
    nobias = bool(m.get("bias_free_norm"))  # no ln *.bias tensors
    if not m.get("post_ln"):
        out["ln_f.gain"] = ("ln_f.weight", False)
        if not nobias:
            out["ln_f.bias"] = ("ln_f.bias", False)
    for i, lk in enumerate(layer_kinds(m)):
        p = f"blocks.{i}."
        for ln in ("ln1", "ln2"):
            out[p + ln + ".gain"] = (p + ln + ".weight", False)
            if not nobias:
                out[p + ln + ".bias"] = (p + ln + ".bias", False)
        out.update(attn_names(m, p + "attn.", lk))
        for n in "12":
            out[p + "ff.w" + n] = (p + "ff.fc" + n + ".weight", True)
            if m.get("bias"):
                out[p + "ff.b" + n] = (p + "ff.fc" + n + ".bias", False)
    return out


def load_weights(model, dt, tensors, cfg):
    m = cfg["model"]
    names = encdec_name_map(m) if is_encdec(cfg) else name_map(m)
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
    if m.get("tie_embeddings") and not is_encdec(cfg):
        state["head.weight"] = state["tok_emb.weight"]  # one tensor, two names in torch's state_dict
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
    load_weights(model, dt, tensors, cfg)
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


def parse_lengths(s):
    if s is None:
        return None
    return [int(x) for x in s.replace(",", " ").replace("[", " ").replace("]", " ").split()]


def check_rows(ids, lengths, v, what):
    """Validates rows of ids over vocab v and their lengths (default: full
    rows); returns the lengths."""
    if not ids or len({len(r) for r in ids}) != 1:
        raise ValueError(f"{what}: every row must have the same length, and there must be one")
    s = len(ids[0])
    if lengths is None:
        lengths = [s] * len(ids)
    if len(lengths) != len(ids) or any(not 0 <= n <= s for n in lengths):
        raise ValueError(f"{what} lengths {lengths}: want one per row, each in [0, {s}]")
    if any(not 0 <= t < v for r in ids for t in r):
        raise ValueError(f"{what} ids must be in [0, {v})")
    return lengths


def print_logits(logits, dt):
    out = {
        "shape": list(logits.shape),
        "dtype": str(dt).replace("torch.", ""),
        "torch": torch.__version__,
        "logits": logits.double().tolist(),
    }
    json.dump(out, sys.stdout, allow_nan=False)
    sys.stdout.write("\n")


def cmd_logits_encdec(a, cfg, model, dt):
    if a.input:
        with open(a.input) as f:
            inp = json.load(f)
        missing = [k for k in ("src", "tgt") if k not in inp]
        if missing:
            raise ValueError(f"{a.input}: an encoder-decoder checkpoint needs \"src\" and \"tgt\" (and optionally \"src_lengths\", \"tgt_lengths\"); missing {missing}")
        src, tgt = inp["src"], inp["tgt"]
        src_len, tgt_len = inp.get("src_lengths"), inp.get("tgt_lengths")
    else:
        if not (a.src and a.tgt):
            raise ValueError("an encoder-decoder checkpoint needs --src and --tgt (or --input), not --ids")
        src, tgt = parse_rows(a.src, "src"), parse_rows(a.tgt, "tgt")
        src_len, tgt_len = parse_lengths(a.src_lengths), parse_lengths(a.tgt_lengths)
    v = cfg["model"]["vocab"]
    src_len = check_rows(src, src_len, v, "src")
    tgt_len = check_rows(tgt, tgt_len, v, "tgt")
    if len(src) != len(tgt):
        raise ValueError(f"{len(src)} source rows and {len(tgt)} target rows")
    model.eval()
    t = lambda x: torch.tensor(x, dtype=torch.int64)
    with torch.no_grad():
        logits = model(t(src), t(src_len), t(tgt), t(tgt_len))
    print_logits(logits, dt)


def cmd_logits(a):
    cfg, model, dt = load_checkpoint(a.checkpoint)
    if is_encdec(cfg):
        return cmd_logits_encdec(a, cfg, model, dt)
    if not (a.ids or a.input):
        raise ValueError("a decoder-only checkpoint needs --ids or --input")
    if a.input:
        with open(a.input) as f:
            inp = json.load(f)
        if "ids" not in inp:
            raise ValueError(f"{a.input}: a decoder-only checkpoint needs \"ids\" (and optionally \"lengths\")")
        ids, lengths = inp["ids"], inp.get("lengths")
    else:
        ids, lengths = parse_rows(a.ids, "ids"), parse_lengths(a.lengths or None)
    lengths = check_rows(ids, lengths, cfg["model"]["vocab"], "input")
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor(ids, dtype=torch.int64), torch.tensor(lengths, dtype=torch.int64))
    print_logits(logits, dt)


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


def param_groups(model, cfg):
    # qkv's AdamW decays parameters of 2+ dims whose name lacks "emb": the
    # projection matrices and the head, not embeddings, gains or biases;
    # with "decay": "matrices" (nanoGPT's rule), every parameter of 2+ dims.
    matrices = cfg.get("decay") == "matrices"
    decay, rest = [], []
    for name, p in model.named_parameters():
        (decay if p.dim() >= 2 and (matrices or "emb" not in name) else rest).append(p)
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


# SDPA: a bench timing with PyTorch's own attention call where a layer
# allows it (Attention.forward); never set for logits.
SDPA = False


def time_steps(cfg, model, dt, steps, warmup, seed):
    gen = torch.Generator().manual_seed(seed)
    ids, lengths, targets, weights = bench_batch(cfg, gen)
    weights = weights.to(dt)
    decay, rest = param_groups(model, cfg)
    wd = cfg.get("weight_decay", 0.01) if cfg.get("optimizer", "adamw") == "adamw" else 0.0
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": wd}, {"params": rest, "weight_decay": 0.0}],
        lr=cfg.get("lr", 3e-3), betas=(cfg.get("beta1") or 0.9, cfg.get("beta2") or 0.999), eps=1e-8,
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


def idle_cpus(window=0.5):
    """The CPUs idle now: the idle share of /proc/stat's CPU time over a
    short window, times the CPU count; None where /proc/stat is missing.
    A load average would count the run that just finished (qkv bench times
    its own step first), not what is free now."""
    def sample():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[3] + v[4], sum(v)  # idle + iowait, total
    try:
        i0, t0 = sample()
        time.sleep(window)
        i1, t1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    if t1 <= t0:
        return None
    return (os.cpu_count() or 1) * (i1 - i0) / (t1 - t0)


def spare_cores_missing(threads):
    """Why timing with `threads` threads would be hopeless, or "": a thread
    count above 1 is timed only when at least threads - 0.5 CPUs are idle
    just before (the script sleeps while it looks, so it counts as idle).
    On a shared machine whose other cores are busy, PyTorch's threads wait
    for each other: its 2-thread step was 10 to 30 times its 1-thread step
    here at load 3 to 7, a figure about the machine's load, not about
    PyTorch."""
    if threads <= 1:
        return ""
    idle = idle_cpus()
    if idle is None or idle >= threads - 0.5:
        return ""
    return "%.1f of %d CPUs idle, fewer than the %d threads need (rule: at least threads - 0.5 idle over 0.5 s; --all-threads times it anyway)" % (idle, os.cpu_count() or 1, threads)


def cmd_bench(a):
    if a.checkpoint:
        cfg, _, _ = load_checkpoint(a.checkpoint)  # checks the weights load
    else:
        cfg = load_config(a.config)
    if is_encdec(cfg):
        raise ValueError("bench times decoder-only models only; this is an encoder-decoder (\"arch\": \"encdec\")")
    if a.batch:
        cfg["batch"] = a.batch
    if a.dtype:
        cfg["dtype"] = a.dtype
    # torch's default is one thread per physical core; os.cpu_count() counts
    # logical CPUs. Time 1 thread, the default, and every logical CPU.
    default_threads = torch.get_num_threads()
    results = []
    blas = blas_library()
    # Each thread count with the explicit attention (the reference's), and
    # with PyTorch's own attention call where every layer allows it.
    global SDPA
    for threads in sorted({1, default_threads, os.cpu_count() or 1}):
        busy = spare_cores_missing(threads) if not a.all_threads else ""
        if busy:
            results.append({"threads": threads, "skipped": busy})
            continue
        torch.set_num_threads(threads)
        set_blas_threads(blas, threads)
        for sdpa in (False, True):
            SDPA = sdpa
            torch.manual_seed(a.seed)
            model, dt = build(cfg)  # torch's own init: timing does not depend on values
            if sdpa and not all(l.plain() for l in model.modules() if isinstance(l, Attention)):
                continue
            ms = time_steps(cfg, model, dt, a.steps, a.warmup, a.seed)
            r = {"threads": threads, "ms_per_step": round(ms, 3)}
            if sdpa:
                r["attention"] = "_scaled_dot_product_attention"
            results.append(r)
        SDPA = False
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
        "blas_core": OPENBLAS_CORE,
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
    lg.add_argument("--input", help='JSON file {"ids": [[...]], "lengths": [...]} instead of --ids/--lengths; '
                    'for an encoder-decoder {"src": [[...]], "src_lengths": [...], "tgt": [[...]], "tgt_lengths": [...]}')
    lg.add_argument("--src", help="encoder-decoder: source ids, as --ids")
    lg.add_argument("--src-lengths", help="encoder-decoder: unpadded length of each source (default: full rows)")
    lg.add_argument("--tgt", help="encoder-decoder: target (decoder input) ids, as --ids")
    lg.add_argument("--tgt-lengths", help="encoder-decoder: unpadded length of each target (default: full rows)")
    bn = sub.add_parser("bench", help="time training steps of a checkpoint's or config's model")
    src = bn.add_mutually_exclusive_group(required=True)
    src.add_argument("--checkpoint", help="qkv checkpoint directory (its config.json)")
    src.add_argument("--config", help="a qkv config.json (train.Config as JSON)")
    bn.add_argument("--steps", type=int, default=20, help="timed steps")
    bn.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    bn.add_argument("--all-threads", action="store_true", help="time every thread count, even on a machine too busy for it (see spare_cores_missing)")
    bn.add_argument("--batch", type=int, help="override the config's batch size")
    bn.add_argument("--dtype", choices=["float32", "float64"], help="override the config's dtype")
    bn.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    if a.cmd == "logits" and not (a.ids or a.input or a.src or a.tgt):
        ap.error("logits needs --ids, --src and --tgt, or --input")
    try:
        {"logits": cmd_logits, "bench": cmd_bench}[a.cmd](a)
    except (ValueError, KeyError, OSError) as e:
        print(f"torchref: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
