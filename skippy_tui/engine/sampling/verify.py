"""Choosing tokens: plain sampling, the draft's proposals and the target's verification.

One :class:`ReplySampler` per reply (its seed resolved) holds the three rules,
which must agree for speculation to be lossless:

* **plain** (:meth:`ReplySampler.pick`): greedy is the argmax of the
  (penalised) row; sampling is the Gumbel-max draw
  ``argmax_j(log p_j + g_j)`` over the filtered distribution ``p``, with noise
  ``g`` that depends only on (seed, absolute position, token id)
  (:mod:`noise`). A plain step is a verify step with no proposal, so the two
  share this rule.
* **coupled** speculative sampling (the default; Daliri, Musco, Suresh 2024,
  "Coupling without Communication and Drafter-Invariant Speculative
  Decoding", arXiv 2408.07978): the draft proposes ``argmax(log q_i + g_i)``
  with the *same* noise, the target's token at row ``i`` is
  ``argmax(log p_i + g_i)``; proposals are accepted while the two agree, then
  the target's token is committed. Every committed token is the token plain
  sampling would have drawn at that position, so the reply is token-identical
  to plain sampling with the same seed, for any k, any draft model, n-gram
  proposals (deterministic, the same rule) or none; a proposal is accepted
  with probability ``sum_j 1 / sum_i max(p_i/p_j, q_i/q_j)``, at least
  ``(1 - TV(p, q)) / (1 + TV(p, q))``. Greedy decoding is the limit case.
* **rejection** sampling (Leviathan et al. 2023, Alg. 1; Chen et al. 2023):
  the draft *samples* ``d_i ~ q_i`` (its own noise stream), the target accepts
  it with probability ``min(1, p_i(d_i) / q_i(d_i))`` and otherwise commits a
  draw from ``norm(max(0, p_i - q_i))``; after a full accept it draws the
  bonus token from ``p_k`` as plain sampling does. The output is distributed
  as the target's, but not token-identical to a plain reply with the same seed.
  A deterministic (n-gram) proposal is the case ``q_i = one_hot(d_i)``.

Penalties (:class:`~.params.PenaltyWindow`): each row sees the history plain
decoding would see there — the committed context plus the drafts before it;
rejected tokens never enter it. The draft applies the same penalties.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from . import noise
from .params import Candidates, PenaltyWindow, SamplingParams, candidates, penalise, softmax


@dataclass(frozen=True, slots=True)
class Verdict:
    """What verification decided for one block.

    ``n_accepted``: proposal tokens kept. ``committed``: the target's token
    after them (correction or bonus). ``p_target``: at the first rejection, the
    target's probability of the rejected proposal token under the distribution
    it samples from (its raw softmax when greedy); ``None`` when nothing was
    rejected. ``expected``: under the coupled sampler, the probability that each
    judged position (the accepted ones, then the rejected one) would be accepted
    (:func:`expected_acceptance`; ``None`` where not computed); empty otherwise.
    """

    n_accepted: int
    committed: int
    p_target: float | None = None
    expected: tuple[float | None, ...] = ()


def gumbel_pick(c: Candidates, seed: int, position: int, stream: int = noise.TARGET) -> int:
    """``argmax(logits + Gumbel noise)`` over the candidates: a draw from their softmax."""
    if c.ids.shape[0] == 1:
        return int(c.ids[0])
    g = noise.gumbel(seed, position, c.ids, stream)
    return int(c.ids[int(np.argmax(c.logits.astype(np.float64) + g))])


def verify_greedy(proposal: Sequence[int], target_argmax: Sequence[int]) -> tuple[int, int]:
    """Greedy verification: the longest prefix equal to the target's argmax, then its token.

    Args:
        proposal: the draft's ``k`` tokens.
        target_argmax: ``k + 1`` target argmax ids, one per verify row.

    Returns:
        ``(n_accepted, committed)`` (a bonus if ``n_accepted == k``, else a correction).
    """
    j = 0
    while j < len(proposal) and proposal[j] == target_argmax[j]:
        j += 1
    return j, int(target_argmax[j])


def coupled_acceptance(p: np.ndarray, q: np.ndarray) -> float:
    """P(argmax(log p + g) == argmax(log q + g)) for shared Gumbel noise ``g``.

    ``sum_j 1 / sum_i max(p_i / p_j, q_i / q_j)`` over tokens with ``p_j, q_j > 0``
    (Daliri et al. 2024). Shapes ``(n,)``, probabilities; O(n * |both supports|) memory.
    """
    j = np.flatnonzero((p > 0) & (q > 0))
    if j.shape[0] == 0:
        return 0.0
    ratios = np.maximum(p[None, :] / p[j, None], q[None, :] / q[j, None])
    return float((1.0 / ratios.sum(axis=1)).sum())


EXPECTED_MAX_CANDIDATES = 256
"""Above this many candidates (filters off) a position's expected acceptance is not
computed (its n x n ratios would not fit a step's budget): the outcome stands in."""


def expected_acceptance(p: Candidates, q: Candidates | None, token: int) -> float | None:
    """The probability that the coupled sampler accepts the draft's ``token`` at a
    position, given the target's distribution ``p`` and the draft's ``q`` (``None``:
    a deterministic proposal, accepted when the target samples it: ``p(token)``).

    The outcome (0 or 1) is a draw of it, so counting this instead gives the same mean
    acceptance with far less variance (Rao-Blackwell): a sampled reply's few rejections
    no longer decide a draft's estimate alone. ``None`` above
    :data:`EXPECTED_MAX_CANDIDATES` candidates.
    """
    if q is None:
        return p.prob_of(token)
    ids = np.union1d(p.ids, q.ids)
    if ids.shape[0] > EXPECTED_MAX_CANDIDATES:
        return None
    pp, qq = np.zeros(ids.shape[0]), np.zeros(ids.shape[0])
    pp[np.searchsorted(ids, p.ids)] = p.probs()
    qq[np.searchsorted(ids, q.ids)] = q.probs()
    return coupled_acceptance(pp, qq)


class DraftRule:
    """How a draft picks its proposal tokens, one call per position.

    ``choose(row)`` returns ``(token, prob, dist)``: ``prob`` is the draft's
    probability of the token (under its sampled distribution; its raw softmax
    when greedy), ``dist`` the draft's filtered distribution when sampled (rejection
    sampling verifies with it; the coupled sampler's expected acceptance reads it),
    ``None`` when greedy. Each call moves to the next
    position and adds the token to the penalty history.
    """

    def __init__(self, sampler: ReplySampler, position: int, window: PenaltyWindow | None) -> None:
        self.sampler = sampler
        self.position = position
        self.window = window.copy() if window is not None and sampler.params.penalised else None

    def choose(self, row: np.ndarray) -> tuple[int, float, Candidates | None]:
        s, params = self.sampler, self.sampler.params
        dist = None
        if params.greedy:
            x = penalise(row, params, self.window)
            tok = int(np.argmax(x))
            prob = float(1.0 / np.exp(x - x[tok]).sum(dtype=np.float64))
        else:
            c = candidates(row, params, self.window)
            stream = noise.DRAFT if params.sampler == "rejection" else noise.TARGET
            tok = gumbel_pick(c, s.seed, self.position, stream)
            prob = c.prob_of(tok)
            dist = c
        self.position += 1
        if self.window is not None:
            self.window.push(tok)
        return tok, prob, dist


GREEDY_DRAFT = SamplingParams(temperature=0.0)


class ReplySampler:
    """The token rules of one reply: plain pick, draft rule, verification.

    Args:
        params: the sampling settings (they may be replaced between steps).
        seed: the resolved seed of the reply (``params.seed`` or a fresh one).
    """

    def __init__(self, params: SamplingParams, seed: int) -> None:
        self.params = params
        self.seed = seed

    def pick(self, row: np.ndarray, position: int, window: PenaltyWindow | None = None) -> int:
        """The token plain decoding commits at ``position`` given the logits ``row``."""
        if self.params.greedy:
            return int(np.argmax(penalise(row, self.params, window)))
        return gumbel_pick(candidates(row, self.params, window), self.seed, position)

    def draft_rule(self, position: int, window: PenaltyWindow | None = None) -> DraftRule:
        """The rule a draft follows for a proposal whose first token sits at ``position``."""
        return DraftRule(self, position, window)

    def verify(
        self,
        proposal: Sequence[int],
        rows: np.ndarray,
        position: int,
        window: PenaltyWindow | None = None,
        dists: Sequence[Candidates | None] = (),
    ) -> Verdict:
        """Check a proposal against the target's rows, stopping at the first rejection.

        Args:
            proposal: the ``k`` proposed tokens.
            rows: the target's logits, ``(k + 1, n_vocab)``; row ``i`` follows ``d1..di``.
            position: absolute position of the first proposed token.
            window: the penalty history of the committed context (not modified).
            dists: the draft's distributions per token (rejection sampling; missing
                or ``None`` = a deterministic proposal).
        """
        judge = self.judge(proposal, position, window, dists)
        for row in rows:
            verdict = judge.row(row)
            if verdict is not None:
                return verdict
        raise ValueError(f"{len(rows)} rows for a proposal of {len(proposal)} tokens")

    def judge(
        self,
        proposal: Sequence[int],
        position: int,
        window: PenaltyWindow | None = None,
        dists: Sequence[Candidates | None] = (),
    ) -> Judge:
        """:meth:`verify` row by row: a :class:`Judge` that takes the target's rows in order
        and gives the verdict as soon as it is known (at the first rejection, or after the
        ``k + 1``-th row), so a target verifying in chunks may stop decoding there."""
        return Judge(self, proposal, position, window, dists)

    def prob(self, row: np.ndarray, token: int, window: PenaltyWindow | None = None) -> float:
        """The target's probability of ``token``: under the sampled distribution, or
        its raw softmax when greedy (where the sampled one is one-hot)."""
        if self.params.greedy:
            return float(softmax(penalise(row, self.params, window))[token])
        return candidates(row, self.params, window).prob_of(token)

    def _rejection_row(
        self, row: np.ndarray, position: int, window: PenaltyWindow | None, d: int, q: Candidates | None
    ) -> tuple[bool, int, float]:
        p = candidates(row, self.params, window)
        pp = p.probs()
        hit = np.flatnonzero(p.ids == d)
        p_d = float(pp[hit[0]]) if hit.shape[0] else 0.0
        q_d = 1.0 if q is None else q.prob_of(d)
        if q_d > 0.0 and noise.uniform(self.seed, position, noise.ACCEPT) < min(1.0, p_d / q_d):
            return True, d, p_d
        if q is None:
            qq = (p.ids == d).astype(np.float64)
        else:
            qmap = dict(zip(q.ids.tolist(), q.probs().tolist()))
            qq = np.array([qmap.get(i, 0.0) for i in p.ids.tolist()])
        r = np.maximum(pp - qq, 0.0)
        if r.sum() <= 0.0:  # p == q: acceptance was certain; guard anyway
            r = pp
        live = np.flatnonzero(r > 0)
        g = noise.gumbel(self.seed, position, p.ids[live], noise.RESIDUAL)
        return False, int(p.ids[live[int(np.argmax(np.log(r[live]) + g))]]), p_d


class Judge:
    """One proposal's verification, fed the target's rows one at a time (see
    :meth:`ReplySampler.judge`); the rule is :meth:`ReplySampler.verify`'s."""

    __slots__ = ("_coupled", "_dists", "_expected", "_i", "_proposal", "_rejection", "_s", "_win", "position")

    def __init__(
        self,
        sampler: ReplySampler,
        proposal: Sequence[int],
        position: int,
        window: PenaltyWindow | None,
        dists: Sequence[Candidates | None],
    ) -> None:
        params = sampler.params
        self._s, self._proposal, self._dists, self.position = sampler, proposal, dists, position
        self._win = window.copy() if window is not None and params.penalised else None
        self._rejection = params.sampler == "rejection" and not params.greedy
        self._coupled = not self._rejection and not params.greedy
        self._expected: list[float | None] = []
        self._i = 0

    def row(self, row: np.ndarray) -> Verdict | None:
        """Judge the next row: the verdict once decided, else None (the next row is needed)."""
        s, i, win, proposal = self._s, self._i, self._win, self._proposal
        pos = self.position + i
        if i == len(proposal):
            return Verdict(i, s.pick(row, pos, win), None, tuple(self._expected))
        d = proposal[i]
        q = self._dists[i] if i < len(self._dists) else None
        if self._rejection:
            accepted, tok, p_d = s._rejection_row(row, pos, win, d, q)
        elif self._coupled:
            c = candidates(row, s.params, win)
            tok = gumbel_pick(c, s.seed, pos)
            accepted = tok == d
            p_d = None if accepted else c.prob_of(d)
            self._expected.append(expected_acceptance(c, q, d))
        else:
            tok = s.pick(row, pos, win)
            accepted, p_d = tok == d, None
        if not accepted:
            p_d = p_d if p_d is not None else s.prob(row, d, win)
            return Verdict(i, tok, p_d, tuple(self._expected))
        if win is not None:
            win.push(d)
        self._i = i + 1
        return None
