"""Every dialog fits every terminal size the app supports: it stays on the screen, its text
wraps (never cut at the dialog's edge), its buttons stay in sight, and every field it has
can be scrolled into view (issue 57.13: at 60x20, F3 cut its help and put Apply/Cancel
below the screen)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static
from ui_helpers import CHAT_JSON, run, settle, ui_config, wait_until

from skippy_tui.history import ChatEntry
from skippy_tui.transcript import Transcript
from skippy_tui.ui.app import SkippyApp
from skippy_tui.ui.button_row import row_form
from skippy_tui.ui.clipboard import CodeBlockScreen
from skippy_tui.ui.screens.error import ErrorScreen
from skippy_tui.ui.screens.history import ConfirmDeleteScreen, HistoryScreen, RenameScreen
from skippy_tui.ui.screens.inspector import InspectorScreen
from skippy_tui.ui.screens.model_picker import picker_for

SIZES = [(40, 15), (60, 20), (80, 24), (140, 40)]  # 40x15: the smallest the layout keeps the chat usable at
LONG = (
    "model file not found: /home/someone/models/a-rather-long-folder-name/SmolLM2-1.7B-Instruct-Q4_K_M.gguf "
    "(check the path)"
)


def _inspector(app: SkippyApp) -> ModalScreen:
    reply = app.transcript.replies()[0]
    return InspectorScreen(reply.steps, 0, reply.started)


# how each dialog opens: a key, or a function of the app that returns the screen to push (None: it pushed it)
OPENERS: dict[str, str | Callable[[SkippyApp], ModalScreen | None]] = {
    "help": "f1",
    "system prompt": "f2",
    "tune": "f3",
    "history": lambda app: HistoryScreen(app.history_store()),  # F9 says the history is off
    "quit": "ctrl+q",  # the chat is unsaved: it asks
    "models": picker_for,
    "inspector": _inspector,
    "open": lambda app: app.action_open_transcript(),
    "error": lambda app: ErrorScreen("Could not load the models", LONG, "Check [target] path. " * 8),
    "rename": lambda app: RenameScreen("", "A chat about something"),
    "delete": lambda app: ConfirmDeleteScreen(ChatEntry(Path("/tmp/h/chat-1.json"), "A chat " * 12, "", 0), True),
    "code blocks": lambda app: CodeBlockScreen([("python", "print(1)\n" * 40), ("", "x = 2\n")], 1),
}


def _misfits(screen: ModalScreen) -> list[str]:
    """What does not fit: the dialog off the screen, text cut at its right edge, a button out of sight."""
    dialog = screen.query_one("#dialog")
    out = []
    if not screen.region.contains_region(dialog.region):
        out.append(f"the dialog {dialog.region} is off the screen {screen.region}")
    right = dialog.content_region.right
    for text in [*dialog.query(Label), *dialog.query(Static)]:
        if not isinstance(text, Button) and text.display and text.region.area and text.region.right > right:
            out.append(f"text cut at the edge: {str(text.render())[:50]!r} {text.region}")
    for button in dialog.query(Button):
        if not dialog.region.contains_region(button.region):
            out.append(f"button {str(button.label)!r} {button.region} out of the dialog {dialog.region}")
    return out


async def _unreachable(pilot: Any, screen: ModalScreen) -> list[str]:
    """The fields that focusing does not bring into the dialog's view."""
    dialog = screen.query_one("#dialog")
    out = []
    for widget in [w for w in dialog.query("*") if w.focusable and w.display]:  # not a closed Select's overlay
        widget.focus()
        try:  # focusing scrolls the dialog after a refresh or two
            await wait_until(pilot, lambda w=widget: dialog.region.contains_region(w.region), 2, "in view")
        except AssertionError:
            out.append(f"{type(widget).__name__}#{widget.id} {widget.region} not in view of {dialog.region}")
    return out


@pytest.mark.parametrize("size", SIZES, ids=[f"{w}x{h}" for w, h in SIZES])
def test_every_dialog_fits(size: tuple[int, int]) -> None:
    async def body() -> None:
        app = SkippyApp(
            ui_config(ui={"history": False}),
            transcript=Transcript.load(CHAT_JSON),
            transcript_path=CHAT_JSON,
            load_models=False,
        )
        problems: list[str] = []
        store = app.history_store()
        for i in range(3):
            store.save(Transcript.load(CHAT_JSON), store.folder / f"chat-{i}.json")
        async with app.run_test(size=size) as pilot:
            app.transcript.system_prompt = "changed"  # unsaved: quitting asks first
            for name, opener in OPENERS.items():
                if isinstance(opener, str):
                    await pilot.press(opener)
                elif (screen := opener(app)) is not None:
                    app.push_screen(screen)
                await wait_until(
                    pilot, lambda: isinstance(app.screen, ModalScreen) and bool(app.screen.query("#dialog")), 10, name
                )
                await settle(pilot)
                screen = app.screen
                problems += [f"{name}: {p}" for p in _misfits(screen) + await _unreachable(pilot, screen)]
                app.pop_screen()
                await wait_until(pilot, lambda: not isinstance(app.screen, ModalScreen), 5, f"{name} to close")
        assert not problems, "\n".join(problems)

    run(body())


@pytest.mark.parametrize(
    ("labels", "room", "form"),
    [
        (["Save", "Cancel"], 36, "wide"),  # 16 + 16 and a gap of 2 before each
        (["Save", "Cancel"], 35, "narrow"),  # 8 + 10 and the gaps
        (["Save", "Cancel"], 21, "stacked"),
        (["Quit without saving (y)", "Save first (s)", "Cancel (esc)"], 70, "wide"),
        (["Quit without saving (y)", "Save first (s)", "Cancel (esc)"], 60, "stacked"),
    ],
)
def test_a_button_row_narrows_then_stacks(labels: list[str], room: int, form: str) -> None:
    assert row_form(labels, room) == form
