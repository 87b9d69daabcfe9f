#!/usr/bin/python3
"""
nanoGPT's character-level training, in one file, as the PyTorch reference for
`qkv train --task chars --preset nanogpt-cpu`.

It follows karpathy/nanoGPT (commit 3adf61e, 2025-11-12):
  * data/shakespeare_char/prepare.py: vocabulary = sorted(set(text)) over the
    whole text, first int(0.9 * n) characters train, the rest validation;
  * model.py: GPT with pre-LN blocks, LayerNorm without bias (bias=False),
    exact GELU, tied wte / lm_head, N(0, 0.02) init with the residual
    projections (c_proj) at N(0, 0.02 / sqrt(2 * n_layer));
  * train.py: get_batch, estimate_loss, get_lr (warmup then cosine),
    configure_optimizers (AdamW, weight decay on params with dim >= 2),
    grad clipping, and the same order of random draws (the next batch is
    fetched right after the forward pass), so for a seed the losses are the
    ones nanoGPT's train.py prints with the same data and settings.
The defaults are nanoGPT's CPU recipe for shakespeare_char (its README):
block 64, batch 12, 4 layers, 4 heads, 128 wide, dropout 0, 2000 iterations.

Two differences from nanoGPT's train.py, both about what is run, not how:
  * it stops after `--iters` optimizer steps, with an evaluation after the last
    one (nanoGPT evaluates at iter 2000 and then takes one more step, 2001 in
    all, whose result it never reports);
  * it adds a FIXED validation loss that qkv computes the same way (see
    fixed_windows below), beside nanoGPT's random-batch estimate.

The corpus is the same as qkv's: by default the Go files of net/http in
$(go env GOROOT), without the *_test.go ones, sorted by name, concatenated
(bytes), decoded as UTF-8.

Usage (see README.md):
  /usr/bin/python3 tools/nanogpt/nanogpt_chars.py --threads 1 --out-json r.json
  /usr/bin/python3 tools/nanogpt/nanogpt_chars.py --time-steps 50
  /usr/bin/python3 tools/nanogpt/nanogpt_chars.py --check
"""

import argparse
import ctypes
import glob
import hashlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

# tools/torchref's module chooses OpenBLAS's kernels for this CPU before
# torch loads OpenBLAS (torchref.openblas_core_for_this_cpu): on a CPU
# OpenBLAS does not know it takes SSE3 kernels, 4x slower.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "torchref"))
import torchref  # noqa: E402,F401

import torch  # noqa: E402
import torch.nn as nn
from torch.nn import functional as F

NANOGPT_COMMIT = '3adf61e154c3fe3fca428ad6bc3818b27a3b8291'
T_START = time.perf_counter()


class CorpusError(Exception):
    """ a corpus that cannot be used; main() prints it and exits with status 2 """


def log(msg):
    print(msg, file=sys.stderr, flush=True)

# -----------------------------------------------------------------------------
# corpus: which files, their bytes, the text


def default_files():
    """ $(go env GOROOT)/src/net/http/*.go without *_test.go, sorted by name """
    try:
        goroot = subprocess.run(['go', 'env', 'GOROOT'], check=True, capture_output=True,
                                text=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError) as e:
        raise CorpusError(f"no --data given and `go env GOROOT` failed ({e}); "
                          "pass --data FILE|DIR|GLOB")
    pattern = os.path.join(goroot, 'src', 'net', 'http', '*.go')
    files = sorted(f for f in glob.glob(pattern)
                   if not f.endswith('_test.go') and os.path.isfile(f))
    if not files:
        raise CorpusError(f"no --data given and {pattern} (without *_test.go) matches no file")
    return files


def data_files(path):
    """ --data: a file, a directory (its regular files directly inside, sorted by
    name) or a glob (its regular files, sorted); None = the default corpus """
    if path is None:
        return default_files()
    if any(c in path for c in '*?['):
        files = sorted(f for f in glob.glob(path) if os.path.isfile(f))
        if not files:
            raise CorpusError(f"--data {path}: the pattern matches no regular file")
        return files
    if not os.path.exists(path):
        raise CorpusError(f"--data {path}: no such file or directory")
    if os.path.isdir(path):
        files = sorted(os.path.join(path, name) for name in os.listdir(path)
                       if os.path.isfile(os.path.join(path, name)))
        if not files:
            raise CorpusError(f"--data {path}: the directory has no regular file directly inside")
        return files
    if not os.path.isfile(path):
        raise CorpusError(f"--data {path}: not a regular file or a directory")
    return [path]


