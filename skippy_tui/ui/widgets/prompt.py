"""The message input: multi-line TextArea where Enter sends and Ctrl+J adds a newline."""

from __future__ import annotations

from typing import ClassVar

from textual import events
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import TextArea

HINT = "enter send · ctrl+j newline · ↑↓ history"


class PromptInput(TextArea):
    """Enter sends; Ctrl+J (also Shift+Enter or Alt+Enter where the terminal tells
    them apart) inserts a newline; ↑ on the first line and ↓ on the last line walk
    through earlier messages."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+j,shift+enter,alt+enter", "newline", "Newline", show=False),
    ]

    class Submitted(Message):
        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    def __init__(self, history: list[str] | None = None, **kwargs) -> None:
        super().__init__(soft_wrap=True, show_line_numbers=False, tab_behavior="focus", **kwargs)
        self.recall_list: list[str] = list(history or [])
        self._hist_pos: int | None = None  # index into history while recalling
        self._draft = ""  # what was typed before recalling
        self._hint = HINT  # the keys, in the bottom border
        self._count = ""  # the text's tokens against the context window (ui/context_fit.py), or ""

    def on_mount(self) -> None:
        self.border_title = "message"
        self._show_subtitle()

    def set_hint(self, hint: str) -> None:
        """What the bottom border says about the keys (editing a message says other keys)."""
        self._hint = hint
        self._show_subtitle()

    def set_count(self, count: str, too_long: bool) -> None:
        """Show the text's token count before the keys; ``too_long`` marks the input."""
        self._count = count
        self.set_class(too_long, "-too-long")
        self._show_subtitle()

    def _show_subtitle(self) -> None:
        self.border_subtitle = f"{self._count} · {self._hint}" if self._count else self._hint

    def action_newline(self) -> None:
        start, end = self.selection
        self._replace_via_keyboard("\n", start, end)

    def remember(self, text: str) -> None:
        if text and (not self.recall_list or self.recall_list[-1] != text):
            self.recall_list.append(text)
        self._hist_pos = None
        self._draft = ""

    def _recall(self, delta: int) -> bool:
        if not self.recall_list:
            return False
        if self._hist_pos is None:
            if delta > 0:
                return False
            self._draft = self.text
            pos = len(self.recall_list) - 1
        else:
            pos = self._hist_pos + delta
        if pos < 0:
            return True  # stay on the oldest
        if pos >= len(self.recall_list):
            self._hist_pos = None
            self._set(self._draft)
            return True
        self._hist_pos = pos
        self._set(self.recall_list[pos])
        return True

    def _set(self, text: str) -> None:
        self.load_text(text)
        self.move_cursor(self.document.end)

    async def _on_key(self, event: events.Key) -> None:
        if event.key == "enter":
            event.stop()
            event.prevent_default()
            self.post_message(self.Submitted(self.text))
            return
        row = self.cursor_location[0]
        if event.key == "up" and row == 0 and self._recall(-1):
            event.stop()
            event.prevent_default()
            return
        if event.key == "down" and row == self.document.line_count - 1 and self._recall(+1):
            event.stop()
            event.prevent_default()
            return
        await super()._on_key(event)
