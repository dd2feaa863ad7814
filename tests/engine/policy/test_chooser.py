"""source = "auto": the SourceChooser between the draft model and the n-gram, on synthetic costs."""

from __future__ import annotations

import pytest

from skippy_tui.engine.policy import chooser as chooser_module
from skippy_tui.engine.policy.adaptive import AdaptiveK
from skippy_tui.engine.policy.chooser import HANDOFF_HIT, PAUSE_BREAKS, SourceChooser
from skippy_tui.engine.policy.cost_model import (
    net_gains,
)
from skippy_tui.engine.policy.measurements import VerifyCosts

# -- source = "auto": the n-gram proposal, the model's or plain ----------------------------------


def feed_sources(
    chooser: SourceChooser, steps: int, available, verify, model_ms: float, accept: dict, k_max_model: int = 8
) -> list[tuple[str, int]]:
    """Let ``chooser`` pick ``steps`` times; ``available(i)`` n-gram tokens at step i,
    ``accept[source](k)`` tokens accepted of k, the model costing ``model_ms`` per token."""
    chosen = []
    for i in range(steps):
        source, k, why = chooser.choose(k_max_model if chooser.model is not None else 0, available(i))
        assert why.startswith(f"auto: {source}"), why
        assert k <= (available(i) if source == "ngram" else k_max_model)
        cost = model_ms if source == "model" else 0.01
        n_acc = accept[source](k)
        sync_ms, draft_ms, verify_ms = cost if k else 0.0, cost * k, verify(k + 1)
        chooser.policy(source).observe(
            k=k, n_proposed=k, n_accepted=n_acc, sync_ms=sync_ms, draft_ms=draft_ms, verify_ms=verify_ms
        )
        chooser.record(n_acc + 1, sync_ms + draft_ms + verify_ms)  # as the speculator does after each step
        if source == "ngram" and k:
            chooser.copy_judged(k, n_acc)
        # the n-gram proposal judged against the committed tokens: it matches accept["ngram"] of them
        n_new = n_acc + 1
        matched = min(accept["ngram"](min(available(i), n_new)), n_new)
        proposed_by = source if k else "none"  # a plain step proposed nothing, whoever chose it
        chooser.shadow(proposed_by, [1] * min(available(i), n_new), [1] * matched + [2] * (n_new - matched))
        chosen.append((source, k))
    return chosen


def _chooser(with_model: bool = True, shadowed: bool = False) -> SourceChooser:
    costs = VerifyCosts()
    ngram = AdaptiveK(costs, runs=True, draft_prior_ms=0.01 if shadowed else None)
    return SourceChooser(AdaptiveK(costs) if with_model else None, ngram, shadowed=shadowed)


