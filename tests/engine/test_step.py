"""The pieces of a speculation step that need no model: committing a step's tokens to the
reply (EOS, stop strings, max_tokens, origins), following a mid-reply sampling change,
building the step's event from its records, and the fixed-k policy.

The same pieces run on the real models in tests/engine/test_engine.py (eos inside a block, stop
strings, max_tokens, context full, cancel) and the identity tests; here a tiny
vocabulary pins each rule down exactly.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest

from skippy_tui.engine.drafting.model import Proposal
from skippy_tui.engine.events import SyncInfo, TextSpan
from skippy_tui.engine.policy.adaptive import AdaptiveK, FixedK, KPolicy
from skippy_tui.engine.sampling.params import SamplingParams
from skippy_tui.engine.sampling.verify import ReplySampler, Verdict
from skippy_tui.engine.settings import GenerationSettings
from skippy_tui.engine.step import (
    NOT_SYNCED,
    NOTHING_PROPOSED,
    KChoice,
    Proposed,
    Reply,
    Step,
    Synced,
    Verified,
    step_event,
)

EOS = 0
PIECES = {1: b"The", 2: b" cat", 3: b" sat", 4: b" on", 5: b" the", 6: b" mat", 7: b" \xe2\x82", 8: b"\xac"}


class Vocab:
    """Eight tokens and an EOS; 7 and 8 are the two halves of ' €'."""

    def is_eog(self, token: int) -> bool:
        return token == EOS

    def piece(self, token: int) -> bytes:
        return PIECES.get(token, b"")

    def token_text(self, token: int) -> str:
        return "<eos>" if token == EOS else PIECES.get(token, b"?").decode("utf-8", "replace")


def reply(prompt=(9, 9), max_tokens: int = 100, stop: tuple[str, ...] = (), sampling=None) -> Reply:
    gen = GenerationSettings(sampling=sampling or SamplingParams(), max_tokens=max_tokens, stop=stop)
    return Reply(list(prompt), gen, ReplySampler(gen.sampling, 7), Vocab())


def proposal(*tokens: int, rows: int | None = None) -> Proposal:
    n = len(tokens) if rows is None else rows
    return Proposal(
        tokens, tuple(0.5 for _ in tokens), tuple(np.arange(10, dtype=np.float32) for _ in range(n)), "model"
    )


# -- commit ----------------------------------------------------------------------------


def test_a_step_commits_the_accepted_drafts_then_the_targets_token_with_their_origins() -> None:
    r = reply()
    c = r.commit(proposal(1, 2, 6), Verdict(n_accepted=2, committed=3))
    assert c.tokens == (1, 2, 3) and c.n_used == 3 and c.reason is None and c.reached
    assert r.context == [9, 9, 1, 2, 3] and r.token_ids == [1, 2, 3]
    assert c.delta == [("The", "draft"), (" cat", "draft"), (" sat", "target")]  # a span per token released
    assert r.remaining == 97


def test_an_eos_inside_the_accepted_drafts_ends_the_reply_before_the_targets_token() -> None:
    r = reply()
    c = r.commit(proposal(1, EOS, 2), Verdict(n_accepted=3, committed=4))
    assert c.reason == "eos" and c.n_used == 1 and c.n_looked == 2
    assert not c.reached  # the target's own token (4) was never looked at
    assert r.token_ids == [1] and r.context == [9, 9, 1]  # the EOS joins neither


def test_an_eos_from_the_target_is_looked_at_but_not_used() -> None:
    r = reply()
    c = r.commit(proposal(1), Verdict(n_accepted=1, committed=EOS))
    assert (c.reason, c.n_used, c.n_looked, c.reached) == ("eos", 1, 2, True)


def test_max_tokens_cuts_inside_the_block() -> None:
    r = reply(max_tokens=3)
    r.commit(proposal(), Verdict(0, 1))
    assert r.remaining == 2
    c = r.commit(proposal(2, 3, 4), Verdict(n_accepted=3, committed=5))
    assert c.reason == "max_tokens" and c.n_used == 2 and not c.reached
    assert r.token_ids == [1, 2, 3] and r.remaining == 0


def test_a_stop_string_across_tokens_ends_the_reply_and_is_never_released() -> None:
    r = reply(stop=("cat sat",))
    c1 = r.commit(proposal(1, 2), Verdict(n_accepted=1, committed=2))  # "The cat": "cat" may begin the stop
    assert c1.reason is None and c1.delta == [("The", "draft"), (" ", "target")]
    c2 = r.commit(proposal(3, 4), Verdict(n_accepted=2, committed=5))  # " sat" completes it
    assert c2.reason == "stop" and c2.n_used == 1 and c2.delta == [] and c2.reached is False
    fin = r.finish("stop", "", 1.0, 12)
    assert fin.text == "The " and fin.tail == "" and fin.token_ids == (1, 2, 3)


def test_finish_releases_held_text() -> None:
    r = reply(stop=("mats",))
    c = r.commit(proposal(5), Verdict(n_accepted=1, committed=6))
    assert c.delta == [(" the", "draft"), (" ", "target")]  # "mat" held as a possible "mats"
    fin = r.finish("max_tokens", "", 2.5, 40)
    assert fin.tail == "mat" and fin.text == " the mat"
    assert fin.seed == 7 and fin.prefill_ms == 2.5 and fin.n_past == 40 and fin.dropped_bytes == 0


def test_finish_drops_a_character_the_reply_cut_short() -> None:
    r = reply()
    r.commit(proposal(6), Verdict(n_accepted=1, committed=7))  # " mat" + the first half of " €"
    assert r.commit(proposal(), Verdict(0, 8)).delta == [("€", "target")]  # the second half completes it
    r2 = reply()
    r2.commit(proposal(6), Verdict(n_accepted=1, committed=7))
    fin = r2.finish("max_tokens", "", 0.0, 0)
    assert fin.text == " mat " and fin.dropped_bytes == 2


# -- a sampling change mid-reply ----------------------------------------------------------


def test_a_mid_reply_sampling_change_applies_with_the_replys_seed() -> None:
    live = SimpleNamespace(sampling=SamplingParams(seed=None), max_tokens=10, stop=())
    r = Reply([9, 1, 2], live, ReplySampler(live.sampling, 7), Vocab())  # type: ignore[arg-type]
    assert r.follow() is None and r.window is None
    live.sampling = SamplingParams(temperature=0.8, repeat_penalty=1.2, seed=123)
    changed = r.follow()
    assert changed is not None and changed["temperature"] == 0.8
    assert changed["seed"] == 7 and changed["seed_fixed"] is False  # the reply's seed stays
    assert r.sampler.params == SamplingParams(temperature=0.8, repeat_penalty=1.2, seed=None)
    assert r.window is not None  # penalties on: the history is the context so far
    assert r.follow() is None  # the same settings again: no change to record
    live.sampling = SamplingParams(temperature=0.8, repeat_penalty=1.2, seed=5)  # only the seed differs
    assert r.follow() is None


# -- the event -----------------------------------------------------------------------------


def _event(prop: Proposal, verdict: Verdict, r: Reply | None = None, logits_rows: int | None = None, note: str = ""):
    r = r or reply()
    committed = r.commit(prop, verdict)
    rows = len(prop.tokens) + 1 if logits_rows is None else logits_rows
    logits = np.tile(np.arange(10, dtype=np.float32)[::-1], (rows, 1))  # the target prefers low ids
    proposed = Proposed(prop, 2.0, note) if prop.tokens else NOTHING_PROPOSED
    synced = Synced(SyncInfo("extend", 3, 4), 0.5) if prop.tokens else NOT_SYNCED
    step = Step(
        KChoice(len(prop.tokens), "fixed", AdaptiveK()), synced, proposed, Verified(logits, verdict, 3.0), committed
    )
    return step, step_event(step, 4, (10, 10 + committed.n_used), Vocab(), {"temperature": 0.5})


def test_a_correction_step_carries_both_top_lists_at_the_first_rejection() -> None:
    step, ev = _event(proposal(1, 2, 6), Verdict(n_accepted=1, committed=3, p_target=0.25))
    assert step.rejected and step.n_proposed == 3
    assert ev.commit_kind == "correction" and ev.committed is not None and ev.committed.id == 3
    assert [t.id for t in ev.proposed] == [1, 2, 6] and ev.n_accepted == 1 and ev.p_target == 0.25
    assert [t.id for t in ev.target_top] == [0, 1, 2, 3, 4]  # the target's row at position 1
    assert [t.id for t in ev.draft_top] == [9, 8, 7, 6, 5]  # the draft's row there
    assert ev.delta == (TextSpan("The", "draft"), TextSpan(" sat", "target"))
    assert (ev.index, ev.n_past_before, ev.n_past_after, ev.k) == (4, 10, 12, 3)
    assert (ev.sync, ev.sync_ms, ev.draft_ms, ev.verify_ms) == (SyncInfo("extend", 3, 4), 0.5, 2.0, 3.0)
    assert ev.draft_source == "model" and ev.k_reason == "fixed" and ev.sampling == {"temperature": 0.5}


@pytest.mark.parametrize(
    ("stopped", "note", "reason"),
    [
        (True, "", "fixed (handed to the n-gram: a copy began)"),
        (False, " (a copy began; drafted through: 0 of the reply's 2 went on)",
         "fixed (a copy began; drafted through: 0 of the reply's 2 went on)"),
        (False, "", "fixed"),
    ],
)  # fmt: skip
def test_the_reason_says_whether_a_proposal_stopped_where_a_copy_began(stopped, note, reason) -> None:
    prop = dataclasses.replace(proposal(1, 2), stopped=stopped)
    _, ev = _event(prop, Verdict(n_accepted=2, committed=3), note=note)
    assert ev.k_reason == reason


def test_a_rejection_after_the_drafts_last_row_has_no_draft_top_list() -> None:
    _, ev = _event(proposal(1, 2, rows=1), Verdict(n_accepted=1, committed=3))  # an n-gram-like proposal
    assert ev.target_top and ev.draft_top == ()


@pytest.mark.parametrize(
    ("tokens", "verdict", "kind", "committed"),
    [
        ((), Verdict(0, 1), "plain", 1),
        ((1, 2), Verdict(2, 3), "bonus", 3),
        ((1, 2), Verdict(0, 3), "correction", 3),
        ((EOS, 2), Verdict(2, 3), "none", None),  # the reply ended inside the accepted drafts
    ],
)
def test_commit_kinds(tokens, verdict, kind, committed) -> None:
    step, ev = _event(proposal(*tokens), verdict)
    assert ev.commit_kind == kind
    assert (ev.committed.id if ev.committed else None) == committed
    assert (ev.target_top == ()) == (not step.rejected)
    if not tokens:
        assert ev.sync == SyncInfo("none") and ev.draft_source == "" and ev.k == 0


# -- the fixed-k policy ------------------------------------------------------------------


def test_a_fixed_k_asks_for_everything_that_fits() -> None:
    fixed: KPolicy = FixedK()
    assert fixed.choose(3) == (3, "fixed") and fixed.choose(1) == (1, "fixed")
    auto: KPolicy = AdaptiveK()
    assert auto.choose(3) == (0, "auto: measuring plain step")  # auto measures a plain step first
