"""The load/config error dialog: what went wrong, how to fix it, continue or quit."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Label, Static

from ...engine.errors import BoundsError, IncompatibleModelsError, ModelFileError
from ..button_row import ButtonRow


def how_to_fix(error: BaseException, config_file: str) -> str:
    """A hint for one error: what to change, and where."""
    from ...config import ConfigError, SavedSettingsError

    if isinstance(error, SavedSettingsError):
        return (
            f"Delete {error.path}: it holds only what the app saved (Ctrl+P, Save settings as defaults), "
            "none of your config file. Or continue, set things again and save them: that replaces it."
        )
    if isinstance(error, ConfigError):
        return (
            f"Edit the key named above in {config_file}, or start with --config PATH to use another file "
            "(skippy-tui --print-config-path shows the default location)."
        )
    if isinstance(error, ModelFileError):
        return (
            f"Check [target] path / [draft] path in {config_file}, or pass --target PATH / --draft PATH. "
            "Leave both paths empty to use the built-in default pair."
        )
    if isinstance(error, IncompatibleModelsError):
        return (
            "Pick a draft model of the same family as the target (same tokenizer and special tokens), "
            "or start with --no-draft for plain decoding."
        )
    if isinstance(error, BoundsError):
        return f"Change that setting in {config_file} or on the command line to a value in bounds."
    return f"See the log and {config_file}; start with --no-draft or another --target to narrow it down."


class ErrorScreen(ModalScreen[str]):
    """What went wrong and how to fix it. Dismisses with "quit" or "continue"."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss('continue')", "Continue", show=False),
        Binding("q", "dismiss('quit')", "Quit", show=False),
    ]

    def __init__(self, title: str, message: str, fix: str, *, can_continue: bool = True) -> None:
        super().__init__()
        self.title_text = title
        self.message = message
        self.fix = fix
        self.can_continue = can_continue

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="error-dialog") as v:
            v.border_title = self.title_text
            yield Static(self.message, id="error-message", markup=False)
            yield Label("How to fix it", classes="dialog-heading")
            yield Static(self.fix, id="error-fix", markup=False)
            with ButtonRow():
                if self.can_continue:
                    yield Button("Continue without models", id="continue", variant="primary")
                yield Button("Quit", id="quit", variant="error")

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id or "continue")
