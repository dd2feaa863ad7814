"""A llama.cpp context together with the bookkeeping of what its KV cache holds.

:meth:`KvCache.sync` turns a :mod:`sync` plan into native work and records it
only after the work succeeded. How a truncation drops the tail depends on the
model's memory (:mod:`..load.arch`): an attention KV cache drops any tail; a recurrent
state rolls back to a snapshot of its last decode (``snapshot``) or to a state
saved at a quiescent boundary (:meth:`KvCache.mark`), after which the kept tokens
past that point are decoded again (``restore``). Where neither can (or a
sliding-window cache already evicted cells the kept prefix needs) the cache is
reset and refilled, and the plan says so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from ..errors import StateError
from ..events import SyncInfo
from ..native.model import Context, SeqState
from ..native.window import grown, padded
from .sync import AlreadySynced, DraftSyncState, Extend, Reset, Truncate


class Follower(Protocol):
    """Something that mirrors a cache's contents (an MTP head follows its target's)."""

    def truncated(self, keep: int) -> None:
        """The cache now holds only its first ``keep`` tokens (0: it was emptied)."""
        ...


class KvCache:
    """One sequence's KV cache and its :class:`DraftSyncState`."""

    def __init__(self, ctx: Context, n_ctx_max: int | None = None) -> None:
        self.ctx = ctx
        self.state = DraftSyncState()
        # the window :meth:`fit` may grow to (tokens; the configured n_ctx, padded)
        self.n_ctx_max = max(n_ctx_max or 0, ctx.n_ctx)
        # saved states by purpose ("step": before a verify or a proposal, "turn": a reply's
        # start), each valid while the cache still holds the tokens it was taken after
        self._saved: dict[str, SeqState] = {}
        self.followers: list[Follower] = []

    def fit(self, need: int) -> None:
        """Make the window hold ``need`` tokens, up to :attr:`n_ctx_max`: a new context,
        at least twice as large (a long chat moves a few times), holding the same cells
        (same bookkeeping); the old one is freed. See :mod:`..native.window`.

        Raises:
            ModelFileError, DecodeError: as :func:`..native.window.grown`; nothing changed.
        """
        have = self.ctx.n_ctx
        if need <= have or have >= self.n_ctx_max:
            return
        new = grown(self.ctx, min(self.n_ctx_max, max(padded(need), 2 * have)))
        new.observer = self.ctx.observer
        self.ctx.close()
        self.ctx = new
        self._saved.clear()  # states of the old context: the new one holds the same, unsaved

    @property
    def n_past(self) -> int:
        """Tokens the cache holds."""
        return len(self.state)

    def mark(self, purpose: str = "step") -> bool:
        """Save the state now, to roll back to (a recurrent model that cannot drop a tail by
        itself); call it at a quiescent boundary (the cache holds exactly :attr:`state`'s
        tokens). False when it cannot be saved (over the size bound): a later truncation
        below what the memory rolls back resets instead."""
        if self.ctx.rollback == "kv":
            return False
        try:
            self._saved[purpose] = self.ctx.capture()
        except StateError:
            self._saved.pop(purpose, None)
            return False
        return True

    def sync(
        self,
        context: Sequence[int],
        cancelled: Callable[[], bool] | None = None,
        epoch: object | None = None,
        fold: int = 0,
    ) -> SyncInfo:
        """Bring the cache to ``context[:-1]``; return what was done.

        ``epoch``: see :meth:`DraftSyncState.plan` (within one reply the context
        only grows, so only the new tokens are compared). ``fold``: an ``extend``
        of at most this many tokens, or a ``truncate``'s re-extend of as many, is only
        planned (``SyncInfo.folded``); the caller decodes them in its next batch
        (:meth:`unsynced`).

        Raises:
            ContextFullError, DecodeError: from the prefill; the bookkeeping then
                matches what the cache still holds.
        """
        if self.ctx.rollback != "kv" and self.ctx.pos_max() + 1 != len(self.state):
            self.state.record_reset(())  # a failed decode emptied a state that could not drop its part
            self._dropped(0)
        info = self._sync(context, cancelled, epoch, fold)
        self.state.mark_synced(epoch)
        return info

    def _sync(
        self, context: Sequence[int], cancelled: Callable[[], bool] | None, epoch: object | None, fold: int
    ) -> SyncInfo:
        plan = self.state.plan(context, epoch)
        if isinstance(plan, AlreadySynced):
            return SyncInfo("synced")
        if isinstance(plan, Extend):
            if self._folds(plan.to - plan.from_, fold):
                return SyncInfo("extend", plan.from_, plan.to, folded=True)
            self._extend(context, plan.from_, plan.to, cancelled)
            return SyncInfo("extend", plan.from_, plan.to)
        if isinstance(plan, Truncate):
            dropped = self.drop_after(plan.keep)
            if dropped is not None:
                kept, via = dropped
                if self._folds(plan.to - kept, fold):
                    # a rejection then a step this cache did not draft (plain): the correction token
                    # rides in the next proposal's first call, as a whole proposal's last token does
                    return SyncInfo("truncate", kept, plan.to, folded=True, via=via)
                self._extend(context, kept, plan.to, cancelled)
                return SyncInfo("truncate", kept, plan.to, via=via)
        stop = plan.to if isinstance(plan, (Reset, Truncate)) else max(len(context) - 1, 0)
        self.reset()
        self._extend(context, 0, stop, cancelled)
        return SyncInfo("reset", 0, stop)

    def _folds(self, n: int, fold: int) -> bool:
        """Whether ``n`` tokens still to decode are left to the caller's next batch."""
        return 0 < n <= fold and self.ctx.n_batch > fold

    def unsynced(self, context: Sequence[int], fold: int) -> list[int]:
        """The tokens of ``context[:-1]`` a folding :meth:`sync` left undecoded: empty when
        it decoded them all, or when more than ``fold`` are missing (no sync came first)."""
        start, stop = len(self.state), len(context) - 1
        return list(context[start:stop]) if stop - start <= fold else []

    def reset(self) -> None:
        """Empty the cache."""
        self.ctx.clear()
        self.state.record_reset(())
        self._dropped(0)

    def drop_after(self, keep: int) -> tuple[int, str] | None:
        """Drop what the cache holds past its first ``keep`` tokens, as cheaply as its
        memory allows: ``(kept, via)`` with ``via`` ``""`` (the KV cache) or ``snapshot`` (``kept ==
        keep``) or ``restore`` (back to a saved state of ``kept <= keep`` tokens: the
        caller decodes the rest again); None when it cannot (nothing changed)."""
        via = "" if self.ctx.rollback == "kv" else self.ctx.rollback
        if keep >= len(self.state):
            return keep, via
        n_swa = self.ctx.model.n_swa
        if n_swa > 0:
            pos_min = self.ctx.pos_min()
            if pos_min > max(0, keep - n_swa):
                return None  # the window the kept prefix needs was already evicted
        if self.ctx.remove_from(keep):
            self.state.record_truncate(keep)
            self._dropped(keep)
            return keep, via
        saved = max((s for s in self._saved.values() if s.n_tokens <= keep), key=lambda s: s.n_tokens, default=None)
        if saved is None:
            return None
        try:
            self.ctx.restore(saved)
        except StateError:
            self.state.record_reset(())
            self._dropped(0)
            return None
        self.state.record_truncate(saved.n_tokens)
        self._dropped(saved.n_tokens)
        return saved.n_tokens, "restore"

    def _dropped(self, keep: int) -> None:
        """The cache now holds its first ``keep`` tokens: states saved after them are stale."""
        for purpose in [p for p, s in self._saved.items() if s.n_tokens > keep]:
            del self._saved[purpose]
        for f in self.followers:
            f.truncated(keep)

    def _extend(self, context: Sequence[int], start: int, stop: int, cancelled: Callable[[], bool] | None) -> None:
        # stop <= len(context) - 1: the plan never reaches the context's last token
        if stop > start:
            delta = list(context[start:stop])
            self.ctx.prefill(delta, start, cancelled)
            self.state.record_extend(delta)
