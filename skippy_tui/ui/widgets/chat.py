"""The chat pane: user messages, assistant replies streamed as Markdown or coloured by origin."""

from __future__ import annotations

import functools
from typing import ClassVar

from markdown_it import MarkdownIt
from textual.app import ComposeResult
from textual.binding import BindingType
from textual.containers import VerticalScroll
from textual.message import Message
from textual.widget import Widget
from textual.widgets import Markdown, Static
from textual.widgets.markdown import MarkdownStream

from ...engine.events import ReplyFinished, TextSpan
from ...transcript import Entry, reply_summary
from .render import fg, origin_text, reply_footer


def _hard_breaks(state) -> None:  # type: ignore[no-untyped-def]
    for tok in state.tokens:
        for child in tok.children or ():
            if child.type == "softbreak":
                child.type = "hardbreak"


@functools.cache
def chat_parser() -> MarkdownIt:
    """GitHub-flavoured Markdown where a single newline is a line break, as chat models mean it.

    One parser for the app (parsing keeps no state in it): Textual asks for a parser
    at every streamed append, and a new one compiles its rule chains on first use,
    about a twentieth of the UI thread's time while a reply streams.
    """
    md = MarkdownIt("gfm-like", {"breaks": True})
    md.core.ruler.push("hard_breaks", _hard_breaks)
    return md


class ChatView(VerticalScroll):
    """The conversation. With the ``-origin`` class, replies show their text coloured by origin."""

    can_focus = True
    BINDINGS: ClassVar[list[BindingType]] = [("home", "scroll_home", "Top"), ("end", "scroll_end", "Bottom")]

    def messages(self) -> list[MessageWidget]:
        return list(self.query(MessageWidget))


class MessageWidget(Widget):
    """One chat message, bound to its transcript entry."""

    def __init__(self, entry: Entry, **kwargs) -> None:
        super().__init__(**kwargs)
        self.entry = entry


class SystemNote(Static):
    """The system prompt, shown dimmed above the conversation; also the model pair, before
    a reply that came from another pair than the reply before it."""


class SystemChange(MessageWidget):
    """A system prompt change, where it was made: the turns above kept the one before."""

    def compose(self) -> ComposeResult:
        text = self.entry.content
        yield Static(f"system prompt changed: {text}" if text else "system prompt cleared", markup=False)


class Welcome(Static):
    """Shown while the conversation is empty."""


class UserMessage(MessageWidget):
    def compose(self) -> ComposeResult:
        yield Static(self.entry.content, markup=False)

    def on_mount(self) -> None:
        self.border_title = "you"


class AssistantMessage(MessageWidget):
    """A reply: Markdown while and after streaming, or plain text coloured by origin.

    Clicking it shows its steps in the speculation panel.
    """

    COMPONENT_CLASSES: ClassVar[set[str]] = {"origin--draft", "origin--target"}

    class Selected(Message):
        def __init__(self, message: AssistantMessage) -> None:
            super().__init__()
            self.message = message

    def __init__(self, entry: Entry, **kwargs) -> None:
        super().__init__(entry, **kwargs)
        self._stream: MarkdownStream | None = None
        self._spans: list[TextSpan] = entry.spans()
        self._origin_dirty = True
        self._finish: ReplyFinished | None = entry.finish

    def compose(self) -> ComposeResult:
        yield Markdown(self.entry.content, parser_factory=chat_parser)
        yield Static("", classes="origin-view", markup=False)

    def on_mount(self) -> None:
        self.border_title = "assistant"
        self._footer()
        # is_mounted turns true only after this handler, so refresh_origin() would skip the
        # render and a reply opened while origin colouring is on would show an empty box
        self._render_origin()

    @property
    def markdown(self) -> Markdown:
        return self.query_one(Markdown)

    @property
    def text(self) -> str:
        """The text shown so far (the Markdown source)."""
        return self.markdown.source

    def start_stream(self) -> None:
        self.add_class("-streaming")
        self.border_subtitle = "…"
        self._stream = Markdown.get_stream(self.markdown)

    async def append(self, spans: list[TextSpan]) -> None:
        """Stream more text (never dropped; the MarkdownStream merges fast appends)."""
        text = "".join(s.text for s in spans)
        self._spans += spans
        self._origin_dirty = True
        if text and self._stream is not None:
            await self._stream.write(text)
        if self.is_origin_mode:
            self.refresh_origin()

    async def finish(self, fin: ReplyFinished, text: str) -> None:
        """Stop streaming and render the full text once (code fences render fully now)."""
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        if fin.tail:
            self._spans.append(TextSpan(fin.tail, "target"))
        self._origin_dirty = True
        self.remove_class("-streaming")
        self._finish = fin
        self._footer()
        if fin.reason in ("error", "cancelled"):
            self.add_class(f"-{fin.reason}")
        await self.markdown.update(text)
        self.refresh_origin()

    async def fail(self, error: BaseException) -> None:
        """End a reply whose engine thread raised (no ReplyFinished will come)."""
        if self._stream is not None:
            await self._stream.stop()
            self._stream = None
        self.remove_class("-streaming")
        self.add_class("-error")
        self.border_subtitle = f"failed: {type(error).__name__}: {error}"

    def _footer(self) -> None:
        """The reply's stats in the bottom border, fitted to the box; the tooltip has them in full."""
        fin = self._finish
        if fin is None:
            return
        # the border's corners and the spaces around the subtitle take 6 cells
        self.border_subtitle = reply_footer(fin, max(self.outer_size.width - 6, 20))
        self.tooltip = reply_summary(fin)

    def on_resize(self) -> None:
        self._footer()

    @property
    def is_origin_mode(self) -> bool:
        return self.parent is not None and self.parent.has_class("-origin")

    def refresh_origin(self, force: bool = False) -> None:
        """Re-render the origin view (after new text, a toggle, or a theme change)."""
        if not (self._origin_dirty or force) or not self.is_mounted:
            return
        self._render_origin()

    def _render_origin(self) -> None:
        draft = fg(self.get_component_rich_style("origin--draft"))
        target = fg(self.get_component_rich_style("origin--target"))
        self.query_one(".origin-view", Static).update(origin_text(self._spans, draft, target))
        self._origin_dirty = False

    def on_click(self) -> None:
        self.post_message(self.Selected(self))
