"""Messages the worker threads post to the app (the only way engine output reaches widgets)."""

from __future__ import annotations

from textual.message import Message

from ..engine.events import Event
from ..engine.native.window import PromptSize


class EngineEvent(Message):
    """One engine event of reply ``reply_id``. Never dropped or merged: text deltas ride on these."""

    def __init__(self, reply_id: int, event: Event) -> None:
        super().__init__()
        self.reply_id = reply_id
        self.event = event


class LoadProgress(Message):
    """Model loading progress; a newer one replaces a queued older one."""

    def __init__(self, stage: str, fraction: float) -> None:
        super().__init__()
        self.stage = stage
        self.fraction = fraction

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, LoadProgress)


class PromptCounted(Message):
    """The input counted against the context window (``size`` None: it could not be).

    ``seq`` says which count it answers: a newer keystroke makes it stale."""

    def __init__(self, seq: int, size: PromptSize | None) -> None:
        super().__init__()
        self.seq = seq
        self.size = size
