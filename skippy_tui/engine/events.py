"""Immutable events the engine emits while it generates a reply.

Each event is a frozen dataclass named as a fact that happened. ``to_dict``
gives a JSON-ready dict with a ``"type"`` field; ``event_from_dict`` reverses it.
The CLI's ``--json`` lines, the transcript file and the replay view all use this
one shape. Units: token counts in tokens, times in ms, probabilities in [0, 1].
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

FinishReason = Literal["eos", "stop", "max_tokens", "context_full", "cancelled", "error"]
Origin = Literal["draft", "target"]
CommitKind = Literal["bonus", "correction", "plain", "none"]


@dataclass(frozen=True, slots=True)
class TokenInfo:
    """One token: its id, its text (special tokens rendered), a probability.

    ``prob`` is the draft's probability for proposed tokens and the target's for
    top-k lists; ``None`` where no distribution applies.
    """

    id: int
    text: str
    prob: float | None = None


@dataclass(frozen=True, slots=True)
class TextSpan:
    """A piece of committed text and where its tokens came from."""

    text: str
    origin: Origin


@dataclass(frozen=True, slots=True)
class SyncInfo:
    """The draft KV sync plan a step ran: ``kind`` in synced/extend/truncate/reset,
    or ``none`` for a step without a proposal (plain decoding).

    ``start``/``end`` are the prefilled range ``[start, end)`` (for truncate,
    ``start`` is the number of tokens kept); both 0 for ``synced``.
    ``folded``: the range was not decoded by the sync itself but in the same
    batch as the proposal's first draft call (its time is in the draft's).
    ``via``: how a truncate dropped the tail: ``kv`` (or empty: the KV cache dropped
    it), ``snapshot`` (a recurrent state rolled back to a snapshot) or ``restore`` (a
    recurrent state restored to one saved at ``start`` tokens, the rest decoded again).
    """

    kind: str
    start: int = 0
    end: int = 0
    folded: bool = False
    via: str = ""

    def label(self) -> str:
        """Short badge text: ``synced``, ``extend 41..44``, ``truncate 38→44`` (``rollback
        38→44`` from a snapshot, ``restore 38→44`` from a saved state), ``reset 0..44``."""
        if self.kind == "none":
            return "plain"
        if self.kind == "synced":
            return "synced"
        if self.kind == "truncate":
            verb = {"snapshot": "rollback", "restore": "restore"}.get(self.via, "truncate")
            return f"{verb} {self.start}→{self.end}"
        return f"{self.kind} {self.start}..{self.end}"


@dataclass(frozen=True, slots=True)
class Rollback:
    """How the target's KV cache dropped the rows a step did not commit (rejected drafts,
    or drafts past an end of the reply).

    ``via``: ``kv`` (an attention cache dropped them), ``snapshot`` (a recurrent state
    rolled back to a snapshot llama.cpp kept), ``restore`` (a recurrent state restored
    to the one saved before the verify, then the kept rows decoded again) or ``reset``
    (nothing could drop them: the cache was emptied and refilled). ``dropped``: rows
    the cache let go; ``redecoded``: rows decoded again; ``ms``: the time it took.
    """

    via: str
    dropped: int
    redecoded: int = 0
    ms: float = 0.0

    @classmethod
    def of(cls, info: SyncInfo, before: int, ms: float) -> Rollback | None:
        """The rollback a cache's sync ``info`` did, from ``before`` cached rows (None: none)."""
        if info.kind == "truncate":
            return cls(info.via or "kv", before - info.start, info.end - info.start, ms)
        if info.kind == "reset":
            return cls("reset", before, info.end, ms)
        return None

    def label(self) -> str:
        """``drop 3``, ``rollback 3`` (snapshot), ``restore 3 +2`` (2 decoded again), ``reset +41``."""
        if self.via == "restore":
            return f"restore {self.dropped} +{self.redecoded}"
        if self.via == "reset":
            return f"reset +{self.redecoded}"
        return f"{'rollback' if self.via == 'snapshot' else 'drop'} {self.dropped}"


