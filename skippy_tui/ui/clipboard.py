"""Copying a reply, or one of its code blocks, to the clipboard (OSC 52, through the terminal)."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList

from .widgets.chat import chat_parser


def code_blocks(markdown: str) -> list[tuple[str, str]]:
    """The code blocks of a reply's Markdown, in order, as ``(language, code)``.

    Fenced (```` ``` ````/``~~~``) and indented blocks count, parsed the way the chat
    renders them; ``language`` is the fence's info word ("" when none). ``code``
    ends with its last line's newline, as in the source.
    """
    out = []
    for tok in chat_parser().parse(markdown):
        if tok.type in ("fence", "code_block"):
            out.append((tok.info.split()[0] if tok.info.strip() else "", tok.content))
    return out


def block_title(index: int, language: str, code: str, width: int = 60) -> str:
    """One line naming a block in the picker: number, language, first non-empty line, size."""
    first = next((line.strip() for line in code.splitlines() if line.strip()), "")
    if len(first) > width:
        first = first[: width - 1] + "…"
    n = code.count("\n") + (not code.endswith("\n"))
    return f"{index + 1}. {language or 'code'} · {first} · {n} line{'s' if n != 1 else ''}"


class CodeBlockScreen(ModalScreen["int | None"]):
    """Pick one of a reply's code blocks. Returns its index, or None when cancelled."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss(None)", "Cancel")]
    AUTO_FOCUS = "#blocks"

    def __init__(self, blocks: list[tuple[str, str]], reply: int) -> None:
        super().__init__()
        self.blocks = blocks
        self.reply = reply

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog") as v:
            v.border_title = f"Copy a code block of reply {self.reply}"
            v.border_subtitle = "↑↓ choose · enter copy · esc cancel"
            yield Label(f"{len(self.blocks)} code blocks:")
            yield OptionList(*[block_title(i, lang, code) for i, (lang, code) in enumerate(self.blocks)], id="blocks")

    @on(OptionList.OptionSelected)
    def _picked(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option_index)
