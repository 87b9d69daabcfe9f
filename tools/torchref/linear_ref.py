#!/usr/bin/env python3
"""linear_ref: a float64 PyTorch reference for qkv's linear attention (issue
24), in its two forms from the same inputs: the naive O(S^2) masked form and
the recurrent form (a state S (F x dv) and z (F) per head, updated token by
token). qkv's graph ops are compared with it; torchref.py's LinearAttention
(the model reference) is compared with it in the self-test.

    linear_ref.py < request.json      # {"cases": [...]} -> {"torch": ..., "results": [...]}
    linear_ref.py --self-test         # the checks below; exit status 1 if one fails

The attention, per row b and head h, from q, k (after the projection, before
phi; d' per head) and v (dv per head):

    phi       "elu1": F.elu(x) + 1; "relu"; "identity";
              "taylor" (Based): [1, x / d'^(1/4), vec(x x^T) / (sqrt(2) sqrt(d'))],
              vec row-major (index a*d' + b holds x_a x_b), so that
              phi(q).phi(k) = 1 + s + s^2/2 with s = q.k / sqrt(d').
    visible   key j is visible to query i when j < lengths[b] and, if
              causal, j <= i.
    naive     A_ij = phi(q_i).phi(k_j) over visible j (0 elsewhere);
              out_i = sum_j A_ij v_j, divided by (sum_j A_ij + 1e-12) when
              normalize is "sum"; not divided when "none".
    recurrent S = sum phi(k_j)^T v_j, z = sum phi(k_j) over the visible keys
              seen so far: causal, after token i's update (a key j >=
              lengths[b] does not update them); bidirectional, over every
              visible key. out_i = phi(q_i) S, divided by (phi(q_i).z +
              1e-12) when "sum".
    A query with no visible key (lengths[b] = 0, or none at all) gets 0
    in both forms.

A case (one JSON object in "cases"):

    {"op": "linear_attention", "dtype": "float64" (or "float32"),
     "batch": B, "seq": S, "heads": H,
     "q": [...], "k": [...]   B*S*H*d' floats, row-major (B, S, H, d'),
     "v": [...]               B*S*H*dv floats, row-major (B, S, H, dv),
     "feature_map": "taylor" | "elu1" | "relu" | "identity" (default taylor),
     "causal": true | false (default true),
     "normalize": "sum" | "none" (default "sum"; true/false accepted),
     "lengths": [B ints in 0..S] (optional; default S: every key real),
     "dy": [...] (optional, B*S*H*dv)}

d' and dv are read from the lengths of q and v. Its result:

    {"y": [...]            the naive form, B*S*H*dv floats, row-major
                           (B, S, H, dv): heads concatenated, before wo,
     "y_recurrent": [...]  the recurrent form, same layout,
     "max_diff": float     max |y - y_recurrent|,
     "dq", "dk", "dv"      with "dy": the gradients of sum(y * dy) (naive
                           form) by torch.autograd, laid out as q, k, v}

Floats are printed with Python's repr, so float64 values round-trip exactly.
"""

import json
import math
import os
import sys

import torch
import torch.nn.functional as F

DTYPES = {"float64": torch.float64, "float32": torch.float32}
FEATURE_MAPS = ("taylor", "elu1", "relu", "identity")
EPS = 1e-12


def phi(name, x):
    """The feature map over the last axis of x (..., d')."""
    if name == "elu1":
        return F.elu(x) + 1
    if name == "relu":
        return F.relu(x)
    if name == "identity":
        return x
    if name == "taylor":
        d = x.shape[-1]
        outer = torch.einsum("...a,...b->...ab", x, x).reshape(*x.shape[:-1], d * d)
        return torch.cat((torch.ones_like(x[..., :1]), x / d ** 0.25, outer / (math.sqrt(2) * math.sqrt(d))), dim=-1)
    raise ValueError(f"unknown feature_map {name!r}: want one of {', '.join(FEATURE_MAPS)}")


def visible(b, s, causal, lengths):
    """(B, S, S) bool: key j visible to query i of row b."""
    j = torch.arange(s)
    vis = (j.view(1, 1, s) < lengths.view(b, 1, 1)).expand(b, s, s)
    if causal:
        vis = vis & (j.view(1, 1, s) <= j.view(1, s, 1))
    return vis


