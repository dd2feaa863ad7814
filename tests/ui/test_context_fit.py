"""A message against the context window, in the app on a real model (issue 57, item 5).

The input shows its tokens and the chat's (used / window) as one types, counted by
the model's own tokenizer and template; a message that cannot fit is refused before
it is sent, with the numbers and what to do kept in the chat, and nothing is lost:
the text stays in the input and the next message works.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import load
from ui_helpers import SIZE, run, ui_config, wait_until

from skippy_tui.ui.app import SkippyApp
from skippy_tui.ui.context_fit import ContextNote
from skippy_tui.ui.widgets.chat import AssistantMessage, UserMessage

LONG = "The lighthouse keeper counted the ships that passed, one by one, every night. " * 20  # ~1,600 chars


@pytest.fixture(scope="module")
def small_window(smollm2_q4_1: Path, cache_dir: Path) -> Iterator[Any]:
    """SmolLM2 Q4_1 alone (plain decoding) in a 256-token window."""
    s = load(smollm2_q4_1, None, cache_dir, n_ctx=256)
    yield s
    s.close()


def _subtitle(app: SkippyApp) -> str:
    return str(app.prompt.border_subtitle or "")


def _notes(app: SkippyApp) -> list[str]:
    return [str(n.render()) for n in app.query(ContextNote)]


async def _reply(app: SkippyApp, pilot: Any, text: str) -> None:
    n = len(app.transcript.entries)
    app.prompt.load_text(text)
    await pilot.press("enter")
    await wait_until(pilot, lambda: not app.generating and len(app.transcript.entries) == n + 2, 240, "the reply")


def test_the_input_shows_its_tokens_and_the_chat_s_as_one_types(small_window: Any) -> None:
    async def body() -> None:
        app = SkippyApp(ui_config(max_tokens=4), speculator=small_window)
        async with app.run_test(size=SIZE) as pilot:
            assert "tok" not in _subtitle(app)  # an empty input: the keys only
            for ch in "Name a fruit.":  # typed: a count per pause, not per key
                app.prompt.insert(ch)
                await pilot.pause()
            size = small_window.count_tokens([{"role": "user", "content": "Name a fruit."}])
            want = f"{size.n_message:,} tok · context {size.n_prompt:,}/{size.n_ctx:,}"
            await wait_until(pilot, lambda: _subtitle(app).startswith(want), 10, f"the count {want!r}")
            assert size.n_ctx == 256 and 0 < size.n_message < size.n_prompt < 256
            assert "enter send" in _subtitle(app) and not app.prompt.has_class("-too-long")

    run(body())


def test_a_message_that_cannot_fit_is_refused_with_the_numbers_and_nothing_is_lost(small_window: Any) -> None:
    """1,600 characters in a 256-token window: before, the reply box was empty with
    ``context_full · 0 tok``, the reason a passing toast, and every later message failed too."""

    async def body() -> None:
        app = SkippyApp(ui_config(max_tokens=4), speculator=small_window)
        async with app.run_test(size=SIZE) as pilot:
            app.prompt.load_text(LONG)  # a paste
            await wait_until(pilot, lambda: "too long" in _subtitle(app), 10, "the count to say too long")
            assert app.prompt.has_class("-too-long")
            await pilot.press("enter")
            await wait_until(pilot, lambda: bool(_notes(app)), 10, "the note in the chat")
            (note,) = _notes(app)
            size = small_window.count_tokens([{"role": "user", "content": LONG.strip()}])
            assert f"the chat is {size.n_prompt:,} tokens" in note and "the context window holds 256" in note
            for what in ("ctrl+l", "ctrl+n", "n_ctx"):
                assert what in note, note
            # nothing was sent, nothing lost
            assert app.transcript.entries == [] and not app.query(UserMessage) and not app.query(AssistantMessage)
            assert app.prompt.text == LONG and not app.generating
            # the chat goes on: the next message is answered, and the note stays
            await _reply(app, pilot, "Name a fruit.")
            last = app.transcript.entries[-1]
            assert last.finish is not None and last.finish.reason != "context_full" and last.finish.n_tokens > 0
            assert len(_notes(app)) == 1

    run(body())


def test_a_message_the_engine_refuses_goes_back_into_the_input(small_window: Any, monkeypatch) -> None:
    """Where the count is not there (it failed), the engine's own refusal takes the message
    back: out of the chat and the transcript, its text into the input, the reason in the chat."""

    async def body() -> None:
        app = SkippyApp(ui_config(max_tokens=4), speculator=small_window)
        monkeypatch.setattr(app, "_size_now", lambda text: None)
        async with app.run_test(size=SIZE) as pilot:
            app.prompt.load_text(LONG)
            await pilot.press("enter")
            await wait_until(pilot, lambda: bool(_notes(app)) and not app.generating, 60, "the engine's refusal")
            (note,) = _notes(app)
            assert "context window holds 256" in note and "ctrl+n" in note, note
            assert app.transcript.entries == [] and not app.query(UserMessage) and not app.query(AssistantMessage)
            assert app.prompt.text == LONG.strip()
            await _reply(app, pilot, "Name a fruit.")  # not carried into the next message
            assert [e.role for e in app.transcript.entries] == ["user", "assistant"]
            assert app.transcript.entries[-1].finish.reason != "context_full"

    run(body())


def test_a_reply_the_window_cuts_short_leaves_the_reason_in_the_chat(small_window: Any) -> None:
    async def body() -> None:
        app = SkippyApp(ui_config(max_tokens=400), speculator=small_window)
        async with app.run_test(size=SIZE) as pilot:
            await _reply(app, pilot, "Write a long story about a dragon. " * 5)
            fin = app.transcript.entries[-1].finish
            assert fin is not None and fin.reason == "context_full" and fin.n_tokens > 0
            (note,) = _notes(app)
            assert note.startswith("The reply stopped: the context window is full") and "ctrl+n" in note, note

    run(body())


def test_a_20000_character_paste_is_refused_in_the_default_window(speculator: Any) -> None:
    async def body() -> None:
        app = SkippyApp(ui_config(max_tokens=4), speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            app.prompt.load_text((LONG * 13)[:20000])  # about 4,100 tokens of prose
            await wait_until(pilot, lambda: "too long" in _subtitle(app), 30, "the count to say too long")
            await pilot.press("enter")
            await wait_until(pilot, lambda: bool(_notes(app)), 10, "the note in the chat")
            assert f"the context window holds {speculator.n_ctx:,}" in _notes(app)[0]
            assert app.transcript.entries == [] and len(app.prompt.text) == 20000

    run(body())
