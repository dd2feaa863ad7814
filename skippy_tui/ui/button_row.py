"""A dialog's row of buttons, fitted to its width: side by side, narrowed, or stacked.

The row sits at the dialog's foot (``#dialog > .buttons`` is docked in app.tcss), so it
stays in sight while the rest of the dialog scrolls on a short terminal. On a narrow one
the buttons first drop Textual's 16-cell minimum; when even their labels do not fit side
by side, they stack, one compact (borderless, one-row) button per line.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from rich.cells import cell_len
from textual.containers import Horizontal
from textual.widgets import Button

RowForm = Literal["wide", "narrow", "stacked"]

BUTTON_MIN = 16  # Textual's Button min-width
BUTTON_EDGES = 4  # a button's border and line padding, both sides
BUTTON_GAP = 2  # the left margin of each button in a row (app.tcss)


def row_form(labels: Sequence[str], room: int) -> RowForm:
    """How buttons with these labels fit in ``room`` cells: at their usual width, at their
    labels' width, or only stacked."""
    natural = [cell_len(label) + BUTTON_EDGES for label in labels]
    gaps = BUTTON_GAP * len(labels)
    if sum(max(BUTTON_MIN, n) for n in natural) + gaps <= room:
        return "wide"
    if sum(natural) + gaps <= room:
        return "narrow"
    return "stacked"


class ButtonRow(Horizontal):
    """The buttons of a dialog (class ``buttons``), refitted whenever its width changes."""

    def __init__(self, *children: Button, **kwargs) -> None:
        classes = " ".join(filter(None, ["buttons", kwargs.pop("classes", "")]))
        super().__init__(*children, classes=classes, **kwargs)
        self.form: RowForm = "wide"

    def on_resize(self) -> None:
        self.fit()

    def fit(self) -> None:
        buttons = list(self.query(Button))
        if not buttons or not self.size.width:
            return
        form = row_form([str(b.label) for b in buttons], self.size.width)
        if form == self.form:
            return
        self.form = form
        self.set_class(form == "stacked", "-stacked")
        for button in buttons:
            button.compact = form == "stacked"
            button.styles.min_width = BUTTON_MIN if form == "wide" else 0
