"""One speculation step as named pieces, with a typed record between each.

:meth:`~skippy_tui.engine.speculator.Speculator._loop` runs, per step::

    choose k ─▶ KChoice ─▶ sync the draft ─▶ Synced ─▶ propose ─▶ Proposed
      ─▶ verify ─▶ Verified ─▶ commit ─▶ Committed
      ─▶ Step (all five) ─▶ step_event ─▶ StepVerified, and the k policy learns from it

The pieces that touch a model (choosing k, sync, propose, verify) are methods
of the speculator; this module holds the records, the reply's running state
with the commit rule (:meth:`Reply.commit`: tokens in, text and a stop reason
out — pure, given a vocabulary) and the builders of the step's and the
reply's final event. Records are frozen and slotted: a few per step, none
per token (the loop is timed per token).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from .drafting.model import Proposal
from .events import FinishReason, ReplyFinished, Rollback, StepVerified, SyncInfo, TextSpan, TokenInfo
from .policy.adaptive import AdaptiveK
from .sampling.params import PenaltyWindow, SamplingParams, top_softmax
from .sampling.verify import ReplySampler, Verdict
from .settings import GenerationSettings
from .stats import AcceptanceStats
from .text import SpanQueue, StopStringMatcher, Utf8Assembler

TOP_K_SHOWN = 5
"""Entries in the panel's target/draft top-k lists at the first rejection."""

NO_SYNC = SyncInfo("none")


