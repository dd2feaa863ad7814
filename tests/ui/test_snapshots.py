"""Snapshots of the main screen, the inspector and an error dialog, in fixed states.

Driven from the committed transcript fixture (no models) or a load that fails
before any model is read, with the input's cursor blink off, so each render
is the same on every run. Update with ``pytest --snapshot-update`` and look
at the SVGs in ``__snapshots__/`` before committing them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from ui_helpers import SAMPLED_JSON, SIZE, replay_app, settle, ui_config, wait_for_screen, wait_until

from skippy_tui.ui.app import SkippyApp
from skippy_tui.ui.screens.error import ErrorScreen
from skippy_tui.ui.screens.inspector import InspectorScreen
from skippy_tui.ui.screens.tune import TuneScreen


async def _steady(pilot) -> None:
    pilot.app.query_one("PromptInput").cursor_blink = False
    for field in pilot.app.screen.query("Input"):  # a dialog's fields
        field.cursor_blink = False
    await pilot.wait_for_scheduled_animations()
    await pilot.pause()


async def _inspect_first_rejection(pilot) -> None:
    app = pilot.app
    table = app.panel.timeline
    first_rejection = next(i for i, s in enumerate(table.steps) if s.n_accepted < len(s.proposed))
    table.focus()
    table.move_cursor(row=first_rejection)
    await pilot.press("enter")
    await wait_for_screen(pilot, app, InspectorScreen, 10)
    await _steady(pilot)


def test_main_screen_replay(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await _steady(pilot)

    assert snap_compare(replay_app(), terminal_size=SIZE, run_before=run_before)


def test_main_screen_origin_colouring(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await pilot.press("ctrl+o")
        pilot.app.clear_notifications()
        await wait_until(pilot, lambda: not pilot.app.screen.query("Toast"), 10, "the toast to go")
        await _steady(pilot)

    assert snap_compare(replay_app(), terminal_size=SIZE, run_before=run_before)


def test_inspector(snap_compare) -> None:
    assert snap_compare(replay_app(), terminal_size=SIZE, run_before=_inspect_first_rejection)


def test_inspector_sampled_reply(snap_compare) -> None:
    """A T=0.8 reply: draft and target probability of the rejected token, the seed and how to reproduce it."""

    async def run_before(pilot) -> None:
        await settle(pilot)  # the chat has scrolled to its end: the click lands where the reply is drawn
        first = pilot.app.query("AssistantMessage").first()
        await pilot.click(first)
        await wait_until(pilot, lambda: first.has_class("-shown"), 10, "reply 1 in the panel")
        await _inspect_first_rejection(pilot)

    assert snap_compare(replay_app(SAMPLED_JSON), terminal_size=SIZE, run_before=run_before)


def test_main_screen_sampling_changed_mid_reply(snap_compare) -> None:
    """The step from which F3 changed the sampling is marked, and the line under the timeline says to what."""

    async def run_before(pilot) -> None:
        await _steady(pilot)

    assert snap_compare(replay_app(SAMPLED_JSON), terminal_size=SIZE, run_before=run_before)


def test_tune_dialog(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await pilot.press("f3")
        await wait_for_screen(pilot, pilot.app, TuneScreen, 10)
        await _steady(pilot)

    assert snap_compare(replay_app(), terminal_size=SIZE, run_before=run_before)


def test_error_dialog_missing_model(snap_compare) -> None:
    config = ui_config(target={"path": "/models/missing-target.gguf"})
    config.source = Path("/home/me/.config/skippy-tui/config.toml")  # fixed, for a stable "how to fix" line

    async def run_before(pilot) -> None:
        await wait_for_screen(pilot, pilot.app, ErrorScreen, 30)
        # whether the prompt behind the dialog still drew its cursor raced the failed load (the
        # prompt's focus is set in its own queue): the dialog has the focus, so no cursor there
        pilot.app.prompt.has_focus = False
        await _steady(pilot)

    assert snap_compare(SkippyApp(config), terminal_size=SIZE, run_before=run_before)


LAYOUT_SIZES = [(80, 24), (100, 30), (150, 42), (200, 50)]


@pytest.mark.parametrize("size", LAYOUT_SIZES, ids=[f"{w}x{h}" for w, h in LAYOUT_SIZES])
def test_layout_at_size(snap_compare, size: tuple[int, int]) -> None:
    """Issue 12.4/12.5: beside the chat from 120 columns, under it below, hidden when also short;
    step rows, reply footers and the status bar fit (a stopped reply, a truncate at 130, "(reply ended)")."""
    from test_layout import layout_app

    assert snap_compare(layout_app(), terminal_size=size, run_before=_steady)


def test_layout_small_terminal_panel_shown_with_f6(snap_compare) -> None:
    from test_layout import layout_app

    async def run_before(pilot) -> None:
        await pilot.press("f6")
        await _steady(pilot)

    assert snap_compare(layout_app(), terminal_size=(80, 24), run_before=run_before)


def test_confirm_before_quitting_an_unsaved_chat(snap_compare) -> None:
    from skippy_tui.ui.screens.confirm import ConfirmDiscardScreen

    async def run_before(pilot) -> None:
        pilot.app.transcript.system_prompt = "Be brief."  # changed since it was opened
        await pilot.press("ctrl+q")
        await wait_for_screen(pilot, pilot.app, ConfirmDiscardScreen, 10)
        await _steady(pilot)

    # history off: on, the history keeps the chat and quitting asks nothing
    assert snap_compare(replay_app(history=False), terminal_size=SIZE, run_before=run_before)
