"""Asking before an action drops a conversation that has not been saved (quit, new chat, open)."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

from ..button_row import ButtonRow

DISCARD = "discard"
SAVE = "save"


class ConfirmDiscardScreen(ModalScreen["str | None"]):
    """Asks "quit / clear / open without saving?". Dismisses with :data:`DISCARD` (Enter or y),
    :data:`SAVE` (s: save, then go on) or None (Esc or n: keep the conversation).

    ``action`` is the verb shown on the buttons ("Quit", "Start a new chat", "Open"). The
    buttons are for the mouse only, so Enter always means the same thing.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter,y", f"choose('{DISCARD}')", "Discard", priority=True),
        Binding("s", f"choose('{SAVE}')", "Save first", priority=True),
        Binding("escape,n", "choose(None)", "Cancel", priority=True),
    ]

    def __init__(self, action: str, what: str) -> None:
        super().__init__()
        self.action_name = action
        self.what = what

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="confirm") as v:
            v.border_title = f"{self.action_name}?"
            v.border_subtitle = "enter/y without saving · s save first · esc/n cancel"
            yield Static(f"{self.what} has not been saved.", id="confirm-message", markup=False)
            with ButtonRow():
                yield Button(f"{self.action_name} without saving (y)", id="discard", variant="error")
                yield Button("Save first (s)", id="save", variant="primary")
                yield Button("Cancel (esc)", id="cancel")

    def on_mount(self) -> None:
        for button in self.query(Button):
            button.can_focus = False

    def action_choose(self, choice: str | None) -> None:
        self.dismiss(choice)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss({"discard": DISCARD, "save": SAVE}.get(event.button.id or ""))
