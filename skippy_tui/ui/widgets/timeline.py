"""The speculation panel's timeline: a row per step under a fixed header (Textual's Line API).

Each row is rendered once, when it first comes into view, and kept as a strip until
the column widths, the sync column's form or the theme change. A DataTable re-rendered
every visible cell through Rich on every batch of new rows (its caches are keyed by
the table's update count): at 4 batches a second that was over 40 % of the UI
thread's time during a reply, and on 2 cores the UI's time is taken from the
engine's decoding threads (``tools/app_speed.py``).
"""

from __future__ import annotations

from typing import ClassVar

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

from ...engine.events import StepVerified
from .render import commit_cell, fg, proposal_cell, sync_short

CHANGED = "*"
"""Marks a step from which the sampling settings changed mid-reply (F3)."""

COLUMNS = (
    ("#", "index"), ("src", "source"), ("sync", "sync"), ("proposal", "proposal"), ("+", "commit"),
    ("rollback", "rollback"), ("d/v ms", "ms"),
)  # fmt: skip
OPTIONAL = frozenset({"source", "rollback"})
"""Columns shown only once a step has something worth a column in them, so the proposal keeps
the width where they would repeat what the status bar says: the source once a step drafted
with something else than the draft model (n-gram, MTP heads), the rollback once the target
dropped rows otherwise than its KV cache does (a hybrid or recurrent target's snapshot or
restore, a reset). The inspector shows both for every step."""


def optional_cells(st: StepVerified) -> dict[str, bool]:
    """Whether ``st`` alone calls for each :data:`OPTIONAL` column."""
    return {
        "source": st.draft_source not in ("", "model"),
        "rollback": st.rollback is not None and st.rollback.via != "kv",
    }


COMMIT_MAX = 14  # cells for the committed token; "(reply ended)" fits, a longer token ends in "…"
PROPOSAL_MIN = 8  # the proposal keeps at least this many cells, ending in "…" when cut
PAD = 1  # cells either side of every column
RIGHT = frozenset({"index"})  # columns aligned right


def step_ms(ms: float) -> str:
    """Milliseconds in at most 5 cells: ``3.1``, ``518``, ``4.7s``, ``17s``."""
    if ms < 100:
        return f"{ms:.1f}"
    if ms < 1000:
        return f"{ms:.0f}"
    return f"{ms / 1000:.1f}s" if ms < 10_000 else f"{ms / 1000:.0f}s"


