#!/usr/bin/env python3
"""variants_ref: PyTorch references for the attention variants that act on q
and k rather than on the scores: rotary position embedding (RoPE) and QK-norm's
RMSNorm. graph/rope_test.go and graph/rmsnorm_test.go compare qkv's ops with it.

It reads one JSON object on stdin, {"cases": [case, ...]}, and prints
{"torch": version, "results": [result, ...]}, one result per case, in order.

A RoPE case:

    {"op": "rope", "dtype": "float64", "shape": [B, S, D], "x": [...],
     "positions": [...] (B*S ints, row-major (B, S)), "heads": H,
     "base": 10000.0, "pairing": "half" | "interleaved",
     "rotary_dim": r (0 or absent: dk), "angles": "float64" | "float32",
     "dy": [...] (optional)}

  "half" is Hugging Face's rotate_half / apply_rotary_pos_emb (GPT-NeoX,
  Llama in transformers, Qwen, gpt-oss), partial rotary as GPT-NeoX does it
  (rotate x[..., :r], pass x[..., r:]). "interleaved" is Meta's llama
  apply_rotary_emb (view_as_complex of pairs (2m, 2m+1), times
  polar(1, angle)), partial as GPT-J (the first r features).

  "angles": "float64" (the default) computes inv_freq, the angles, their
  cosines and sines in float64; "float32" exactly as Hugging Face's
  LlamaRotaryEmbedding does for any model dtype (inv_freq and
  inv_freq @ position_ids in float32, cos and sin in float32, then cast to
  the dtype of x), to measure how far a float64 model is from HF.

An RMSNorm case:

    {"op": "rmsnorm", "dtype": "float64", "shape": [..., D], "x": [...],
     "gain": [...] (D / heads), "eps": 1e-6, "heads": H (1 if absent),
     "dy": [...] (optional)}

  Qwen3RMSNorm, applied per head over the last axis viewed as (H, dk), as
  Qwen3's attention applies q_norm and k_norm (hidden_shape = (*input_shape,
  -1, head_dim)). Qwen3RMSNorm upcasts to float32; here the upcast is to
  max(float32, dtype), so that float64 stays float64.

A "qknorm_rope" case has the fields of both (gain, eps, positions, base,
pairing): HeadRMSNorm then RoPE, Qwen3's order.

Each result holds "y", the output flattened row-major, and, when the case
has "dy", the gradients torch.autograd computes for the cost sum(y * dy):
"dx" and, for RMSNorm, "dgain". Lists of floats are printed with Python's
repr, so float64 values round-trip exactly.
"""

import json
import sys

import torch

DTYPES = {"float64": torch.float64, "float32": torch.float32}


# ----------------------------------------------------------------------------
# RoPE, Hugging Face (transformers/models/llama/modeling_llama.py)


def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin)


def hf_cos_sin(positions, dim, base, dtype, angles):
    """LlamaRotaryEmbedding.forward for position_ids (B, S), attention_scaling
    1 (default rope_type): cos, sin (B, S, dim)."""
    if angles == "float32":
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float) / dim))
        inv_freq_expanded = inv_freq[None, :, None].float().expand(positions.shape[0], -1, 1)
        position_ids_expanded = positions[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype), emb.sin().to(dtype)
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype=torch.float64) / dim))
    inv_freq_expanded = inv_freq[None, :, None].expand(positions.shape[0], -1, 1)
    position_ids_expanded = positions[:, None, :].to(torch.float64)
    freqs = (inv_freq_expanded @ position_ids_expanded).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def rope_half(x, positions, base, rotary_dim, angles):
    """x (B, H, S, dk): GPT-NeoX partial rotary around HF's
    apply_rotary_pos_emb."""
    cos, sin = hf_cos_sin(positions, rotary_dim, base, x.dtype, angles)
    x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]
    return torch.cat((apply_rotary_pos_emb(x_rot, cos, sin), x_pass), dim=-1)


# ----------------------------------------------------------------------------
# RoPE, Meta (llama/model.py)


