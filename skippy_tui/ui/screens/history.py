"""The chat history screen (F9): every saved chat, a filter, open / rename / delete.

The list comes from :class:`~skippy_tui.history.HistoryStore` (its index, so
it opens at once on hundreds of chats). Renames and deletes go through the
store here; opening dismisses with the chat's path and the app continues it.
A broken file is listed with the reason and cannot be opened or renamed.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import events, on
from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Input, Static

from ...engine.load.labels import model_label
from ...history import ChatEntry, HistoryError, HistoryStore
from ..button_row import ButtonRow
from .field_tabs import FIELD_TABS

HINT = "enter open · f2 rename · del delete · type to filter · esc close"


def models_text(entry: ChatEntry, width: int = 26) -> str:
    """``target / draft`` as short labels (file stem and quantization), or the broken file's reason."""
    if entry.broken:
        return f"broken: {entry.error}"
    return " / ".join(model_label(m.path, m.name, m.file_type, width) for m in entry.models) or "—"


class HistoryScreen(ModalScreen["Path | None"]):
    """Lists the chats of ``store``, newest first. Dismisses with the path of the chat to
    open, or None (Esc). ``current`` is the chat the app has open (its rows says so)."""

    # scoped to this screen (the dialog's size is set in on_mount: app CSS outranks DEFAULT_CSS)
    DEFAULT_CSS = """
    #history-filter { margin: 0 0 1 0; }
    #history-table { height: 1fr; }
    #history-count { color: $text-muted; height: 1; }
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Close"),
        # no letter keys: every printable key typed in the list goes to the filter
        Binding("f2,ctrl+r", "rename", "Rename"),
        # priority: typing moves the focus to the filter, whose own delete and ctrl+d would take
        # them; Delete is still the field's while it has a character right of its cursor
        Binding("delete", "delete(True)", "Delete", priority=True),
        Binding("ctrl+d", "delete", "Delete", show=False, priority=True),
        Binding("slash", "focus_filter", "Filter", show=False),
        *FIELD_TABS,
    ]

    def __init__(self, store: HistoryStore, current: Path | None = None) -> None:
        super().__init__()
        self.store = store
        self.current = current
        self.entries: list[ChatEntry] = []
        self.shown: list[ChatEntry] = []

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="history") as v:
            v.border_title = "Chat history"
            v.border_subtitle = HINT
            # not select_on_focus: the key that moved the focus here is its first character
            yield Input(
                placeholder="filter: words in the title, messages, models or date",
                id="history-filter",
                select_on_focus=False,
            )
            yield DataTable(id="history-table", cursor_type="row", zebra_stripes=True)
            yield Static("", id="history-count", markup=False)

    def on_mount(self) -> None:
        dialog = self.query_one("#dialog")  # wider and taller than the app's dialogs: a table of chats
        dialog.styles.width = 124
        dialog.styles.max_width = "98%"
        dialog.styles.height = "85%"
        table = self.table
        for label, key in (("title", "title"), ("updated", "updated"), ("turns", "turns"), ("models", "models")):
            table.add_column(label, key=key)
        self.reload()
        table.focus()

    @property
    def table(self) -> DataTable:
        return self.query_one("#history-table", DataTable)

    @property
    def filter_input(self) -> Input:
        return self.query_one("#history-filter", Input)

    def reload(self) -> None:
        """Read the list again (after a rename or delete) and show it through the filter."""
        self.entries = self.store.list()
        self._show()

    def _show(self) -> None:
        table = self.table
        keep = self.highlighted
        query = self.filter_input.value
        self.shown = [e for e in self.entries if e.matches(query)]
        table.clear()
        # a long title (a pasted first message, a rename) would push the other columns out of sight
        longest = max(16, min(60, self.size.width // 2))
        for e in self.shown:
            title = Text(e.title, style="italic" if e.broken else "")
            title.truncate(longest, overflow="ellipsis")
            if self.current is not None and e.path.name == self.current.name:
                title.append("  (open)", style="dim")
            table.add_row(
                title,
                e.updated_label(),
                "—" if e.broken else str(e.turns),  # before the models: a broken file's reason may be long
                Text(models_text(e), style="bold red" if e.broken else ""),
                key=str(e.path),
            )
        if keep is not None and keep in self.shown:
            table.move_cursor(row=self.shown.index(keep))
        n, total = len(self.shown), len(self.entries)
        if not total:
            text = f"No chats in {self.store.folder} yet: each chat is saved here after every reply."
        elif query.strip():
            text = f"{n} of {total} chats match"
        else:
            text = f"{total} chat{'s' if total != 1 else ''}, newest first"
        self.query_one("#history-count", Static).update(text)

    @property
    def highlighted(self) -> ChatEntry | None:
        """The entry under the table's cursor, if any row is shown."""
        row = self.table.cursor_row
        return self.shown[row] if self.shown and 0 <= row < len(self.shown) else None

    # -- filter -------------------------------------------------------------------------------

    @on(Input.Changed, "#history-filter")
    def _filter(self) -> None:
        self._show()

    @on(Input.Submitted, "#history-filter")
    def _open_from_filter(self) -> None:
        self._open(self.highlighted)

    def action_focus_filter(self) -> None:
        self.filter_input.focus()

    def on_key(self, event: events.Key) -> None:
        """In the table, a printable key other than ``/`` starts the filter; ↓/↑ in the
        filter move the table's cursor, so Enter there opens the chosen row."""
        table, field = self.table, self.filter_input
        if table.has_focus and event.is_printable and event.character and event.character != "/":
            field.focus()
            field.insert_text_at_cursor(event.character)
            event.stop()
        elif field.has_focus and event.key in ("down", "up") and self.shown:
            table.move_cursor(row=table.cursor_row + (1 if event.key == "down" else -1))
            event.stop()

    # -- open, rename, delete -------------------------------------------------------------------

    @on(DataTable.RowSelected, "#history-table")
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        self._open(self.highlighted)

    def _open(self, entry: ChatEntry | None) -> None:
        if entry is None:
            return
        if entry.broken:
            self.notify(f"{entry.path.name}: {entry.error}", title="Cannot open this chat", severity="error")
            return
        self.dismiss(entry.path)

    def action_rename(self) -> None:
        entry = self.highlighted
        if entry is None:
            return
        if entry.broken:
            self.notify(f"{entry.path.name}: {entry.error}", title="Cannot rename this chat", severity="error")
            return

        def done(title: str | None) -> None:
            if title is None:
                return
            try:
                self.store.rename(entry.path, title)
            except HistoryError as e:
                self.notify(str(e), title="Rename failed", severity="error", timeout=10)
            self.reload()

        self.app.push_screen(RenameScreen(entry.title if entry.renamed else "", entry.title), done)

    def _filter_deletes(self) -> bool:
        """Whether Delete belongs to the filter: it has the focus and a character right of
        its cursor (or a selection) to delete."""
        field = self.filter_input
        return field.has_focus and (not field.selection.is_empty or field.cursor_position < len(field.value))

    def action_delete(self, field_first: bool = False) -> None:
        """Delete the highlighted chat (asked first); with ``field_first`` (the Delete key), the
        filter's character right of its cursor instead, when there is one."""
        if field_first and self._filter_deletes():
            raise SkipAction()  # the field's own binding deletes the character
        entry = self.highlighted
        if entry is None:
            return
        is_open = self.current is not None and entry.path.name == self.current.name

        def done(yes: bool | None) -> None:
            if not yes:
                return
            try:
                self.store.delete(entry.path)
            except HistoryError as e:
                self.notify(str(e), title="Delete failed", severity="error", timeout=10)
            self.reload()
            self.table.focus()

        self.app.push_screen(ConfirmDeleteScreen(entry, is_open), done)


