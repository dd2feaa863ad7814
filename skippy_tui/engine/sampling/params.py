"""Sampling settings and the distribution a logits row is sampled from.

Pure numpy; no model needed. A logits row is ``(n_vocab,)`` float32.

The filters run in llama.cpp's default sampler-chain order (``common_params.
samplers``: penalties, top-k, top-p, min-p, then temperature), so the same
settings mean the same distribution as in llama-server or LM Studio:

1. **penalties** over the last ``repeat_last_n`` tokens of the context (prompt
   and reply, as llama-server feeds its sampler the prompt): a token seen ``c``
   times has its logit divided by ``repeat_penalty`` (multiplied when the logit
   is negative), then lowered by ``c * frequency_penalty + presence_penalty``;
2. **top-k** keeps the ``top_k`` largest logits (0 = off);
3. **top-p** keeps the smallest head of the (temperature 1) softmax whose mass
   reaches ``top_p`` (1.0 = off);
4. **min-p** keeps tokens whose logit is at least ``max + log(min_p)``, i.e.
   probability at least ``min_p`` times the top one (0.0 = off);
5. **temperature** divides the surviving logits (0 = greedy: the argmax of the
   penalised row).

Every filter after top-k keeps a prefix of the logits sorted in descending
order, so only a short sorted head is ever built: the head is found by a
threshold below the maximum (one vectorised comparison over the row), widened
until it holds enough tokens. No full-vocabulary sort, no float64 copy of the
row; a penalised row is one float32 copy.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..bounds import check_int, check_unit_float
from ..errors import BoundsError
from ..options import MAX_SEED, SAMPLERS, bounds, default, option

__all__ = ["MAX_SEED", "SAMPLERS"]  # re-exported: their home is .options


def _check_float(key: str, value: object, lo: float, hi: float, lo_open: bool = False) -> None:
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and np.isfinite(value)
    if ok:
        ok = (lo < value if lo_open else lo <= value) and value <= hi  # type: ignore[operator]
    if not ok:
        raise BoundsError(key, value, f"finite and in {'(' if lo_open else '['}{lo:g}, {hi:g}]")


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How the target's next token is chosen (and the draft's, under sampling).

    ``temperature`` 0 = greedy. ``top_k`` (0 = off), ``top_p`` (1.0 = off),
    ``min_p`` (0.0 = off) filter as llama.cpp does (module docstring).
    ``seed``: the public random stream; ``None`` = a fresh one per reply (drawn
    from the OS and reported in the reply's events, so it can be reused).
    Penalties with llama.cpp's meaning, off by default: ``repeat_penalty``
    (1.0 = off), ``repeat_last_n`` (tokens looked back; 0 = off, -1 = the whole
    context), ``presence_penalty`` and ``frequency_penalty`` (0.0 = off).
    ``sampler``: how a speculative step samples — ``coupled`` (the default:
    draft and target argmax with the same per-position Gumbel noise, so the
    reply equals plain sampling with the same seed) or ``rejection`` (drafts
    sampled from the draft's distribution, accepted with ``min(1, p/q)``).

    Raises:
        BoundsError: a value is out of bounds (named, with its bound).
    """

    temperature: float = default("sampling.temperature")
    top_k: int = default("sampling.top_k")
    top_p: float = default("sampling.top_p")
    min_p: float = default("sampling.min_p")
    seed: int | None = None  # the config's "random"
    repeat_penalty: float = default("sampling.repeat_penalty")
    repeat_last_n: int = default("sampling.repeat_last_n")
    presence_penalty: float = default("sampling.presence_penalty")
    frequency_penalty: float = default("sampling.frequency_penalty")
    sampler: str = default("sampling.sampler")

    def __post_init__(self) -> None:
        for key in ("temperature", "repeat_penalty", "presence_penalty", "frequency_penalty"):
            opt = option(f"sampling.{key}")
            _check_float(key, getattr(self, key), opt.lo, opt.hi, opt.lo_open)  # type: ignore[arg-type]
        check_int("top_k", self.top_k, *bounds("sampling.top_k"))
        check_unit_float("top_p", self.top_p)
        check_unit_float("min_p", self.min_p)
        if self.seed is not None:
            check_int("seed", self.seed, *bounds("sampling.seed"))
        check_int("repeat_last_n", self.repeat_last_n, *bounds("sampling.repeat_last_n"))
        if self.sampler not in SAMPLERS:
            raise BoundsError("sampler", self.sampler, "one of " + ", ".join(SAMPLERS))

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    @property
    def penalised(self) -> bool:
        """True when the penalties change anything (llama.cpp's ``is_disabled`` negated)."""
        return self.repeat_last_n != 0 and (
            self.repeat_penalty != 1.0 or self.presence_penalty != 0.0 or self.frequency_penalty != 0.0
        )

    def label(self) -> str:
        """Short text for a status bar: ``greedy`` or ``coupled T=0.8``."""
        return "greedy" if self.greedy else f"{self.sampler} T={self.temperature:g}"


