"""The cost model of one speculative step: what a step proposing ``k`` tokens is expected
to yield (tokens) and to cost (ms), from per-term costs and acceptance by position. Pure
arithmetic; :class:`~.adaptive.AdaptiveK` measures the terms online and chooses k with it,
:class:`~.chooser.SourceChooser` weighs sources with :func:`net_gains`, and the bench and
the draft finder report :func:`break_even_acceptance`.

Per step with ``k`` proposed tokens (ms)::

    T(0) = o + V(1)
    T(k) = o + s + w * A(k) + c_1 + c_d * (D(k) - 1) + V(1 + M(k)) + r * R(k)      k >= 1

    E(k) = 1 + sum_{i=1..k} prod_{j=1..i} q_j * a_j

* ``o``: per-step overhead outside sync/draft/verify; ``s``: the draft's sync (any
  catch-up included, :meth:`~.adaptive.AdaptiveK.costs`); ``w``: what a proposal taken
  whole adds to the next sync, charged through ``A(k)``, the probability that all ``k``
  tokens are offered and accepted (the draft never decoded its last proposed token, so the
  next sync, or the next proposal's first call, decodes it; after a rejection the sync only
  truncates); ``r``: what a rejection adds to its step, charged through ``R(k)``, the
  probability that a step proposing up to ``k`` tokens has one rejected (plain steps never
  roll back);
* ``c_1``, ``c_d``: the draft's first call of a proposal and each later one;
* ``V(b)``: the target's verify ms for ``b`` rows (linear between integer sizes);
* ``D(k) = sum_{i=1..k} P(m >= i-1)`` draft calls, ``M(k) = sum_{i=1..k} P(m >= i)``
  expected proposal length, where ``m`` is how many tokens the draft offers (it may
  stop early: ``p_min``, no n-gram match);
* ``q_j = P(m >= j | m >= j-1)``, ``a_j = P(token j accepted | offered, tokens < j accepted)``.

``E(k)`` counts the committed correction/bonus token plus the accepted ones (Leviathan
et al. 2023, eq. 1, with acceptance by position instead of one rate).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Costs:
    """The cost inputs of the model (ms). ``verify[b - 1]`` is ``V(b)``."""

    verify: Sequence[float]
    draft_per_call: float
    sync: float = 0.0
    overhead: float = 0.0
    rollback: float = 0.0
    draft_first: float | None = None
    """The first draft call of a proposal, when it differs (``draft_per_call`` is then each later one)."""
    sync_whole: float = 0.0
    """``w``: the next sync's extra ms after a proposal accepted whole (a one-token extend
    where a rejection leaves only a truncate)."""

    def draft_ms(self, calls: float) -> float:
        """Draft ms of a proposal making ``calls`` expected decodes (>= 1 once it proposes)."""
        if self.draft_first is None or calls <= 0:
            return self.draft_per_call * calls
        return self.draft_first + self.draft_per_call * (calls - 1)

    def verify_at(self, batch: float) -> float:
        """``V`` at a fractional batch size (linear between integer sizes)."""
        lo = min(max(int(batch), 1), len(self.verify))
        hi = min(lo + 1, len(self.verify))
        frac = min(max(batch - lo, 0.0), 1.0)
        return self.verify[lo - 1] + (self.verify[hi - 1] - self.verify[lo - 1]) * frac


def expected_tokens(k: int, accept: Sequence[float], offer: Sequence[float] | None = None) -> float:
    """``E(k)``: committed tokens per step (1 + expected accepted prefix)."""
    total, reach = 1.0, 1.0
    for i in range(k):
        reach *= (offer[i] if offer is not None else 1.0) * accept[i]
        total += reach
    return total


def expected_step_ms(
    k: int, costs: Costs, offer: Sequence[float] | None = None, accept: Sequence[float] | None = None
) -> float:
    """``T(k)``: expected ms of a step proposing up to ``k`` tokens.

    ``accept`` (``a_1..a_k``) is needed only to charge ``costs.rollback`` and
    ``costs.sync_whole``; without it no step is assumed to reject or to be taken whole.
    """
    if k <= 0:
        return costs.overhead + costs.verify_at(1)
    calls, offered, p = 0.0, 0.0, 1.0  # p = P(m >= i)
    reach, rejects = 1.0, 0.0  # P(offered and accepted so far), R(k)
    for i in range(k):
        calls += p  # call i+1 happens when the draft offered i tokens so far
        q = offer[i] if offer is not None else 1.0
        p *= q
        offered += p
        if accept is not None:
            rejects += reach * q * (1.0 - accept[i])
            reach *= q * accept[i]
    whole = reach if accept is not None else 0.0  # A(k)
    fixed = costs.overhead + costs.sync + costs.sync_whole * whole
    return fixed + costs.draft_ms(calls) + costs.verify_at(1 + offered) + costs.rollback * rejects


def expected_steps(
    k_max: int, accept: Sequence[float], costs: Costs, offer: Sequence[float] | None = None
) -> tuple[list[float], list[float]]:
    """``E(k)`` (tokens) and ``T(k)`` (ms) for ``k = 0..k_max`` (``accept``/``offer`` need
    ``k_max`` entries).

    One pass with running sums, O(k_max): :func:`expected_tokens` and
    :func:`expected_step_ms` for every k at once.
    """
    tokens_by_k, ms_by_k = [1.0], [expected_step_ms(0, costs)]
    tokens, reach = 1.0, 1.0  # E(k); P(first i proposed tokens offered and accepted)
    calls, offered, p = 0.0, 0.0, 1.0  # D(k), M(k), P(m >= i)
    rejects = 0.0  # R(k): P(a step proposing up to k tokens rejects one)
    fixed = costs.overhead + costs.sync
    for i in range(k_max):
        q = offer[i] if offer is not None else 1.0
        rejects += reach * q * (1.0 - accept[i])
        reach *= q * accept[i]
        tokens += reach
        calls += p
        p *= q
        offered += p
        tokens_by_k.append(tokens)
        ms = fixed + costs.sync_whole * reach + costs.draft_ms(calls) + costs.verify_at(1 + offered)
        ms_by_k.append(ms + costs.rollback * rejects)
    return tokens_by_k, ms_by_k


def expected_rates(
    k_max: int, accept: Sequence[float], costs: Costs, offer: Sequence[float] | None = None
) -> list[float]:
    """Expected tokens/s for ``k = 0..k_max``: ``1000 E(k) / T(k)`` (see :func:`expected_steps`)."""
    tokens, ms = expected_steps(k_max, accept, costs, offer)
    return [1000.0 * t / m for t, m in zip(tokens, ms)]


def net_gains(tokens: Sequence[float], ms: Sequence[float], going: float) -> list[float]:
    """``E(k) - going * T(k) / 1000`` for every k: the tokens a step adds over what the
    reply's going rate (``going`` tokens/s) makes in the same time.

    Choosing the step that maximises this, not ``E/T``, is the average-reward rule of a
    semi-Markov decision process (Puterman 1994, ch. 11; Dinkelbach's ratio iteration):
    a step is worth its time only against what the rest of the reply does with that time.
    At ``going`` = the best ratio on offer it picks the same k as :func:`best_k`; above it
    (an n-gram copy paused at an edit, which the copy resumes after a token or two), a long,
    costly proposal whose tokens the copy would have made for almost nothing loses to a
    cheap step.
    """
    return [t - going * m / 1000.0 for t, m in zip(tokens, ms)]


def best_k(rates: Sequence[float]) -> int:
    """The k with the highest rate; ties go to the smaller k."""
    return max(range(len(rates)), key=lambda k: (rates[k], -k))


def break_even_acceptance(k: int, costs: Costs) -> float | None:
    """The per-position acceptance ``a`` (same at every position) at which k ties plain.

    Solves ``(1 + a + ... + a^k) / T(k) = 1 / T(0)``; ``None`` when even
    ``a = 1`` loses (speculation at this k can never pay), 0.0 when any wins.
    """
    if k <= 0:
        return None
    plain = expected_step_ms(0, costs)

    def gain(a: float) -> float:  # speculative rate over plain at acceptance a (rollbacks depend on a)
        return expected_tokens(k, [a] * k) * plain / expected_step_ms(k, costs, None, [a] * k)

    if gain(1.0) < 1.0:
        return None
    if gain(0.0) >= 1.0:
        return 0.0
    lo, hi = 0.0, 1.0
    for _ in range(50):
        mid = (lo + hi) / 2
        if gain(mid) < 1.0:
            lo = mid
        else:
            hi = mid
    return hi
