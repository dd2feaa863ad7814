"""A llama.cpp context together with the bookkeeping of what its KV cache holds.

:meth:`KvCache.sync` turns a :mod:`sync` plan into native work and records it
only after the work succeeded. A truncation that the memory cannot do (recurrent
or hybrid models refuse to drop part of a sequence; a sliding-window cache may
already have evicted cells the kept prefix needs) falls back to a reset.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .events import SyncInfo
from .native import Context
from .sync import AlreadySynced, DraftSyncState, Extend, Reset, Truncate
from .window import grown, padded


class KvCache:
    """One sequence's KV cache and its :class:`DraftSyncState`."""

    def __init__(self, ctx: Context, n_ctx_max: int | None = None) -> None:
        self.ctx = ctx
        self.state = DraftSyncState()
        # the window :meth:`fit` may grow to (tokens; the configured n_ctx, padded)
        self.n_ctx_max = max(n_ctx_max or 0, ctx.n_ctx)

    def fit(self, need: int) -> None:
        """Make the window hold ``need`` tokens, up to :attr:`n_ctx_max`: a new context,
        at least twice as large (a long chat moves a few times), holding the same cells
        (same bookkeeping); the old one is freed. See :mod:`.window`.

        Raises:
            ModelFileError, DecodeError: as :func:`.window.grown`; nothing changed.
        """
        have = self.ctx.n_ctx
        if need <= have or have >= self.n_ctx_max:
            return
        new = grown(self.ctx, min(self.n_ctx_max, max(padded(need), 2 * have)))
        self.ctx.close()
        self.ctx = new

    @property
    def n_past(self) -> int:
        """Tokens the cache holds."""
        return len(self.state)

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
        if isinstance(plan, Truncate) and self._truncate(plan.keep):
            if self._folds(plan.to - plan.keep, fold):
                # a rejection then a step this cache did not draft (plain): the correction token
                # rides in the next proposal's first call, as a whole proposal's last token does
                return SyncInfo("truncate", plan.keep, plan.to, folded=True)
            self._extend(context, plan.keep, plan.to, cancelled)
            return SyncInfo("truncate", plan.keep, plan.to)
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

    def _truncate(self, keep: int) -> bool:
        n_swa = self.ctx.model.n_swa
        if n_swa > 0:
            pos_min = self.ctx.pos_min()
            if pos_min > max(0, keep - n_swa):
                return False  # the window the kept prefix needs was already evicted
        if not self.ctx.remove_from(keep):
            return False
        self.state.record_truncate(keep)
        return True

    def _extend(self, context: Sequence[int], start: int, stop: int, cancelled: Callable[[], bool] | None) -> None:
        # stop <= len(context) - 1: the plan never reaches the context's last token
        if stop > start:
            delta = list(context[start:stop])
            self.ctx.prefill(delta, start, cancelled)
            self.state.record_extend(delta)
