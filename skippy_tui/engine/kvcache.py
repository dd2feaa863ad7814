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
from .sync import AlreadySynced, DraftSyncState, Extend, Reset, Truncate, prefix_target


class KvCache:
    """One sequence's KV cache and its :class:`DraftSyncState`."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.state = DraftSyncState()

    @property
    def n_past(self) -> int:
        """Tokens the cache holds."""
        return len(self.state)

    def sync(self, context: Sequence[int], cancelled: Callable[[], bool] | None = None) -> SyncInfo:
        """Bring the cache to ``context[:-1]``; return what was done.

        Raises:
            ContextFullError, DecodeError: from the prefill; the bookkeeping then
                matches what the cache still holds.
        """
        plan = self.state.plan(context)
        target = prefix_target(context)
        if isinstance(plan, AlreadySynced):
            return SyncInfo("synced")
        if isinstance(plan, Extend):
            self._extend(target, plan.from_, plan.to, cancelled)
            return SyncInfo("extend", plan.from_, plan.to)
        if isinstance(plan, Truncate) and self._truncate(plan.keep):
            self._extend(target, plan.keep, plan.to, cancelled)
            return SyncInfo("truncate", plan.keep, plan.to)
        stop = plan.to if isinstance(plan, (Reset, Truncate)) else len(target)
        self.reset()
        self._extend(target, 0, stop, cancelled)
        return SyncInfo("reset", 0, stop)

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

    def _extend(self, target: Sequence[int], start: int, stop: int, cancelled: Callable[[], bool] | None) -> None:
        if stop > start:
            delta = list(target[start:stop])
            self.ctx.prefill(delta, start, cancelled)
            self.state.record_extend(delta)