def naive(q, k, v, fmap, causal, normalize, lengths):
    """q, k (B, H, S, d'), v (B, H, S, dv), lengths (B) -> (B, H, S, dv):
    the masked O(S^2) form."""
    b, _, s, _ = q.shape
    vis = visible(b, s, causal, lengths).unsqueeze(1)  # (B, 1, S, S)
    a = (phi(fmap, q) @ phi(fmap, k).transpose(-2, -1)) * vis.to(q.dtype)
    y = a @ v
    if normalize:
        y = y / (a.sum(-1, keepdim=True) + EPS)
    return y * vis.any(-1, keepdim=True).to(q.dtype)


def recurrent(q, k, v, fmap, causal, normalize, lengths):
    """The same from a state per head: S (F, dv) and z (F), updated token by
    token with the visible keys; causal queries read the state after their
    own token's update, bidirectional ones the state after every key."""
    b, h, s, dv = v.shape
    pq, pk = phi(fmap, q), phi(fmap, k)  # (B, H, S, F)
    f = pq.shape[-1]
    state = torch.zeros(b, h, f, dv, dtype=q.dtype)
    z = torch.zeros(b, h, f, dtype=q.dtype)
    seen = torch.zeros(b, dtype=torch.int64)  # visible keys in the state, per row
    real = lengths.view(b, 1, 1, 1).to(torch.int64)

    def read(i):
        out = torch.einsum("bhf,bhfd->bhd", pq[:, :, i], state)
        if normalize:
            out = out / (torch.einsum("bhf,bhf->bh", pq[:, :, i], z).unsqueeze(-1) + EPS)
        return out * (seen > 0).view(b, 1, 1).to(q.dtype)

    outs = []
    for j in range(s):
        keep = (j < real).to(q.dtype)  # (B, 1, 1, 1): does key j update the state?
        state = state + keep * torch.einsum("bhf,bhd->bhfd", pk[:, :, j], v[:, :, j])
        z = z + keep.view(b, 1, 1) * pk[:, :, j]
        seen = seen + (j < lengths).to(torch.int64)
        if causal:
            outs.append(read(j))
    if not causal:
        outs = [read(i) for i in range(s)]
    return torch.stack(outs, dim=2)


def norm_flag(x):
    if x is None or x is True or x == "sum":
        return True
    if x is False or x == "none":
        return False
    raise ValueError(f"normalize {x!r}: want \"sum\" or \"none\"")


def run(case):
    if case.get("op", "linear_attention") != "linear_attention":
        raise ValueError(f"unknown op {case.get('op')!r}")
    dt = DTYPES[case.get("dtype", "float64")]
    b, s, h = case["batch"], case["seq"], case["heads"]
    nq, nv = len(case["q"]), len(case["v"])
    if nq % (b * s * h) or nv % (b * s * h) or len(case["k"]) != nq or nq == 0 or nv == 0:
        raise ValueError(f"q, k ({nq}, {len(case['k'])} floats) and v ({nv}) are not (B={b}, S={s}, H={h}, n)")
    fd, dv = nq // (b * s * h), nv // (b * s * h)
    heads = lambda x, n: torch.tensor(x, dtype=dt).view(b, s, h, n).transpose(1, 2).contiguous().requires_grad_(True)
    q, k, v = heads(case["q"], fd), heads(case["k"], fd), heads(case["v"], dv)
    lengths = torch.tensor(case.get("lengths") or [s] * b, dtype=torch.int64)
    if lengths.shape != (b,) or (lengths < 0).any() or (lengths > s).any():
        raise ValueError(f"lengths {case.get('lengths')}: want {b} ints in [0, {s}]")
    fmap = case.get("feature_map") or "taylor"
    causal = case.get("causal", True)
    normalize = norm_flag(case.get("normalize"))
    y = naive(q, k, v, fmap, causal, normalize, lengths)
    with torch.no_grad():
        yr = recurrent(q, k, v, fmap, causal, normalize, lengths)
    flat = lambda t: t.detach().transpose(1, 2).reshape(-1).tolist()  # (B, H, S, n) -> (B, S, H, n)
    out = {"y": flat(y), "y_recurrent": flat(yr), "max_diff": (y - yr).abs().max().item()}
    if case.get("dy") is not None:
        dy = torch.tensor(case["dy"], dtype=dt).view(b, s, h, dv).transpose(1, 2)
        (y * dy).sum().backward()
        out["dq"], out["dk"], out["dv"] = flat(q.grad), flat(k.grad), flat(v.grad)
    return out


