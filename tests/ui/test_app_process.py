"""The app with ``[ui] engine = "process"``: the models load and decode in a child process.

One app per test loads its own pair in a child (the real path: spawn, load
progress over the pipe, events back); replies are short and greedy, so each
can be checked token for token against the in-process engine (the shared pair).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from ui_helpers import SIZE, run, ui_config, wait_for_screen, wait_until

from skippy_tui.engine.events import ReplyFinished, StepVerified
from skippy_tui.engine.settings import GenerationSettings
from skippy_tui.transcript import Transcript
from skippy_tui.ui.app import SkippyApp
from skippy_tui.ui.launch import early_engine
from skippy_tui.ui.screens.tune import TuneScreen
from skippy_tui.ui.widgets.chat import AssistantMessage

PROMPT = "Tell me a long story about a dragon and a knight."


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (an exited child not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or between open and read
        return False


async def _send(app: SkippyApp, pilot: Any, text: str) -> None:
    app.prompt.load_text(text)
    await pilot.press("enter")
    await wait_until(pilot, lambda: app.generating, 10, "the reply to start")


async def _reply(app: SkippyApp, pilot: Any, text: str) -> ReplyFinished:
    n = len(app.transcript.entries)
    await _send(app, pilot, text)
    await wait_until(pilot, lambda: not app.generating and len(app.transcript.entries) == n + 2, 240, "the reply")
    fin = app.transcript.entries[-1].finish
    assert fin is not None
    return fin


def _in_process(speculator: Any, messages: list[dict[str, str]], max_tokens: int) -> ReplyFinished:
    speculator.forget()
    fin = list(speculator.run(messages, GenerationSettings(max_tokens=max_tokens)))[-1]
    assert isinstance(fin, ReplyFinished)
    return fin


def _config(max_tokens: int) -> Any:
    # history on (the default): quitting saves the chat rather than asking
    return ui_config(max_tokens=max_tokens, ui={"engine": "process"})


def test_a_reply_from_the_engine_process_tunes_stops_and_quits(speculator) -> None:
    """Same greedy tokens as the in-process engine; F3 mid-reply reaches the child (the step
    events show the new k and sampling); Esc stops the reply; quitting ends the child."""
    app = SkippyApp(_config(max_tokens=16))
    pid: list[int] = []

    async def body() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: app.speculator is not None, 240, "the models to load")
            spec = app.speculator
            assert spec.separate_process and app.owns_speculator and spec.pid != os.getpid()
            pid.append(spec.pid)
            assert _alive(spec.pid)
            assert "ctx 0/4096" in str(app.query_one("#status").render())
            app._input_arrived()  # a key with no reply streaming: the engine need not pause
            assert not spec._ui_input.is_set()
            fin = await _reply(app, pilot, "Name three colours.")
            alone = _in_process(speculator, app.transcript.engine_messages()[:-1], 16)
            assert fin.reason == alone.reason and fin.token_ids == alone.token_ids and fin.text == alone.text
            assert spec.n_past == fin.n_past  # the snapshot followed the reply
            # the input counted by the child, as one types (ui/context_fit.py)
            app.prompt.load_text("Name a fruit.")
            size = speculator.count_tokens(
                [*app.transcript.engine_messages(), {"role": "user", "content": "Name a fruit."}]
            )
            want = f"{size.n_message} tok · context {size.n_prompt}/4,096"
            await wait_until(pilot, lambda: str(app.prompt.border_subtitle).startswith(want), 10, f"the count {want}")
            app.prompt.clear()

            # F3 mid-reply: k and temperature from the next step on
            spec.update(n_draft=4, source="model")
            app.generation = GenerationSettings(max_tokens=400)
            await _send(app, pilot, PROMPT)
            await wait_until(pilot, lambda: app.panel.timeline.row_count >= 1, 180, "the first step")
            # the terminal's input thread flags a key at once: the child waits between steps until
            # the UI has handled it and redrawn (Pilot's keys skip the driver: flagged here by hand)
            answered: list[bool] = []
            answer = app._input_answered
            app._input_answered = lambda: (answered.append(spec._ui_input.is_set()), answer())[1]  # type: ignore[method-assign]
            app._input_arrived()
            assert spec._ui_input.is_set()
            await pilot.press("f3")
            screen = await wait_for_screen(pilot, app, TuneScreen, 5)
            await wait_until(pilot, lambda: bool(answered), 5, "the key answered")
            assert not spec._ui_input.is_set()
            screen.query_one("#n_draft").value = "2"
            screen.query_one("#temperature").value = "0.5"
            await pilot.click("#apply")
            await wait_until(pilot, lambda: not isinstance(app.screen, TuneScreen), 5, "the dialog to apply")
            assert spec.speculation.n_draft == 2  # answered by the child
            entry = app._current_entry

            def steps() -> list[StepVerified]:
                return entry.steps + app._pending

            await wait_until(
                pilot, lambda: any(st.sampling is not None for st in steps()) or not app.generating, 60, "the change"
            )
            await wait_until(pilot, lambda: len(steps()) >= 3 or not app.generating, 60, "more steps")
            # sampled at T=0.5, the story may end on its own just before Esc reaches it (seen once
            # in CI): an eos within a few steps of the key is that race, not a key that did nothing
            seen = len(steps())
            await pilot.press("escape")
            await wait_until(pilot, lambda: not app.generating, 30, "the reply to stop")
            ended = entry.finish.reason == "eos" and len(entry.steps) <= seen + 3
            assert entry.finish.reason == "cancelled" or ended, (entry.finish.reason, seen, len(entry.steps))
            marked = [i for i, st in enumerate(entry.steps) if st.sampling is not None]
            assert len(marked) == 1 and entry.steps[marked[0]].sampling["temperature"] == 0.5
            assert entry.steps[0].k == 4 and all(st.k <= 2 for st in entry.steps[marked[0] + 1 :])
            assert "k=2" in str(app.query_one("#status").render())
            await pilot.press("ctrl+q")
            await asyncio.wait_for(asyncio.shield(app._task), 30)  # run_test's task: done once the app closed
        await wait_until_ended(pid)

    run(body())


@pytest.mark.models  # loads the default pair (not through a fixture)
def test_a_killed_engine_process_ends_the_reply_and_f5_loads_again() -> None:
    app = SkippyApp(_config(max_tokens=400))

    async def body() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: app.speculator is not None, 240, "the models to load")
            await _send(app, pilot, PROMPT)
            await wait_until(pilot, lambda: app.panel.timeline.row_count >= 1, 180, "the first step")
            os.kill(app.speculator.pid, signal.SIGKILL)
            died = "the engine process exited (signal 9). Press F5 to load the models again."
            # the reply ends a moment before the death is told: wait for both, not the first
            await wait_until(
                pilot,
                lambda: not app.generating and died in [n.message for n in app._notifications],
                30,
                "the reply to end and the death to be told",
            )
            assert app.speculator is None and "no models loaded (f5 loads them)" in str(
                app.query_one("#status").render()
            )
            # the conversation stays: the message, and the reply as far as its steps got, marked failed
            user, partial = app.transcript.entries
            assert (user.role, user.content) == ("user", PROMPT) and partial.role == "assistant"
            assert partial.content and partial.content == "".join(s.text for st in partial.steps for s in st.delta)
            assert partial.finish.reason == "error" and partial.finish.n_steps == len(partial.steps) >= 1
            assert app.query(AssistantMessage).last().has_class("-error")
            await pilot.press("f5")
            await wait_until(pilot, lambda: app.speculator is not None, 240, "the models to load again")
            app.generation = GenerationSettings(max_tokens=6)
            fin = await _reply(app, pilot, "Thanks!")
            assert fin.reason in ("max_tokens", "eos") and fin.text

    try:
        run(body())
    finally:
        if app.speculator is not None:
            app.speculator.close()


@pytest.mark.models  # loads the default pair (not through a fixture)
def test_quitting_mid_reply_keeps_the_partial_reply_in_the_history() -> None:
    """Ctrl+Q while a reply streams stops it as Esc does; the chat is saved with the partial
    reply (not without it, beside a still-busy engine), and the app and its child end."""
    app = SkippyApp(_config(max_tokens=400))
    pid: list[int] = []

    async def body() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: app.speculator is not None, 240, "the models to load")
            pid.append(app.speculator.pid)
            await _send(app, pilot, PROMPT)
            await wait_until(pilot, lambda: app.panel.timeline.row_count >= 2, 180, "two steps")
            await pilot.press("ctrl+q")
            await asyncio.wait_for(asyncio.shield(app._task), 30)
        await wait_until_ended(pid)

    run(body())
    saved = Transcript.load(app.history_path)
    user, partial = saved.entries[-2:]
    assert (user.role, user.content) == ("user", PROMPT)
    assert partial.role == "assistant" and partial.content and partial.finish.reason == "cancelled"


def test_quitting_during_the_load_ends_the_engine_process(smollm2_f32: Path) -> None:
    app = SkippyApp(_config(max_tokens=4))
    children: list[int] = []

    async def body() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: app.loading, 10, "the load to start")
            await wait_until(pilot, lambda: bool(children.extend(_children()) or children), 30, "the child")
            await pilot.press("ctrl+q")
        await wait_until_ended(children)

    run(body())
    assert app.speculator is None and not any(_alive(p) for p in children)


def _children() -> list[int]:
    """This process's live engine processes (multiprocessing's resource tracker left out)."""
    me = str(os.getpid())
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:  # a process may end between any two reads
                with open(f"/proc/{d}/stat", encoding="ascii") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                ours = fields[1] == me and fields[0] != "Z"
                engine = ours and b"spawn_main" in Path(f"/proc/{d}/cmdline").read_bytes()
            except OSError:
                continue
            if engine:
                out.append(int(d))
    return out


async def wait_until_ended(pids: list[int], timeout: float = 15.0) -> None:
    """Wait until none of ``pids`` is alive (the engine process ends with the app)."""
    t0 = time.monotonic()
    while any(_alive(p) for p in pids):
        assert time.monotonic() - t0 < timeout, f"child processes {pids} still alive after {timeout:.0f}s"
        await asyncio.sleep(0.1)


def test_the_app_loads_from_the_engine_the_launcher_started(speculator) -> None:
    """``skippy-tui`` starts the engine process before it imports and draws the UI; the
    app's first load takes that child over instead of starting another."""
    assert early_engine(ui_config(ui={"engine": "thread"})) is None  # nothing to start early in-process
    config = _config(max_tokens=8)
    started = early_engine(config)
    assert started is not None and started.process.is_alive()
    app = SkippyApp(config, engine_started=started)

    async def body() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: app.speculator is not None, 240, "the models to load")
            assert app.speculator.pid == started.process.pid and app.engine_started is None
            fin = await _reply(app, pilot, "Name three colours.")
            assert fin.reason in ("eos", "max_tokens") and fin.n_tokens > 0
            await pilot.press("ctrl+q")
            await asyncio.wait_for(asyncio.shield(app._task), 30)
        await wait_until_ended([started.process.pid])

    run(body())
