"""The speculation panel: a timeline row per step, then reply and session statistics."""

from __future__ import annotations

from typing import ClassVar

from rich.cells import cell_len
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import DataTable, Label, Static
from textual.widgets.data_table import ColumnKey

from ..engine.events import StepVerified
from ..engine.stats import AcceptanceStats
from ..transcript import sampling_changes, sampling_label
from .render import SYNC_LEGEND, commit_cell, fg, proposal_cell, stats_table, step_bars, sync_short

# marks a step from which the sampling settings changed mid-reply (F3)
CHANGED = "*"
COLUMNS = (("#", "index"), ("sync", "sync"), ("proposal", "proposal"), ("+", "commit"), ("d/v ms", "ms"))
COMMIT_MAX = 14  # cells for the committed token; "(reply ended)" fits, a longer token ends in "…"
PROPOSAL_MIN = 8  # the proposal keeps at least this many cells, ending in "…" when cut


def _ms(ms: float) -> str:
    """Milliseconds in at most 5 cells: ``3.1``, ``518``, ``4.7s``, ``17s``."""
    if ms < 100:
        return f"{ms:.1f}"
    if ms < 1000:
        return f"{ms:.0f}"
    return f"{ms / 1000:.1f}s" if ms < 10_000 else f"{ms / 1000:.0f}s"


class Timeline(DataTable):
    """One row per step; Enter (or a click on the highlighted row) opens the inspector.

    The columns are sized here, not by the table, so that they always fit the width:
    the proposal takes what the others leave and ends in "…" when cut (the inspector
    shows it whole). When even that would cut it, the sync column switches to short
    badges (``e41..44``; :attr:`compact`) and the panel shows their legend.
    """

    class Compacted(Message):
        """The sync column switched between full and short badges."""

    COMPONENT_CLASSES: ClassVar[set[str]] = DataTable.COMPONENT_CLASSES | {
        "step--accepted",
        "step--rejected",
        "step--bonus",
        "step--correction",
        "step--sep",
        "step--sync",
        "step--ms",
        "step--changed",
    }
    BINDINGS: ClassVar[list[BindingType]] = [("enter", "select_cursor", "Inspect step")]

    def __init__(self, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=False, **kwargs)
        self.steps: list[StepVerified] = []
        self.compact = False  # short sync badges
        self._widest: dict[str, int] = {}  # per column (and "sync_short"): the widest cell so far
        self._sizes: dict[str, int] = {}  # the column widths set last
        self._follow = True  # keep the last row in view: true until the user scrolls up from it

    def on_mount(self) -> None:
        for label, key in COLUMNS:
            self.add_column(label, key=key)
        self.show_cursor = False

    def on_focus(self) -> None:
        self.show_cursor = True  # the row cursor shows only while the timeline has focus

    def on_blur(self) -> None:
        self.show_cursor = False

    def _row(self, st: StepVerified) -> tuple[Text, ...]:
        style = self.get_component_rich_style
        ms = fg(style("step--ms"))
        index = Text(str(st.index), style=ms, justify="right")
        if st.sampling is not None:  # F3 changed the sampling settings from this step on
            index = Text(CHANGED, style=fg(style("step--changed"))) + index
            index.justify = "right"
        proposal = proposal_cell(
            st,
            fg(style("step--accepted")),
            fg(style("step--rejected")),
            fg(style("step--sep")),
        )
        proposal.overflow = "ellipsis"
        commit = commit_cell(st, fg(style("step--bonus")), fg(style("step--correction")))
        commit.overflow = "ellipsis"
        return (
            index,
            Text(sync_short(st.sync) if self.compact else st.sync.label(), style=fg(style("step--sync"))),
            proposal,
            commit,
            Text(f"{_ms(st.draft_ms)}/{_ms(st.verify_ms)}", style=ms),
        )

    def _measure(self, steps: list[StepVerified]) -> None:
        """Widen the running column maxima by these steps' cells."""
        widest = self._widest
        if not widest:
            widest.update({key: cell_len(label) for label, key in COLUMNS})
            widest["sync_short"] = widest["sync"]
        for st in steps:
            cells = {
                "index": len(str(st.index)) + (st.sampling is not None),
                "sync": cell_len(st.sync.label()),
                "sync_short": cell_len(sync_short(st.sync)),
                "proposal": proposal_cell(st, "", "").cell_len,
                "commit": min(commit_cell(st, "", "").cell_len, COMMIT_MAX),
                "ms": len(_ms(st.draft_ms)) + 1 + len(_ms(st.verify_ms)),
            }
            for key, width in cells.items():
                widest[key] = max(widest[key], width)

    def _fit(self) -> bool:
        """Size the columns to the table's width; True when :attr:`compact` changed."""
        width = self.size.width - 1  # the vertical scrollbar's column, shown or not
        if width <= 0 or not self.columns:
            return False
        if not self._widest:
            self._measure([])
        w, pad = self._widest, 2 * self.cell_padding
        fixed = w["index"] + w["commit"] + w["ms"] + 5 * pad
        compact = fixed + w["sync"] + w["proposal"] > width
        sizes = {
            "index": w["index"],
            "sync": w["sync_short" if compact else "sync"],
            "commit": w["commit"],
            "ms": w["ms"],
        }
        sizes["proposal"] = max(width - sum(sizes.values()) - 5 * pad, PROPOSAL_MIN)
        if sizes != self._sizes:  # most batches of steps change no width
            self._sizes = sizes
            for key, size in sizes.items():
                column = self.columns[ColumnKey(key)]
                column.width, column.auto_width = size, False
            self._require_update_dimensions = True
            self.refresh()
        changed, self.compact = compact != self.compact, compact
        if changed:
            self.post_message(self.Compacted())
        return changed

    def _rebuild(self) -> None:
        """All rows again (after the sync column changed form or the theme changed)."""
        row, follow = self.cursor_row, self._follow
        self.clear()  # scrolls to the top
        self._follow = follow
        if self.steps:
            self.add_rows([self._row(st) for st in self.steps])
            self.move_cursor(row=min(row, len(self.steps) - 1), scroll=not follow)  # Enter inspects this row
            self._stick()

    def add_steps(self, steps: list[StepVerified]) -> None:
        self.steps += steps
        self._measure(steps)
        if self._fit():
            self._rebuild()
            return
        self.add_rows([self._row(st) for st in steps])

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if new_value < old_value:  # scrolled up: stop following; back at the end: follow again
            self._follow = False
        elif new_value >= self.max_scroll_y - 1:
            self._follow = True

    def watch_virtual_size(self) -> None:
        self._stick()

    def _stick(self) -> None:
        """Scroll to the last row when following, once the table knows its height (on idle)."""
        if not self._follow:
            return
        if self._require_update_dimensions or self._new_rows:
            self.call_after_refresh(self._stick)
            return
        self.scroll_end(animate=False, immediate=True)

    def set_steps(self, steps: list[StepVerified]) -> None:
        self.clear()
        self.steps, self._widest, self._follow = [], {}, True
        self.add_steps(steps)

    def on_resize(self) -> None:
        if self._fit():
            self._rebuild()
        else:  # shown, or given more or fewer rows: the last row stays in view
            self._stick()

    def restyle(self) -> None:
        """Rebuild the rows with the current theme's styles."""
        self._rebuild()


