"""The speculation panel: a timeline row per step, then reply and session statistics."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Label, Static

from ...engine.events import StepVerified
from ...engine.stats import AcceptanceStats
from ...transcript import sampling_changes, sampling_label
from .render import SYNC_LEGEND, fg, stats_table, step_bars
from .timeline import CHANGED, Timeline


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

    def on_timeline_row_selected(self, event: Timeline.RowSelected) -> None:
        event.stop()
        self.post_message(self.InspectStep(self.timeline.steps, event.cursor_row))