def precompute_freqs_cis(dim, positions, theta, angles):
    """Meta's precompute_freqs_cis, at the given positions (B, S) rather than
    at arange(end): (B, S, dim/2) complex."""
    if angles == "float32":
        freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
        t = positions.float()
        freqs = t[..., None] * freqs
        return torch.polar(torch.ones_like(freqs), freqs).to(torch.complex128)
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].double() / dim))
    t = positions.double()
    freqs = t[..., None] * freqs
    return torch.polar(torch.ones_like(freqs), freqs)


def rope_interleaved(x, positions, base, rotary_dim, angles):
    """x (B, S, H, dk), as Meta's apply_rotary_emb takes xq; partial rotary
    as GPT-J (the first rotary_dim features)."""
    freqs_cis = precompute_freqs_cis(rotary_dim, positions, base, angles)  # (B, S, r/2)
    x_rot, x_pass = x[..., :rotary_dim], x[..., rotary_dim:]
    # Meta: xq.float(); .double() here, so that float64 stays float64 (a
    # float32 x is rotated in float64 too, then rounded, as qkv does).
    x_ = torch.view_as_complex(x_rot.double().reshape(*x_rot.shape[:-1], -1, 2))
    freqs_cis = freqs_cis[:, :, None, :]  # reshape_for_broadcast: over heads
    out = torch.view_as_real(x_ * freqs_cis).flatten(3)
    return torch.cat((out.type_as(x), x_pass), dim=-1)


def rope(case, x):
    b, s, d = case["shape"]
    heads = case["heads"]
    dk = d // heads
    rotary_dim = case.get("rotary_dim") or dk
    base = float(case.get("base") or 10000.0)
    angles = case.get("angles", "float64")
    positions = torch.tensor(case["positions"], dtype=torch.int64).reshape(b, s)
    pairing = case.get("pairing", "half")
    if pairing == "half":
        xh = x.view(b, s, heads, dk).transpose(1, 2)  # (B, H, S, dk), as HF
        y = rope_half(xh, positions, base, rotary_dim, angles).transpose(1, 2)
    elif pairing == "interleaved":
        y = rope_interleaved(x.view(b, s, heads, dk), positions, base, rotary_dim, angles)
    else:
        raise ValueError(f"unknown pairing {pairing!r}")
    return y.reshape(b, s, d)


# ----------------------------------------------------------------------------
# RMSNorm, Qwen3 (transformers/models/qwen3/modeling_qwen3.py)


class Qwen3RMSNorm(torch.nn.Module):
    def __init__(self, weight, eps=1e-6):
        super().__init__()
        self.weight = weight
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        # HF: .to(torch.float32); float64 kept in float64 here.
        hidden_states = hidden_states.to(torch.promote_types(input_dtype, torch.float32))
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


def rmsnorm(case, x, gain):
    shape = case["shape"]
    heads = case.get("heads", 1)
    eps = case.get("eps") or 1e-6
    norm = Qwen3RMSNorm(gain, eps)
    hidden_shape = (*shape[:-1], heads, shape[-1] // heads)
    return norm(x.view(hidden_shape)).reshape(shape)


# ----------------------------------------------------------------------------


def run(case):
    dt = DTYPES[case.get("dtype", "float64")]
    shape = case["shape"]
    x = torch.tensor(case["x"], dtype=dt).reshape(shape).requires_grad_(True)
    gain = None
    if "gain" in case:
        gain = torch.tensor(case["gain"], dtype=dt).requires_grad_(True)
    op = case["op"]
    if op == "rope":
        y = rope(case, x)
    elif op == "rmsnorm":
        y = rmsnorm(case, x, gain)
    elif op == "qknorm_rope":
        y = rope(case, rmsnorm(case, x, gain))
    else:
        raise ValueError(f"unknown op {op!r}")
    out = {"y": y.detach().reshape(-1).tolist()}
    if case.get("dy") is not None:
        dy = torch.tensor(case["dy"], dtype=dt).reshape(y.shape)
        (y * dy).sum().backward()
        out["dx"] = x.grad.reshape(-1).tolist()
        if gain is not None:
            out["dgain"] = gain.grad.reshape(-1).tolist()
    return out


def main():
    torch.set_num_threads(1)
    req = json.load(sys.stdin)
    results = [run(c) for c in req["cases"]]
    json.dump({"torch": torch.__version__, "results": results}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
