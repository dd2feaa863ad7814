"""The app on hybrid and recurrent targets and MTP heads: F3 offers the sources the loaded
models can draft with, the status bar names the source and the rollback, the panel and the
inspector show each step's source and how the target dropped what it rejected.

Tiny models from ``tools/tiny_gguf.py`` (see ``tests/test_mtp.py``), loaded in the app's
thread (``[ui] engine = "thread"``), so every test here runs in seconds.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ui_helpers import CHAT_JSON, SIZE, run, ui_config, wait_for_screen, wait_until

from skippy_tui.engine.load.loader import EngineSpec, load_speculator
from skippy_tui.engine.native.model import LoadParams
from skippy_tui.engine.settings import DRAFT_SOURCES, ModelSpec, SpeculationSettings
from skippy_tui.transcript import Transcript
from skippy_tui.ui.app import SkippyApp
from skippy_tui.ui.screens.inspector import InspectorScreen
from skippy_tui.ui.tuning import offered_sources

LP = LoadParams(n_ctx=512, n_batch=64, n_ubatch=64, threads=1, threads_batch=1)


def load(target: Path, cache_dir: Path, draft: Path | None = None, **speculation: Any) -> Any:
    """A tiny speculator as the app gets it, heads loaded where the target has them."""
    settings = SpeculationSettings(**{"enabled": True, "n_draft": 4, **speculation})
    spec = EngineSpec(ModelSpec(target, LP), ModelSpec(draft, LP) if draft else None, settings, cache_dir, True)
    return load_speculator(spec)


def test_offered_sources_follow_what_is_loaded() -> None:
    def spec(model: bool, mtp: bool, arch: str = "qwen35", n_nextn: int = 1) -> SimpleNamespace:
        return SimpleNamespace(
            model_drafter=SimpleNamespace(source="model") if model else None,
            mtp_drafter=SimpleNamespace(source="mtp") if mtp else None,
            target_info=SimpleNamespace(architecture=arch, n_nextn=n_nextn),
        )

    assert offered_sources(None) == (DRAFT_SOURCES, "")  # nothing loaded: the config takes any
    assert offered_sources(spec(True, True)) == (DRAFT_SOURCES, "")
    sources, note = offered_sources(spec(True, False, "llama", 0))
    assert "mtp" not in sources and "model" in sources
    assert note == "no mtp: the target cannot draft with MTP heads (the file has no MTP (NextN) layers)"
    sources, note = offered_sources(spec(False, False))  # heads in the file, not loaded
    assert sources == ("auto", "ngram") and 'choose "integrated MTP" in F8' in note
    assert "runs one MTP block" in offered_sources(spec(False, False, n_nextn=2))[1]


async def _inspect(app: SkippyApp, pilot: Any, row: int) -> str:
    """The inspector's head for timeline row ``row`` (left open)."""
    timeline = app.panel.timeline
    timeline.focus()
    timeline.move_cursor(row=row)
    await pilot.press("enter")
    screen = await wait_for_screen(pilot, app, InspectorScreen, 5)
    return str(screen.query_one("#inspect-head").render())


def test_the_panel_shows_each_steps_source_and_the_targets_rollback(
    tiny_qwen35_mtp_echo: Path, cache_dir: Path, tmp_path: Path
) -> None:
    """A hybrid target drafting with its MTP heads: the timeline's src and rollback columns, the
    inspector's source and rollback (with its ms), and the Markdown transcript's summary of both."""
    speculator = load(tiny_qwen35_mtp_echo, cache_dir, source="mtp", n_draft=3)

    async def body() -> None:
        app = SkippyApp(ui_config(max_tokens=40, ui={"engine": "thread"}), speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            app.prompt.load_text("Say hi.")
            await pilot.press("enter")
            await wait_until(pilot, lambda: len(app.transcript.entries) == 2 and not app.generating, 60, "the reply")
            steps = app.transcript.entries[-1].steps
            rejected = next(i for i, st in enumerate(steps) if st.rollback is not None)
            rb = steps[rejected].rollback
            assert rb.via == "snapshot" and steps[rejected].draft_source == "mtp"
            timeline = app.panel.timeline
            assert timeline.shown == ["index", "source", "sync", "proposal", "commit", "rollback", "ms"]
            cells = [c.plain for c in timeline.get_row_at(rejected)]
            assert cells[1] == "mtp" and cells[5] == rb.label() == f"rollback {rb.dropped}"
            head = await _inspect(app, pilot, rejected)
            assert "source       mtp (the MTP heads)" in head
            assert f"rollback     rollback {rb.dropped}  (the recurrent state went back" in head
            assert f"{rb.ms:.1f} ms)" in " ".join(head.split())
            await pilot.press("escape")
            json_path, md_path = app.transcript.save(tmp_path / "t.json")
            assert Transcript.load(json_path) == app.transcript  # the rollbacks round-trip
            md = md_path.read_text("utf-8")
            assert "> steps by source: " in md and " mtp" in md and " · target rollbacks: " in md and "rollback (" in md

    try:
        run(body())
    finally:
        speculator.close()


def test_an_old_transcript_shows_no_source_or_rollback_column() -> None:
    """Recorded before rollbacks were, and by the draft model alone: the proposal keeps the width;
    the inspector still names the source and has no rollback to tell."""

    async def body() -> None:
        app = SkippyApp(ui_config(), transcript=Transcript.load(CHAT_JSON), transcript_path=CHAT_JSON,
                        load_models=False)  # fmt: skip
        async with app.run_test(size=SIZE) as pilot:
            timeline = app.panel.timeline
            await wait_until(pilot, lambda: timeline.row_count == 8, 5, "the replayed steps")
            assert timeline.shown == ["index", "sync", "proposal", "commit", "ms"]
            head = await _inspect(app, pilot, 0)
            assert "source       model (the draft model)" in head and "rollback     " not in head

    run(body())
