"""Pure formatting helpers and the live generation settings (no app, no models)."""

from __future__ import annotations

import dataclasses

import pytest

from skippy_tui.engine.events import StepVerified, SyncInfo, TextSpan, TokenInfo
from skippy_tui.engine.sampling import SamplingParams
from skippy_tui.engine.settings import GenerationSettings
from skippy_tui.ui.app import LiveGeneration
from skippy_tui.ui.render import bar, commit_cell, origin_text, proposal_cell, visible


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
    from skippy_tui.ui.render import step_bars

    t = step_bars([4, 4, 2, 0, None], 4, 10, "g", "r")
    top, bottom = t.plain.split("\n")
    assert top == "██   " and bottom == "███· "  # 4/4 full, 2/4 half, none accepted a dot, plain step blank
    assert step_bars([1] * 30, 4, 10, "g", "r").plain.split("\n")[1] == "▄" * 10  # the latest 10 steps