class RenameScreen(ModalScreen["str | None"]):
    """A chat's new title. Enter keeps it ("" goes back to the first message), Esc cancels."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss(None)", "Cancel")]

    def __init__(self, title: str, placeholder: str) -> None:
        super().__init__()
        self.title_text = title
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog") as v:
            v.border_title = "Rename chat"
            v.border_subtitle = "enter keep · empty = its first message · esc cancel"
            yield Input(self.title_text, placeholder=self.placeholder, id="rename-title")

    @on(Input.Submitted, "#rename-title")
    def _submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)


class ConfirmDeleteScreen(ModalScreen[bool]):
    """Asks before a chat's files are removed: Enter/y deletes, Esc/n keeps it."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter,y", "choose(True)", "Delete", priority=True),
        Binding("escape,n", "choose(False)", "Keep", priority=True),
    ]

    def __init__(self, entry: ChatEntry, is_open: bool = False) -> None:
        super().__init__()
        self.entry = entry
        self.is_open = is_open

    def compose(self) -> ComposeResult:
        name = self.entry.path.with_suffix("").name
        text = f"Delete “{self.entry.title}”?\nThis removes {name}.json and {name}.md from {self.entry.path.parent}."
        if self.is_open:
            text += "\nIt is the chat on screen: it stays there, and is saved again as a new chat if you continue it."
        with Vertical(id="dialog", classes="error-dialog") as v:
            v.border_title = "Delete chat?"
            v.border_subtitle = "enter/y delete · esc/n keep"
            yield Static(text, id="delete-message", markup=False)
            with ButtonRow():
                yield Button("Delete (y)", id="yes", variant="error")
                yield Button("Keep (esc)", id="no")

    def on_mount(self) -> None:
        for button in self.query(Button):
            button.can_focus = False

    def action_choose(self, yes: bool) -> None:
        self.dismiss(yes)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")
