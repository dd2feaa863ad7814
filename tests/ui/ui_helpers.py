"""UI test helpers: running async bodies and polling waits.

Tests drive the real app with Textual's Pilot. Waits poll a condition with a
timeout (``wait_until``) instead of sleeping a fixed time, so they are as fast
as the machine allows and fail with a clear message when something hangs.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

FIXTURES = Path(__file__).parent / "fixtures"
CHAT_JSON = FIXTURES / "chat.json"  # recorded before seeds, samplers and p_target were (an old transcript)
# recorded on the default pair at T=0.8 (scratch script, not kept): reply 1 with a seed drawn for it,
# reply 2 with seed 1234 and, from step 2 on, T=0.3 and repeat_penalty 1.1 (a mid-reply change)
SAMPLED_JSON = FIXTURES / "chat_sampled.json"
SIZE = (140, 40)


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    """Run one async test body (no asyncio plugin needed)."""
    return asyncio.run(coro)


async def wait_until(pilot: Any, cond: Callable[[], bool], timeout: float = 120.0, what: str = "condition") -> float:
    """Poll ``cond`` between app frames; returns the seconds it took.

    Raises:
        AssertionError: still false after ``timeout`` seconds.
    """
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        await pilot.pause()  # until the app is idle: a frame or two, not a fixed sleep
    return time.monotonic() - t0


def ui_config(max_tokens: int = 8, **sections: dict[str, Any]) -> Any:
    """The defaults (never a developer's own config file) with a short reply cap.

    One thread per model: on a small shared machine llama.cpp's spinning worker
    threads make two-thread decoding several times slower than one.
    """
    from skippy_tui.config import Config

    cfg = Config()
    cfg.set("generation", "max_tokens", max_tokens)
    cfg.set("target", "threads", 1)
    cfg.set("target", "threads_batch", 1)
    for section, values in sections.items():
        for key, value in values.items():
            cfg.set(section, key, value)
    return cfg


async def settle(pilot: Any) -> None:
    """Wait until the app is quiet: the work a refresh schedules (the footer recomposing its keys
    after a focus change, a scrollbar's repaint) is done, and a frame has been drawn since."""
    for _ in range(3):  # a pause lets the refresh run; what it scheduled runs in the next
        await pilot.pause()


async def wait_for_screen(pilot: Any, app: Any, cls: type, timeout: float = 30.0) -> Any:
    """Wait until a screen of type ``cls`` is on top with its dialog composed; return it."""
    await wait_until(
        pilot, lambda: isinstance(app.screen, cls) and bool(app.screen.query("#dialog")), timeout, cls.__name__
    )
    await pilot.pause()
    return app.screen


def replay_app(path: Path = CHAT_JSON, config: Any = None, **ui: object) -> Any:
    """The app on a recorded transcript, no models loaded (``config`` or the test defaults, with
    ``ui`` as its ``[ui]`` keys)."""
    from skippy_tui.transcript import Transcript
    from skippy_tui.ui.app import SkippyApp

    config = config or (ui_config(ui=ui) if ui else ui_config())
    return SkippyApp(config, transcript=Transcript.load(path), transcript_path=path, load_models=False)


def status_text(app: Any) -> str:
    """The status bar as plain text."""
    return str(app.query_one("#status").render())


def one_read(app: Any, *keys: tuple[str, str | None]) -> None:
    """Post ``(key, character)`` key events at once, as the terminal driver posts the keys of one read."""
    from textual import events

    for key, char in keys:
        app.post_message(events.Key(key, char))


async def type_text(pilot: Any, text: str) -> None:
    """Type ``text`` into the focused widget as one read (``pilot.press`` waits for the app to
    idle after each key, twice: ~45 ms a character)."""
    from textual.keys import _character_to_key  # the key names Pilot gives characters

    one_read(pilot.app, *((c if c.isalnum() else _character_to_key(c), c) for c in text))
    await pilot.pause()
