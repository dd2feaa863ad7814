"""Pure formatting helpers and the live generation settings (no app, no models)."""

from __future__ import annotations

import dataclasses

import pytest

from skippy_tui.engine.events import ReplyFinished, Rollback, StepVerified, SyncInfo, TextSpan, TokenInfo
from skippy_tui.engine.sampling.params import SamplingParams
from skippy_tui.engine.settings import GenerationSettings
from skippy_tui.ui.generation import LiveGeneration
from skippy_tui.ui.widgets.render import (
    SYNC_LEGEND,
    Part,
    bar,
    commit_cell,
    fit_parts,
    origin_text,
    proposal_cell,
    reply_footer,
    rollback_text,
    source_text,
    sync_short,
    visible,
)


def _step(n_accepted: int, kind: str = "correction") -> StepVerified:
    return StepVerified(
        index=3, n_past_before=41, n_past_after=43, k=3, sync=SyncInfo("extend", 41, 44),
        proposed=(TokenInfo(1, " the"), TokenInfo(2, "\n"), TokenInfo(3, "\tx")),
        n_accepted=n_accepted, committed=TokenInfo(9, " cat"), commit_kind=kind,  # type: ignore[arg-type]
        target_top=(), draft_top=(), sync_ms=0.1, draft_ms=1.0, verify_ms=2.0,
        delta=(TextSpan(" the", "draft"), TextSpan(" cat", "target")),
    )  # fmt: skip


@pytest.mark.parametrize(("text", "shown"), [(" the", "·the"), ("\n", "↵"), ("\tx", "→x"), ("", "∅"), ("a\r\n", "a␍↵")])
def test_whitespace_is_visible(text: str, shown: str) -> None:
    assert visible(text) == shown


def test_proposal_cell_marks_accepted_and_rejected_tokens() -> None:
    cell = proposal_cell(_step(1), "green", "red", "dim")
    assert cell.plain == "·the ↵ →x"
    styles = [(cell.plain[s.start : s.end], str(s.style)) for s in cell.spans if s.style != "dim"]
    assert styles == [("·the", "green"), ("↵", "red"), ("→x", "red")]


def test_commit_cell_styles_by_kind() -> None:
    assert commit_cell(_step(1), "b", "c").plain == "+·cat"
    assert {str(s.style) for s in commit_cell(_step(3, "bonus"), "b", "c").spans} == {"b"}
    assert {str(s.style) for s in commit_cell(_step(1), "b", "c").spans} == {"c"}
    ended = dataclasses.replace(_step(3, "none"), committed=None)
    assert commit_cell(ended, "b", "c").plain == "(reply ended)" and ended.n_committed == 3


def test_bar_has_eighth_resolution_and_fixed_width() -> None:
    assert bar(1.0, 4) == "████"
    assert bar(0.0, 4) == "    "
    assert bar(0.5, 4) == "██  "
    assert bar(1 / 32, 4) == "▏   "
    assert all(len(bar(f / 10, 7)) == 7 for f in range(11))


def test_origin_text_colours_spans() -> None:
    t = origin_text([TextSpan("a", "draft"), TextSpan("b", "target")], "green", "yellow")
    assert t.plain == "ab" and [str(s.style) for s in t.spans] == ["green", "yellow"]


def test_live_generation_reads_sampling_at_each_access() -> None:
    class Holder:
        sampling = SamplingParams(temperature=0.0)

    holder = Holder()
    gen = LiveGeneration(GenerationSettings(max_tokens=7, stop=("x",)), holder)  # type: ignore[arg-type]
    assert gen.max_tokens == 7 and gen.stop == ("x",) and gen.sampling.greedy
    holder.sampling = dataclasses.replace(holder.sampling, temperature=0.8)
    assert gen.sampling.temperature == 0.8 and not gen.sampling.greedy


def test_step_bars_use_an_absolute_scale() -> None:
    from skippy_tui.ui.widgets.render import step_bars

    t = step_bars([4, 4, 2, 0, None], 4, 10, "g", "r")
    top, bottom = t.plain.split("\n")
    assert top == "██   " and bottom == "███· "  # 4/4 full, 2/4 half, none accepted a dot, plain step blank
    assert step_bars([1] * 30, 4, 10, "g", "r").plain.split("\n")[1] == "▄" * 10  # the latest 10 steps


def _fits(parts: list[Part], width: int) -> str:
    return fit_parts(parts, width, " │ ")


