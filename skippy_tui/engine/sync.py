"""KV-cache sync planning: what bringing a cache to a context costs.

A cache that a proposal decodes from holds every context token but the last; the
last token is the one the next decode starts from. Given the tokens a cache
holds (its *synced* tokens) and a new context, :meth:`KvSyncState.plan` says
what to do:

* :class:`AlreadySynced` — the synced tokens are exactly the context's prefix;
* :class:`Extend` — they are a strict prefix of it: prefill ``context[from_:to]``;
* :class:`Truncate` — they share a non-empty prefix of ``keep`` tokens and then
  diverge (a rejected proposal, an edited message): drop positions ``>= keep``
  and prefill ``context[keep:to]``;
* :class:`Reset` — nothing usable is shared (or the cache is empty): clear it and
  prefill the whole prefix.

The first three kinds and their bookkeeping follow the draft runner of the skippy
server (``DraftSyncPlan``); ``Truncate`` is ours. Whether a truncation is
possible is the caller's business (recurrent memory cannot drop a partial
sequence): it falls back to ``Reset`` and records that.

Bookkeeping is recorded only after the matching decode succeeded, so a failed
decode never leaves the state claiming a token the KV cache does not hold.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class AlreadySynced:
    """Nothing to do."""

    kind = "synced"


@dataclass(frozen=True, slots=True)
class Extend:
    """Prefill ``context[from_:to]``; ``from_`` equals the synced length."""

    from_: int
    to: int
    kind = "extend"


@dataclass(frozen=True, slots=True)
class Truncate:
    """Keep the first ``keep`` cached tokens, then prefill ``context[keep:to]``.

    ``to`` may equal ``keep`` (a pure rollback, nothing to prefill).
    """

    keep: int
    to: int
    kind = "truncate"


@dataclass(frozen=True, slots=True)
class Reset:
    """Clear the cache and prefill ``context[0:to]``."""

    to: int
    kind = "reset"


SyncPlan = AlreadySynced | Extend | Truncate | Reset


def prefix_target(context: Sequence[int]) -> Sequence[int]:
    """The tokens a cache must hold for ``context``: all but the last one."""
    return context[: max(len(context) - 1, 0)]


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class DraftSyncState:
    """Tokens one KV cache has materialised, and the plans derived from them.

    Named after the draft runner it comes from; the engine keeps one for the
    target cache too (the same rules decide what a new chat turn reuses).
    """

    __slots__ = ("_tokens",)

    def __init__(self, tokens: Sequence[int] = ()) -> None:
        self._tokens: list[int] = list(tokens)

    @property
    def tokens(self) -> tuple[int, ...]:
        """The synced tokens, position 0 first."""
        return tuple(self._tokens)

    def __len__(self) -> int:
        return len(self._tokens)

    def plan(self, context: Sequence[int]) -> SyncPlan:
        """What syncing to ``context`` takes (the cache must hold ``context[:-1]``)."""
        target = prefix_target(context)
        n = len(self._tokens)
        if n == 0:
            return Reset(to=len(target))
        shared = common_prefix_len(self._tokens, target)
        if shared == n:
            if n == len(target):
                return AlreadySynced()
            return Extend(from_=n, to=len(target))
        if shared == 0:
            return Reset(to=len(target))
        return Truncate(keep=shared, to=len(target))

    def reference_plan(self, context: Sequence[int]) -> SyncPlan:
        """The plan the reference draft runner would make (no ``Truncate``)."""
        plan = self.plan(context)
        if isinstance(plan, Truncate):
            return Reset(to=plan.to)
        return plan

    # -- bookkeeping, each called only after the matching decode succeeded --

    def record_extend(self, delta: Sequence[int]) -> None:
        """``delta`` was prefilled after the synced tokens."""
        self._tokens.extend(delta)

    def record_truncate(self, keep: int) -> None:
        """Positions ``>= keep`` were removed from the cache."""
        del self._tokens[keep:]

    def record_reset(self, prefix: Sequence[int]) -> None:
        """The cache was cleared and ``prefix`` prefilled."""
        self._tokens = list(prefix)

    def record_proposal_step(self, current: int) -> None:
        """A proposal step decoded ``current``; the cache now holds it."""
        self._tokens.append(current)