@dataclass(frozen=True, slots=True)
class Event:
    """Base class: every event serialises with a ``type`` field."""

    type: ClassVar[str] = "event"

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        for f in dataclasses.fields(self):
            out[f.name] = _plain(getattr(self, f.name))
        return out


@dataclass(frozen=True, slots=True)
class ReplyStarted(Event):
    """The prompt was rendered and prefilled; generation begins.

    ``target_sync``: how the target KV cache was brought to the prompt (a new
    turn is an ``extend``; an edit or regenerate a ``truncate`` or ``reset``).
    ``draft_sync``: the same for the draft (``none`` without a draft model).
    Both prefills are timed apart from generation (``prefill_ms``,
    ``draft_prefill_ms``). ``sampling``: the settings the reply starts with —
    temperature, top_k, top_p, min_p, the penalties, ``sampler``, ``seed`` (the
    resolved seed) and ``seed_fixed`` (False when it was drawn for this reply).
    ``p_min``: the draft's stopping probability at the start. ``verify``: how its verify
    batches relate to plain decoding (:meth:`.policy.exactness.VerifyPlan.short`): ``exact ≤7
    rows`` or ``exact`` (bit-identical rows: a greedy reply is plain decoding's token
    for token), ``not bit-exact`` (one batch on a build that certifies none) or ``not
    exact`` (one batch, unchecked: ``profile = "fast"``, ``exact = false``); ``""`` for a
    reply that does not speculate (and in files written before it was recorded).
    """

    type: ClassVar[str] = "reply_started"
    turn: int
    n_prompt: int
    n_ctx: int
    target_sync: SyncInfo
    prefill_ms: float
    speculative: bool
    draft_source: str
    n_draft: int | str
    sampling: dict[str, Any] = field(default_factory=dict)
    draft_sync: SyncInfo = field(default_factory=lambda: SyncInfo("none"))
    draft_prefill_ms: float = 0.0
    p_min: float = 0.0
    verify: str = ""


@dataclass(frozen=True, slots=True)
class StepVerified(Event):
    """One speculation step: sync the draft, propose, verify, commit.

    ``proposed`` holds the draft's tokens (``prob`` = draft probability);
    the first ``n_accepted`` were accepted. ``committed`` is the target's token
    after them: a ``correction`` at the first mismatch, a ``bonus`` after a fully
    accepted proposal, ``plain`` for a step with no proposal; ``None`` (kind
    ``none``) when the reply ended (EOS, stop, max tokens) inside the accepted
    drafts, before the target's token. ``target_top`` and
    ``draft_top`` are the top-k at the first rejected position (empty when all
    were accepted). ``n_past_before``/``n_past_after``: tokens in the target KV
    cache. ``delta``: the text this step released to the stream (it may lag the
    tokens while a possible stop string or a split UTF-8 character is held).
    ``k_reason``: why this k (for ``n_draft = "auto"``, the expected tokens/s of
    the alternatives). ``draft_source``: what proposed (``model``/``ngram``;
    empty for a step without a proposal). An n-gram proposal's ``prob`` is
    ``None`` and its ``sync`` is what the n-gram index took in. A proposed
    token's ``prob`` is the draft's probability under the distribution it
    picked from (its raw softmax when greedy). ``p_target``: at the first
    rejection, the target's probability of the rejected token, likewise (None
    when nothing was rejected). ``sampling``: the sampling settings from this
    step on, when they changed during the reply (F3), else None. ``rollback``: how
    the target's cache dropped what the step did not commit (None: nothing to drop).
    """

    type: ClassVar[str] = "step"
    index: int
    n_past_before: int
    n_past_after: int
    k: int
    sync: SyncInfo
    proposed: tuple[TokenInfo, ...]
    n_accepted: int
    committed: TokenInfo | None
    commit_kind: CommitKind
    target_top: tuple[TokenInfo, ...]
    draft_top: tuple[TokenInfo, ...]
    sync_ms: float
    draft_ms: float
    verify_ms: float
    delta: tuple[TextSpan, ...]
    k_reason: str = ""
    draft_source: str = ""
    p_target: float | None = None
    sampling: dict[str, Any] | None = None
    rollback: Rollback | None = None

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.delta)

    @property
    def n_committed(self) -> int:
        return self.n_accepted + (self.committed is not None)


