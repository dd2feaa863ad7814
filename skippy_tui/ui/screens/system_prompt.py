"""The system prompt dialog (F2)."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, TextArea

from ..button_row import ButtonRow
from .field_tabs import FIELD_TABS


class SystemPromptScreen(ModalScreen["str | None"]):
    """Edit the system prompt. Returns the new text, or None when cancelled."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Cancel"),
        Binding("ctrl+s", "save", "Save"),
        *FIELD_TABS,
    ]

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog") as v:
            v.border_title = "System prompt"  # the subtitle fits the width (_fit)
            yield TextArea(self.text, id="system-text", soft_wrap=True, tab_behavior="focus")
            with ButtonRow():
                yield Button("Save", id="save", variant="primary")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        area = self.query_one("#system-text", TextArea)
        area.focus()
        area.move_cursor(area.document.end)
        self._fit()

    def on_resize(self) -> None:
        self._fit()

    def _fit(self) -> None:
        """The text area's ten rows shrink (to three) on a short terminal, so that Save and
        Cancel stay in the dialog's 90 % of the screen below its border and padding (4 rows)
        and the buttons (3); on a narrow one the buttons narrow (ButtonRow)."""
        room = int(self.size.height * 0.9) - 7
        self.query_one("#system-text", TextArea).styles.height = max(3, min(10, room))
        keys = "ctrl+s save · esc cancel"  # the subtitle is cut at the border: the keys first when narrow
        self.query_one("#dialog").border_subtitle = (
            keys if self.size.width < 70 else f"applies from the next reply · {keys}"
        )

    def action_save(self) -> None:
        self.dismiss(self.query_one("#system-text", TextArea).text.strip())

    @on(Button.Pressed, "#save")
    def _save(self) -> None:
        self.action_save()

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(None)
