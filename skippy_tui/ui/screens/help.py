"""The help screen (F1): every key, what the panel's columns, badges and status figures mean,
the origin colours, and the full names of the models in use."""

from __future__ import annotations

import io
from collections.abc import Iterable
from typing import ClassVar, Protocol

from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from ..widgets.render import fg


class HelpHost(Protocol):
    """What the help screen reads from the app (so it need not import it)."""

    def key_help(self) -> list[tuple[str, str]]: ...

    def model_descriptions(self) -> list[str]: ...


# keys that belong to one widget or dialog, not to the app (the app's own come from its bindings)
CONTEXT_KEYS: tuple[tuple[str, str], ...] = (
    ("enter", "send the message (in the input)"),
    ("ctrl+j", "new line in the message (also shift+enter / alt+enter where the terminal tells them apart)"),
    ("↑ ↓", "in the input: earlier messages; in the panel: move between steps"),
    ("tab / shift+tab", "move the focus: input → panel → chat (shift+tab: back)"),
    ("enter", "in the panel: inspect the highlighted step"),
    ("← →", "in the inspector: previous / next step"),
    ("a letter", "typed while the chat or the panel has the focus, it goes to the input"),
    ("esc", "closes a dialog, this screen or the keys panel"),
    ("ctrl+p", "command palette: every action, with its key"),
)

COLUMNS: tuple[tuple[str, str], ...] = (
    ("#", "the step's number; * marks the step from which F3 changed the sampling settings"),
    ("src", "what proposed: model (the draft model), ngram (prompt lookup), mtp (MTP heads); shown once a "
            "reply drafts with something else than the draft model"),
    ("sync", "how the draft's KV cache was brought up to date before it proposed (badges below)"),
    ("proposal", "the draft's tokens, in order: accepted ones, then the first rejected one; "
                 "the tokens after it are struck through too, but were never checked"),
    ("+", "the target's own token after the accepted ones: a bonus after a fully accepted proposal, a "
          "correction at the first rejection, plain for a step without a proposal; (reply ended) when EOS "
          "or a stop string came inside the accepted tokens"),
    ("rollback", "how a hybrid or recurrent target dropped what it did not commit: rollback N (N rows back to "
                 "a snapshot), restore N +M (the state saved before the verify, M tokens decoded again); shown "
                 "once a step needed one. The inspector says it for every step (drop N: the KV cache dropped N)"),
    ("d/v ms", "time the draft took to propose / the target to verify, in milliseconds"),
)  # fmt: skip

BADGES: tuple[tuple[str, str], ...] = (
    ("synced", "the draft already held the context: nothing to do"),
    ("extend a..b", "positions a..b were prefilled (the tokens committed since the last step)"),
    ("truncate k→b", "cut back to the k tokens shared with the context (after a rejection or an edit), then "
                     "prefilled up to b; rollback k→b / restore k→b: a recurrent draft's state went back to a "
                     "snapshot, or to one it saved"),
    ("reset 0..b", "nothing reusable: the draft's cache was refilled from 0"),
    ("plain", "no proposal this step (speculation off, no room, or auto chose plain decoding)"),
)  # fmt: skip