class Timeline(ScrollView, can_focus=True):
    """One row per step; Enter (or a click on the highlighted row) opens the inspector.

    The columns are sized here so that they always fit the width: the proposal takes
    what the others leave and ends in "…" when cut (the inspector shows it whole).
    When even that would cut it, the sync column switches to short badges
    (``e41..44``; :attr:`compact`) and the panel shows their legend. The draft source
    of each step (``model``, ``ngram``, ``mtp``) and how the target dropped the rows it
    did not commit (``drop 3``, ``rollback 3``, ``restore 3 +2``) have columns once a
    step calls for them (:data:`OPTIONAL`). The view follows
    the last row until the user scrolls up, and again once back at the end.
    """

    class Compacted(Message):
        """The sync column switched between full and short badges."""

    class RowSelected(Message):
        """Enter (or a click) on row ``cursor_row``."""

        def __init__(self, cursor_row: int) -> None:
            super().__init__()
            self.cursor_row = cursor_row

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "timeline--header",
        "timeline--cursor",
        "step--accepted",
        "step--rejected",
        "step--bonus",
        "step--correction",
        "step--sep",
        "step--sync",
        "step--ms",
        "step--changed",
    }
    DEFAULT_CSS = """
    Timeline {
        overflow-x: hidden;
        &:focus { background-tint: $foreground 5%; }
        & > .timeline--header { text-style: bold; background: $panel; color: $foreground; }
        & > .timeline--cursor {
            background: $block-cursor-blurred-background;
            color: $block-cursor-blurred-foreground;
            text-style: $block-cursor-blurred-text-style;
        }
        &:focus > .timeline--header { background-tint: $foreground 5%; }
        &:focus > .timeline--cursor {
            background: $block-cursor-background;
            color: $block-cursor-foreground;
            text-style: $block-cursor-text-style;
        }
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Inspect step"),
        Binding("up", "cursor_up", "Cursor up", show=False),
        Binding("down", "cursor_down", "Cursor down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home", "first", "First step", show=False),
        Binding("end", "last", "Last step", show=False),
    ]

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.steps: list[StepVerified] = []
        self.compact = False  # short sync badges
        self.cursor_row = 0
        self._widest: dict[str, int] = {}  # per column (and "sync_short"): the widest cell so far
        self._present: set[str] = set()  # the OPTIONAL columns some step has filled
        self._sizes: dict[str, int] = {}  # the column widths in use
        self._strips: dict[int, Strip] = {}  # rendered rows (without the cursor), by index
        self._header: Strip | None = None
        self._follow = True  # keep the last row in view: true until the user scrolls up from it
        self._laid_out_rows: Size | None = None  # the virtual size the scrollbars last saw

    # -- the rows ------------------------------------------------------------------------

    @property
    def row_count(self) -> int:
        return len(self.steps)

    @property
    def widths(self) -> dict[str, int]:
        """Each shown column's width in cells (padding excluded), by key."""
        return dict(self._sizes)

    @property
    def shown(self) -> list[str]:
        """The keys of the columns shown, in order: every one but the optional ones no step filled."""
        return [key for _, key in COLUMNS if key not in OPTIONAL or key in self._present]

    def get_row_at(self, row: int) -> tuple[Text, ...]:
        """The cells of row ``row`` in the shown columns, styled, uncut."""
        cells = self._cells(self.steps[row])
        return tuple(cells[key] for key in self.shown)

    def _cells(self, st: StepVerified) -> dict[str, Text]:
        style = self.get_component_rich_style
        ms = fg(style("step--ms"))
        index = Text(str(st.index), style=ms)
        if st.sampling is not None:  # F3 changed the sampling settings from this step on
            index = Text(CHANGED, style=fg(style("step--changed"))) + index
        proposal = proposal_cell(st, fg(style("step--accepted")), fg(style("step--rejected")), fg(style("step--sep")))
        commit = commit_cell(st, fg(style("step--bonus")), fg(style("step--correction")))
        sync = sync_short(st.sync) if self.compact else st.sync.label()
        return {
            "index": index,
            "source": Text(st.draft_source, style=fg(style("step--sync"))),
            "sync": Text(sync, style=fg(style("step--sync"))),
            "proposal": proposal,
            "commit": commit,
            "rollback": Text(st.rollback.label() if st.rollback is not None else "", style=ms),
            "ms": Text(f"{step_ms(st.draft_ms)}/{step_ms(st.verify_ms)}", style=ms),
        }

    def add_steps(self, steps: list[StepVerified]) -> None:
        """Append rows (a batch of a reply in flight); only rows in view are rendered."""
        self.steps += steps
        self._measure(steps)
        self._fit()
        self._resized()

    def set_steps(self, steps: list[StepVerified]) -> None:
        """Show these steps instead (another reply), following the last one."""
        self.steps, self._widest, self._follow, self.cursor_row = [], {}, True, 0
        self._present = set()
        self._forget()
        self.add_steps(steps)

    def restyle(self) -> None:
        """Render the rows again with the current theme's styles."""
        self._forget()
        self.refresh()

    def _forget(self) -> None:
        self._strips.clear()
        self._header = None

    def _size_updated(self, size: Size, virtual_size: Size, container_size: Size, layout: bool = True) -> bool:
        # The layout hands a ScrollView its region's size as the virtual size; ours is the
        # row count (set in _resized). ScrollView compares the two, finds them different at
        # every layout of the screen and repaints the scrollbar: a dirty column at the
        # screen's right edge that pulled the whole panel into every frame of streaming text.
        # Now only a new row count (or size) goes on to the scrollbars.
        rows = self.virtual_size
        if rows == self._laid_out_rows:
            virtual_size = rows
        self._laid_out_rows = rows
        return super()._size_updated(size, virtual_size, container_size, layout)

    def _resized(self) -> None:
        self.virtual_size = Size(0, len(self.steps) + 1)  # the header is the first line
        self._stick()
        self.refresh()

    # -- column widths -------------------------------------------------------------------

    def _measure(self, steps: list[StepVerified]) -> None:
        """Widen the running column maxima by these steps' cells."""
        widest = self._widest
        if not widest:
            widest.update({key: cell_len(label) for label, key in COLUMNS})
            widest["sync_short"] = widest["sync"]
        for st in steps:
            cells = {
                "index": len(str(st.index)) + (st.sampling is not None),
                "source": cell_len(st.draft_source),
                "sync": cell_len(st.sync.label()),
                "sync_short": cell_len(sync_short(st.sync)),
                "proposal": proposal_cell(st, "", "").cell_len,
                "commit": min(commit_cell(st, "", "").cell_len, COMMIT_MAX),
                "ms": len(step_ms(st.draft_ms)) + 1 + len(step_ms(st.verify_ms)),
                "rollback": cell_len(st.rollback.label()) if st.rollback is not None else 0,
            }
            for key, width in cells.items():
                widest[key] = max(widest[key], width)
            self._present.update(key for key, wanted in optional_cells(st).items() if wanted)

    def _fit(self) -> None:
        """Size the columns to the widget's width; switch the sync column's form when needed."""
        width = self.size.width - 1  # the vertical scrollbar's column, shown or not
        if width <= 0:
            return
        if not self._widest:
            self._measure([])
        shown = self.shown
        w, pad = self._widest, 2 * PAD * len(shown)
        fixed = {key: w[key] for key in shown if key not in ("sync", "proposal")}
        compact = sum(fixed.values()) + pad + w["sync"] + w["proposal"] > width
        sizes = {key: fixed[key] if key in fixed else w["sync_short" if compact else "sync"] for key in shown}
        sizes["proposal"] = max(width - sum(v for k, v in sizes.items() if k != "proposal") - pad, PROPOSAL_MIN)
        changed = compact != self.compact
        if sizes != self._sizes or changed:  # most batches of steps change no width
            self._sizes, self.compact = sizes, compact
            self._forget()
        if changed:
            self.post_message(self.Compacted())

    def on_resize(self) -> None:
        self._fit()
        self._resized()

    # -- rendering -----------------------------------------------------------------------

    def _line(self, cells: dict[str, Text], base: Style, header: bool = False) -> Strip:
        """One line of the shown columns' cells cut or padded to their widths (labels all aligned left)."""
        line = Text(no_wrap=True, end="")
        for key in self._sizes:
            cell = cells[key].copy()
            cell.overflow, cell.no_wrap = "ellipsis", True
            cell.align("right" if key in RIGHT and not header else "left", self._sizes.get(key, 0))
            line.append(" " * PAD)
            line.append_text(cell)
            line.append(" " * PAD)
        line.stylize_before(base)  # under the cells' styles (a Text's own style renders only with spans)
        segments = [s for s in line.render(self.app.console) if s.text]
        return Strip(segments, line.cell_len)

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.rich_style
        if y == 0:
            header = self.get_component_rich_style("timeline--header")
            if self._header is None:
                self._header = self._line({key: Text(label) for label, key in COLUMNS}, header, header=True)
            return self._header.crop_extend(0, width, header)
        row = self.scroll_offset.y + y - 1
        if row >= len(self.steps):
            return Strip.blank(width, base)
        strip = self._strips.get(row)
        if strip is None:
            strip = self._strips[row] = self._line(self._cells(self.steps[row]), base)
        strip = strip.crop_extend(0, width, base)  # cached at the columns' width, fitted to the widget's here
        if row == self.cursor_row and self.has_focus:  # the cursor's colours over the cells'
            cursor = self.get_component_rich_style("timeline--cursor")
            strip = Strip(Segment.apply_style(strip, post_style=cursor), strip.cell_length)
        return strip.apply_offsets(0, row)

    # -- following the last row ------------------------------------------------------------

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        # Follow while the view is at the end. Not "stop when it moved up": the view also moves up
        # by itself, clamped to a shorter list (the next reply starts empty) or a taller view (the
        # panel grew), and that stopped the following for a whole reply. Only a scroll by the user
        # leaves the view above the end; a clamp leaves it at the end.
        self._follow = round(new_value) >= self.max_scroll_y

    def _stick(self) -> None:
        """Scroll to the last row when following."""
        if self._follow and self.size.height:
            # force: the first row past the view would wait for the next batch, as the scrollbar
            # (without which a widget does not scroll) shows only at the next layout
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True, force=True)

    # -- the cursor ------------------------------------------------------------------------

    def on_focus(self) -> None:
        self.restyle()  # the cursor row shows only while the timeline has focus, tinted

    def on_blur(self) -> None:
        self.restyle()

    def move_cursor(self, row: int, scroll: bool = True) -> None:
        """Put the cursor on ``row`` (clamped), scrolled into view unless ``scroll`` is False."""
        self.cursor_row = min(max(row, 0), max(len(self.steps) - 1, 0))
        if scroll:
            view = self.size.height - 1  # rows under the header
            top = self.scroll_offset.y
            if self.cursor_row < top:
                self.scroll_to(y=self.cursor_row, animate=False, immediate=True)
            elif view > 0 and self.cursor_row >= top + view:
                self.scroll_to(y=self.cursor_row - view + 1, animate=False, immediate=True)
        self.refresh()

    def action_cursor_up(self) -> None:
        self.move_cursor(self.cursor_row - 1)

    def action_cursor_down(self) -> None:
        self.move_cursor(self.cursor_row + 1)

    def action_page_up(self) -> None:
        self.move_cursor(self.cursor_row - max(self.size.height - 2, 1))

    def action_page_down(self) -> None:
        self.move_cursor(self.cursor_row + max(self.size.height - 2, 1))

    def action_first(self) -> None:
        self.move_cursor(0)

    def action_last(self) -> None:
        self.move_cursor(len(self.steps) - 1)

    def action_select_cursor(self) -> None:
        if self.steps:
            self.post_message(self.RowSelected(self.cursor_row))

    def on_click(self, event: events.Click) -> None:
        row = self.scroll_offset.y + event.y - 1
        if event.y < 1 or not 0 <= row < len(self.steps):
            return
        if row == self.cursor_row and self.has_focus:
            self.action_select_cursor()
        else:
            self.move_cursor(row, scroll=False)
