"""The sampler's own cost per verify row, on the target's real logits and on rows resized
to other vocabulary sizes."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..engine.sampling.params import PenaltyWindow, SamplingParams, candidates, top_ids
from ..engine.sampling.verify import gumbel_pick
from .core import messages_for

SAMPLER_VOCABS = (49_152, 262_144)  # SmolLM2 / Llama-3-like sizes, and Gemma 3's
SAMPLER_ROWS = 64
SYNTHETIC_HEAD = 256  # top logits a resized row keeps as they are


def target_rows(
    speculator: Any, replies: Sequence[tuple[str, Sequence[int]]], system: str = "", n: int = SAMPLER_ROWS
) -> tuple[list[np.ndarray], list[list[int]]]:
    """Up to ``n`` of the target's logits rows at reply positions — the rows a verify
    step samples from — with the history each row follows (for penalty windows).

    ``replies``: (prompt, reply tokens) pairs, e.g. the bench's plain runs. The
    replies are decoded again as one batch per prompt; both caches are emptied after.
    """
    from ..engine.chat import prompt_tokens

    ctx = speculator.target_cache.ctx
    rows: list[np.ndarray] = []
    histories: list[list[int]] = []
    try:
        for text, reply in replies:
            prompt = prompt_tokens(speculator.target, speculator.template, messages_for(text, system))
            room = min(n - len(rows), ctx.n_batch, ctx.n_ctx - len(prompt) + 1)
            batch = [prompt[-1], *reply[:-1]][: max(room, 0)]
            if not batch:
                continue
            speculator.forget()
            ctx.prefill(prompt[:-1], 0)
            rows += list(ctx.decode(batch, len(prompt) - 1, len(batch)))
            histories += [[*prompt, *reply[:i]] for i in range(len(batch))]
            if len(rows) >= n:
                break
    finally:
        speculator.forget()  # the bookkeeping knew nothing of these decodes
    return rows, histories


def resize_row(row: np.ndarray, size: int, rng: np.random.Generator, head: int = SYNTHETIC_HEAD) -> np.ndarray:
    """A logits row of ``size`` tokens with ``row``'s spread: its ``head`` largest logits
    once each (what the filters keep), the rest drawn from its other logits (what
    the thresholds scan), all at random ids."""
    top = top_ids(row, head)
    rest = np.delete(row, top)
    n_fill = size - top.shape[0]
    fill = rng.choice(rest, n_fill, replace=n_fill > rest.shape[0])
    out = np.concatenate([row[top], fill]).astype(np.float32)
    return out[rng.permutation(size)]


def time_sampler(
    rows: Sequence[np.ndarray], params: SamplingParams, windows: Sequence[PenaltyWindow | None], passes: int = 3
) -> dict[str, float]:
    """Median µs per row of a verify row's sampling work: candidates (penalties,
    filters, temperature) and the Gumbel pick; the first pass warms caches too."""
    cand: list[int] = []
    pick: list[int] = []
    total: list[int] = []
    for _ in range(passes):
        for i, row in enumerate(rows):
            t0 = time.perf_counter_ns()
            c = candidates(row, params, windows[i])
            t1 = time.perf_counter_ns()
            gumbel_pick(c, 0, i)
            t2 = time.perf_counter_ns()
            cand.append(t1 - t0)
            pick.append(t2 - t1)
            total.append(t2 - t0)
    return {
        "per_row": round(statistics.median(total) / 1000, 1),
        "candidates": round(statistics.median(cand) / 1000, 1),
        "pick": round(statistics.median(pick) / 1000, 1),
    }


def sampler_cost(
    rows: Sequence[np.ndarray], histories: Sequence[Sequence[int]], params: SamplingParams
) -> dict[str, Any]:
    """The sampler's µs per verify row at each of :data:`SAMPLER_VOCABS` (and the
    target's own size): the target's own rows at its size, resized ones elsewhere.

    Greedy settings are measured at temperature 0.8 (greedy itself is one argmax).
    """
    if params.greedy:
        params = dataclasses.replace(params, temperature=0.8)
    out: dict[str, Any] = {
        "temperature": params.temperature,
        "top_k": params.top_k,
        "top_p": params.top_p,
        "min_p": params.min_p,
        "penalised": params.penalised,
        "n_rows": len(rows),
        "vocab": {},
    }
    if not rows:
        return out
    own = rows[0].shape[0]
    rng = np.random.default_rng(0)
    for size in sorted({*SAMPLER_VOCABS, own}):
        real = size == own
        sized = rows if real else [resize_row(r, size, rng) for r in rows]
        windows = [
            PenaltyWindow(params.repeat_last_n, [t for t in h if t < size]) if params.penalised else None
            for h in histories
        ]
        out["vocab"][size] = {**time_sampler(sized, params, windows), "rows": "target" if real else "synthetic"}
    return out
