"""Turning committed token bytes into streamable text.

Two pure pieces, fed only committed tokens (never a rejected proposal):

* :class:`Utf8Assembler` — token pieces are byte strings that may split a UTF-8
  character (byte-level BPE splits emoji and CJK across tokens); the standard
  library's incremental decoder holds an incomplete sequence back until the next
  bytes complete it.
* :class:`StopStringMatcher` — stop strings can span token boundaries; text that
  could still be the start of a stop string is held back until resolved.
"""

from __future__ import annotations

import codecs
from collections.abc import Sequence


class Utf8Assembler:
    """Incremental UTF-8 decoding that never emits half a character.

    Invalid bytes inside the stream become U+FFFD (the model produced them);
    a character the reply's end cut short (max_tokens, a stop) is dropped, not
    replaced: :attr:`dropped` counts its bytes.
    """

    __slots__ = ("_decoder", "dropped")

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.dropped = 0

    def feed(self, piece: bytes) -> str:
        """Add a token's bytes; return the text completed so far (may be ``""``)."""
        return self._decoder.decode(piece)

    def flush(self) -> str:
        """End of stream: the bytes of an unfinished trailing character are dropped
        (counted in :attr:`dropped`), never shown as U+FFFD."""
        pending, _ = self._decoder.getstate()
        self.dropped += len(pending)
        self._decoder.reset()
        return ""


class StopStringMatcher:
    """Finds stop strings across chunk boundaries and holds back partial matches.

    ``push(text)`` returns ``(emit, hit)``: the text now safe to show and whether
    a stop string completed (``emit`` then ends just before it). After a hit the
    matcher ignores further input. ``flush()`` releases held-back text at the
    end of the stream.
    """

    __slots__ = ("_done", "_pending", "_stops", "matched")

    def __init__(self, stops: Sequence[str]) -> None:
        self._stops = tuple(s for s in stops if s)
        self._pending = ""
        self._done = False
        self.matched: str | None = None

    def push(self, text: str) -> tuple[str, bool]:
        if self._done:
            return "", True
        if not self._stops:
            return text, False
        buf = self._pending + text
        cut = -1
        for stop in self._stops:
            i = buf.find(stop)
            if i != -1 and (cut == -1 or i < cut):
                cut, self.matched = i, stop
        if cut != -1:
            self._done = True
            self._pending = ""
            return buf[:cut], True
        hold = self._held_suffix_len(buf)
        self._pending = buf[len(buf) - hold :] if hold else ""
        return buf[: len(buf) - hold], False

    def flush(self) -> str:
        out, self._pending = self._pending, ""
        return "" if self._done else out

    def _held_suffix_len(self, buf: str) -> int:
        """Length of the longest suffix of ``buf`` that starts some stop string."""
        best = 0
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(buf)), best, -1):
                if stop.startswith(buf[-n:]):
                    best = n
                    break
        return best


class SpanQueue:
    """Text waiting to be released, each character tagged with its origin.

    Text enters when its token is committed and leaves, oldest first, as the
    stop-string matcher releases it, so released spans keep their origin.
    """

    __slots__ = ("_spans",)

    def __init__(self) -> None:
        self._spans: list[list[str]] = []

    def push(self, text: str, origin: str) -> None:
        if not text:
            return
        if self._spans and self._spans[-1][1] == origin:
            self._spans[-1][0] += text
        else:
            self._spans.append([text, origin])

    def take(self, n: int) -> list[tuple[str, str]]:
        """Remove and return the oldest ``n`` characters as ``(text, origin)`` spans."""
        out: list[tuple[str, str]] = []
        while n > 0 and self._spans:
            text, origin = self._spans[0]
            if len(text) <= n:
                out.append((text, origin))
                self._spans.pop(0)
                n -= len(text)
            else:
                out.append((text[:n], origin))
                self._spans[0][0] = text[n:]
                n = 0
        return out

    def clear(self) -> None:
        self._spans.clear()