def read_corpus(files):
    """ the files' bytes concatenated, and their UTF-8 decoding """
    parts = []
    for f in files:
        with open(f, 'rb') as fh:
            parts.append(fh.read())
    raw = b''.join(parts)
    if not raw:
        raise CorpusError(f"the corpus is empty ({len(files)} file(s), 0 bytes: {files[0]} ...)")
    try:
        text = raw.decode('utf-8')  # strict: invalid bytes and surrogates are errors
    except UnicodeDecodeError as e:
        # name the file holding the offending byte
        off, name = e.start, files[-1]
        for f, p in zip(files, parts):
            if off < len(p):
                name = f
                break
            off -= len(p)
        raise CorpusError(f"the corpus is not valid UTF-8: {name}, byte {off}: {e.reason}")
    return raw, text


def prepare(text, block_size):
    """ nanoGPT's prepare.py: the vocabulary over the whole text, a 90/10 split """
    chars = sorted(list(set(text)))
    stoi = {ch: i for i, ch in enumerate(chars)}
    n = len(text)
    if n < block_size + 2:
        raise CorpusError(f"the corpus has {n} characters; block_size {block_size} needs at "
                          f"least {block_size + 2}")
    n_train = int(n * 0.9)
    train_text, val_text = text[:n_train], text[n_train:]
    for name, part in (('training', train_text), ('validation', val_text)):
        if len(part) < block_size + 1:
            raise CorpusError(f"the {name} part ({'first 90%' if name == 'training' else 'last 10%'}"
                              f" of {n} characters) has {len(part)} characters; block_size "
                              f"{block_size} needs at least {block_size + 1}: use a longer corpus "
                              "or a smaller --block-size")
    train = torch.tensor([stoi[c] for c in train_text], dtype=torch.long)  # (n_train,)
    val = torch.tensor([stoi[c] for c in val_text], dtype=torch.long)      # (n - n_train,)
    return chars, train, val

# -----------------------------------------------------------------------------
# the model: nanoGPT's model.py, without from_pretrained and generate


class LayerNorm(nn.Module):
    """ LayerNorm with an optional bias (nn.LayerNorm has no bias=False in torch 1.13) """

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)  # q, k, v of all heads
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        # as nanoGPT: PyTorch's fused attention when there is one (>= 2.0), else the written-out one
        self.flash = hasattr(torch.nn.functional, 'scaled_dot_product_attention')
        if not self.flash:
            self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                                 .view(1, 1, config.block_size, config.block_size))

    def forward(self, x):
        B, T, C = x.size()  # batch, time, n_embd
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)                  # 3 x (B, T, C)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)     # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)     # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)     # (B, nh, T, hs)
        if self.flash:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                               dropout_p=self.dropout if self.training else 0,
                                               is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))  # (B, nh, T, T)
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float('-inf'))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v                                                      # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)                     # heads side by side
        return self.resid_dropout(self.c_proj(y))                            # (B, T, C)


class MLP(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()  # exact (erf) GELU
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):  # (B, T, C) -> (B, T, 4C) -> (B, T, C)
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):  # (B, T, C), pre-LN residual
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


@dataclass
class GPTConfig:
    block_size: int = 64
    vocab_size: int = 104
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0
    bias: bool = False


class GPT(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.config = config
        # the modules are built in nanoGPT's order: the constructors draw random
        # numbers, so the order decides the weights a seed gives
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.dropout),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():  # GPT-2's scaled init of the residual projections
            if pn.endswith('c_proj.weight'):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def get_num_params(self, non_embedding=True):
        """ nanoGPT's count: the tied wte/lm_head once; non_embedding subtracts wpe only """
        n_params = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n_params -= self.transformer.wpe.weight.numel()
        return n_params

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        b, t = idx.size()  # (B, T) token ids
        assert t <= self.config.block_size
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)  # (T,)
        tok_emb = self.transformer.wte(idx)  # (B, T, C)
        pos_emb = self.transformer.wpe(pos)  # (T, C)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)         # (B, T, C)
        logits = self.lm_head(x)             # (B, T, vocab)
        loss = None
        if targets is not None:              # mean cross-entropy (nats) over B*T predictions
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas, eps):
        """ nanoGPT's rule: decay every parameter with dim >= 2 (matmul weights and
        embeddings), not the others (LayerNorm gains, biases) """
        param_dict = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
        decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
        nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
        optim_groups = [
            {'params': decay_params, 'weight_decay': weight_decay},
            {'params': nodecay_params, 'weight_decay': 0.0},
        ]
        return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, eps=eps)