# ----------------------------------------------------------------------------
# self-test


def by_definition(q, k, v, fmap, causal, normalize, lengths):
    """A third form, scalar loops over the definition; the Taylor kernel as
    1 + s + s^2/2 rather than through phi. Small inputs only."""
    b, h, s, dv = v.shape
    d = q.shape[-1]
    out = torch.zeros(b, h, s, dv, dtype=torch.float64)
    for r in range(b):
        for hh in range(h):
            for i in range(s):
                keys = [j for j in range(s) if j < lengths[r] and (not causal or j <= i)]
                if not keys:
                    continue
                num, den = torch.zeros(dv, dtype=torch.float64), 0.0
                for j in keys:
                    if fmap == "taylor":
                        x = float(q[r, hh, i] @ k[r, hh, j]) / math.sqrt(d)
                        w = 1 + x + x * x / 2
                    else:
                        w = float(phi(fmap, q[r, hh, i]) @ phi(fmap, k[r, hh, j]))
                    num += w * v[r, hh, j]
                    den += w
                out[r, hh, i] = num / (den + EPS) if normalize else num
    return out


def scale(y):
    return max(1.0, y.abs().max().item())


def self_test():
    torch.set_num_threads(1)
    failures = []
    lines = []

    def check(name, diff, tol):
        ok = diff <= tol
        lines.append(f"{'ok  ' if ok else 'FAIL'} {name}: {diff:.3g} (tol {tol:.0e})")
        if not ok:
            failures.append(name)

    gen = torch.Generator().manual_seed(24)
    b, h, s, fd, dv = 3, 2, 11, 3, 4
    lengths = torch.tensor([s, 6, 0])
    rnd = lambda *shape: torch.randn(*shape, generator=gen, dtype=torch.float64)

    # The Taylor map's kernel.
    x, y = rnd(50, fd), rnd(50, fd)
    sc = (x * y).sum(-1) / math.sqrt(fd)
    check("taylor: phi(q).phi(k) = 1 + s + s^2/2", ((phi("taylor", x) * phi("taylor", y)).sum(-1) - (1 + sc + sc * sc / 2)).abs().max().item(), 1e-12)
    check("taylor: phi has 1 + d' + d'^2 features", 0.0 if phi("taylor", x).shape[-1] == 1 + fd + fd * fd else 1.0, 0)

    # The two forms (and a third, by the definition), every map, with and
    # without normalisation, causal and bidirectional, float64; gradients
    # of the two forms by autograd. Differences are relative to the
    # output's largest |value| when it exceeds 1 (identity and relu with
    # "sum" divide by sums that can be small).
    for fmap in FEATURE_MAPS:
        for normalize in (True, False):
            for causal in (True, False):
                q, k, v = (t.requires_grad_(True) for t in (rnd(b, h, s, fd), rnd(b, h, s, fd), rnd(b, h, s, dv)))
                if fmap == "identity" and normalize:
                    # keep the denominators away from 0: q.k > 0 on the whole
                    q, k = (t.detach().abs().requires_grad_(True) for t in (q, k))
                yn = naive(q, k, v, fmap, causal, normalize, lengths)
                yr = recurrent(q, k, v, fmap, causal, normalize, lengths)
                yd = by_definition(q.detach(), k.detach(), v.detach(), fmap, causal, normalize, lengths)
                name = f"{fmap}/{'sum' if normalize else 'none'}/{'causal' if causal else 'bidirectional'}"
                check(name + ": naive vs recurrent", (yn - yr).abs().max().item() / scale(yn), 1e-12)
                check(name + ": naive vs definition", (yn - yd).abs().max().item() / scale(yn), 1e-12)
                zero = yn[2].abs().max().item() + yr[2].abs().max().item()  # the row of length 0
                check(name + ": length-0 row is 0", zero, 0)
                dy = rnd(b, h, s, dv)
                gn = torch.autograd.grad((yn * dy).sum(), (q, k, v))
                gr = torch.autograd.grad((yr * dy).sum(), (q, k, v))
                check(name + ": gradients naive vs recurrent", max((a - c).abs().max().item() / scale(a) for a, c in zip(gn, gr)), 1e-12)

    # The CLI path (run) on one case: layout (B, S, H, n) and both forms.
    case = {"op": "linear_attention", "dtype": "float64", "batch": 2, "seq": 5, "heads": 2,
            "q": rnd(2 * 5 * 2 * 3).tolist(), "k": rnd(2 * 5 * 2 * 3).tolist(), "v": rnd(2 * 5 * 2 * 4).tolist(),
            "feature_map": "elu1", "causal": True, "normalize": "sum", "lengths": [5, 3], "dy": rnd(2 * 5 * 2 * 4).tolist()}
    res = run(case)
    qh = torch.tensor(case["q"], dtype=torch.float64).view(2, 5, 2, 3).transpose(1, 2)
    kh = torch.tensor(case["k"], dtype=torch.float64).view(2, 5, 2, 3).transpose(1, 2)
    vh = torch.tensor(case["v"], dtype=torch.float64).view(2, 5, 2, 4).transpose(1, 2)
    want = by_definition(qh, kh, vh, "elu1", True, True, [5, 3]).transpose(1, 2).reshape(-1)
    check("run(): y in (B, S, H, dv) layout", (torch.tensor(res["y"], dtype=torch.float64) - want).abs().max().item(), 1e-12)
    check("run(): max_diff", res["max_diff"], 1e-12)

    lines += torchref_checks(check, rnd)
    print("\n".join(lines))
    print(f"linear_ref self-test: {len(lines) - len(failures)} checks passed, {len(failures)} failed (torch {torch.__version__})")
    return 1 if failures else 0


