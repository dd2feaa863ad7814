"""The conversation on screen: the chat filled from the transcript, which reply the
panel shows (a click, Alt+↑/↓), the step inspector, and copying a reply or code block."""

from __future__ import annotations

from typing import Any

from ..engine.events import StepVerified
from ..engine.stats import AcceptanceStats
from ..transcript import Entry, count, models_label, reply_stats
from .clipboard import CodeBlockScreen, code_blocks
from .screens.inspector import InspectorScreen
from .widgets.chat import AssistantMessage, MessageWidget, SystemChange, SystemNote, UserMessage, Welcome

WELCOME = (
    "Type a message below and press Enter. Replies stream here; the speculation panel (beside the chat, "
    "or below it in a narrow terminal; F6 shows or hides it) shows every step: the draft's proposal, "
    "what the target accepted, and the token it added. Select a step (Tab to the panel, then Enter) to "
    "inspect it. F1 explains the keys and the panel; Ctrl+P lists every command."
)


def message_widget(entry: Entry) -> MessageWidget:
    """The chat's widget for one transcript entry."""
    if entry.role == "assistant":
        return AssistantMessage(entry)
    return SystemChange(entry) if entry.role == "system" else UserMessage(entry)


class ReplyViewMixin:
    """What the chat and the panel show, for the app.

    Owns ``_shown`` (the reply whose steps the panel shows; None before the first).
    Relies on the app's ``transcript``, ``session_stats``, ``chat``, ``panel`` and, for the
    reply in flight, ``_current`` / ``_panel_pending`` (GenerationMixin).
    """

    def _init_reply_view(self) -> None:
        self._shown: AssistantMessage | None = None  # reply shown in the panel

    def _transcript_widgets(self) -> list[Any]:
        """The chat's widgets for the transcript: its messages and notes, or the welcome text."""
        widgets: list[Any] = []
        if self.transcript.system_prompt:
            widgets.append(SystemNote(f"system: {self.transcript.system_prompt}", markup=False, id="system-note"))
        pair = ""
        for e in self.transcript.entries:
            if e.role == "assistant":
                label = models_label(e.models)
                if label and pair and label != pair:  # the models were switched before this reply
                    widgets.append(SystemNote(f"models: {label}", markup=False))
                pair = label or pair
            widgets.append(message_widget(e))
        if not self.transcript.entries:
            widgets.append(Welcome(WELCOME, markup=False))
        return widgets

    async def _show_transcript(self) -> None:
        """Show the transcript in the chat in place of what it showed, and its replies' figures."""
        await self.chat.remove_children()
        await self.chat.mount_all(self._transcript_widgets())
        self._transcript_shown()

    def _transcript_shown(self) -> None:
        """With the transcript's widgets in the chat (mounted, or composed with the app): its
        replies' figures in the panel, the last reply's steps, and the chat at its end."""
        chat = self.chat
        self.session_stats = AcceptanceStats()
        for e in self.transcript.replies():
            self.session_stats.merge(reply_stats(e.events))
        self.panel.set_session(self.session_stats)
        replies = list(chat.query(AssistantMessage))
        if replies:
            self._show_in_panel(replies[-1])
        else:
            self.panel.show_reply("no reply yet", [], AcceptanceStats())
        if self.transcript.entries:  # at its end, kept there when the panel or the terminal
            chat.anchor()  # changes its width (as while a reply streams)
            chat.scroll_end(animate=False)  # after the layout: the anchor alone leaves the scrollbar unpainted
        else:  # a new chat's welcome text on top: anchored, the chat drew it at the bottom
            chat.anchor(False)
            chat.scroll_home(animate=False, force=True)  # force: it fits, and Textual would not scroll it

    async def _place_system_notes(self) -> None:
        """Bring the chat's system prompt notes in line with the transcript (after F2, an edit or
        a regenerate): the one it started with on top, each change where it was made."""
        chat, entries = self.chat, self.transcript.entries
        top = self.transcript.system_prompt
        for note in chat.query("#system-note"):
            await note.remove()
        if top:
            children = chat.children
            await chat.mount(
                SystemNote(f"system: {top}", markup=False, id="system-note"), before=children[0] if children else None
            )
        for change in chat.query(SystemChange):
            if not any(change.entry is e for e in entries):
                await change.remove()
        shown = {id(w.entry): w for w in chat.query(MessageWidget)}
        for i, e in enumerate(entries):
            if e.role == "system" and id(e) not in shown:
                after = next((shown[id(x)] for x in entries[i + 1 :] if id(x) in shown), None)
                shown[id(e)] = change = SystemChange(e)
                await chat.mount(change, before=after)  # None: at the end

    def _show_in_panel(self, msg: AssistantMessage) -> None:
        replies = list(self.chat.query(AssistantMessage))
        n = replies.index(msg) + 1 if msg in replies else len(replies)
        for r in replies:
            r.set_class(r is msg, "-shown")
        self._shown = msg
        steps = msg.entry.steps
        title = f"reply {n} of {len(replies)} · {count(len(steps), 'step')}"
        started = msg.entry.started
        if started is not None:
            title += f" · prompt {started.n_prompt} tok · target {started.target_sync.label()}"
            if started.draft_sync.kind != "none":
                title += f" · draft {started.draft_sync.label()}"
        self.panel.show_reply(title, steps, reply_stats(msg.entry.events))

    def _pick_reply(self, msg: AssistantMessage) -> None:
        """Show ``msg``'s steps in the panel (a click, alt+↑/↓), the reply in flight included."""
        if msg is self._shown:
            return
        self._show_in_panel(msg)
        if msg is self._current:
            self._panel_pending = []  # its entry holds every step flushed so far: shown now, not again

    def _inspect_step(self, steps: list[StepVerified], index: int) -> None:
        """Open the inspector on step ``index`` of ``steps`` (Enter on a panel row)."""
        if steps:
            started = self._shown.entry.started if self._shown is not None else None
            self.push_screen(InspectorScreen(steps, index, started))

    # -- the keyboard's way to pick and copy a reply -----------------------------------------

    def action_show_reply(self, delta: int) -> None:
        """Show the previous (-1) or next (+1) reply's steps in the panel: the keyboard's click on a reply."""
        replies = list(self.chat.query(AssistantMessage))
        if not replies:
            self.notify("No reply yet.", timeout=2)
            return
        at = replies.index(self._shown) if self._shown in replies else len(replies) - 1
        msg = replies[max(0, min(len(replies) - 1, at + delta))]
        self._pick_reply(msg)
        self.chat.scroll_to_widget(msg, animate=False)

    def _reply_to_copy(self) -> tuple[int, str] | None:
        """The reply the panel shows (or the last one): its number and text; None, with a notice, when none."""
        replies = list(self.chat.query(AssistantMessage))
        msg = self._shown if self._shown in replies else (replies[-1] if replies else None)
        if msg is None or not msg.text:
            self.notify("No reply to copy yet.", severity="warning", timeout=3)
            return None
        return replies.index(msg) + 1, msg.text

    def action_copy_reply(self) -> None:
        reply = self._reply_to_copy()
        if reply is not None:
            n, text = reply
            self.copy_to_clipboard(text)
            self.notify(f"Copied reply {n} ({count(len(text), 'character')}) to the clipboard.", timeout=3)

    def action_copy_code(self) -> None:
        reply = self._reply_to_copy()
        if reply is None:
            return
        n, text = reply
        blocks = code_blocks(text)

        def copy(index: int | None) -> None:
            if index is not None:
                self.copy_to_clipboard(blocks[index][1])
                self.notify(f"Copied code block {index + 1} of reply {n} to the clipboard.", timeout=3)

        if not blocks:
            self.notify(f"Reply {n} has no code block: alt+c copies the whole reply.", severity="warning")
        elif len(blocks) == 1:
            copy(0)
        else:
            self.push_screen(CodeBlockScreen(blocks, n), copy)