STATUS: tuple[tuple[str, str], ...] = (
    ("≈N× plain", "the engine's estimate of tokens/s with the current speculation settings over plain "
                  "decoding, from the costs it measured (draft per token, verify per batch size) and the "
                  "acceptance per draft position; shown once enough is measured. Below 1× the draft "
                  "costs more than it saves"),
    ("exact ≤N rows", "verify batches are split so a reply equals plain decoding token for token"),
    ("auto: …", "the profile in force (auto, the default) and how it verifies: exact ≤N rows as above, or "
                "not bit-exact where this build certifies no batch of 2 rows: one verify batch, and a reply "
                "can differ from plain decoding where two tokens nearly tie"),
    ("profile fast", "one verify batch, flash attention: faster, a reply may differ from plain decoding"),
    ("CPU · CUDA0 · …", "where the models' layers run: CPU, a GPU (CUDA0), an RPC server's device "
                        "(RPC0@host:port), +CPU when some stay on the CPU; target … · draft … when they differ"),
    ("ctx a/b", "tokens in the target's KV cache / its context window"),
    ("spec on … k=… p_min=…", "speculation on (F4), the draft source unless it is the draft model named beside "
                              "it (model, or auto choosing it per step): ngram, mtp, auto (mtp)…, set with F3; the "
                              "proposal length k (auto: chosen per step) and p_min"),
    ("rollback: …", "how a hybrid or recurrent target drops rejected tokens: snapshot (llama.cpp goes back itself) "
                    "or restore (a state saved before each verify, the accepted tokens decoded again)"),
    ("greedy · coupled T=…", "the sampler and temperature; a fixed seed and +penalties when set (F3)"),
)  # fmt: skip

WHITESPACE = "Tokens show whitespace: · space, ↵ new line, → tab, ∅ empty."


class HelpScreen(ModalScreen[None]):
    """Keys, the panel's columns and badges, the status bar's figures, colours, models."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,f1,q", "dismiss", "Close")]
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "help--heading", "help--key", "help--draft", "help--target",
        "help--accepted", "help--rejected", "help--bonus", "help--correction",
    }  # fmt: skip

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="help") as v:
            v.border_title = "Help"
            v.border_subtitle = "↑↓ pgup pgdn scroll · esc close"
            with VerticalScroll(id="help-body"):
                yield Static(id="help-text")

    def on_mount(self) -> None:
        self.query_one("#help-text", Static).update(self.text())
        self.query_one("#help-body").focus()

    def _style(self, name: str):
        return fg(self.get_component_rich_style(f"help--{name}"))

    def text(self) -> Group:
        """The whole help, with the current theme's colours: headings, then key/meaning grids."""
        app: HelpHost = self.app  # type: ignore[assignment]
        heading, key = self._style("heading"), self._style("key")
        parts: list[RenderableType] = []

        def section(title: str) -> None:
            parts.append(Text(("\n" if parts else "") + title, style=heading))

        def rows(items: Iterable[tuple[str, str]], width: int = 17) -> None:
            grid = Table.grid(padding=(0, 1))
            grid.add_column(width=width, style=key, no_wrap=True)  # the meaning wraps under itself
            grid.add_column(ratio=1)
            for k, what in items:
                grid.add_row(k, what)
            parts.append(Padding(grid, (0, 0, 0, 2)))

        def line(text: Text) -> None:
            parts.append(Padding(text, (0, 0, 0, 2)))

        section("Keys")
        rows([*app.key_help(), *CONTEXT_KEYS])

        section("The panel: one row per speculation step of the reply it shows (alt+↑/↓ picks the reply)")
        rows(COLUMNS, 9)
        colours = Text("colours:  ")
        for name, label in (("accepted", "accepted"), ("rejected", "rejected"), ("bonus", "+bonus"),
                            ("correction", "+correction")):  # fmt: skip
            colours.append(label, style=self._style(name))
            colours.append("  ")
        line(colours)
        line(Text(WHITESPACE))

        section("Sync badges (the sync column)")
        rows(BADGES, 13)

        section("Status bar")
        rows(STATUS, 21)

        section("Origin colours (ctrl+o)")
        origin = Text("Replies coloured by where each token came from: ")
        origin.append("a draft token the target accepted", style=self._style("draft"))
        origin.append(" · ")
        origin.append("a token the target chose itself", style=self._style("target"))
        origin.append(" (bonus, correction, or a plain step).")
        line(origin)

        section("Models")
        for text in app.model_descriptions() or ["none loaded"]:
            line(Text(text))
        return Group(*parts)

    def plain(self, width: int = 100) -> str:
        """The help as plain text, ``width`` cells wide (what a reader sees, without colours)."""
        console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
        console.print(self.text())
        return console.export_text()
