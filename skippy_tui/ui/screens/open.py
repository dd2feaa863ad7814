"""The open-transcript dialog: a saved transcript (newest first) or a typed path."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Input, OptionList, Static

from .field_tabs import FIELD_TABS


class OpenTranscriptScreen(ModalScreen["Path | None"]):
    """Pick a saved transcript (newest first) or type a path."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss(None)", "Cancel"), *FIELD_TABS]

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder
        found = folder.glob("*.json") if folder.is_dir() else []
        self.files = sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)
        # focus the list (or the path field), not the scroll area around the list
        self.AUTO_FOCUS = "#files" if self.files else "#path"

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog") as v:
            v.border_title = "Open transcript"
            v.border_subtitle = "enter open · esc cancel"
            # a Static wraps a long folder (a Label runs past the dialog's edge); a path may hold [brackets]
            where = f"Saved in {self.folder}:" if self.files else f"No transcripts in {self.folder} yet."
            yield Static(where, id="open-where", markup=False)
            if self.files:
                with VerticalScroll(id="transcript-list"):
                    yield OptionList(*[p.name for p in self.files], id="files")
            yield Input(placeholder="or a path to a .json transcript", id="path")

    @on(OptionList.OptionSelected)
    def _picked(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.files[event.option_index])

    @on(Input.Submitted)
    def _typed(self, event: Input.Submitted) -> None:
        if event.value.strip():
            self.dismiss(Path(event.value.strip()).expanduser())