# -----------------------------------------------------------------------------
# the schedule, the batches, the two evaluations


def get_lr(it, a):
    """ nanoGPT's get_lr (train.py at commit 3adf61e) """
    if it < a.warmup_iters:  # 1) linear warmup
        return a.lr * (it + 1) / (a.warmup_iters + 1)
    if it > a.lr_decay_iters:  # 2) after the decay, min_lr
        return a.min_lr
    decay_ratio = (it - a.warmup_iters) / (a.lr_decay_iters - a.warmup_iters)  # 3) cosine
    assert 0 <= decay_ratio <= 1
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))  # 1 .. 0
    return a.min_lr + coeff * (a.lr - a.min_lr)


def get_batch(data, block_size, batch_size):
    """ nanoGPT's get_batch: batch_size random windows of the split """
    ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([data[i:i + block_size] for i in ix])          # (B, T) inputs
    y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])  # (B, T) next characters
    return x, y


@torch.no_grad()
def estimate_loss(model, splits, a):
    """ nanoGPT's estimate_loss: the mean loss of eval_iters random batches per split """
    out = {}
    model.eval()
    for split in ['train', 'val']:
        losses = torch.zeros(a.eval_iters)
        for k in range(a.eval_iters):
            X, Y = get_batch(splits[split], a.block_size, a.batch_size)
            _, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean().item()
    model.train()
    return out