@dataclass(frozen=True, slots=True)
class ReplyFinished(Event):
    """The reply ended.

    ``reason``: eos, stop, max_tokens, context_full, cancelled or error (then
    ``error`` says why). Totals: ``acceptance_rate`` = accepted / drafted
    (0.0 when nothing was drafted); ``mean_accepted_length`` = accepted draft
    tokens per speculative step, *not* counting the bonus/correction token (vLLM
    counts it; add 1 to compare); ``per_position`` = acceptance rate by draft
    position (index 0 = first proposed token); ``tokens_per_second`` = generated
    tokens / generation time, prefill excluded. ``tail``: text released only at
    the end (held back as a possible stop-string start); the stream plus
    ``tail`` equals ``text``. ``n_past``: tokens in the target KV cache.
    ``seed``: the reply's random seed (``--seed`` with it reproduces the reply).
    ``dropped_bytes``: bytes of a character the reply's end cut short (e.g. half
    an emoji at max_tokens), left out of ``text`` rather than shown as U+FFFD.
    """

    type: ClassVar[str] = "finish"
    reason: FinishReason
    token_ids: tuple[int, ...]
    text: str
    n_tokens: int
    n_steps: int
    n_drafted: int
    n_accepted: int
    acceptance_rate: float
    mean_accepted_length: float
    per_position: tuple[float, ...]
    tokens_per_second: float
    generation_ms: float
    prefill_ms: float
    n_past: int
    tail: str = ""
    error: str = ""
    seed: int | None = None
    dropped_bytes: int = 0


EVENT_TYPES: dict[str, type[Event]] = {c.type: c for c in (ReplyStarted, StepVerified, ReplyFinished)}


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (tuple, list)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


@functools.cache
def _field_hints(cls: type) -> tuple[tuple[str, Any], ...]:
    """A dataclass's fields with their resolved types: resolving them (``get_type_hints``
    evaluates every annotation) took most of a transcript's load when done per event."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls))


def _build(hint: Any, value: Any) -> Any:
    """``value`` (parsed JSON) as ``hint``, checked: a wrongly typed field is a ``TypeError``
    here, at load, not a crash later while rendering."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if value is None:
        if origin in (typing.Union, types.UnionType) and type(None) in args:
            return None
        raise TypeError(f"null where {_name(hint)} is expected")
    if origin is tuple:
        if not isinstance(value, list):
            raise TypeError(f"{value!r} is not a list")
        return tuple(_build(args[0], v) for v in value)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        errors = []
        for a in inner:
            try:
                return _build(a, value)
            except TypeError as e:
                errors.append(str(e))
        raise TypeError("; ".join(errors))
    if origin is typing.Literal:
        if value not in args:
            raise TypeError(f"{value!r} is not one of {', '.join(map(repr, args))}")
        return value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, dict):
            raise TypeError(f"{value!r} is not an object")
        fields = {}
        for name, field_hint in _field_hints(hint):
            if name in value:
                try:
                    fields[name] = _build(field_hint, value[name])
                except TypeError as e:
                    raise TypeError(f"{name}: {e}") from None
        return hint(**fields)
    if hint is bool:
        ok = isinstance(value, bool)
    elif hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif hint is str:
        ok = isinstance(value, str)
    elif origin is dict or hint is dict:
        ok = isinstance(value, dict)
    else:
        ok = True  # Any and the like
    if not ok:
        raise TypeError(f"{value!r} is not {_name(hint)}")
    return value


def _name(hint: Any) -> str:
    return {int: "a whole number", float: "a number", str: "a string", bool: "true/false"}.get(hint, str(hint))


def event_from_dict(data: dict[str, Any]) -> Event:
    """Rebuild an event from :meth:`Event.to_dict` output.

    Raises:
        ValueError: for an unknown ``type`` or missing fields.
    """
    cls = EVENT_TYPES.get(data.get("type", ""))
    if cls is None:
        raise ValueError(f"unknown event type {data.get('type')!r}")
    try:
        return _build(cls, data)
    except (KeyError, TypeError) as e:
        raise ValueError(f"malformed {cls.type} event: {e}") from e