def torchref_checks(check, rnd):
    """torchref.py's model with model.layer_kinds: its LinearAttention
    equals naive() on its own projections; a window:W block equals a softmax
    block with model.window W; kinds cycle over the blocks; a checkpoint
    written by hand loads by qkv's names and gives the in-process logits,
    decoder-only and encoder-decoder."""
    import subprocess
    import tempfile

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    import torchref as tr

    base = {"vocab": 7, "max_len": 9, "dim": 8, "heads": 2, "layers": 4, "hidden": 16,
            "activation": "gelu", "positions": "learned", "bias": True}
    lengths = torch.tensor([9, 4, 0])

    # LinearAttention = naive(), per feature map and normalisation, in a
    # decoder (causal) and an encoder (bidirectional) mask.
    for fmap in FEATURE_MAPS:
        for norm in ("sum", "none"):
            m = dict(base, feature_map=fmap, linear_norm=norm, feature_dim=3)
            torch.manual_seed(1)
            att = tr.LinearAttention(m).double()
            x = rnd(3, 9, 8)
            for causal in (True, False):
                allow = visible(3, 9, causal, lengths)
                with torch.no_grad():
                    got = att(x, allow)
                    sp = lambda t, n: t.view(3, 9, 2, n).transpose(1, 2)
                    y = naive(sp(att.q(x), 3), sp(att.k(x), 3), sp(att.v(x), 4), fmap, causal, norm == "sum", lengths)
                    want = att.o(y.transpose(1, 2).reshape(3, 9, 8))
                check(f"torchref LinearAttention {fmap}/{norm}/{'causal' if causal else 'bidirectional'} = naive", (got - want).abs().max().item() / scale(want), 1e-12)

    # Cycling and the window block.
    m = dict(base, layers=5, layer_kinds="linear, window:2,softmax", window=4)
    kinds = tr.layer_kinds(m)
    check("layer_kinds cycles", 0.0 if kinds == [("linear", None), ("window", 2), ("softmax", None), ("linear", None), ("window", 2)] else 1.0, 0)
    dec = tr.Decoder(m)
    types = [type(blk.attn).__name__ + str(getattr(blk.attn, "window", "")) for blk in dec.blocks]
    check("blocks follow layer_kinds (window:2 replaces window 4)", 0.0 if types == ["LinearAttention", "Attention2", "Attention4", "LinearAttention", "Attention2"] else 1.0, 0)
    for bad in ("softmax,,linear", "window:0", "window:x", "lin"):
        try:
            tr.layer_kinds(dict(base, layer_kinds=bad))
            check(f"layer_kinds {bad!r} refused", 1.0, 0)
        except ValueError:
            check(f"layer_kinds {bad!r} refused", 0.0, 0)
    torch.manual_seed(2)
    w2 = tr.Attention(8, 2, True, 0.0, "", dict(base, window=2), "decoder").double()
    k2 = tr.self_attention(dict(base, window=5), "decoder", ("window", 2)).double()
    k2.load_state_dict(w2.state_dict())
    x = rnd(3, 9, 8)
    allow = visible(3, 9, True, lengths)
    with torch.no_grad():
        check("window:2 block = softmax block with model.window 2", (w2(x, allow) - k2(x, allow)).abs().max().item(), 0)

    # Checkpoints written by hand, read by `torchref.py logits`.
    def write_checkpoint(d, cfg, model):
        names = tr.encdec_name_map(cfg["model"]) if tr.is_encdec(cfg) else tr.name_map(cfg["model"])
        state = model.state_dict()
        header, blobs, off = {"__metadata__": {"format": "qkv"}}, [], 0
        for qn, (tn, transpose) in sorted(names.items()):
            t = state[tn].t() if transpose else state[tn]
            raw = t.contiguous().numpy().astype("<f8").tobytes()
            header[qn] = {"dtype": "F64", "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
            blobs.append(raw)
            off += len(raw)
        hb = json.dumps(header).encode()
        with open(os.path.join(d, "model.safetensors"), "wb") as f:
            f.write(len(hb).to_bytes(8, "little") + hb + b"".join(blobs))
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)

    gen = torch.Generator().manual_seed(5)
    ids = lambda: torch.randint(0, 7, (3, 9), generator=gen)
    for label, arch, extra in (
        ("decoder, linear/window/softmax, taylor, feature_dim 3", "decoder",
         {"layer_kinds": "linear,window:2,softmax", "feature_dim": 3}),
        ("decoder, linear only, elu1, none, no bias, sinusoidal, rope-free variants on", "decoder",
         {"layer_kinds": "linear", "feature_map": "elu1", "linear_norm": "none", "bias": False,
          "positions": "sinusoidal", "sinks": True, "qk_norm": True, "kv_heads": 1, "head_temperature": True}),
        ("decoder, softmax,linear with rope + sinks + qk_norm + gqa", "decoder",
         {"layer_kinds": "softmax,linear", "positions": "rope", "sinks": True, "qk_norm": True, "kv_heads": 1,
          "feature_map": "relu"}),
        ("encdec, linear,window:3, taylor", "encdec", {"layer_kinds": "linear,window:3", "layers": 3}),
        ("encdec, causal encoder, identity, alibi", "encdec",
         {"layer_kinds": "window:2,linear", "causal_encoder": True, "feature_map": "identity", "positions": "alibi"}),
    ):
        cfg = {"dtype": "float64", "arch": arch, "model": dict(base, **extra)}
        torch.manual_seed(3)
        model, _ = tr.build(cfg)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.3 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
        model.eval()
        with tempfile.TemporaryDirectory() as d:
            write_checkpoint(d, cfg, model)
            if arch == "encdec":
                src, tgt = ids(), ids()
                inp = {"src": src.tolist(), "src_lengths": [9, 5, 0], "tgt": tgt.tolist(), "tgt_lengths": [9, 0, 6]}
                with torch.no_grad():
                    want = model(src, torch.tensor([9, 5, 0]), tgt, torch.tensor([9, 0, 6]))
            else:
                x = ids()
                inp = {"ids": x.tolist(), "lengths": [9, 4, 0]}
                with torch.no_grad():
                    want = model(x, torch.tensor([9, 4, 0]))
            with open(os.path.join(d, "batch.json"), "w") as f:
                json.dump(inp, f)
            p = subprocess.run([sys.executable, os.path.join(here, "torchref.py"), "logits", "--checkpoint", d,
                                "--input", os.path.join(d, "batch.json")], capture_output=True, text=True)
            if p.returncode != 0:
                check(f"torchref.py logits, {label}: {p.stderr.strip()}", 1.0, 0)
                continue
            got = torch.tensor(json.loads(p.stdout)["logits"], dtype=torch.float64)
            check(f"torchref.py logits, {label}: checkpoint = in-process", (got - want).abs().max().item(), 0)
    return []


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if argv[1:]:
        print("usage: linear_ref.py < request.json | linear_ref.py --self-test", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    req = json.load(sys.stdin)
    results = [run(c) for c in req["cases"]]
    json.dump({"torch": torch.__version__, "results": results}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