def fixed_windows(n_val, block_size, n):
    """ start offsets of the fixed validation windows (block_size + 1 characters
    each), spread evenly over the validation text, in integer arithmetic:
    s_k = (k * (n_val - block_size - 1)) // (n - 1), k = 0 .. n-1; s_0 = 0 for n = 1 """
    if n == 1:
        return [0]
    last = n_val - block_size - 1
    return [(k * last) // (n - 1) for k in range(n)]


@torch.no_grad()
def fixed_val_loss(model, val, a, chunk=120):
    """ the mean cross-entropy (nats) over all N * block_size predictions of the
    fixed windows: inputs w[0:T], targets w[1:T+1]; no random numbers drawn """
    starts = fixed_windows(len(val), a.block_size, a.fixed_windows)
    model.eval()
    total = 0.0
    for c in range(0, len(starts), chunk):
        w = torch.stack([val[s:s + a.block_size + 1] for s in starts[c:c + chunk]])  # (n, T+1)
        logits, _ = model(w[:, :-1])                                                # (n, T, vocab)
        total += F.cross_entropy(logits.reshape(-1, logits.size(-1)), w[:, 1:].reshape(-1),
                                 reduction='sum').double().item()
    model.train()
    return total / (len(starts) * a.block_size)

# -----------------------------------------------------------------------------
# threads and BLAS


def openblas():
    """ the OpenBLAS this process has loaded, or None """
    try:
        with open('/proc/self/maps') as f:
            paths = {line.split()[-1] for line in f if 'blas' in line.lower() and '/' in line}
    except OSError:
        return None
    for p in sorted(paths):
        if 'openblas' in os.path.basename(os.path.realpath(p)):
            try:
                lib = ctypes.CDLL(p)
                lib.openblas_get_config.restype = ctypes.c_char_p
                return lib
            except (OSError, AttributeError):
                pass
    return None


def blas_info():
    """ which BLAS libraries are mapped into this process, and OpenBLAS's own description """
    torch.ones(8, 8) @ torch.ones(8, 8)  # make sure torch's BLAS is loaded
    with open('/proc/self/maps') as f:
        libs = sorted({os.path.realpath(line.split()[-1]) for line in f
                       if ('blas' in line.lower() or 'lapack' in line.lower()) and '/' in line})
    desc = 'BLAS_INFO=' + next((s.split('=')[1].rstrip(',') for s in torch.__config__.show().split()
                                if s.startswith('BLAS_INFO=')), '?')
    lib = openblas()
    if lib is not None:
        desc = (f"{lib.openblas_get_config().decode()} "
                f"(threads {lib.openblas_get_num_threads()}); torch {desc}")
    return desc, libs


def set_threads(a):
    """ torch's intra-op threads (OpenMP), and OpenBLAS's own thread pool, which
    torch.set_num_threads does not touch (Debian's torch calls libblas.so.3) """
    torch.set_num_threads(a.threads)
    blas_threads = a.blas_threads if a.blas_threads > 0 else a.threads
    lib = openblas()
    if lib is not None and a.blas_threads >= 0:
        lib.openblas_set_num_threads(blas_threads)

# -----------------------------------------------------------------------------
# training


def build(a, vocab_size):
    torch.manual_seed(a.seed)  # before the model: its init draws from this generator
    config = GPTConfig(block_size=a.block_size, vocab_size=vocab_size, n_layer=a.n_layer,
                       n_head=a.n_head, n_embd=a.n_embd, dropout=a.dropout, bias=a.bias)
    model = GPT(config)
    optimizer = model.configure_optimizers(a.weight_decay, a.lr, (a.beta1, a.beta2), a.eps)
    return model, optimizer


def train_step(model, optimizer, X, Y, train, a):
    """ one nanoGPT iteration: forward, fetch the next batch, backward, clip, step """
    _, loss = model(X, Y)
    X, Y = get_batch(train, a.block_size, a.batch_size)
    loss.backward()
    if a.grad_clip != 0.0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item(), X, Y


def train(a, chars, train_data, val_data, quiet=False):
    """ nanoGPT's training loop for a.iters steps, evaluating every
    a.eval_interval iterations and after the last step """
    say = (lambda m: None) if quiet else log
    model, optimizer = build(a, len(chars))
    splits = {'train': train_data, 'val': val_data}
    curve, step_ms = [], []
    train_s = eval_s = 0.0
    wall0 = time.perf_counter()
    X, Y = get_batch(train_data, a.block_size, a.batch_size)  # the very first batch
    it = 0
    while True:
        lr = get_lr(it, a) if a.decay_lr else a.lr
        for param_group in optimizer.param_groups:
            param_group['lr'] = lr
        if it % a.eval_interval == 0 or it == a.iters:
            e0 = time.perf_counter()
            losses = estimate_loss(model, splits, a)
            fixed = fixed_val_loss(model, val_data, a)
            eval_s += time.perf_counter() - e0
            curve.append({'iter': it, 'train': losses['train'], 'val': losses['val'],
                          'val_fixed': fixed})
            say(f"step {it}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}, "
                f"fixed val loss {fixed:.4f}")
        if it == a.iters:
            break
        t0 = time.perf_counter()
        lossf, X, Y = train_step(model, optimizer, X, Y, train_data, a)
        dt = time.perf_counter() - t0
        train_s += dt
        step_ms.append(dt * 1000)
        if it % a.log_interval == 0:
            say(f"iter {it}: loss {lossf:.4f}, time {dt * 1000:.2f}ms, lr {lr:.3e}")
        it += 1
    wall_s = time.perf_counter() - wall0
    return model, curve, step_ms, train_s, eval_s, wall_s


def timing(step_ms, skip=10):
    """ median and mean ms per step, without the first `skip` steps (all if too few) """
    s = step_ms[skip:] if len(step_ms) > skip else step_ms
    return statistics.median(s), statistics.fmean(s)

# -----------------------------------------------------------------------------
# the three modes: full run, --time-steps, --check


def run(a):
    files = data_files(a.data)
    raw, text = read_corpus(files)
    chars, train_data, val_data = prepare(text, a.block_size)
    set_threads(a)
    blas, blas_libs = blas_info()
    log(f"corpus: {len(files)} file(s), {len(raw):,} bytes, {len(text):,} characters, "
        f"vocab {len(chars)}, train {len(train_data):,}, val {len(val_data):,}")
    log(f"threads: torch {torch.get_num_threads()}; BLAS: {blas}")
    if a.time_steps:
        model, optimizer = build(a, len(chars))
        X, Y = get_batch(train_data, a.block_size, a.batch_size)
        step_ms = []
        for it in range(a.time_steps):
            for g in optimizer.param_groups:
                g['lr'] = get_lr(it, a)
            t0 = time.perf_counter()
            _, X, Y = train_step(model, optimizer, X, Y, train_data, a)
            step_ms.append((time.perf_counter() - t0) * 1000)
        out = {'ms_per_step_median': statistics.median(step_ms),
               'ms_per_step_mean': statistics.fmean(step_ms), 'steps': a.time_steps,
               'threads': torch.get_num_threads(), 'blas': blas, 'torch': torch.__version__}
        emit(out, a)
        return
    model, curve, step_ms, train_s, eval_s, wall_s = train(a, chars, train_data, val_data)
    med, mean = timing(step_ms)
    last = curve[-1]
    out = {
        'params': model.get_num_params(non_embedding=True),
        'params_total': model.get_num_params(non_embedding=False),
        'vocab_size': len(chars),
        'n_bytes': len(raw),
        'n_chars': len(text),
        'n_train': len(train_data),
        'n_val': len(val_data),
        'val_chars_missing_from_train': len(set(text[len(train_data):]) - set(text[:len(train_data)])),
        'sha256': hashlib.sha256(raw).hexdigest(),
        'files': len(files),
        'val_loss_fixed': last['val_fixed'],
        'val_bpc_fixed': last['val_fixed'] / math.log(2),
        'fixed_windows': a.fixed_windows,
        'val_loss_est': last['val'],
        'train_loss_est': last['train'],
        'ms_per_step_median': med,
        'ms_per_step_mean': mean,
        'train_seconds': train_s,
        'eval_seconds': eval_s,
        'wall_seconds': wall_s - eval_s,  # the training loop without its evaluations
        'wall_seconds_with_eval': wall_s,  # the training loop with them
        'process_seconds': time.perf_counter() - T_START,
        'iters': a.iters,
        'seed': a.seed,
        'threads': torch.get_num_threads(),
        'blas': blas,
        'blas_libs': blas_libs,
        'torch': torch.__version__,
        'python': sys.version.split()[0],
        'nanogpt_commit': NANOGPT_COMMIT,
        'config': {k: getattr(a, k) for k in CONFIG_KEYS},
        'curve': curve,
    }
    emit(out, a)


def emit(out, a):
    s = json.dumps(out, indent=1)
    print(s)
    if a.out_json:
        with open(a.out_json, 'w') as f:
            f.write(s + '\n')


def check(a):
    """ a fast self-test: the error messages, 3 iterations through the whole
    path (finite losses), then 50 steps on a repetitive text (the loss must fall) """
    t0 = time.perf_counter()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as d:
        cases = {}
        cases['missing'] = os.path.join(d, 'nope')
        os.mkdir(os.path.join(d, 'emptydir'))
        cases['emptydir'] = os.path.join(d, 'emptydir')
        open(os.path.join(d, 'empty.txt'), 'wb').close()
        cases['empty'] = os.path.join(d, 'empty.txt')
        with open(os.path.join(d, 'bad.txt'), 'wb') as f:
            f.write(b'abc\xff\xfedef')
        cases['utf8'] = os.path.join(d, 'bad.txt')
        with open(os.path.join(d, 'short.txt'), 'w') as f:
            f.write('x' * 20)
        cases['short'] = os.path.join(d, 'short.txt')
        with open(os.path.join(d, 'tiny.txt'), 'w') as f:
            f.write('x' * 17)
        cases['tiny'] = os.path.join(d, 'tiny.txt')
        cases['noglob'] = os.path.join(d, '*.nothing')
        for name, path in cases.items():
            try:
                prepare(read_corpus(data_files(path))[1], 16)
            except CorpusError as e:
                log(f"check: {name}: {e}")
            else:
                raise AssertionError(f"check: {name} ({path}) was accepted")
    assert fixed_windows(1000, 64, 2400)[-1] == 1000 - 65 and fixed_windows(1000, 64, 1) == [0]
    text = 'the quick brown fox jumps over the lazy dog. ' * 200
    small = dict(block_size=16, batch_size=8, n_layer=2, n_head=2, n_embd=32,
                 eval_iters=4, eval_interval=1000, fixed_windows=40, warmup_iters=5,
                 lr_decay_iters=50, log_interval=1000)
    b = argparse.Namespace(**{**vars(a), **small})
    chars, tr, va = prepare(text, b.block_size)
    b.iters = 3
    _, curve, steps, *_ = train(b, chars, tr, va, quiet=True)
    assert all(math.isfinite(c[k]) for c in curve for k in ('train', 'val', 'val_fixed')), curve
    b.iters = 50
    _, curve, steps, *_ = train(b, chars, tr, va, quiet=True)
    first, last = curve[0]['val_fixed'], curve[-1]['val_fixed']
    assert last < 0.8 * first, f"the loss did not fall: {first:.4f} -> {last:.4f}"
    log(f"check: ok: fixed val loss {first:.4f} -> {last:.4f} in 50 steps, "
        f"{time.perf_counter() - t0:.1f}s")
    print(json.dumps({'check': 'ok', 'loss_first': first, 'loss_last': last}))


CONFIG_KEYS = ['block_size', 'batch_size', 'n_layer', 'n_head', 'n_embd', 'dropout', 'bias',
               'lr', 'min_lr', 'warmup_iters', 'lr_decay_iters', 'decay_lr', 'beta1', 'beta2',
               'eps', 'weight_decay', 'grad_clip', 'eval_interval', 'eval_iters', 'fixed_windows',
               'seed', 'threads', 'blas_threads', 'data']


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument('--data', default=None,
                   help='a file, a directory (its files, sorted) or a glob (sorted); '
                        'default: $(go env GOROOT)/src/net/http/*.go without *_test.go')
    p.add_argument('--iters', type=int, default=2000, help='optimizer steps (max_iters)')
    p.add_argument('--seed', type=int, default=1337)
    p.add_argument('--threads', type=int, default=1, help='torch.set_num_threads')
    p.add_argument('--blas-threads', type=int, default=0,
                   help="OpenBLAS's threads: 0 = as --threads, -1 = leave OpenBLAS's default")
    p.add_argument('--eval-interval', type=int, default=250)
    p.add_argument('--eval-iters', type=int, default=200)
    p.add_argument('--log-interval', type=int, default=10)
    p.add_argument('--fixed-windows', type=int, default=2400)
    p.add_argument('--block-size', type=int, default=64)
    p.add_argument('--batch-size', type=int, default=12)
    p.add_argument('--n-layer', type=int, default=4)
    p.add_argument('--n-head', type=int, default=4)
    p.add_argument('--n-embd', type=int, default=128)
    p.add_argument('--dropout', type=float, default=0.0)
    p.add_argument('--bias', action=argparse.BooleanOptionalAction, default=False)
    p.add_argument('--lr', type=float, default=1e-3, help='learning_rate (the peak)')
    p.add_argument('--min-lr', type=float, default=1e-4)
    p.add_argument('--warmup-iters', type=int, default=100)
    p.add_argument('--lr-decay-iters', type=int, default=2000)
    p.add_argument('--decay-lr', action=argparse.BooleanOptionalAction, default=True)
    p.add_argument('--beta1', type=float, default=0.9)
    p.add_argument('--beta2', type=float, default=0.99)
    p.add_argument('--eps', type=float, default=1e-8)
    p.add_argument('--weight-decay', type=float, default=0.1)
    p.add_argument('--grad-clip', type=float, default=1.0, help='0 = no clipping')
    p.add_argument('--out-json', default=None, help='also write the final JSON here')
    p.add_argument('--time-steps', type=int, default=0,
                   help='only time this many training steps (no evaluation), print '
                        '{ms_per_step_median, threads, blas}')
    p.add_argument('--check', action='store_true', help='a fast self-test (< 20 s)')
    a = p.parse_args(argv)
    for k in ('iters', 'eval_interval', 'eval_iters', 'fixed_windows', 'block_size', 'batch_size',
              'n_layer', 'n_head', 'n_embd', 'threads'):
        if getattr(a, k) < (0 if k == 'iters' else 1):
            p.error(f"--{k.replace('_', '-')} must be at least {0 if k == 'iters' else 1}")
    if a.n_embd % a.n_head:
        p.error('--n-embd must be a multiple of --n-head')
    if a.decay_lr and a.lr_decay_iters <= a.warmup_iters:
        p.error('--lr-decay-iters must exceed --warmup-iters')
    return a


def main(argv=None):
    a = parse_args(argv)
    try:
        if a.check:
            check(a)
        else:
            run(a)
    except CorpusError as e:
        print(f"nanogpt_chars: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == '__main__':
    main()