def test_a_perfect_ngram_source_runs_long():
    """A rewrite: the n-gram copy is never wrong and always 30 tokens long."""
    chooser = _chooser()
    chosen = feed_sources(
        chooser, 120, lambda i: 30, lambda b: 30.0 + 1.5 * (b - 1), 15.0,
        {"ngram": lambda k: k, "model": lambda k: int(0.9 * k)},
    )  # fmt: skip
    late = chosen[40:]
    assert sum(s == "ngram" for s, _ in late) >= 0.85 * len(late), late
    assert sorted(k for s, k in late if s == "ngram")[len(late) // 2] >= 24, late  # long, not ~4


def test_a_useless_ngram_source_leaves_the_steps_to_the_model_or_plain():
    chooser = _chooser()
    chosen = feed_sources(
        chooser, 120, lambda i: 8, lambda b: 30.0 + 1.5 * (b - 1), 3.0,
        {"ngram": lambda k: 0, "model": lambda k: k},
    )  # fmt: skip
    late = chosen[40:]
    assert sum(s == "model" and k > 0 for s, k in late) >= 0.8 * len(late), late
    # with a model that does not pay either, plain decoding
    chooser = _chooser()
    chosen = feed_sources(
        chooser, 120, lambda i: 8, lambda b: 30.0 + 1.5 * (b - 1), 40.0,
        {"ngram": lambda k: 0, "model": lambda k: k // 2},
    )  # fmt: skip
    late = chosen[40:]
    assert sum(k == 0 for _, k in late) >= 0.8 * len(late), late


@pytest.mark.parametrize("shadowed", [False, True])
@pytest.mark.parametrize("ngram_right", [True, False])
def test_the_model_hands_a_copy_to_the_ngram_only_where_the_ngram_then_wins(ngram_right, shadowed):
    """A routed model's proposal stops where its tokens begin a copy only if the n-gram,
    that far into a copy, is expected to beat the model's step; copies that do not go on
    (a sampled chat's short quotes) cut the model's proposal for nothing. A shadowed
    n-gram, judged without steps of its own, is judged all the same."""
    chooser = _chooser(shadowed=shadowed)
    feed_sources(
        chooser, 80, lambda i: 8 if i % 4 == 0 else 0, lambda b: 30.0 + 1.5 * (b - 1), 3.0,
        {"ngram": (lambda k: k) if ngram_right else (lambda k: 0), "model": lambda k: k},
    )  # fmt: skip
    chooser.choose(8, 0)
    assert chooser.ngram.judged and "model" in chooser.last
    assert chooser.handoff_pays(32, 2) is ngram_right


def _handoffs(chooser: SourceChooser, went_on: list[int | None]) -> list[bool]:
    """Steps where a copy begins in the model's proposal (the gate asked), each followed by
    a step whose n-gram offer got ``went_on[i]`` tokens right (None: it had no offer; -1:
    its offer went unjudged, a model step with no shadow); the gate's answers. The copy
    step's own offer, judged in that step, was right: it began the copy and says nothing
    of whether it goes on."""
    verdicts = []
    for right in went_on:
        chooser.choose(8, 0)
        verdicts.append(chooser.handoff_pays(32, 2))
        assert bool(chooser.drafted_through) is not verdicts[-1]  # the trace says why it drafted through
        chooser.copy_judged(4, 4)
        chooser.choose(8, 4 if right is not None else 0)
        if right is not None and right >= 0:
            chooser.copy_judged(4, right)
    return verdicts


@pytest.mark.parametrize(
    ("went_on", "handed_off"),
    [
        # copies that go on: every one is handed to the n-gram
        ([4, 3, HANDOFF_HIT, 4, 4, 4], [True] * 6),
        # code's 4-token suffix matches that stop at once (or leave no match): the first cut
        # proposal is the last
        ([1, 0, None, 1, 0, 1], [True] + [False] * 5),
        # one copy in two goes on: keeps handing off (the record stays at 0.4 or above)
        ([4, 0, 4, 0, 4, 0, 4, 0], [True] * 8),
        # stopped copies, then copies that go on (judged though not handed off): back to hand-offs
        ([0, 4, 4, 4], [True, False, True, True]),
        # offers nobody judged (the rejection sampler shadows nothing) count neither way
        ([-1, -1, 0, 4], [True, True, True, False]),
    ],
)
def test_the_model_stops_for_copies_only_while_they_go_on(went_on, handed_off):
    """A copy begun in a model proposal counts as one that went on when the next step's
    n-gram offer got HANDOFF_HIT tokens right; once fewer than 0.4 of a reply's did, the
    model stops for none, until they go on again. A new reply starts from the prior."""
    chooser = _chooser(shadowed=True)
    feed_sources(
        chooser, 80, lambda i: 8 if i % 4 == 0 else 0, lambda b: 30.0 + 1.5 * (b - 1), 3.0,
        {"ngram": lambda k: k, "model": lambda k: k},
    )  # fmt: skip
    chooser.new_reply()
    chooser.choose(8, 0)
    assert chooser.handoff_pays(32, 2)  # the n-gram is expected to win a copy
    chooser.new_reply()
    assert _handoffs(chooser, went_on) == handed_off
    chooser.new_reply()
    assert _handoffs(chooser, [0]) == [True]


def test_without_a_match_the_model_drafts_and_without_a_model_the_ngram_does():
    chooser = _chooser()
    chosen = feed_sources(
        chooser, 60, lambda i: 0, lambda b: 30.0 + 1.5 * (b - 1), 3.0,
        {"ngram": lambda k: k, "model": lambda k: k},
    )  # fmt: skip
    assert all(s == "model" for s, _ in chosen)
    alone = _chooser(with_model=False)
    chosen = feed_sources(
        alone, 60, lambda i: 12 if i % 2 else 0, lambda b: 30.0 + 1.5 * (b - 1), 3.0,
        {"ngram": lambda k: k, "model": lambda k: 0},
    )  # fmt: skip
    assert all(s == "ngram" for s, _ in chosen)
    assert all(k == 0 for i, (_, k) in enumerate(chosen) if i % 2 == 0)  # no match: plain
    assert sum(k >= 8 for i, (_, k) in enumerate(chosen[20:]) if i % 2) >= 15


def test_a_copy_paused_at_an_edit_waits_for_the_copy_instead_of_calling_the_model():
    """A rewrite with edits: every third step the n-gram has no match (the edited word).
    The model would pay on its own (74 tok/s against plain's 56), but its 9 tokens take
    122 ms that the copy, going at well over 100 tok/s, fills better: a plain step, then
    the copy resumes. Chosen by tokens/s alone, every pause was a model step."""
    chooser = _chooser()
    chosen = feed_sources(
        chooser, 120, lambda i: 0 if i % 3 == 2 else 12, lambda b: 18.0 + 4.0 * (b - 1), 8.0,
        {"ngram": lambda k: k, "model": lambda k: k},
    )  # fmt: skip
    pauses = [c for i, c in enumerate(chosen) if i % 3 == 2][10:]
    assert sum(k == 0 for _, k in pauses) >= 0.8 * len(pauses), pauses
    copies = [c for i, c in enumerate(chosen) if i % 3 != 2][20:]
    assert sum(s == "ngram" and k >= 8 for s, k in copies) >= 0.8 * len(copies), copies


def test_a_chance_match_in_free_text_does_not_hold_the_reply_on_plain_steps():
    """After a copy, free text where a 2-token match turns up every tenth step. A copy's
    rate bounds the going rate for a few steps after its last match (it resumes after an
    edit); a chance match is no copy: its rate, still high from the copy's counts, held
    the going rate over the model's and the steps after each match went to plain."""
    chooser = _chooser(shadowed=True)
    verify = lambda b: 18.0 + 4.0 * (b - 1)  # noqa: E731
    accept = {"ngram": lambda k: k, "model": lambda k: k}
    feed_sources(chooser, 60, lambda i: 12, verify, 6.0, accept)
    accept["ngram"] = lambda k: 0
    chosen = feed_sources(chooser, 120, lambda i: 2 if i % 10 == 0 else 0, verify, 6.0, accept)
    assert sum(k == 0 for _, k in chosen[20:]) <= 3, chosen[20:]  # the model policy's probes


@pytest.mark.parametrize("breaks", [PAUSE_BREAKS, 99])
def test_a_copy_that_breaks_again_after_its_pause_is_not_waited_for(breaks, monkeypatch):
    """A sampled rewrite that turned into a paraphrase: a short copy, an edit (the n-gram's
    offer is wrong), two steps without a match, a match that is wrong too, then free
    text. The copy's rate bounded the going rate for 8 steps after its last match, so the
    free text went to plain steps while the model made more; the second break ends the
    bound (``breaks=99``: as before, the wait)."""
    monkeypatch.setattr(chooser_module, "PAUSE_BREAKS", breaks)
    chooser = _chooser(shadowed=True)
    verify = lambda b: 18.0 + 4.0 * (b - 1)  # noqa: E731
    right = {"ngram": lambda k: k, "model": lambda k: k}
    feed_sources(chooser, 40, lambda i: 12, verify, 6.0, right)
    free_text = []
    for _ in range(6):
        feed_sources(chooser, 2, lambda i: 12, verify, 6.0, right)  # the copy goes on
        feed_sources(chooser, 1, lambda i: 12, verify, 6.0, right | {"ngram": lambda k: 0})  # an edit
        feed_sources(chooser, 2, lambda i: 0, verify, 6.0, right)
        feed_sources(chooser, 1, lambda i: 12, verify, 6.0, right | {"ngram": lambda k: 0})  # no copy resumes
        free_text += feed_sources(chooser, 5, lambda i: 0, verify, 6.0, right)
    plain = sum(k == 0 for _, k in free_text)
    if breaks == PAUSE_BREAKS:
        assert plain <= 3, free_text  # the model policy's probes
    else:
        assert plain >= 15, free_text


def test_a_reply_going_faster_than_its_estimates_keeps_drafting():
    """Free text, the model always right: the reply goes a little faster than the model's
    estimate (acceptance priors keep it under 100 %). Weighed against that going rate,
    every option loses and plain, the cheapest, would lose least; the going rate is capped
    at the best rate on offer, so the model keeps every step but its policy's probes."""
    chooser = _chooser()
    chosen = feed_sources(
        chooser, 80, lambda i: 0, lambda b: 18.0 + 4.0 * (b - 1), 6.0, {"ngram": lambda k: 0, "model": lambda k: k}
    )
    assert all(s == "model" for s, _ in chosen), chosen
    assert sum(k == 0 for _, k in chosen[10:]) <= 2, chosen[10:]  # the policy's own plain probes only


def test_net_gains_pick_the_best_ratio_at_the_best_ratio_and_cheap_steps_above_it():
    tokens, ms = [1.0, 9.0], [18.0, 122.0]  # plain 55.6 tok/s, the model 73.8 tok/s
    assert net_gains(tokens, ms, 73.8)[1] > net_gains(tokens, ms, 73.8)[0]  # = the ratio's choice
    assert net_gains(tokens, ms, 120.0)[0] > net_gains(tokens, ms, 120.0)[1]  # a fast reply: plain
    assert net_gains(tokens, ms, 60.0) == pytest.approx([1.0 - 1.08, 9.0 - 7.32])


def test_the_chooser_explores_the_other_source():
    """The model is chosen, but the n-gram source still gets a step now and then, so a
    source that becomes reliable is noticed."""
    chooser = _chooser()
    accept = {"ngram": lambda k: 0, "model": lambda k: k}
    feed_sources(chooser, 80, lambda i: 8, lambda b: 30.0 + 1.5 * (b - 1), 3.0, accept)
    accept["ngram"] = lambda k: k  # the text turns into a copy
    chosen = feed_sources(chooser, 200, lambda i: 30, lambda b: 30.0 + 1.5 * (b - 1), 3.0, accept)
    assert sum(s == "ngram" for s, _ in chosen[-40:]) >= 30, chosen[-40:]


def test_a_shadowed_ngram_needs_no_steps_of_its_own():
    """Where the n-gram's offer is judged on every step (greedy, the coupled sampler), a
    useless n-gram gets no step once judged: not to be measured, not to be explored (each
    was a 1-token step at a 4-token price). A text that turns into a copy is noticed from
    the judged offers alone."""
    accept = {"ngram": lambda k: 0, "model": lambda k: k}
    verify = lambda b: 30.0 + 1.5 * (b - 1)  # noqa: E731
    unshadowed = feed_sources(_chooser(), 160, lambda i: 8, verify, 3.0, accept)
    assert sum(s == "ngram" and k > 0 for s, k in unshadowed) >= 3  # measured twice, explored
    chooser = _chooser(shadowed=True)
    chosen = feed_sources(chooser, 160, lambda i: 8, verify, 3.0, accept)
    drafted = [i for i, (s, k) in enumerate(chosen) if s == "ngram" and k > 0]
    assert len(drafted) <= 1 and all(i < 3 for i in drafted), chosen  # before any judged offer
    accept["ngram"] = lambda k: k  # the text turns into a copy
    chosen = feed_sources(chooser, 60, lambda i: 30, verify, 3.0, accept)
    assert sum(s == "ngram" for s, _ in chosen[-40:]) >= 30, chosen[-40:]


# -- settings and config -------------------------------------------------------------------------
