"""Sampling settings, logits → probabilities, and the two verification rules.

Pure numpy; no model needed. Shapes: a logits row is ``(n_vocab,)`` float32, a
verify block is ``(k + 1, n_vocab)`` — row ``i`` is the target's distribution for
the token after ``[last, d1..di]``.

* Greedy verification accepts the longest prefix of the proposal that equals the
  target's argmax, then commits the target's argmax at the next row: a
  *correction* token at the first mismatch, a *bonus* token after a fully
  accepted proposal.
* Stochastic verification is speculative sampling by rejection (Leviathan et al.
  2023, "Fast Inference from Transformers via Speculative Decoding", Alg. 1;
  Chen et al. 2023, "Accelerating LLM Decoding with Speculative Sampling"):
  accept ``d_i`` with probability ``min(1, p_i(d_i) / q_i(d_i))``; on rejection
  sample the correction from ``norm(max(0, p_i - q_i))``; after full acceptance
  sample the bonus from ``p_k``. The committed tokens are then distributed
  exactly as if sampled from the target alone. A greedy draft is the case
  ``q_i = one_hot(d_i)``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .bounds import check_int, check_unit_float
from .errors import BoundsError


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """How the target's next token is chosen.

    ``temperature <= 0`` means greedy (argmax); otherwise logits are filtered by
    ``top_k`` (0 = off), divided by ``temperature``, softmaxed, then filtered by
    ``top_p`` (nucleus; 1.0 = off) and ``min_p`` (relative to the top
    probability; 0.0 = off) and renormalised. ``seed`` fixes the random stream.

    Raises:
        BoundsError: for a negative or non-finite temperature, top_k < 0,
            or top_p / min_p outside [0, 1].
    """

    temperature: float = 0.0
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int = 0

    def __post_init__(self) -> None:
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not np.isfinite(t) or t < 0 or t > 100:
            raise BoundsError("temperature", t, "finite and in [0, 100]")
        check_int("top_k", self.top_k, 0)
        check_unit_float("top_p", self.top_p)
        check_unit_float("min_p", self.min_p)
        check_int("seed", self.seed, 0, 2**63 - 1)

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


def softmax(logits: np.ndarray) -> np.ndarray:
    """Numerically stable softmax over the last axis, float64."""
    x = logits.astype(np.float64, copy=False)
    x = np.exp(x - x.max(axis=-1, keepdims=True))
    return x / x.sum(axis=-1, keepdims=True)


def top_prob(logits: np.ndarray) -> tuple[int, float]:
    """``(argmax, its softmax probability)`` of one logits row, without a full copy."""
    i = int(np.argmax(logits))
    m = float(logits[i])
    return i, 1.0 / float(np.exp(logits.astype(np.float64) - m).sum())


def top_k_list(probs: np.ndarray, k: int) -> list[tuple[int, float]]:
    """The ``k`` most probable ids of a probability row, most probable first."""
    k = min(k, probs.shape[-1])
    idx = np.argpartition(-probs, k - 1)[:k]
    idx = idx[np.argsort(-probs[idx], kind="stable")]
    return [(int(i), float(probs[i])) for i in idx]


def filtered_probs(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """The distribution ``params`` samples from, over the full vocabulary.

    Greedy settings give the one-hot of the argmax.
    """
    n = logits.shape[-1]
    if params.greedy:
        out = np.zeros(n, dtype=np.float64)
        out[int(np.argmax(logits))] = 1.0
        return out
    x = logits.astype(np.float64) / params.temperature
    if 0 < params.top_k < n:
        kth = np.partition(x, n - params.top_k)[n - params.top_k]
        x = np.where(x >= kth, x, -np.inf)
    p = np.exp(x - x.max())
    p /= p.sum()
    if params.top_p < 1.0:
        order = np.argsort(-p, kind="stable")
        cum = np.cumsum(p[order])
        # keep the smallest head whose mass reaches top_p (always at least one)
        n_keep = int(np.searchsorted(cum, params.top_p, side="left")) + 1
        mask = np.zeros(n, dtype=bool)
        mask[order[:n_keep]] = True
        p = np.where(mask, p, 0.0)
    if params.min_p > 0.0:
        p = np.where(p >= params.min_p * p.max(), p, 0.0)
    return p / p.sum()


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """One draw from a probability row (inverse CDF; deterministic for a seeded rng)."""
    cum = np.cumsum(probs)
    u = rng.random() * cum[-1]
    return int(min(np.searchsorted(cum, u, side="right"), probs.shape[-1] - 1))


def verify_greedy(proposal: Sequence[int], target_argmax: Sequence[int]) -> tuple[int, int]:
    """Greedy verification.

    Args:
        proposal: the draft's ``k`` tokens.
        target_argmax: ``k + 1`` target argmax ids, one per verify row.

    Returns:
        ``(n_accepted, committed)``: the accepted prefix length and the target
        token committed after it (bonus if ``n_accepted == k``, else correction).
    """
    k = len(proposal)
    j = 0
    while j < k and proposal[j] == target_argmax[j]:
        j += 1
    return j, int(target_argmax[j])


def verify_stochastic(
    proposal: Sequence[int],
    target_probs: Sequence[np.ndarray],
    rng: np.random.Generator,
    draft_probs: Sequence[np.ndarray] | None = None,
) -> tuple[int, int]:
    """Speculative sampling by rejection (Leviathan et al. 2023; Chen et al. 2023).

    Args:
        proposal: the draft's ``k`` tokens.
        target_probs: ``k + 1`` target distributions (already filtered).
        rng: the random stream (one uniform per verified token, one per draw).
        draft_probs: the ``k`` distributions the draft sampled from; ``None``
            means a greedy draft (``q_i`` one-hot at ``d_i``).

    Returns:
        ``(n_accepted, committed)`` as in :func:`verify_greedy`.
    """
    for i, d in enumerate(proposal):
        p = target_probs[i]
        q_d = 1.0 if draft_probs is None else float(draft_probs[i][d])
        if q_d > 0.0 and rng.random() < min(1.0, float(p[d]) / q_d):
            continue
        if draft_probs is None:
            residual = p.copy()
            residual[d] = 0.0
        else:
            residual = np.maximum(p - draft_probs[i], 0.0)
        total = residual.sum()
        # total == 0 only when p == q (then acceptance was certain); guard anyway
        return i, sample(residual / total if total > 0 else p, rng)
    return len(proposal), sample(target_probs[len(proposal)], rng)