def test_fit_parts_gives_way_by_rank_and_keeps_what_has_one_form() -> None:
    parts = [
        Part(("target SmolLM2 135M Instruct F32", "target SmolLM2… F32", ""), (1, 5)),
        Part(("CPU", ""), (2,)),
        Part(("12.3 tok/s",)),
        Part(("spec on k=4 p_min=0.1", "spec on k=4"), (9,)),
        Part(("coupled T=0.8",)),
    ]
    full = "target SmolLM2 135M Instruct F32 │ CPU │ 12.3 tok/s │ spec on k=4 p_min=0.1 │ coupled T=0.8"
    assert _fits(parts, 200) == full
    shorter = "target SmolLM2… F32 │ CPU │ 12.3 tok/s │ spec on k=4 p_min=0.1 │ coupled T=0.8"
    assert _fits(parts, len(full) - 1) == shorter
    assert _fits(parts, 72) == "target SmolLM2… F32 │ 12.3 tok/s │ spec on k=4 p_min=0.1 │ coupled T=0.8"
    assert _fits(parts, 71) == "12.3 tok/s │ spec on k=4 p_min=0.1 │ coupled T=0.8"
    assert _fits(parts, 40) == "12.3 tok/s │ spec on k=4 │ coupled T=0.8"
    assert _fits(parts, 5) == "12.3 tok/s │ spec on k=4 │ coupled T=0.8"  # what must stay, stays
    with pytest.raises(ValueError, match="3 forms need 2 ranks"):
        Part(("a", "b", ""), (1,))


def _finish(reason: str, error: str | None = None) -> ReplyFinished:
    return ReplyFinished(
        reason=reason, token_ids=(), text="", n_tokens=32, n_steps=8, n_drafted=28, n_accepted=21,  # type: ignore[arg-type]
        acceptance_rate=0.75, mean_accepted_length=2.625, per_position=(), tokens_per_second=12.34,
        generation_ms=1.0, prefill_ms=1.0, n_past=40, error=error,
    )  # fmt: skip


def test_reply_footer_says_how_it_ended_first_and_abbreviates_before_it_drops() -> None:
    """Issue 12.5: the footer was the transcript's summary cut at the box ("mean accepted lengt…"),
    so a stopped reply's "cancelled", said last, never showed."""
    fin = _finish("cancelled")
    assert reply_footer(fin, 200) == (
        "cancelled · 32 tokens · 12.3 tok/s · acceptance 75.0% · mean accepted length 2.62 · 8 steps"
    )
    assert reply_footer(fin, 80) == "cancelled · 32 tokens · 12.3 tok/s · acceptance 75.0% · 2.62 acc/step"
    assert reply_footer(fin, 59) == "cancelled · 32 tok · 12.3 tok/s · acc 75% · 2.62 acc/step"
    assert reply_footer(fin, 41) == "cancelled · 32 tok · 12.3 tok/s · acc 75%"
    assert reply_footer(fin, 10) == "cancelled · 32 tok · 12.3 tok/s"
    # the ordinary end is said only when there is room, and last
    eos = _finish("eos")
    assert reply_footer(eos, 200).endswith("8 steps · finished: eos")
    assert "eos" not in reply_footer(eos, 80) and reply_footer(eos, 80).startswith("32 tokens · 12.3 tok/s")
    assert reply_footer(_finish("error", "out of memory"), 30).startswith("error · 32 tok")


def test_sync_short_badges() -> None:
    assert [sync_short(SyncInfo(k, 38, 44)) for k in ("none", "synced", "extend", "truncate", "reset")] == [
        "p", "=", "e38..44", "t38→44", "r38..44",
    ]  # fmt: skip
    for badge in ("= synced", "e extend", "t truncate", "r reset", "p plain"):
        assert badge in SYNC_LEGEND


def test_a_steps_source_and_rollback_in_words() -> None:
    assert source_text("mtp") == "mtp (the MTP heads)" and source_text("ngram") == "ngram (n-gram lookup)"
    assert source_text("", proposed=False) == "none (a plain step)"
    assert source_text("") == "not recorded"  # a proposal an old transcript kept no source of
    assert rollback_text(Rollback("kv", 3, 0, 0.04)) == "drop 3  (the KV cache dropped 3 rows, 0.0 ms)"
    assert rollback_text(Rollback("snapshot", 1, 0, 0.4)) == (
        "rollback 1  (the recurrent state went back 1 row to a snapshot, 0.4 ms)"
    )
    assert rollback_text(Rollback("restore", 3, 2, 1.25)) == (
        "restore 3 +2  (the recurrent state saved before the verify was restored (3 rows dropped) and "
        "2 accepted tokens decoded again, 1.2 ms)"
    )
    assert rollback_text(Rollback("reset", 44, 41, 9.0)).startswith("reset +41  (nothing could drop them")