class SpeculationPanel(Vertical):
    """Timeline of the shown reply's steps; reply and session statistics below it."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"stats--label", "stats--value", "bars--full", "bars--zero"}

    class InspectStep(Message):
        def __init__(self, steps: list[StepVerified], index: int) -> None:
            super().__init__()
            self.steps = steps
            self.index = index

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.reply_stats = AcceptanceStats()
        self.session_stats = AcceptanceStats()

    def compose(self) -> ComposeResult:
        yield Label("no reply yet", id="panel-title")
        yield Timeline(id="timeline")
        yield Static(SYNC_LEGEND, id="legend", markup=False)
        yield Static("", id="changes")
        yield Label("accepted per step", id="spark-label")
        yield Static("", id="spark")
        yield Static("", id="stats")

    def on_mount(self) -> None:
        self.border_title = "speculation"
        self.query_one("#legend").display = False
        self.refresh_stats()

    def on_timeline_compacted(self) -> None:
        self.query_one("#legend").display = self.timeline.compact

    def set_stacked(self, stacked: bool) -> None:
        """Under the chat (a narrow terminal): the timeline and the stats table, no bars."""
        if stacked != self.has_class("-stacked"):
            self.set_class(stacked, "-stacked")
            self._spark()
            self.refresh_stats()

    @property
    def timeline(self) -> Timeline:
        return self.query_one(Timeline)

    def show_reply(self, title: str, steps: list[StepVerified], stats: AcceptanceStats) -> None:
        """Show one reply's recorded (or so-far) steps."""
        self.query_one("#panel-title", Label).update(title)
        self.timeline.set_steps(steps)
        self.reply_stats = stats
        self._changes()
        self._spark()
        self.refresh_stats()

    def add_steps(self, steps: list[StepVerified], stats: AcceptanceStats) -> None:
        self.timeline.add_steps(steps)
        self.reply_stats = stats
        if any(st.sampling is not None for st in steps):
            self._changes()
        self._spark()
        self.refresh_stats()

    def set_session(self, stats: AcceptanceStats) -> None:
        self.session_stats = stats
        self.refresh_stats()

    def set_title(self, title: str) -> None:
        self.query_one("#panel-title", Label).update(title)

    def _changes(self) -> None:
        """Under the timeline, where the sampling settings changed and to what (hidden when they did not)."""
        changes = sampling_changes(self.timeline.steps)
        line = self.query_one("#changes", Static)
        line.display = bool(changes)
        if changes:
            where = "; ".join(f"step {st.index}: {sampling_label(st.sampling or {})}" for st in changes)
            line.update(f"{CHANGED} sampling changed (F3) from {where}")

    def _spark(self) -> None:
        """Accepted tokens per step as columns on an absolute 0..k scale (a Sparkline
        rescales to min..max, which draws an all-accepted reply as a flat floor)."""
        steps = self.timeline.steps
        spark = self.query_one("#spark", Static)
        label = self.query_one("#spark-label", Label)
        spark.display = label.display = bool(steps) and not self.has_class("-stacked")
        if not spark.display:
            return
        scale = max((s.k for s in steps), default=0) or 1
        width = max(self.content_region.width, 10)
        full = fg(self.get_component_rich_style("bars--full"))
        zero = fg(self.get_component_rich_style("bars--zero"))
        values = [s.n_accepted if s.proposed else None for s in steps]
        spark.update(step_bars(values, scale, width, full, zero))
        shown = min(len(steps), width)
        label.update(f"accepted per step (last {shown}, full = {scale})")

    def refresh_stats(self) -> None:
        label = fg(self.get_component_rich_style("stats--label"))
        value = fg(self.get_component_rich_style("stats--value"))
        stats = stats_table(self.reply_stats, self.session_stats, label, value, not self.has_class("-stacked"))
        stats.rstrip()  # no blank line under the table
        self.query_one("#stats", Static).update(stats)

    def restyle(self) -> None:
        self.timeline.restyle()
        self._spark()
        self.refresh_stats()

    def on_resize(self) -> None:
        self._spark()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.post_message(self.InspectStep(self.timeline.steps, event.cursor_row))