class PenaltyWindow:
    """Token counts over the last ``n`` tokens of a history (``n < 0``: all of it).

    :meth:`push` appends one token (dropping the oldest when full), so the
    window of a verify row — the committed context plus the drafts before it —
    costs one push per row, not a rescan of the context.
    """

    def __init__(self, n: int, tokens: Iterable[int] = ()) -> None:
        self.n = n
        self.tokens: deque[int] = deque(maxlen=n if n > 0 else None)
        self.counts: Counter[int] = Counter()
        if n != 0:
            for t in tokens if n < 0 else list(tokens)[-n:]:
                self.push(t)

    def push(self, token: int) -> None:
        if self.n == 0:
            return
        if self.n > 0 and len(self.tokens) == self.n:
            old = self.tokens[0]
            self.counts[old] -= 1
            if not self.counts[old]:
                del self.counts[old]
        self.tokens.append(token)
        self.counts[token] += 1

    def copy(self) -> PenaltyWindow:
        out = PenaltyWindow.__new__(PenaltyWindow)
        out.n, out.tokens, out.counts = self.n, self.tokens.copy(), self.counts.copy()
        return out


def penalise(row: np.ndarray, params: SamplingParams, window: PenaltyWindow | None) -> np.ndarray:
    """``row`` with llama.cpp's repetition, frequency and presence penalties applied
    (a float32 copy), or ``row`` itself when they change nothing."""
    if window is None or not window.counts or not params.penalised:
        return row
    ids = np.fromiter(window.counts.keys(), dtype=np.int64, count=len(window.counts))
    counts = np.fromiter(window.counts.values(), dtype=np.float32, count=len(window.counts))
    v = row[ids]
    rp = np.float32(params.repeat_penalty)
    v = np.where(v <= 0, v * rp, v / rp)
    v = v - (counts * np.float32(params.frequency_penalty) + np.float32(params.presence_penalty))
    out = row.copy()
    out[ids] = v.astype(np.float32, copy=False)
    return out


def top_ids(x: np.ndarray, n: int) -> np.ndarray:
    """Ids of the ``n`` largest values of ``x``, largest first (exact, no full sort).

    A threshold below the maximum selects a small head in one vectorised pass;
    it widens until the head holds ``n`` values, then only the head is
    partitioned and sorted.
    """
    size = x.shape[0]
    n = min(n, size)
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    m = float(x.max())
    idx = None
    if np.isfinite(m):
        gap = 4.0
        while gap < 1e4:
            idx = np.flatnonzero(x >= m - gap)
            if idx.shape[0] >= n:
                break
            gap *= 4.0
        else:
            idx = None
    if idx is None or idx.shape[0] < n:
        idx = np.arange(size)
    v = x[idx]
    if idx.shape[0] > n:
        sel = np.argpartition(-v, n - 1)[:n]
        idx, v = idx[sel], v[sel]
    return idx[np.argsort(-v, kind="stable")]


