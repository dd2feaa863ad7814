"""Whether a message fits the context window: counted as one types, checked before it is sent.

The input's border shows the message's tokens and the chat's (used / window) a moment
after typing stops (:data:`COUNT_DELAY_S`), counted by the engine's own tokenizer and
chat template in a worker (``Speculator.count_tokens``; in an engine process, its pipe
reader). Enter counts again, at once, and a message that cannot fit is not sent: the
input keeps it, and a note in the chat says the numbers and what to do. A reply the
window cuts short (or one the engine refused) leaves the same kind of note.
"""

from __future__ import annotations

from typing import Any

from textual import work
from textual.timer import Timer
from textual.widgets import Static

from ..engine.errors import SkippyError
from ..engine.native.window import PromptSize
from .messages import PromptCounted
from .widgets.prompt import PromptInput

COUNT_DELAY_S = 0.3
"""How long typing must pause before the input is counted (a paste counts once)."""

WHAT_TO_DO = (
    "Shorten the message, edit your last message (ctrl+l), start a new chat (ctrl+n), "
    "or raise n_ctx under [target] in the config and press F5 to reload it."
)


class ContextNote(Static):
    """Why a message was not sent, or a reply stopped, for want of context window: the
    numbers and what to do. It stays in the chat (not in the transcript)."""


def count_label(size: PromptSize) -> str:
    """The input's count: ``12 tok · context 352/4,096`` (the chat with this message, of the
    window), ``… too long`` when it cannot fit."""
    label = f"{size.n_message:,} tok · context {size.n_prompt:,}/{size.n_ctx:,}"
    return label if size.fits else f"{label} · too long"


def refusal(size: PromptSize) -> str:
    """The note for a message that was not sent because the chat with it cannot fit."""
    return (
        f"Not sent: with this message the chat is {size.n_prompt:,} tokens (the message alone "
        f"{size.n_message:,}), and the context window holds {size.n_ctx:,}. Your text is still in "
        f"the input. {WHAT_TO_DO}"
    )


def engine_refusal(error: str) -> str:
    """The note for a message the engine refused (its prompt overflowed the window)."""
    return f"Not sent: {error or 'the prompt does not fit the context window'}. {WHAT_TO_DO}"


def cut_short(n_past: int, n_ctx: int) -> str:
    """The note for a reply that stopped because the window was full."""
    return (
        f"The reply stopped: the context window is full ({n_past:,} of {n_ctx:,} tokens), so the "
        f"next message will not fit either. {WHAT_TO_DO}"
    )


class ContextFitMixin:
    """Counting the input against the context window, and the notes when something does not fit.

    Owns ``_count_timer`` (the pause after typing) and ``_count_seq`` (a newer count wins).
    Relies on the app's ``speculator``, ``transcript``, ``generating``, ``_editing``
    (GenerationMixin) and ``chat``.
    """

    def _init_context_fit(self) -> None:
        self._count_timer: Timer | None = None
        self._count_seq = 0

    def _messages_with(self, text: str) -> list[dict[str, str]]:
        """What sending ``text`` now would prompt with: the chat (up to the message being
        edited, Ctrl+L) and ``text`` as the user's message."""
        messages = self.transcript.engine_messages()
        if self._editing is not None:
            messages = messages[: self._editing + (1 if self.transcript.system_prompt else 0)]
        return [*messages, {"role": "user", "content": text}]

    def _prompt_changed(self) -> None:
        """The input (or the chat it follows) changed: count it once typing pauses."""
        if self._count_timer is not None:
            self._count_timer.stop()
        self._count_seq += 1
        self._count_timer = self.set_timer(COUNT_DELAY_S, self._count_prompt)

    def _count_prompt(self) -> None:
        prompt = self.query_one_optional(PromptInput)  # None: the app closed since the timer started
        if prompt is None:
            return
        text = prompt.text.strip()
        if not text or self.speculator is None or self.generating:
            prompt.set_count("", too_long=False)
            return
        self._count(self._count_seq, self.speculator, self._messages_with(text))

    @work(thread=True, exclusive=True, exit_on_error=False, group="count", name="count")
    def _count(self, seq: int, speculator: Any, messages: list[dict[str, str]]) -> None:
        try:
            size = speculator.count_tokens(messages)
        except SkippyError:  # the template cannot render it: sending says why
            size = None
        self.post_message(PromptCounted(seq, size))

    def on_prompt_counted(self, msg: PromptCounted) -> None:
        prompt = self.query_one_optional(PromptInput)
        if msg.seq != self._count_seq or msg.size is None or prompt is None:
            return  # typed on meanwhile (a newer count comes), or the app closed
        prompt.set_count(count_label(msg.size), too_long=not msg.size.fits)

    def _size_now(self, text: str) -> PromptSize | None:
        """Count ``text`` against the window now (Enter: one count, not one per key); None
        when it cannot be counted (the engine then says why as the reply starts)."""
        try:
            return self.speculator.count_tokens(self._messages_with(text))
        except SkippyError:
            return None

    async def _note_context(self, text: str) -> None:
        """Put a :class:`ContextNote` at the end of the chat, in view."""
        await self.chat.mount(ContextNote(text, markup=False))
        self.chat.scroll_end(animate=False)