class Vocab(Protocol):
    """What committing and reporting tokens needs of the target model
    (:class:`~skippy_tui.engine.native.model.Model` satisfies it)."""

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens."""
        ...

    def piece(self, token: int) -> bytes:
        """The raw bytes of one token, special tokens not rendered."""
        ...

    def token_text(self, token: int) -> str:
        """Display text of one token, special tokens rendered."""
        ...


# -- the records a step passes along -------------------------------------------------


@dataclass(frozen=True, slots=True)
class KChoice:
    """How many tokens this step asks the drafter for, and who measures the step.

    ``k``: the proposal length (0 = a plain step). ``reason``: why this k (the
    event's ``k_reason``). ``policy``: the :class:`AdaptiveK` that observes the
    finished step (costs, acceptance). ``ngram_offer``: with ``source = "auto"``,
    the tokens the n-gram match offered this step (judged against what gets
    committed), else empty.
    """

    k: int
    reason: str
    policy: AdaptiveK
    ngram_offer: Sequence[int] = ()


@dataclass(frozen=True, slots=True)
class Synced:
    """How the draft's KV cache was brought to the committed context, and its ms."""

    info: SyncInfo
    ms: float


NOT_SYNCED = Synced(NO_SYNC, 0.0)
"""A step without a proposal syncs nothing."""


@dataclass(frozen=True, slots=True)
class Proposed:
    """The draft's proposal (empty below ``n_min``; its rows kept) and the ms it took;
    ``note``: why a routed model's proposal did not stop where a copy began (for the
    event's ``k_reason``; empty where it stopped or none began)."""

    proposal: Proposal
    ms: float
    note: str = ""


NOTHING_PROPOSED = Proposed(Proposal(), 0.0)
"""A plain step's proposal."""


@dataclass(frozen=True, slots=True)
class Verified:
    """The target's verdict on a proposal.

    ``logits``: the target's rows ``(k + 1, n_vocab)`` over ``[last, d1..dk]``.
    ``ms``: the verify decode and the verification rule together.
    """

    logits: np.ndarray
    verdict: Verdict
    ms: float


@dataclass(frozen=True, slots=True)
class Committed:
    """What a step added to the reply.

    ``tokens``: the accepted drafts then the target's token, in order (what the
    step could commit). ``n_used``: how many of them joined the reply (an EOS
    and anything after a stop do not). ``reason``: why the reply ends after this
    step, else None. ``delta``: the text released to the stream, as
    ``(text, origin)`` spans. ``reached``: the target's own token was looked at
    (False when the reply ended inside the accepted drafts).
    """

    tokens: tuple[int, ...]
    n_accepted: int
    n_used: int
    reason: FinishReason | None
    delta: list[tuple[str, str]]
    reached: bool

    @property
    def n_looked(self) -> int:
        """Tokens looked at: the used ones and an EOS that ended the reply."""
        return self.n_used + (self.reason == "eos")


@dataclass(frozen=True, slots=True)
class Step:
    """Everything one step did, for its event and for the k policy that measures it;
    ``rollback``: how the target's cache dropped what the step did not commit (None:
    nothing to drop)."""

    choice: KChoice
    synced: Synced
    proposed: Proposed
    verified: Verified
    committed: Committed
    rollback: Rollback | None = None

    @property
    def n_proposed(self) -> int:
        return len(self.proposed.proposal.tokens)

    @property
    def rejected(self) -> bool:
        """A proposed token was rejected (the target's KV cache rolled back)."""
        return self.committed.n_accepted < len(self.proposed.proposal.tokens)


# -- the reply a step commits to --------------------------------------------------


class Reply:
    """One reply's running state: its context, tokens, text and totals so far.

    ``context`` is the caller's list (prompt, then every committed token) and
    grows in place. ``gen`` is read at every step (a live ``sampling`` applies
    mid-reply; see :meth:`follow`); its stop strings are read once.
    """

    __slots__ = (
        "_seen",
        "_spans",
        "_stops",
        "_utf8",
        "context",
        "gen",
        "sampler",
        "stats",
        "text",
        "token_ids",
        "vocab",
        "window",
    )

    def __init__(self, context: list[int], gen: GenerationSettings, sampler: ReplySampler, vocab: Vocab) -> None:
        self.context = context
        self.gen = gen
        self.sampler = sampler
        self.vocab = vocab
        self.window = penalty_window(sampler.params, context)
        self.token_ids: list[int] = []
        self.text: list[str] = []
        self.stats = AcceptanceStats()
        self._utf8, self._stops, self._spans = Utf8Assembler(), StopStringMatcher(gen.stop), SpanQueue()
        self._seen = gen.sampling

    @property
    def remaining(self) -> int:
        """Tokens the reply may still add (``max_tokens`` minus those committed)."""
        return self.gen.max_tokens - len(self.token_ids)

    def follow(self) -> dict[str, object] | None:
        """Apply a sampling change made mid-reply (F3) from this step; the seed stays the reply's.

        Returns the new settings as events record them (:func:`sampling_dict`), or
        None when nothing changed.
        """
        sampling = self.gen.sampling
        if sampling is self._seen:
            return None
        self._seen = sampling
        wanted = dataclasses.replace(sampling, seed=self.sampler.params.seed)
        if wanted == self.sampler.params:
            return None
        self.sampler.params = wanted
        self.window = penalty_window(wanted, self.context)
        return sampling_dict(wanted, self.sampler.seed)

    def commit(self, proposal: Proposal, verdict: Verdict) -> Committed:
        """Add the accepted drafts and the target's token, one by one, until one ends the reply.

        Each token is checked for end of generation (not added), then added to the
        context, the penalty window and the text; the text is released through the
        stop-string matcher (a stop ends the reply, its text never released), and
        ``max_tokens`` ends it after the token that reaches it.
        """
        n_acc = verdict.n_accepted
        tokens = (*proposal.tokens[:n_acc], verdict.committed)
        vocab, window, utf8, spans, stops = self.vocab, self.window, self._utf8, self._spans, self._stops
        context, token_ids, max_tokens = self.context, self.token_ids, self.gen.max_tokens
        reason: FinishReason | None = None
        delta: list[tuple[str, str]] = []
        n_used = 0
        for i, tok in enumerate(tokens):
            if vocab.is_eog(tok):
                reason = "eos"
                break
            context.append(tok)
            token_ids.append(tok)
            if window is not None:
                window.push(tok)
            n_used += 1
            piece = utf8.feed(vocab.piece(tok))
            spans.push(piece, "draft" if i < n_acc else "target")
            released, hit = stops.push(piece)
            delta += spans.take(len(released))
            if hit:
                reason = "stop"
                break
            if len(token_ids) >= max_tokens:
                reason = "max_tokens"
                break
        self.text += [s for s, _ in delta]
        reached = n_used + (reason == "eos") > n_acc
        return Committed(tokens, n_acc, n_used, reason, delta, reached)

    def finish(self, reason: FinishReason, error: str, prefill_ms: float, n_past: int) -> ReplyFinished:
        """Release the text still held (unless a stop string ended the reply) and total the reply."""
        tail = ""
        if reason != "stop":
            rest = self._utf8.flush()
            self._spans.push(rest, "target")
            released, _ = self._stops.push(rest)
            tail = released + self._stops.flush()
        self.text.append(tail)
        stats = self.stats
        return ReplyFinished(
            reason=reason,
            token_ids=tuple(self.token_ids),
            text="".join(self.text),
            n_tokens=len(self.token_ids),
            n_steps=stats.n_steps,
            n_drafted=stats.n_drafted,
            n_accepted=stats.n_accepted,
            acceptance_rate=stats.acceptance_rate,
            mean_accepted_length=stats.mean_accepted_length,
            per_position=stats.per_position,
            tokens_per_second=stats.tokens_per_second,
            generation_ms=stats.generation_ms,
            prefill_ms=prefill_ms,
            n_past=n_past,
            tail=tail,
            error=error,
            seed=self.sampler.seed,
            dropped_bytes=self._utf8.dropped,
        )


# -- the step's event -----------------------------------------------------------------


def step_event(
    step: Step, index: int, n_past: tuple[int, int], vocab: Vocab, sampling: dict[str, object] | None = None
) -> StepVerified:
    """The :class:`StepVerified` event of ``step``, the reply's ``index``-th (from 0).

    ``n_past``: tokens in the target's KV cache before and after the step.
    ``sampling``: the settings from this step on when they changed mid-reply.
    At the first rejected position the event carries both models' top
    :data:`TOP_K_SHOWN` (the draft's when the draft has a row there).
    """
    tt = vocab.token_text
    proposed, verified, committed = step.proposed, step.verified, step.committed
    proposal, n_acc = proposed.proposal, committed.n_accepted
    proposed_info = tuple(TokenInfo(t, tt(t), p) for t, p in zip(proposal.tokens, proposal.probs))
    target_top: tuple[TokenInfo, ...] = ()
    draft_top: tuple[TokenInfo, ...] = ()
    if n_acc < len(proposal.tokens):
        target_top = tuple(TokenInfo(i, tt(i), p) for i, p in top_softmax(verified.logits[n_acc], TOP_K_SHOWN))
        if n_acc < len(proposal.rows):
            draft_top = tuple(TokenInfo(i, tt(i), p) for i, p in top_softmax(proposal.rows[n_acc], TOP_K_SHOWN))
    if not committed.reached:
        token, kind = None, "none"
    else:
        token = TokenInfo(committed.tokens[-1], tt(committed.tokens[-1]))
        kind = "plain" if not proposal.tokens else ("bonus" if n_acc == len(proposal.tokens) else "correction")
    return StepVerified(
        index=index,
        n_past_before=n_past[0],
        n_past_after=n_past[1],
        k=step.choice.k,
        sync=step.synced.info,
        proposed=proposed_info,
        n_accepted=n_acc,
        committed=token,
        commit_kind=kind,  # type: ignore[arg-type]
        target_top=target_top,
        draft_top=draft_top,
        sync_ms=step.synced.ms,
        draft_ms=proposed.ms,
        verify_ms=verified.ms,
        delta=tuple(TextSpan(s, o) for s, o in committed.delta),  # type: ignore[arg-type]
        k_reason=step.choice.reason + (" (handed to the n-gram: a copy began)" if proposal.stopped else proposed.note),
        draft_source=proposal.source if proposal.tokens else "",
        p_target=verified.verdict.p_target,
        sampling=sampling,
        rollback=step.rollback,
    )


def sampling_dict(params: SamplingParams, seed: int) -> dict[str, object]:
    """The sampling settings as events record them, with the reply's resolved seed."""
    out: dict[str, object] = {f.name: getattr(params, f.name) for f in dataclasses.fields(params)}
    out["seed"] = seed
    out["seed_fixed"] = params.seed is not None
    return out


def penalty_window(params: SamplingParams, context: Sequence[int]) -> PenaltyWindow | None:
    """The penalty history of ``context``, or None when the penalties are off."""
    return PenaltyWindow(params.repeat_last_n, context) if params.penalised else None


def failed(message: str, n_past: int, reason: FinishReason = "error") -> ReplyFinished:
    """The event of a reply that ended before its first step (``n_past``: the target's KV cache)."""
    return ReplyFinished(
        reason=reason,
        token_ids=(),
        text="",
        n_tokens=0,
        n_steps=0,
        n_drafted=0,
        n_accepted=0,
        acceptance_rate=0.0,
        mean_accepted_length=0.0,
        per_position=(),
        tokens_per_second=0.0,
        generation_ms=0.0,
        prefill_ms=0.0,
        n_past=n_past,
        error=message,
    )