@dataclass(frozen=True, slots=True)
class Candidates:
    """The tokens a row may be sampled from, after every filter.

    ``ids``: token ids (int64), in descending order of logit (in id order
    when no filter applies: the whole vocabulary). ``logits``:
    their logits after penalties and temperature (float32; at temperature 1
    for greedy settings, where only ``ids[0]`` can be chosen). ``probs()`` is
    the softmax over them (float64), i.e. the sampled distribution.
    """

    ids: np.ndarray
    logits: np.ndarray

    def probs(self) -> np.ndarray:
        x = self.logits.astype(np.float64)
        e = np.exp(x - x.max())
        return e / e.sum()

    def prob_of(self, token: int) -> float:
        """Probability of ``token`` under this distribution (0.0 outside the candidates)."""
        hit = np.flatnonzero(self.ids == token)
        return float(self.probs()[hit[0]]) if hit.shape[0] else 0.0


def candidates(row: np.ndarray, params: SamplingParams, window: PenaltyWindow | None = None) -> Candidates:
    """Apply llama.cpp's default chain (penalties, top-k, top-p, min-p, temperature).

    Args:
        row: one logits row, ``(n_vocab,)`` float32.
        params: the sampling settings.
        window: the penalty history (ignored when penalties are off).

    Returns:
        The surviving candidates. Greedy settings give the single argmax.
    """
    x = penalise(row, params, window)
    if params.greedy:
        i = int(np.argmax(x))
        return Candidates(np.array([i], dtype=np.int64), x[i : i + 1].astype(np.float32))
    size = x.shape[0]
    limit = params.top_k if 0 < params.top_k < size else size
    t = np.float32(params.temperature)
    if params.top_p >= 1.0 and params.min_p <= 0.0:  # nothing after top-k: no head to find
        ids = top_ids(x, limit) if limit < size else np.arange(size)
        return Candidates(ids, (x[ids] / t).astype(np.float32, copy=False))
    head = min(limit, 256)
    while True:
        ids = top_ids(x, head)
        vals = x[ids].astype(np.float32, copy=False)
        complete = head >= limit  # the head holds every token top-k keeps
        keep, decided = ids.shape[0], complete
        if params.top_p < 1.0:
            m = vals[0]
            # llama.cpp's softmax: float32, summed in order over every token top-k keeps
            # (sorted after top-k, in id order without it)
            kept = vals if complete else x if limit == size else x[top_ids(x, limit)]
            total = np.cumsum(np.exp(kept - m), dtype=np.float32)[-1]
            cum = np.cumsum(np.exp(vals - m) / total, dtype=np.float32)
            hit = np.flatnonzero(cum >= np.float32(params.top_p))
            if hit.shape[0]:
                keep, decided = int(hit[0]) + 1, True
        if params.min_p > 0.0:
            floor = vals[0] + np.float32(np.log(np.float32(params.min_p)))
            n_ok = int(np.count_nonzero(vals[:keep] >= floor))  # vals descend: a prefix
            decided = decided or n_ok < keep
            keep = n_ok
        if not decided:  # every head token survived: the cut lies further down
            head = min(limit, head * 4)
            continue
        break
    return Candidates(ids[:keep], (vals[:keep] / t).astype(np.float32, copy=False))


def softmax(logits: np.ndarray) -> np.ndarray:
    """Numerically stable softmax over the last axis, float64."""
    x = logits.astype(np.float64, copy=False)
    x = np.exp(x - x.max(axis=-1, keepdims=True))
    return x / x.sum(axis=-1, keepdims=True)


def top_prob(logits: np.ndarray) -> tuple[int, float]:
    """``(argmax, its softmax probability)`` of one logits row (float32 sums, no copy kept)."""
    i = int(np.argmax(logits))
    return i, float(1.0 / np.exp(logits - logits[i]).sum(dtype=np.float64))


def top_softmax(logits: np.ndarray, n: int) -> list[tuple[int, float]]:
    """The ``n`` most probable ids of a logits row with their softmax probabilities,
    most probable first (for the panel's top-k lists)."""
    ids = top_ids(logits, n)
    m = logits[ids[0]]
    z = float(np.exp(logits - m).sum(dtype=np.float64))
    return [(int(i), float(np.exp(np.float64(logits[i] - m)) / z)) for i in ids]
