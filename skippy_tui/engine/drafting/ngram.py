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

:class:`NgramDrafter` is a :class:`~skippy_tui.engine.drafting.model.Drafter`. Its
sync plan reports what the *index* took in, with the kinds a KV cache uses:
``extend a..b`` (context tokens ``a..b-1`` indexed), ``truncate keep→b`` (an
edit: entries past ``keep`` dropped, then extended), ``reset 0..b`` (rebuilt),
``synced``. The panel shows it like a model's sync; it costs microseconds.
Proposed tokens carry ``prob = None`` (no distribution) and no logits rows.

The drafters that pair it with a model (``ngram+model``, ``auto``) are in
:mod:`.combined`.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import BoundsError
from ..events import SyncInfo
from ..sampling.verify import DraftRule
from .model import Proposal
from .sync import common_prefix_len

NGRAM_MAX = 4
NGRAM_MIN = 2
UNLIMITED_ROOM = 1 << 30
COPY_CAP = 16  # a copy this long is as good as any longer one (the run buckets end at 12 + NGRAM_MIN)
NGRAM_LOOKUP_MS = 0.01
"""What an n-gram proposal is taken to cost before its steps measure it (a dict lookup), ms."""


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
