"""Where the speculation panel goes: beside the chat, under it, or hidden (F6)."""

from __future__ import annotations

from typing import Any

from textual.containers import Horizontal

SIDE_BY_SIDE_MIN_WIDTH = 120  # narrower: the panel goes under the chat
STACKED_MIN_HEIGHT = 30  # under the chat and shorter than this, the panel hides (F6 shows it)


class MainArea(Horizontal):
    """The chat column and the panel. It lays them out again when the terminal's size
    changes: the app itself gets only the first resize (later ones go to the screen)."""

    def on_resize(self) -> None:
        app: Any = self.app  # a SkippyApp (LayoutMixin, StatusMixin)
        app._apply_layout()
        app._update_status()


class LayoutMixin:
    """Panel placement for the app: side by side when wide, stacked when narrow, F6 to show/hide.

    Owns ``_stacked`` (the layout last applied; None before the first) and
    ``_panel_choice`` (F6's show/hide, until the layout changes). Relies on the app's
    ``size``, ``panel``, ``prompt``, ``query_one`` and ``_update_status`` (StatusMixin).
    """

    def _init_layout(self) -> None:
        self._stacked: bool | None = None  # the panel under the chat (a narrow terminal)
        self._panel_choice: bool | None = None  # F6's show/hide, until the layout changes

    def _apply_layout(self) -> None:
        """Side by side when wide; the panel under the chat when narrow, hidden when also short.

        F6's choice holds until the layout changes between side by side and stacked.
        """
        width, height = self.size
        stacked = width < SIDE_BY_SIDE_MIN_WIDTH
        if stacked != self._stacked:
            self._stacked, self._panel_choice = stacked, None
        shown = not stacked or height >= STACKED_MIN_HEIGHT
        if self._panel_choice is not None:
            shown = self._panel_choice
        self.query_one("#main").set_class(stacked, "-stacked")
        self.panel.set_stacked(stacked)
        # hidden with the focus in it, the panel would leave nothing focused (Textual finds
        # no visible sibling to pass it to): the input takes it, or typing goes nowhere
        refocus = not shown and self.panel.has_focus_within
        self.panel.display = shown
        if refocus and self.prompt.display:
            self.prompt.focus()

    def action_toggle_panel(self) -> None:
        if self._stacked is None:  # F6 before the first layout, which would have reset the choice
            self._apply_layout()
        self._panel_choice = not self.panel.display
        self._apply_layout()
        self._update_status()
