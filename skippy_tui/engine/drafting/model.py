"""Draft sources: something that proposes the next ``k`` tokens of a context.

:class:`ModelDrafter` runs a small draft LLM greedily, stopping early when its
top probability falls below ``p_min`` (as llama.cpp's speculative example does).
Each proposal step is recorded in the sync bookkeeping only after its decode
succeeded, and recorded steps join the synced prefix, so the next sync after an
accepted proposal is an ``extend`` and after a rejection a ``truncate``.

The ``extend`` a proposal taken whole leaves is one token: the last proposed
one, which drafting never decodes. Decoded alone it costs a draft call of its
own, so the sync only plans it and the proposal's first call decodes it with the
token it starts from, as one batch. A short catch-up (the tokens an n-gram step
or a few plain steps added) folds the same way, up to :data:`FOLD_MAX` tokens: a
decode's rows cost less than a decode each, so a short catch-up decoded apart, then a
1-row first call, costs more than the one batch. Where a call's fixed cost dominates
(a GPU) folding saves more.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..events import SyncInfo
from ..native.model import Context, Model
from ..sampling.params import Candidates
from ..sampling.verify import GREEDY_DRAFT, DraftRule, ReplySampler
from .kvcache import KvCache
from .sync import Extend, Reset, Truncate

FOLD_MAX = 4
"""The longest ``extend`` a sync leaves to the proposal's first decode (tokens). One
covers the steady case, up to four an n-gram step's or a short plain streak's catch-up;
a longer catch-up is a prefill of its own (timed as one and cancellable). ``auto``
costs either as ``C(b)``."""


@dataclass(frozen=True)
class Proposal:
    """The draft's tokens and, per token, its probability and logits row.

    ``rows[i]`` is the draft's distribution (logits, ``(n_vocab,)``) at proposal
    position ``i``; it may hold one row more than ``tokens`` when drafting
    stopped on ``p_min``. Empty rows for sources without a distribution, whose
    ``probs`` are ``None``. ``source``: what proposed it (``model``/``ngram``).
    ``dists``: the draft's filtered distribution per token when the verifier
    needs it (rejection sampling), else empty. ``call_ms``: the wall time (ms) of
    each draft-model decode, in order (empty for sources that decode nothing): the
    first call of a proposal costs more than the rest (auto's cost model).
    ``stopped``: the proposal ended on its ``stop`` check (an n-gram hand-off), not
    because the draft was unsure: auto does not count it as a shorter offer.
    """

    tokens: tuple[int, ...] = ()
    probs: tuple[float | None, ...] = ()
    rows: tuple[np.ndarray, ...] = field(default=(), repr=False)
    source: str = ""
    dists: tuple[Candidates | None, ...] = field(default=(), repr=False)
    call_ms: tuple[float, ...] = field(default=(), repr=False)
    stopped: bool = False


class Drafter(Protocol):
    """What the speculator needs of a draft source."""

    source: str

    def room(self, context: Sequence[int]) -> int:
        """How many tokens could be proposed after ``context`` (context window)."""
        ...

    def sync(self, context: Sequence[int], epoch: object | None = None) -> SyncInfo:
        """Prepare to propose after ``context`` (the draft cache holds ``context[:-1]``).

        ``epoch``: one object per reply, within which ``context`` only grows at its
        end (see :meth:`~skippy_tui.engine.drafting.sync.DraftSyncState.plan`).
        """
        ...

    def propose(self, context: Sequence[int], k: int, p_min: float, rule: DraftRule | None = None) -> Proposal:
        """Up to ``k`` tokens that may follow ``context``, picked by ``rule`` (default greedy)."""
        ...

    def reset(self) -> None:
        """Forget all cached state."""
        ...


class ModelDrafter:
    """A draft model with its own KV cache (one sequence)."""

    source = "model"

    def __init__(self, model: Model, ctx: Context, n_ctx_max: int | None = None) -> None:
        self.model = model
        self.cache = KvCache(ctx, n_ctx_max)  # n_ctx_max: the window it may grow to (tokens)
        # ids the target has: a draft vocabulary may be larger (compat allows a few extra ids)
        self.vocab_limit = model.n_vocab

    def room(self, context: Sequence[int]) -> int:
        # proposing k tokens decodes context[-1] and k-1 proposals after context[:-1]
        return self.cache.ctx.n_ctx - len(context) + 1

    def sync(self, context: Sequence[int], epoch: object | None = None) -> SyncInfo:
        """Bring the cache to ``context[:-1]``, or leave an extend of up to
        :data:`FOLD_MAX` tokens (after a truncate too) to :meth:`propose` (``SyncInfo.folded``).

        Raises:
            ContextFullError, DecodeError: from the prefill (never for a folded extend).
        """
        return self.cache.sync(context, epoch=epoch, fold=FOLD_MAX)

    def behind(self, context: Sequence[int], epoch: object | None = None) -> int:
        """Tokens a :meth:`sync` to ``context`` would prefill now (0 when synced).

        Pure: plans without decoding (O(new tokens) within one ``epoch``). After a
        run of steps the model did not draft, this is the catch-up its next
        proposal pays first.
        """
        plan = self.cache.state.plan(context, epoch)
        if isinstance(plan, Extend):
            return plan.to - plan.from_
        if isinstance(plan, Truncate):
            return plan.to - plan.keep
        if isinstance(plan, Reset):
            return plan.to
        return 0

    def propose(
        self,
        context: Sequence[int],
        k: int,
        p_min: float,
        rule: DraftRule | None = None,
        stop: Callable[[Sequence[int]], bool] | None = None,
    ) -> Proposal:
        """Up to ``k`` tokens after ``context``, each picked by ``rule`` (default: greedy,
        no penalties); call :meth:`sync` first. ``stop(tokens)``: whether the proposal
        ends after the tokens drafted so far (checked after each one).

        A folded sync's tokens (see :meth:`sync`) go in the first call's batch.

        Raises:
            ContextFullError, DecodeError: a draft decode failed; the steps
                before it stay recorded, the failed one is not (a folded sync's
                tokens are recorded with the first step).
        """
        if rule is None:
            rule = ReplySampler(GREEDY_DRAFT, 0).draft_rule(len(context))
        # a folded sync's tokens; none when no sync came first (decode from where the cache is)
        lead = self.cache.unsynced(context, FOLD_MAX)
        pos = self.cache.n_past
        current = context[-1]
        tokens: list[int] = []
        probs: list[float] = []
        rows: list[np.ndarray] = []
        dists: list[Candidates | None] = []
        call_ms: list[float] = []
        stopped = False
        for i in range(k):
            t = time.perf_counter()
            logits = self._decode(i, [*lead, current], pos + i)
            call_ms.append((time.perf_counter() - t) * 1000)
            if lead:
                self.cache.state.record_extend(lead)
                pos, lead = pos + len(lead), []
            self._record(i, current)
            rows.append(logits)
            tid, p, dist = rule.choose(logits)
            if p < p_min or tid >= self.vocab_limit:
                break  # unsure, or an id the target does not have (it could only fail to decode)
            tokens.append(tid)
            probs.append(p)
            dists.append(dist)
            current = tid
            if stop is not None and len(tokens) < k and stop(tokens):
                stopped = True
                break
        return Proposal(tuple(tokens), tuple(probs), tuple(rows), self.source, tuple(dists), tuple(call_ms), stopped)

    def _decode(self, step: int, tokens: list[int], pos: int) -> np.ndarray:
        """The logits row after ``tokens`` decoded at ``pos..`` (the proposal's ``step``-th call)."""
        if step == 1 and self.cache.ctx.rollback != "kv":
            # the first call decoded committed tokens only: a recurrent draft saves its state
            # there, as it cannot drop the proposal's rows by itself
            self.cache.mark("step")
        return self.cache.ctx.decode(tokens, pos, 1)[0]

    def _record(self, step: int, token: int) -> None:
        """The ``step``-th call's input ``token`` is now cached."""
        self.cache.state.record_proposal_step(token)

    def reset(self) -> None:
        self.cache.reset()
