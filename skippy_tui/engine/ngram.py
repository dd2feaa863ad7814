"""N-gram (prompt-lookup) drafting: proposals copied from the context itself.

When a reply repeats what the context already holds — a text being rewritten
with small edits, code being refactored, a quoted passage, a loop — the tokens
that followed the last occurrence of the current suffix are a good guess for
what comes next. No draft model is needed (Saxena 2023, "prompt lookup
decoding"; llama.cpp's ``lookup`` example).

:class:`NgramIndex` maps every n-gram of the context (``n`` from ``n_max``
down to ``n_min``) to the position after its most recent occurrence. A lookup
takes the longest suffix of the context that occurred before and copies what
followed it, overlapping into its own output when the copy reaches the end of
the context (so a repeating pattern is continued, LZ77-style).

:class:`NgramDrafter` is a :class:`~skippy_tui.engine.drafters.Drafter`. Its
sync plan reports what the *index* took in, with the kinds a KV cache uses:
``extend a..b`` (context tokens ``a..b-1`` indexed), ``truncate keep→b`` (an
edit: entries past ``keep`` dropped, then extended), ``reset 0..b`` (rebuilt),
``synced``. The panel shows it like a model's sync; it costs microseconds.
Proposed tokens carry ``prob = None`` (no distribution) and no logits rows.

:class:`CombinedDrafter` (``ngram+model``) proposes from the n-gram index when
the context's suffix has a match, else from the draft model; only the drafter
that proposes is synced, so a model left behind catches up in one batched
prefill when it is next used.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .drafters import Drafter, ModelDrafter, Proposal
from .errors import BoundsError
from .events import SyncInfo
from .sync import common_prefix_len
from .verify import DraftRule

NGRAM_MAX = 4
NGRAM_MIN = 2
UNLIMITED_ROOM = 1 << 30
COPY_CAP = 16  # a copy this long is as good as any longer one (the run buckets end at 12 + NGRAM_MIN)
NGRAM_LOOKUP_MS = 0.01
"""What an n-gram proposal is taken to cost before its steps measure it (a dict lookup), ms."""

HANDOFF = 4
"""Copy length at which ``auto``'s draft model stops its proposal: its own tokens have begun
a copy of an earlier span, which the n-gram continues next step for almost nothing
(a rewrite's reply starts with no match; the model drafted 8 tokens of the copy at
~12 ms each where one token and a lookup would have found it)."""


class NgramIndex:
    """N-gram → position after its most recent occurrence, over a growing token list."""

    def __init__(self, n_max: int = NGRAM_MAX, n_min: int = NGRAM_MIN) -> None:
        if not 1 <= n_min <= n_max:
            raise BoundsError("ngram sizes", (n_min, n_max), "1 <= n_min <= n_max")
        self.n_max, self.n_min = n_max, n_min
        self.tokens: list[int] = []
        self._after: dict[tuple[int, ...], int] = {}

    def __len__(self) -> int:
        return len(self.tokens)

    def extend(self, tokens: Sequence[int]) -> None:
        """Append tokens; each becomes the continuation of the n-grams ending before it."""
        toks, after = self.tokens, self._after
        for t in tokens:
            p = len(toks)
            for n in range(self.n_min, min(self.n_max, p) + 1):
                after[tuple(toks[p - n : p])] = p
            toks.append(t)

    def truncate(self, keep: int) -> None:
        """Keep the first ``keep`` tokens (rebuilds the map)."""
        kept = self.tokens[:keep]
        self.tokens, self._after = [], {}
        self.extend(kept)

    def match(self, context: Sequence[int] | None = None, extra: Sequence[int] = ()) -> tuple[int, int] | None:
        """``(n, position)`` of the longest suffix of ``context`` (default: the indexed
        tokens) followed by ``extra`` seen before, and where its continuation starts;
        None without a match."""
        ctx = self.tokens if context is None else context
        end, m = len(ctx) + len(extra), len(extra)
        for n in range(min(self.n_max, end), self.n_min - 1, -1):
            tail = tuple(extra[m - n :]) if n <= m else (*ctx[len(ctx) - (n - m) :], *extra)
            p = self._after.get(tail)
            if p is not None and p < end:
                return n, p
        return None

    def copy_length(self, context: Sequence[int] | None = None, cap: int = COPY_CAP) -> int:
        """How many tokens at the end of ``context`` (default: the indexed tokens) repeat
        the tokens before the match's occurrence, up to ``cap``; 0 without a match.

        The match is at least ``n_min`` tokens; a longer copy says the context is
        already copying a span (whoever drafted its tokens), which makes the next token
        of that span far likelier to follow than after a short match in free text.
        """
        return self.copy_length_with(self.tokens if context is None else context, (), cap)

    def copy_length_with(self, context: Sequence[int], extra: Sequence[int], cap: int = COPY_CAP) -> int:
        """:meth:`copy_length` of ``context`` followed by ``extra`` (a proposal's tokens so
        far), without building the joined list."""
        m = self.match(context, extra)
        if m is None:
            return 0
        n, p = m
        n_ctx, end = len(context), len(context) + len(extra)

        def at(i: int) -> int:
            return context[i] if i < n_ctx else extra[i - n_ctx]

        while n < cap and p - 1 - n >= 0 and at(p - 1 - n) == at(end - 1 - n):
            n += 1
        return n

    def continuation(self, context: Sequence[int], k: int) -> list[int]:
        """Up to ``k`` tokens predicted to follow ``context`` (empty without a match)."""
        m = self.match(context)
        if m is None or k <= 0:
            return []
        _, p = m
        out: list[int] = []
        n = len(context)
        for i in range(k):
            j = p + i
            out.append(context[j] if j < n else out[j - n])
        return out


class NgramDrafter:
    """Prompt-lookup drafter: no model, proposals copied from the context."""

    source = "ngram"

    def __init__(self, n_max: int = NGRAM_MAX, n_min: int = NGRAM_MIN) -> None:
        self.index = NgramIndex(n_max, n_min)
        self._epoch: object | None = None  # the index equalled the context synced in this epoch

    def room(self, context: Sequence[int]) -> int:
        return UNLIMITED_ROOM

    def sync(self, context: Sequence[int], epoch: object | None = None) -> SyncInfo:
        """Index ``context`` (all of it: the last token is a continuation too).

        ``epoch``: as for a KV cache: within one epoch the context only grows, so
        a sync compares nothing and indexes only the new tokens.
        """
        info = self._sync(context, epoch)
        self._epoch = epoch
        return info

    def _sync(self, context: Sequence[int], epoch: object | None) -> SyncInfo:
        toks = self.index.tokens
        n = len(toks)
        trusted = epoch is not None and epoch is self._epoch
        if n <= len(context) and (trusted or list(context[:n]) == toks):
            if n == len(context):
                return SyncInfo("synced")
            if n == 0:  # as a KV cache reports a first fill
                self.index.extend(context)
                return SyncInfo("reset", 0, len(context))
            self.index.extend(context[n:])
            return SyncInfo("extend", n, len(context))
        keep = common_prefix_len(toks, context)
        self.index.truncate(keep)
        self.index.extend(context[keep:])
        return SyncInfo("truncate", keep, len(context)) if keep else SyncInfo("reset", 0, len(context))

    def has_match(self, context: Sequence[int]) -> bool:
        return self.index.match(context) is not None

    def propose(self, context: Sequence[int], k: int, p_min: float = 0.0, rule: DraftRule | None = None) -> Proposal:
        """Up to ``k`` tokens copied from after the suffix's last occurrence; call :meth:`sync` first.

        ``p_min`` and ``rule`` do not apply (there is no distribution: the proposal
        is deterministic, which every verification rule accepts as it is).
        """
        tokens = tuple(self.index.continuation(context, k))
        return Proposal(tokens, (None,) * len(tokens), (), self.source)

    def reset(self) -> None:
        self.index.truncate(0)
        self._epoch = None


class CombinedDrafter:
    """``ngram+model``: the n-gram index when it has a match, else the draft model."""

    source = "ngram+model"

    def __init__(self, ngram: NgramDrafter, model: ModelDrafter) -> None:
        self.ngram = ngram
        self.model = model
        self._route = "model"
        self._epoch: object | None = None  # the epoch of the last sync (for a late model sync)

    @property
    def cache(self):  # the model's KV cache, for close()/abort()
        return self.model.cache

    def room(self, context: Sequence[int]) -> int:
        return self.model.room(context)

    def sync(self, context: Sequence[int], epoch: object | None = None) -> SyncInfo:
        """Sync the index; sync the model too only when the index has no match."""
        self._epoch = epoch
        info = self.ngram.sync(context, epoch)
        if self.ngram.has_match(context):
            self._route = "ngram"
            return info
        self._route = "model"
        return self.model.sync(context, epoch)

    def propose(self, context: Sequence[int], k: int, p_min: float, rule: DraftRule | None = None) -> Proposal:
        if self._route == "ngram":
            proposal = self.ngram.propose(context, k, p_min)
            if proposal.tokens:
                return proposal
            self.model.sync(context, self._epoch)
        return self.model.propose(context, k, p_min, rule)

    def reset(self) -> None:
        self.ngram.reset()
        self.model.reset()


class AutoDrafter(CombinedDrafter):
    """``auto``: the n-gram index or the draft model, as each step's policy routes it.

    :meth:`available` tells the policy how long an n-gram proposal could be;
    :attr:`route` (``ngram`` or ``model``) is then set for the step, and only
    that drafter syncs and proposes. Without a draft model every step is an
    n-gram one (or plain). With a fixed k no policy routes: it drafts as
    ``ngram+model``.
    """

    source = "auto"

    def __init__(self, ngram: NgramDrafter, model: ModelDrafter | None) -> None:
        super().__init__(ngram, model)  # type: ignore[arg-type]
        self.route: str | None = None  # None: as ngram+model
        # whether a routed model's proposal may stop for the n-gram, asked once a copy begins
        # (None: always); see propose
        self.handoff: Callable[[], bool] | None = None

    @property
    def cache(self):  # the model's KV cache, for close()/abort()
        return self.model.cache if self.model is not None else None

    def room(self, context: Sequence[int]) -> int:
        return self.model.room(context) if self.model is not None else UNLIMITED_ROOM

    def available(self, context: Sequence[int], k: int, epoch: object | None = None) -> list[int]:
        """What the n-gram match would propose after ``context`` (up to ``k`` tokens;
        empty without a match); indexes the context first."""
        self.ngram.sync(context, epoch)
        return self.ngram.index.continuation(context, k)

    def prefill(self, context: Sequence[int], epoch: object | None = None) -> SyncInfo:
        """Before a reply: index the prompt and fill the model with it, ready for either route."""
        info = self.ngram.sync(context, epoch)
        return self.model.sync(context, epoch) if self.model is not None else info

    def sync(self, context: Sequence[int], epoch: object | None = None) -> SyncInfo:
        self._epoch = epoch
        if self.route == "ngram" or self.model is None:
            self._route = "ngram"
            return self.ngram.sync(context, epoch)
        if self.route == "model":
            self._route = "model"
            return self.model.sync(context, epoch)
        return super().sync(context, epoch)

    def propose(self, context: Sequence[int], k: int, p_min: float, rule: DraftRule | None = None) -> Proposal:
        """The routed drafter's proposal. A routed model's stops once its tokens copy an
        earlier span for :data:`HANDOFF` tokens: the next step's n-gram goes on with it."""
        if self._route == "ngram":
            proposal = self.ngram.propose(context, k, p_min)
            if proposal.tokens or self.model is None or self.route == "ngram":
                return proposal
            self.model.sync(context, self._epoch)
        return self.model.propose(context, k, p_min, rule, self._handoff(context))  # type: ignore[union-attr]

    def _handoff(self, context: Sequence[int]) -> Callable[[Sequence[int]], bool] | None:
        """When a routed model's proposal stops for the n-gram (None: it does not; the
        index must hold ``context``, as :meth:`available` left it)."""
        index = self.ngram.index
        if self.route != "model" or len(index) != len(context):
            return None
        gate, verdict = self.handoff, []  # the gate is asked at most once, when a copy begins

        def stop(tokens: Sequence[int]) -> bool:
            if index.copy_length_with(context, tokens) < HANDOFF:
                return False
            if not verdict:
                verdict.append(gate is None or gate())
            return verdict[0]

        return stop

    def reset(self) -> None:
        self.ngram.reset()
        if self.model is not None:
            self.model.reset()


def build_drafter(
    source: str, model: ModelDrafter | None, ngram: NgramDrafter | None = None, mtp: ModelDrafter | None = None
) -> Drafter | None:
    """The drafter for a ``speculation.source``, from a loaded draft model or MTP head
    (``model``: the one that drafts for ``model``, ``ngram+model`` and ``auto``), or None.

    ``model`` or ``mtp`` without such a drafter gives None (speculation off);
    ``ngram+model`` without one falls back to the n-gram drafter alone; ``auto`` works
    with or without one.
    """
    if source == "mtp":
        return mtp
    if source == "model":
        return model
    ngram = ngram if ngram is not None else NgramDrafter()
    if source == "auto":
        return AutoDrafter(ngram, model)
    if source == "ngram" or model is None:
        return ngram
    return CombinedDrafter(ngram, model)
