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

Cost: a plan compares the cached tokens with the context, O(context). Within a
reply the context only grows, so the engine passes an *epoch* (one object per
reply): a state synced earlier in the same epoch trusts the prefix it verified
then and compares only what came after it, O(new tokens) per step.
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


def common_prefix_len(a: Sequence[int], b: Sequence[int], start: int = 0) -> int:
    """Length of the longest common prefix of two token sequences, given that the
    first ``start`` tokens are known to be equal (they are not compared)."""
    n = min(len(a), len(b))
    i = min(start, n)
    while i < n and a[i] == b[i]:
        i += 1
    return i


class DraftSyncState:
    """Tokens one KV cache has materialised, and the plans derived from them.

    Named after the draft runner it comes from; the engine keeps one for the
    target cache too (the same rules decide what a new chat turn reuses).
    """

    __slots__ = ("_epoch", "_tokens", "_verified")

    def __init__(self, tokens: Sequence[int] = ()) -> None:
        self._tokens: list[int] = list(tokens)
        # the first _verified tokens equalled the context synced in _epoch
        self._epoch: object | None = None
        self._verified = 0

    @property
    def tokens(self) -> tuple[int, ...]:
        """The synced tokens, position 0 first."""
        return tuple(self._tokens)

    def __len__(self) -> int:
        return len(self._tokens)

    def plan(self, context: Sequence[int], epoch: object | None = None) -> SyncPlan:
        """What syncing to ``context`` takes (the cache must hold ``context[:-1]``).

        ``epoch``: the caller's promise that, since :meth:`mark_synced` was last
        called with the same epoch, ``context`` has only grown at its end; the
        prefix verified then is not compared again (O(new tokens), not O(context)).
        """
        want = max(len(context) - 1, 0)
        n = len(self._tokens)
        if n == 0:
            return Reset(to=want)
        trusted = self._verified if epoch is not None and epoch is self._epoch else 0
        shared = common_prefix_len(self._tokens, context, min(trusted, want))
        shared = min(shared, want)
        if shared == n:
            if n == want:
                return AlreadySynced()
            return Extend(from_=n, to=want)
        if shared == 0:
            return Reset(to=want)
        return Truncate(keep=shared, to=want)

    def reference_plan(self, context: Sequence[int]) -> SyncPlan:
        """The plan the reference draft runner would make (no ``Truncate``)."""
        plan = self.plan(context)
        if isinstance(plan, Truncate):
            return Reset(to=plan.to)
        return plan

    def mark_synced(self, epoch: object | None) -> None:
        """The synced tokens now equal the context's prefix (a sync just completed);
        a later :meth:`plan` in the same ``epoch`` need not compare them again."""
        self._epoch, self._verified = epoch, len(self._tokens)

    # -- bookkeeping, each called only after the matching decode succeeded --

    def record_extend(self, delta: Sequence[int]) -> None:
        """``delta`` was prefilled after the synced tokens."""
        self._tokens.extend(delta)

    def record_truncate(self, keep: int) -> None:
        """Positions ``>= keep`` were removed from the cache."""
        del self._tokens[keep:]
        self._verified = min(self._verified, keep)

    def record_reset(self, prefix: Sequence[int]) -> None:
        """The cache was cleared and ``prefix`` prefilled."""
        self._tokens = list(prefix)
        self._verified = 0

    def record_proposal_step(self, current: int) -> None:
        """A proposal step decoded ``current``; the cache now holds it."""
        self._tokens.append(current)
