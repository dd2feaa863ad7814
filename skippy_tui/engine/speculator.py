"""The speculative decoding loop: sync, propose, verify, commit — one step at a time.

Each step (Leviathan et al. 2023; Chen et al. 2023; the layout of llama.cpp's
speculative example), one named piece each, passing the records of
:mod:`step` along:

0. choose ``k`` (:meth:`Speculator._choose_k` → ``KChoice``): fixed, or by the
   adaptive policy (:mod:`adaptive`), clamped to what fits;
1. bring the draft's KV cache to the committed context, a sync plan
   (:meth:`Speculator._sync_draft` → ``Synced``);
2. the draft proposes up to ``k`` tokens ``d1..dk`` after the last committed
   one (:meth:`Speculator._propose` → ``Proposed``);
3. the target decodes one batch ``[last, d1..dk]`` with logits at all ``k + 1``
   rows, and the proposal is verified by the reply's rule (:mod:`verify`):
   greedy, the coupled sampler (the default: the reply equals plain sampling
   with the same seed) or rejection sampling; the target's token after the
   accepted prefix is the correction or bonus (:meth:`Speculator._verify` →
   ``Verified``);
4. the tokens are committed one by one, checked for EOS/EOT, stop strings and
   max tokens (:meth:`step.Reply.commit` → ``Committed``), and rejected
   positions are removed from the target's KV cache
   (:meth:`Speculator._trim_target`);
5. the step's event is built from the records (:func:`step.step_event`), and
   the policy that chose ``k`` learns from the step (:meth:`Speculator._learn`).

A step with ``k = 0`` is plain decoding (one target token), so plain and
speculative generation share every line but the proposal. The loop emits
immutable events (:mod:`events`); it never prints and never raises a
:class:`SkippyError` — those end the reply with ``reason="error"``.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from functools import partial

import numpy as np

from .bounds import ContextCapacity, validate_capacity, validate_prompt_len
from .chat import ChatTemplate, Message, prompt_tokens
from .drafting.combined import HANDOFF, AutoDrafter, build_drafter
from .drafting.kvcache import KvCache
from .drafting.model import Drafter, ModelDrafter, Proposal
from .drafting.mtp import MtpDrafter
from .drafting.ngram import NGRAM_LOOKUP_MS, NgramDrafter
from .errors import BoundsError, ContextFullError, SkippyError
from .events import Event, FinishReason, ReplyStarted, Rollback
from .load.gguf_info import ModelInfo
from .native.invariance import Invariance
from .native.model import Context, Model
from .native.window import PromptSize
from .policy.adaptive import AdaptiveK, KPolicy
from .policy.book import PolicyBook
from .policy.chooser import SourceChooser
from .policy.exactness import plan_of
from .sampling.params import PenaltyWindow
from .sampling.verify import Judge, ReplySampler, Verdict
from .settings import GenerationSettings, SpeculationSettings
from .step import (
    NO_SYNC,
    NOT_SYNCED,
    NOTHING_PROPOSED,
    KChoice,
    Proposed,
    Reply,
    Step,
    Synced,
    Verified,
    failed,
    sampling_dict,
    step_event,
)


class Speculator:
    """Target model + optional draft source, generating replies as event streams.

    Not thread-safe: one generation at a time, all calls from one thread
    (except :meth:`abort` and settings updates, which are single assignments).
    """

    def __init__(
        self,
        target: Model,
        target_ctx: Context,
        template: ChatTemplate,
        drafter: Drafter | None = None,
        speculation: SpeculationSettings | None = None,
        target_info: ModelInfo | None = None,
        draft_info: ModelInfo | None = None,
        n_ctx: int | None = None,
        mtp: MtpDrafter | None = None,
    ) -> None:
        self.target = target
        # largest verify batch that decodes bit-identically to plain decoding (None = any)
        self.verify_rows: int | None = None
        self.invariance: Invariance | None = None
        self.target_info = target_info
        self.draft_info = draft_info
        # n_ctx: the configured window (tokens), which the context grows to as replies need
        self.target_cache = KvCache(target_ctx, n_ctx)
        self.template = template
        self.speculation = speculation or SpeculationSettings(enabled=drafter is not None or mtp is not None)
        # model drafters are kept aside so the draft source can change at runtime; any other
        # Drafter is used as given. The MTP head (mtp) drafts for "mtp", and for "model" and
        # "auto" where no draft model is loaded (model_drafter is then the head too)
        self.mtp_drafter = mtp
        self.model_drafter = drafter if isinstance(drafter, ModelDrafter) else mtp
        for d in (self.model_drafter, mtp):
            if d is not None:
                d.vocab_limit = min(d.vocab_limit, target.n_vocab)
        if mtp is not None:
            self.target_cache.followers.append(mtp)  # the head drops what the target drops
        self._ngram = NgramDrafter()
        self.drafter = drafter
        if drafter is None or self.model_drafter is not None:
            self.drafter = self._build(self.speculation.source)
        # the k policies by draft source and sampling mode (policy/book.py), installed for the drafter
        self.policies = PolicyBook(NGRAM_LOOKUP_MS)
        self._install_policy()
        self._turn = 0
        # one object per reply: within it the context only grows, so syncs compare only new tokens
        self._epoch: object | None = None
        # measures batch invariance (exact = true) when speculation is first used; None once done
        self.exactness_probe: Callable[[Callable[[float], None] | None], Invariance] | None = None
        # why speculation must stay off (a recurrent model whose state is too large to save), or ""
        self.no_rollback = ""
        # what llama.cpp changed in the load settings (it pads n_ctx), said once by the CLI and app, or ""
        self.load_note = ""
        # the numeric settings the draft model runs with (settings.numeric_settings), or "" without one
        self.draft_settings = ""

    # -- settings that apply from the next step -------------------------------------

    def update(self, **changes: object) -> SpeculationSettings:
        """Change speculation settings (validated); they apply from the next step.

        Raises:
            BoundsError: a value is out of bounds, or speculation is switched on where
                :attr:`no_rollback` forbids it; nothing changes.
        """
        new = replace(self.speculation, **changes)  # type: ignore[arg-type]
        if new.enabled and self.no_rollback:
            raise BoundsError("speculation.enabled", True, f"false: {self.no_rollback}")
        if new.k_max > self.speculation.k_max:  # a verify batch of k + 1 rows must fit both contexts
            t = self.target_cache.ctx
            d = getattr(self.model_drafter, "cache", None)
            validate_capacity(
                ContextCapacity("target", t.n_batch, t.n_ubatch),
                ContextCapacity("draft", d.ctx.n_batch, d.ctx.n_ubatch) if d is not None else None,
                new.k_max,
            )
        if new.source != self.speculation.source:
            drafter = self._build(new.source)
            if drafter is None:
                loaded = "draft model" if new.source == "model" else "MTP heads"
                raise BoundsError("speculation.source", new.source, f"ngram, ngram+model or auto (no {loaded} loaded)")
            self.drafter = drafter
        self.speculation = new
        self._install_policy()
        return self.speculation

    def _build(self, source: str) -> Drafter | None:
        return build_drafter(source, self.model_drafter, self._ngram, self.mtp_drafter)

    def _install_policy(self) -> None:
        """Point the k policy and the estimator at the drafter's source (:class:`PolicyBook`)."""
        source = self.drafter.source if self.drafter is not None else "none"
        model_source = self.model_drafter.source if self.model_drafter is not None else None
        self.policies.install(source, model_source, self.speculation.auto)
        if source == "auto" and not self.speculation.auto:  # no chooser routes a fixed k: it drafts as ngram+model
            self.drafter.route = None  # type: ignore[union-attr]

    @property
    def k_policy(self) -> KPolicy | SourceChooser:
        """What chooses k now (and with ``source = "auto"`` the source)."""
        return self.policies.k_policy

    @property
    def estimator(self) -> AdaptiveK:
        """The policy that measures every step, even with a fixed k (the verdict's)."""
        return self.policies.estimator

    def reset_policies(self) -> None:
        """Forget what the adaptive policies measured during replies (costs, acceptance) for
        every draft source; the load-time verify timings (:meth:`seed_verify_costs`) stay."""
        self.policies.reset()  # installed again as they were

    def learned(self) -> object:
        """What the adaptive policies have measured so far (the verify costs, every
        source's policy and ``source = "auto"``'s choosers), opaque, for :meth:`restore_learned`."""
        return self.policies.learned()

    def restore_learned(self, state: object | None) -> None:
        """Put back a state from :meth:`learned` (``None``: start afresh, as
        :meth:`reset_policies`). The bench keeps one per method, so each method learns
        only from its own replies, as a session using it would."""
        self.policies.restore(state)  # type: ignore[arg-type]  # installed again as they were

    def seed_verify_costs(self, timings_ms: dict[int, float]) -> None:
        """First estimates of the target's verify cost by batch size (ms), e.g. from the probe.

        Set :attr:`verify_rows` first: a batch longer than it is priced as its chunks,
        each a decode of its own (:class:`~.policy.measurements.VerifyCosts`), until measured.
        """
        self.policies.seed(timings_ms, self.verify_rows)

    def ensure_exact(self, report: Callable[[float], None] | None = None) -> None:
        """Run :attr:`exactness_probe` if speculation is on and it has not run yet, and
        verify as the profile and the probe's verdict say (:func:`~.policy.exactness.verify_plan`:
        the chunks it certifies, or with ``profile = "auto"`` one batch where it certifies
        fewer than 2 rows).

        The probe decodes on the target's context, so its KV cache is emptied first
        (the next reply prefills the conversation again). ``report`` gets the
        fraction of the probe done (0..1); what it raises ends the probe.

        Raises:
            DecodeError, ContextFullError: from the probe; it stays pending (as it
                does for anything ``report`` raises).
        """
        if self.exactness_probe is None or not self.speculation.enabled or self.drafter is None:
            return
        self.target_cache.reset()
        ctx = self.target_cache.ctx
        observer, ctx.observer = ctx.observer, None  # the probe's text is not the chat's
        try:
            inv = self.exactness_probe(report)
        finally:
            ctx.observer = observer
        self.exactness_probe = None
        self.invariance = inv
        plan = plan_of(self)
        # auto on a build that certifies no batch: one decode per verify, not row by row
        self.verify_rows = plan.rows if plan is not None else inv.chunk
        self.seed_verify_costs(inv.timings_ms)

    def verdict(self) -> float | None:
        """Estimated tokens/s of the current settings over plain decoding's (e.g. 1.3).

        From the measured costs (draft per call, verify per batch size — seeded
        by the load-time probe — and acceptance by position); ``None`` until
        enough is measured or while speculation is off.
        """
        if not self.speculation.enabled or self.drafter is None:
            return None
        return self.policies.verdict(self.speculation.k_max, self.speculation.auto)

    def close(self) -> None:
        """Free the contexts and models (contexts first: they borrow the models)."""
        for cache in self.draft_caches:
            cache.ctx.close()
            if cache.ctx.model is not self.target:  # an integrated MTP head's model is the target
                cache.ctx.model.close()
        self.target_cache.ctx.close()
        self.target.close()

    def abort(self) -> None:
        """Make a native decode in flight return early (quit mid-stream)."""
        self._set_abort(True)

    def _set_abort(self, flag: bool) -> None:
        # both contexts: a flag left set on the draft would fail every later reply
        self.target_cache.ctx.set_abort(flag)
        for cache in self.draft_caches:
            cache.ctx.set_abort(flag)

    @property
    def draft_cache(self) -> KvCache | None:
        """The draft model's KV cache (the MTP head's without one; None with neither)."""
        return getattr(self.model_drafter or self.drafter, "cache", None)

    @property
    def draft_caches(self) -> list[KvCache]:
        """Every drafter's KV cache: a draft model's and an MTP head's."""
        caches = [getattr(d, "cache", None) for d in (self.model_drafter, self.mtp_drafter, self.drafter)]
        return [c for c in dict.fromkeys(caches) if c is not None]

    @property
    def n_ctx(self) -> int:
        """The context window in tokens (configured, padded). The contexts hold what
        the chat has needed so far and grow to it (:meth:`fit_window`)."""
        return self.target_cache.n_ctx_max

    def fit_window(self, need: int) -> None:
        """Grow the target's and the draft model's windows so ``need`` tokens (prompt
        plus reply cap) fit, up to their configured ``n_ctx`` (:meth:`.KvCache.fit`).

        Raises:
            ModelFileError, DecodeError: a context could not grow (it is unchanged).
        """
        self.target_cache.fit(need)
        for cache in self.draft_caches:
            cache.fit(need)

    @property
    def n_past(self) -> int:
        """Tokens in the target's KV cache."""
        return self.target_cache.n_past

    def count_tokens(self, messages: Sequence[Message]) -> PromptSize:
        """How many tokens ``messages`` make as a prompt, how many its last message's text
        is, and the window they must fit: what the app shows as one types. Decodes
        nothing; safe beside a reply in another thread (tokenizing only reads the vocabulary).

        Raises:
            SkippyError: as :func:`.chat.prompt_tokens` (the template failed to render).
        """
        n_prompt = len(prompt_tokens(self.target, self.template, messages))
        last = messages[-1]["content"] if messages else ""
        n_message = len(self.target.tokenize(last, add_special=False, parse_special=False)) if last else 0
        return PromptSize(n_prompt, n_message, self.n_ctx)

    def forget(self) -> None:
        """Drop both KV caches (a new chat)."""
        self.target_cache.reset()
        self._ngram.reset()
        for d in dict.fromkeys((self.model_drafter, self.mtp_drafter)):
            if d is not None:
                d.reset()
        if self.drafter is not None and self.drafter not in (self._ngram, self.model_drafter, self.mtp_drafter):
            self.drafter.reset()

    # -- generation ------------------------------------------------------------------

    def run(
        self, messages: Sequence[Message], gen: GenerationSettings, cancel: threading.Event | None = None
    ) -> Iterator[Event]:
        """Generate the assistant's reply to ``messages`` (rendered with the chat template).

        Yields ``ReplyStarted``, one ``StepVerified`` per step, then ``ReplyFinished``.
        The KV caches are reused across calls: a new turn extends them, an edit
        or regenerate truncates them to the shared prefix.
        """
        try:
            tokens = prompt_tokens(self.target, self.template, messages)
        except SkippyError as e:
            yield failed(str(e), self.n_past)
            return
        yield from self.generate(tokens, gen, cancel)

    def generate(
        self, prompt: Sequence[int], gen: GenerationSettings, cancel: threading.Event | None = None
    ) -> Iterator[Event]:
        """Generate after raw prompt tokens. See :meth:`run` for the events."""
        cancelled = cancel.is_set if cancel is not None else (lambda: False)
        self._turn += 1
        self._set_abort(False)
        context = list(prompt)
        self._epoch = epoch = object()
        self.policies.new_reply()
        try:
            self.ensure_exact()
            validate_prompt_len(len(context))
            if not context:
                raise SkippyError("empty prompt: nothing to decode from")
            if len(context) > self.n_ctx:  # before the window grows: it would grow for nothing
                raise ContextFullError(
                    f"the prompt is {len(context)} tokens but the context window holds {self.n_ctx}; "
                    "raise n_ctx or start a new chat"
                )
            self.fit_window(len(context) + gen.max_tokens)
            t0 = time.perf_counter()
            target_sync = self.target_cache.sync(context, cancelled, epoch)
            t1 = time.perf_counter()
            draft_sync, draft_prefill_ms = NO_SYNC, 0.0
            if self.speculation.enabled and self.drafter is not None and self.drafter.room(context) > 0:
                # fill the draft with the prompt now, so prefill never counts as decoding time
                d = self.drafter
                draft_sync = d.prefill(context, epoch) if isinstance(d, AutoDrafter) else d.sync(context, epoch)
                draft_prefill_ms = (time.perf_counter() - t1) * 1000  # none filled: exactly 0, not a clock tick
            prefill_ms = (t1 - t0) * 1000
            self._mark_turn()
        except ContextFullError as e:
            yield failed(str(e), self.n_past, reason="context_full")
            return
        except SkippyError as e:
            reason = "cancelled" if cancelled() else "error"
            yield failed(str(e) if reason == "error" else "", self.n_past, reason=reason)
            return

        spec = self.speculation
        params = gen.sampling
        # a reply without a fixed seed draws one, reported so the reply can be reproduced
        seed = params.seed if params.seed is not None else secrets.randbits(63)
        speculative = spec.enabled and self.drafter is not None
        plan = plan_of(self) if speculative else None
        yield ReplyStarted(
            turn=self._turn,
            n_prompt=len(context),
            n_ctx=self.n_ctx,
            target_sync=target_sync,
            prefill_ms=prefill_ms,
            draft_sync=draft_sync,
            draft_prefill_ms=draft_prefill_ms,
            speculative=speculative,
            draft_source=self.drafter.source if self.drafter is not None else "none",
            n_draft=spec.n_draft,
            p_min=spec.p_min,
            sampling=sampling_dict(params, seed),
            verify=plan.short() if plan is not None else "",
        )
        yield from self._loop(context, gen, ReplySampler(params, seed), cancelled, prefill_ms)

    def _mark_turn(self) -> None:
        """Save the recurrent states where the reply starts: the next turn re-renders this
        reply's text, whose tokens may differ from the ones generated, and a state that
        cannot drop a tail then goes back here rather than to an empty cache."""
        for cache in (self.target_cache, *self.draft_caches):
            if cache.ctx.rollback != "kv":
                cache.mark("turn")

    def _loop(
        self,
        context: list[int],
        gen: GenerationSettings,
        sampler: ReplySampler,
        cancelled: Callable[[], bool],
        prefill_ms: float,
    ) -> Iterator[Event]:
        """Steps until the reply ends (each yields its ``StepVerified``), then ``ReplyFinished``.

        A step reads: choose k, sync the draft, propose, verify, commit, event;
        the records between the pieces are those of :mod:`step`.
        """
        reply = Reply(context, gen, sampler, self.target)
        reason: FinishReason | None = None
        error = ""
        index = 0
        while reason is None:
            reason = self._halted(context, cancelled)
            if reason is not None:
                break
            t_step = time.perf_counter()
            changed = reply.follow()
            self._follow_mode(sampler)
            n_past = len(context) - 1
            try:
                choice = self._choose_k(context, reply.remaining)
                synced = self._sync_draft(context, choice.k)
                proposed = self._propose(context, choice.k, sampler, reply.window)
                verified = self._verify(context, proposed.proposal, sampler, reply.window)
            except ContextFullError as e:
                reason, error = "context_full", str(e)
                break
            except SkippyError as e:
                reason = "cancelled" if cancelled() else "error"
                error = "" if reason == "cancelled" else str(e)
                break
            committed = reply.commit(proposed.proposal, verified.verdict)
            t_commit = time.perf_counter()
            rollback, trim_error = self._trim_target(context)
            if trim_error:
                committed, error = replace(committed, reason="error"), trim_error  # the step stands; the reply ends
            step = Step(choice, synced, proposed, verified, committed, rollback)
            event = step_event(step, index, (n_past, self.n_past), self.target, changed)
            # the step's time includes building its event (the panel's top-k lists)
            t_end = time.perf_counter()
            # a rejection costs the target's KV removal and the panel's top-k lists: charged to
            # the steps that reject (auto's cost model), not smeared over plain steps
            rollback_ms = (t_end - t_commit) * 1000 if step.rejected else 0.0
            self._learn(reply, step, (t_end - t_step) * 1000, rollback_ms, cold=index == 0)
            yield event
            reason = committed.reason
            index += 1
        yield reply.finish(reason, error, prefill_ms, self.n_past)

    # -- the pieces of a step, in order -----------------------------------------------

    def _halted(self, context: Sequence[int], cancelled: Callable[[], bool]) -> FinishReason | None:
        """Why no further step can start (``cancelled``, ``context_full``), or None."""
        if cancelled():
            return "cancelled"
        if len(context) > self.n_ctx:  # the last committed token has no slot to be decoded in
            return "context_full"
        return None

    def _follow_mode(self, sampler: ReplySampler) -> None:
        """Switch to the k policies of the reply's current sampling mode (greedy, coupled or
        rejection: acceptance differs by mode), after a mid-reply change."""
        self.policies.follow("greedy" if sampler.params.greedy else sampler.params.sampler)

    def _choose_k(self, context: Sequence[int], remaining: int) -> KChoice:
        """This step's proposal length, clamped so everything fits (0 = plain step).

        ``remaining``: tokens the reply may still add. With ``source = "auto"`` it
        also routes the drafter to the chosen source.
        """
        spec = self.speculation
        if self.drafter is None or not spec.enabled:
            return KChoice(0, "speculation off", self.estimator)
        n_past = len(context) - 1
        # the verify batch [last, d1..dk] must fit the target's window; more than
        # remaining - 1 proposals could never all be committed
        fits = min(self.n_ctx - n_past - 1, remaining - 1)
        # a long n-gram proposal is clamped to what one target batch holds (the model's k is validated)
        k_ngram = min(spec.k_max_ngram, fits, self.target_cache.ctx.n_batch - 1)
        k_max = min(k_ngram if self.drafter.source == "ngram" else spec.k_max, fits)
        k_max = min(k_max, self.drafter.room(context))
        policy, offer = self.estimator, ()
        # what the draft model would prefill before proposing: its catch-up after steps it did not draft
        behind = self.model_drafter.behind(context, self._epoch) if self.model_drafter is not None else 0
        if isinstance(self.k_policy, SourceChooser):
            drafter: AutoDrafter = self.drafter  # type: ignore[assignment]
            offer = drafter.available(context, k_ngram, self._epoch) if k_ngram > 0 else []
            self._note_copy(self.k_policy.ngram, context)
            k_model = max(k_max, 0) if drafter.model is not None else 0
            source, k, why = self.k_policy.choose(k_model, len(offer), behind)
            drafter.route = source
            # the model stops for the n-gram where a copy begins only if the n-gram would then win
            # (asked only when a copy begins: most proposals never do)
            run = max(HANDOFF - self._ngram.index.n_min, 0)
            drafter.handoff = partial(self.k_policy.handoff_pays, k_ngram, run)
            policy = self.k_policy.policy(source)
        elif k_max <= 0:
            return KChoice(0, "no room", policy)
        else:
            if self.drafter is self._ngram:
                self._note_copy(self.estimator, context)
            k, why = self.k_policy.choose(k_max, behind if self.drafter is self.model_drafter else 0)
        if 0 < k < spec.n_min:
            k, why = 0, f"k={k} below n_min={spec.n_min}"
        return KChoice(k, why, policy, offer)

    def _note_copy(self, policy: AdaptiveK, context: Sequence[int]) -> None:
        """Tell the n-gram's ``policy`` how far the context's end already copies an earlier
        span (a match of ``n_min`` tokens is no run yet; each token past it is one)."""
        index = self._ngram.index
        policy.copying(max(index.copy_length(context) - index.n_min, 0))

    def _sync_draft(self, context: list[int], k: int) -> Synced:
        """Bring the draft source to ``context`` (the draft's KV cache to ``context[:-1]``)
        when the step proposes (``k > 0``).

        Raises:
            SkippyError: a draft decode failed.
        """
        if k <= 0:
            return NOT_SYNCED
        t = time.perf_counter()
        info = self.drafter.sync(context, self._epoch)  # type: ignore[union-attr]
        return Synced(info, (time.perf_counter() - t) * 1000)

    def _propose(self, context: list[int], k: int, sampler: ReplySampler, window: PenaltyWindow | None) -> Proposed:
        """Up to ``k`` draft tokens after ``context``, picked by the reply's draft rule; a
        proposal shorter than ``n_min`` (or empty) is dropped, its rows kept for the panel.

        Raises:
            SkippyError: a draft decode failed.
        """
        if k <= 0:
            return NOTHING_PROPOSED
        t = time.perf_counter()
        rule = sampler.draft_rule(len(context), window)
        proposal = self.drafter.propose(context, k, self.speculation.p_min, rule)  # type: ignore[union-attr]
        ms = (time.perf_counter() - t) * 1000
        if len(proposal.tokens) < max(self.speculation.n_min, 1):
            proposal = Proposal(rows=proposal.rows, call_ms=proposal.call_ms)
        note = self.k_policy.drafted_through if isinstance(self.k_policy, SourceChooser) else ""
        return Proposed(proposal, ms, note)

    def _verify(
        self, context: list[int], proposal: Proposal, sampler: ReplySampler, window: PenaltyWindow | None
    ) -> Verified:
        """Decode the verify batch ``[last, d1..dk]`` on the target and judge the proposal
        by the reply's rule. The batch stays in the target's KV cache (the commit trims it).

        Raises:
            SkippyError: the decode failed (nothing of the batch stays cached).
        """
        t = time.perf_counter()
        batch = [context[-1], *proposal.tokens]
        n_past = len(context) - 1
        if self.target_cache.ctx.rollback == "kv" or not proposal.tokens:
            logits = self._verify_decode(batch, n_past)
            self.target_cache.state.record_extend(batch)
            verdict = sampler.verify(proposal.tokens, logits, len(context), window, proposal.dists)
        else:
            logits, verdict = self._verify_recurrent(batch, n_past, sampler.judge(
                proposal.tokens, len(context), window, proposal.dists))  # fmt: skip
        return Verified(logits, verdict, (time.perf_counter() - t) * 1000)

    def _verify_recurrent(self, batch: list[int], n_past: int, judge: Judge) -> tuple[np.ndarray, Verdict]:
        """Verify on a recurrent or hybrid target: in chunks, judging each chunk's rows before
        decoding the next, so a rejection always lies in the last chunk decoded, whose
        snapshots roll it back (chunks of at most ``n_rs_seq + 1`` rows); a target without
        snapshots saves its state first (:meth:`.KvCache.mark`) and restores it on a rejection.

        Raises:
            SkippyError: a decode failed (the bookkeeping holds what stayed cached).
        """
        cache = self.target_cache
        ctx = cache.ctx
        if ctx.rollback == "restore":
            cache.mark("step")
        size = self.verify_rows or len(batch)
        if ctx.rollback == "snapshot":
            size = min(size, ctx.n_rs_seq + 1)
        parts: list[np.ndarray] = []
        for i in range(0, len(batch), size):
            chunk = batch[i : i + size]
            rows = ctx.decode(chunk, n_past + i, len(chunk))
            cache.state.record_extend(chunk)
            parts.append(rows)
            for row in rows:
                verdict = judge.row(row)
                if verdict is not None:
                    return np.concatenate(parts), verdict
        raise AssertionError("the judge gives its verdict by the batch's last row")  # pragma: no cover

    def _trim_target(self, context: list[int]) -> tuple[Rollback | None, str]:
        """Drop rejected (and post-stop) positions from the target's KV cache, so it holds
        only committed tokens: how (None when nothing was dropped), and the error's
        message if that failed, else ``""``."""
        before = self.target_cache.n_past
        t = time.perf_counter()
        try:
            info = self.target_cache.sync(context, epoch=self._epoch)
        except SkippyError as e:
            return None, str(e)
        return Rollback.of(info, before, (time.perf_counter() - t) * 1000), ""

    def _learn(self, reply: Reply, step: Step, step_ms: float, rollback_ms: float, cold: bool = False) -> None:
        """Add the finished step to the reply's totals and to what the k policies measure.

        ``step_ms``: the whole step, its event included; ``rollback_ms``: the part a
        rejection added (0 when nothing was rejected); ``cold``: the reply's first step.
        """
        synced, proposed, verified, committed = step.synced, step.proposed, step.verified, step.committed
        n_proposed = step.n_proposed
        reply.stats.add_step(
            n_proposed, committed.n_accepted, committed.n_used,
            step_ms=step_ms, sync_ms=synced.ms, draft_ms=proposed.ms, verify_ms=verified.ms,
        )  # fmt: skip
        if isinstance(self.k_policy, SourceChooser):
            self.k_policy.record(len(committed.tokens), step_ms)  # the going rate (what any step made)
            proposed_by = proposed.proposal.source if n_proposed else "none"
            if proposed_by == "ngram":
                self.k_policy.copy_judged(n_proposed, committed.n_accepted)
            elif self.k_policy.shadowed:
                # the n-gram's offer, judged against what was committed: free acceptance data
                self.k_policy.shadow(proposed_by, step.choice.ngram_offer, committed.tokens[: committed.n_looked])
        info = synced.info
        # a folded extend decoded nothing in the sync: its cost is in the first draft call
        ranged = info.end - info.start if info.kind in ("extend", "truncate", "reset") else 0
        sync_tokens, folded_tokens = (0, ranged) if info.folded else (ranged, 0)
        # a proposal the n-gram took over from (a hand-off) offered all it was let offer
        k = n_proposed if proposed.proposal.stopped else step.choice.k
        step.choice.policy.observe(
            k=k, n_proposed=n_proposed, n_accepted=committed.n_accepted,
            sync_ms=synced.ms, draft_ms=proposed.ms, verify_ms=verified.ms, step_ms=step_ms,
            rollback_ms=rollback_ms, cold=cold,
            sync_tokens=sync_tokens, folded_tokens=folded_tokens,
            draft_calls_ms=proposed.proposal.call_ms, expected=verified.verdict.expected,
        )  # fmt: skip

    def _verify_decode(self, batch: list[int], n_past: int) -> np.ndarray:
        """Target logits at every row of ``[last, d1..dk]``, in chunks of ``verify_rows``.

        Chunking keeps each row bit-identical to a plain decode (see
        :mod:`invariance`); on failure nothing of the batch stays cached.
        """
        ctx = self.target_cache.ctx
        rows = self.verify_rows
        if rows is None or len(batch) <= rows:
            return ctx.decode(batch, n_past, len(batch))
        parts = []
        try:
            for i in range(0, len(batch), rows):
                chunk = batch[i : i + rows]
                parts.append(ctx.decode(chunk, n_past + i, len(chunk)))
        except SkippyError:
            ctx.remove_from(n_past)
            raise
        return np.concatenate(parts)
