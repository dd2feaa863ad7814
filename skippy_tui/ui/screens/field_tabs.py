"""Tab and Shift+Tab for dialogs with fields that type keys themselves, as priority bindings.

A terminal delivers a fast "<tab>4230" (or "<tab><enter>") in one read. Textual
forwards each key to the focused widget's own queue, and a plain Tab moves the
focus only once that widget has bubbled it up to the screen's binding: an Input
or TextArea left behind typed the keys after it (F3's min_p became 4230; Enter
after Tab in the system prompt broke a line instead of pressing Save). A key
bound to an action is looked up after it bubbles, along the focus as it is by
then, so buttons and tables are not affected. A priority binding moves the
focus before the app forwards the next key.
"""

from __future__ import annotations

from textual.binding import Binding, BindingType

FIELD_TABS: tuple[BindingType, ...] = (
    Binding("tab", "app.focus_next", "Next field", show=False, priority=True),
    Binding("shift+tab", "app.focus_previous", "Previous field", show=False, priority=True),
)
