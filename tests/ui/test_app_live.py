"""The app on the real default pair (SmolLM2-135M F32 target, Q4_1 draft), driven by Pilot.

Replies are short, so each test costs a few steps; greedy (temperature 0)
unless the test is about sampling. The shared pair starts every test as
loaded (see conftest); a test that needs a proposal in every step fixes k,
since ``auto`` may decode the first steps plainly.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ui_helpers import CHAT_JSON, SIZE, run, status_text, ui_config, wait_for_screen, wait_until

from skippy_tui.cli import main
from skippy_tui.engine.chat import prompt_tokens
from skippy_tui.engine.events import Event, ReplyFinished, StepVerified, SyncInfo
from skippy_tui.engine.native.invariance import Invariance
from skippy_tui.transcript import Entry, Transcript
from skippy_tui.ui import launch
from skippy_tui.ui.app import SkippyApp
from skippy_tui.ui.screens.confirm import ConfirmDiscardScreen
from skippy_tui.ui.screens.inspector import InspectorScreen
from skippy_tui.ui.screens.system_prompt import SystemPromptScreen
from skippy_tui.ui.screens.tune import TuneScreen
from skippy_tui.ui.widgets.chat import AssistantMessage, UserMessage, Welcome


def _proposes(step: StepVerified) -> bool:
    """A step of a fixed k proposed, unless the reply had room for one token only."""
    return bool(step.proposed) or step.k_reason == "no room"


async def _send(app: SkippyApp, pilot, text: str) -> None:
    app.prompt.load_text(text)
    await pilot.press("enter")
    await wait_until(pilot, lambda: app.generating or app._current is None, 10, "the reply to start")


async def _reply(app: SkippyApp, pilot, text: str, timeout: float = 240) -> ReplyFinished:
    n = len(app.transcript.entries)
    await _send(app, pilot, text)
    await wait_until(pilot, lambda: not app.generating and len(app.transcript.entries) == n + 2, timeout, "the reply")
    fin = app.transcript.entries[-1].finish
    assert fin is not None
    return fin


def _prompt(spec: Any, transcript: Transcript, question: str) -> list[int]:
    """The tokens the engine's prompt must be when ``question`` follows ``transcript``."""
    messages = [*transcript.engine_messages(), {"role": "user", "content": question}]
    return prompt_tokens(spec.target, spec.template, messages)


class Paced:
    """The shared pair, but the engine thread waits after each step until the test lets it go on.

    So the test reads the chat after every step while the reply provably is
    not finished (its next step is not even computed), however fast the machine.
    """

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.go = threading.Semaphore(0)
        self._free = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def run(self, messages: Any, gen: Any, cancel: threading.Event) -> Iterator[Event]:
        for ev in self._inner.run(messages, gen, cancel):
            yield ev  # posted to the app before the generator resumes
            if isinstance(ev, StepVerified) and not self._free.is_set():
                self.go.acquire(timeout=60)

    def free(self) -> None:
        """Stop pacing (a failed test must not leave the engine thread waiting)."""
        self._free.set()
        self.go.release()


async def _after_step(app: SkippyApp, pilot, entry: Entry, msg: AssistantMessage, n: int) -> str | None:
    """The chat's text once step ``n + 1`` of a paced reply is shown (None: the reply ended)."""
    await wait_until(pilot, lambda: len(entry.steps) > n or not app.generating, 180, f"step {n + 1}")
    if not app.generating:
        return None
    so_far = "".join(s.text for st in entry.steps for s in st.delta)
    await wait_until(pilot, lambda: msg.text == so_far, 10, f"step {n + 1}'s text in the chat")
    assert app.generating and entry.finish is None
    return msg.text


def test_send_streams_text_and_step_rows(speculator) -> None:
    """The chat shows the reply growing step by step while it is generated, then the full text."""
    speculator.update(n_draft=4, source="model")  # every step proposes
    paced = Paced(speculator)

    async def body() -> None:
        app = SkippyApp(ui_config(max_tokens=16), speculator=paced)
        async with app.run_test(size=SIZE) as pilot:
            await _send(app, pilot, "Write a haiku about the sea.")
            msg, entry = app._current, app._current_entry
            assert msg is not None and entry is not None
            shown: list[str] = []  # the chat's text after each step, read while the reply was unfinished
            try:
                while (text := await _after_step(app, pilot, entry, msg, len(shown))) is not None:
                    shown.append(text)
                    paced.go.release()
            finally:
                paced.free()
            fin = entry.finish
            assert fin is not None and fin.reason in ("max_tokens", "eos")
            # streamed: the text grew through at least two partial states before the reply finished
            partial = [t for t in dict.fromkeys(shown) if t and t != fin.text]
            assert len(partial) >= 2, shown
            assert all(fin.text.startswith(t) for t in partial)
            assert all(len(a) < len(b) for a, b in itertools.pairwise(partial))
            assert entry is app.transcript.entries[-1] and fin.text and entry.content == fin.text
            assert msg.text == fin.text  # Markdown re-rendered with the full text
            assert app.panel.timeline.row_count == len(entry.steps) == fin.n_steps == len(shown)
            assert "".join(s.text for s in entry.spans()) == fin.text
            assert all(_proposes(st) for st in entry.steps)  # speculation ran, k=4 each step
            status = status_text(app)
            for part in ("F32", "Q4_1", "CPU", f"ctx {fin.n_past}/4096", "spec on k=4", "greedy"):
                assert part in status
            # the inspector opens on a step
            app.panel.timeline.focus()
            await pilot.press("enter")
            await wait_for_screen(pilot, app, InspectorScreen, 5)
            await pilot.press("escape")
            await wait_until(pilot, lambda: not isinstance(app.screen, InspectorScreen), 5, "the inspector to close")

    run(body())


def test_the_step_list_follows_the_next_reply_after_a_long_one(speculator) -> None:
    """Issue 57.11: after a reply longer than the step list's view, the next reply's steps stayed
    on its first rows (the view, clamped to the empty list, moved up, and that was taken for the
    user scrolling up). Mid-reply, after each step, the newest step is in view."""
    speculator.update(n_draft=1, source="model")  # at most two tokens a step: more steps than the view has rows

    async def body() -> None:
        app = SkippyApp(ui_config(max_tokens=24), speculator=speculator)
        async with app.run_test(size=(100, 30)) as pilot:  # the panel under the chat: a few rows
            timeline = app.panel.timeline
            await _reply(app, pilot, "Tell me about the sea.")
            await wait_until(pilot, lambda: timeline.max_scroll_y > 0, 10, "a list longer than its view")
            assert timeline.scroll_y == timeline.max_scroll_y
            app.speculator = paced = Paced(speculator)
            await _send(app, pilot, "And about the mountains.")
            seen: list[tuple[int, float, int]] = []  # rows, scroll_y, max_scroll_y after each step
            try:
                while app.generating and len(seen) < 16:
                    n = timeline.row_count
                    await wait_until(pilot, lambda n=n: timeline.row_count > n or not app.generating, 180, "a step")
                    await pilot.pause()
                    seen.append((timeline.row_count, timeline.scroll_y, timeline.max_scroll_y))
                    paced.go.release()
            finally:
                paced.free()
            await wait_until(pilot, lambda: not app.generating, 180, "the reply")
            overflowing = [s for s in seen if s[2] > 0]
            assert overflowing, f"the reply never outgrew the view: {seen}"
            assert all(scroll == end for _, scroll, end in overflowing), seen

    run(body())


def test_stop_mid_reply(speculator, monkeypatch: pytest.MonkeyPatch) -> None:
    # Count the steps the engine has yielded, on the worker's side: the UI's own count lags
    # behind by the messages still queued, and plain steps are a few ms each.
    yielded = [0]
    engine_run = speculator.run

    def counting_run(*args: Any, **kwargs: Any) -> Iterator[Event]:
        for ev in engine_run(*args, **kwargs):
            yielded[0] += isinstance(ev, StepVerified)
            yield ev

    monkeypatch.setattr(speculator, "run", counting_run)

    async def body() -> None:
        app = SkippyApp(ui_config(max_tokens=400), speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            await _send(app, pilot, "Tell me a long story about a dragon and a knight.")
            await wait_until(pilot, lambda: app.panel.timeline.row_count >= 1, 180, "the first step")
            await pilot.press("escape")
            # the cancel event is set now; the engine may finish the step it is in, no more
            assert app._cancel.is_set()
            at_press = yielded[0]
            await wait_until(pilot, lambda: not app.generating, 60, "the reply to stop")
            entry = app.transcript.entries[-1]
            assert entry.finish.reason == "cancelled"
            assert len(entry.steps) <= at_press + 1  # within one step
            assert entry.content == entry.finish.text and entry.content
            assert app.query(AssistantMessage).last().has_class("-cancelled")
            # the conversation goes on after a stop
            app.generation = dataclasses.replace(app.generation, max_tokens=6)
            fin = await _reply(app, pilot, "Thanks!")
            assert fin.reason in ("max_tokens", "eos") and fin.text

    run(body())


def test_regenerate_replaces_the_last_reply_and_autosaves(speculator) -> None:
    async def body() -> None:
        app = SkippyApp(ui_config(max_tokens=8, ui={"autosave": True}), speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            first = await _reply(app, pilot, "Name a colour.")
            old_entry = app.transcript.entries[-1]
            saved = app.transcript_path  # auto-saved after the reply
            assert saved is not None and Transcript.load(saved) == app.transcript
            await pilot.press("ctrl+r")
            await wait_until(pilot, lambda: app.generating or app.transcript.entries[-1] is not old_entry, 10, "start")
            await wait_until(pilot, lambda: not app.generating and len(app.transcript.entries) == 2, 240, "the reply")
            new_entry = app.transcript.entries[-1]
            assert new_entry is not old_entry and new_entry.role == "assistant"
            assert new_entry.content == first.text  # greedy: the same reply again
            assert new_entry.started.target_sync.kind in ("truncate", "synced")  # the KV cache was reused
            assert len(app.query(AssistantMessage)) == 1 and len(app.query(UserMessage)) == 1
            assert app.transcript_path == saved and Transcript.load(saved) == app.transcript  # saved again, same file

    run(body())


async def _regenerate(app: SkippyApp, pilot) -> ReplyFinished:
    old = app.transcript.entries[-1]
    await pilot.press("ctrl+r")
    await wait_until(pilot, lambda: app.generating or app.transcript.entries[-1] is not old, 10, "the reply to start")
    await wait_until(pilot, lambda: not app.generating and app.transcript.entries[-1] is not old, 240, "the reply")
    fin = app.transcript.entries[-1].finish
    assert fin is not None and fin.reason in ("max_tokens", "eos")
    return fin


async def _tune(app: SkippyApp, pilot, **values: str) -> None:
    """Set fields in the F3 dialog and apply them."""
    await pilot.press("f3")
    screen = await wait_for_screen(pilot, app, TuneScreen, 5)
    for key, value in values.items():
        screen.query_one(f"#{key}").value = value
    await pilot.click("#apply")
    await wait_until(pilot, lambda: not isinstance(app.screen, TuneScreen), 5, "the dialog to apply")


def test_regenerate_at_temperature_is_a_new_reply_and_a_fixed_seed_repeats_it(speculator) -> None:
    """At T > 0 each reply draws its own seed, so Ctrl+R samples anew; a fixed seed gives the same reply back.

    Twelve tokens at T=0.8 on an open prompt: 60 replies with drawn seeds were all different.
    """

    async def body() -> None:
        app = SkippyApp(ui_config(max_tokens=12, sampling={"temperature": 0.8}), speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            assert "coupled T=0.8" in str(app.query_one("#status").render())
            first = await _reply(app, pilot, "Write one sentence about anything you like.")
            second = await _regenerate(app, pilot)
            assert first.seed is not None and second.seed is not None and first.seed != second.seed
            assert second.text != first.text
            started = app.transcript.entries[-1].started
            assert started.sampling["seed"] == second.seed and started.sampling["seed_fixed"] is False
            # the inspector names the reply's seed and how to reproduce it
            app.panel.timeline.focus()
            await pilot.press("enter")
            screen = await wait_for_screen(pilot, app, InspectorScreen, 5)
            head = str(screen.query_one("#inspect-head").render())
            assert f"{second.seed} (drawn for this reply)" in head and f"--seed {second.seed} " in head
            await pilot.press("escape")
            await wait_until(pilot, lambda: not isinstance(app.screen, InspectorScreen), 5, "the inspector to close")
            # a fixed seed (set in F3, from the next reply on): regenerate repeats the reply exactly
            await _tune(app, pilot, seed="4242")
            assert "coupled T=0.8 seed 4242" in str(app.query_one("#status").render())
            fixed = [await _regenerate(app, pilot) for _ in range(2)]
            assert fixed[0].seed == fixed[1].seed == 4242
            assert fixed[0].token_ids == fixed[1].token_ids and fixed[0].text == fixed[1].text

    run(body())


def test_a_sampling_change_mid_reply_is_recorded_at_its_step(speculator) -> None:
    """F3 mid-reply: the new temperature applies from the next step and that step's event records it;
    the new seed waits for the next reply, so it is no change for this one."""

    async def body() -> None:
        app = SkippyApp(ui_config(max_tokens=400), speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            assert "greedy" in str(app.query_one("#status").render())
            await _send(app, pilot, "Tell me a long story about a dragon and a knight.")
            await wait_until(pilot, lambda: app.panel.timeline.row_count >= 1, 180, "the first step")
            await _tune(app, pilot, temperature="0.5", seed="77")
            entry = app._current_entry

            def changed() -> list:
                return [st for st in entry.steps + app._pending if st.sampling is not None]

            await wait_until(pilot, lambda: bool(changed()) or not app.generating, 60, "a step with the change")
            await pilot.press("escape")
            await wait_until(pilot, lambda: not app.generating, 60, "the reply to stop")
            steps = entry.steps
            marked = [i for i, st in enumerate(steps) if st.sampling is not None]
            assert len(marked) == 1 and marked[0] > 0, "the change is recorded once, at the step it applies from"
            settings = steps[marked[0]].sampling
            assert settings["temperature"] == 0.5 and settings["sampler"] == "coupled"
            assert settings["seed"] == entry.finish.seed == entry.started.sampling["seed"] != 77
            assert settings["seed_fixed"] is False  # the reply's drawn seed, not 77 pinned mid-reply
            assert str(app.panel.timeline.get_row_at(marked[0])[0]).startswith("*")
            assert "from step" in str(app.query_one("#changes").render())
            assert "coupled T=0.5 seed 77" in str(app.query_one("#status").render())
            # the next reply starts with the new seed
            app.generation = dataclasses.replace(app.generation, max_tokens=4)
            fin = await _reply(app, pilot, "Thanks!")
            assert fin.seed == 77 and app.transcript.entries[-1].started.sampling["temperature"] == 0.5

    run(body())


async def _set_system(app: SkippyApp, pilot, text: str) -> None:
    await pilot.press("f2")
    screen = await wait_for_screen(pilot, app, SystemPromptScreen, 5)
    screen.query_one("#system-text").load_text(text)
    await pilot.press("ctrl+s")
    await wait_until(pilot, lambda: not isinstance(app.screen, SystemPromptScreen), 5, "the dialog to close")


def test_a_system_prompt_set_after_a_reply_applies_when_that_turn_is_sent_again(speculator) -> None:
    """Issue 57.1: F2 after a reply, then Ctrl+R or Ctrl+L: the turn sent again goes with the new
    system prompt (the first one: the chat now starts with it); F2 while a reply streams puts the
    change after that reply. The chat shows each change where it applies."""

    def said(app: SkippyApp) -> list[tuple[str, str]]:
        return [(e.role, e.content if e.role != "assistant" else "…") for e in app.transcript.entries]

    def widgets(app: SkippyApp) -> list[str]:
        return [type(w).__name__ for w in app.chat.children]

    async def body() -> None:
        app = SkippyApp(ui_config(max_tokens=4), speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            await _reply(app, pilot, "Say A.")
            await _set_system(app, pilot, "SYS-X")
            await _regenerate(app, pilot)  # turn 1 again: sent with SYS-X, which the chat now starts with
            assert said(app) == [("user", "Say A."), ("assistant", "…")] and app.transcript.system_prompt == "SYS-X"
            assert widgets(app) == ["SystemNote", "UserMessage", "AssistantMessage"]
            await _reply(app, pilot, "Say B.")
            await _set_system(app, pilot, "SYS-Y")
            await pilot.press("ctrl+l")
            app.prompt.load_text("Say C.")
            await pilot.press("enter")
            await wait_until(pilot, lambda: not app.generating and app._current is None, 240, "the edited turn")
            assert said(app)[2:] == [("system", "SYS-Y"), ("user", "Say C."), ("assistant", "…")]
            assert widgets(app)[3:] == ["SystemChange", "UserMessage", "AssistantMessage"]
            assert app.transcript.entries[-1].started.n_prompt == len(
                prompt_tokens(speculator.target, speculator.template, app.transcript.engine_messages()[:-1])
            )
            app.speculator = paced = Paced(speculator)  # held after its first step while F2 is used
            try:
                await _send(app, pilot, "Tell me a story.")
                await wait_until(pilot, lambda: bool(app._pending or app._current_entry.steps), 180, "a step")
                await _set_system(app, pilot, "SYS-Z")
                assert app.generating
            finally:
                paced.free()
            await wait_until(pilot, lambda: not app.generating, 240, "the reply")
            assert said(app)[-3:] == [("user", "Tell me a story."), ("assistant", "…"), ("system", "SYS-Z")]
            assert widgets(app)[-1] == "SystemChange"

    run(body())


def test_edit_last_message(speculator) -> None:
    async def body() -> None:
        app = SkippyApp(ui_config(max_tokens=6), speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            await _reply(app, pilot, "Name a fruit.")
            await pilot.press("ctrl+l")
            assert app.prompt.text == "Name a fruit."
            assert app.prompt.has_class("-editing")
            app.prompt.load_text("Name a vegetable.")
            await pilot.press("enter")
            await wait_until(pilot, lambda: not app.generating and app._current is None, 240, "the new reply")
            roles = [(e.role, e.content) for e in app.transcript.entries]
            assert len(roles) == 2 and roles[0] == ("user", "Name a vegetable.")
            users = app.query(UserMessage)
            assert len(users) == 1 and users.first().entry.content == "Name a vegetable."
            assert not app.prompt.has_class("-editing")

    run(body())


def test_save_reload_and_continue(speculator, tmp_path) -> None:
    async def body() -> None:
        app = SkippyApp(ui_config(max_tokens=6), speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            await _reply(app, pilot, "Say hello.")
            await pilot.press("ctrl+s")
            await wait_until(pilot, lambda: app.transcript_path is not None, 5, "the save")
            path = app.transcript_path
            assert path.is_file() and path.with_suffix(".md").is_file()
            assert Transcript.load(path) == app.transcript  # round trip equal
            assert "Say hello." in path.with_suffix(".md").read_text("utf-8")
            saved = app.transcript

        # open it again with models: the conversation continues
        app2 = SkippyApp(ui_config(max_tokens=6), speculator=speculator)
        async with app2.run_test(size=SIZE) as pilot:
            await app2.open_transcript(path)
            assert app2.transcript == saved
            assert len(app2.query(AssistantMessage)) == 1
            assert app2.panel.timeline.row_count == len(saved.entries[-1].steps)
            await _reply(app2, pilot, "And goodbye.")
            assert [e.role for e in app2.transcript.entries] == ["user", "assistant"] * 2
            # the reply's prompt was the whole conversation, the saved turn included
            started = app2.transcript.entries[-1].started
            assert started.n_prompt == len(_prompt(speculator, saved, "And goodbye."))

    run(body())


def _recording(
    run: Callable[..., Iterator[Event]], events: list[Event], late: list[Event], ended: threading.Event
) -> Callable[..., Iterator[Event]]:
    """``Speculator.run`` that keeps every event it yields (in ``late`` too when the reply was
    already cancelled) and says when the reply's generator ended."""

    def recorded(messages: Any, gen: Any, cancel: threading.Event) -> Iterator[Event]:
        try:
            for ev in run(messages, gen, cancel):
                events.append(ev)
                if cancel.is_set():
                    late.append(ev)
                yield ev
        finally:
            ended.set()

    return recorded


@pytest.mark.models  # the app loads the default pair itself (not through a fixture)
def test_quit_mid_stream_ends_the_reply_within_a_step() -> None:
    """The app loads its own models (the real loading path), then quits while a reply streams.

    Quit stops the reply as Esc does (the engine yields at most the step it was
    in, and the partial reply is kept), asks about the unsaved chat, and the app
    and the engine thread end. Waits
    are on those events, bounded at 30 s: generous on a busy shared machine,
    and a hang still fails.
    """
    app = SkippyApp(ui_config(max_tokens=400, ui={"history": False}))  # on, quitting would save, not ask
    events: list[Event] = []
    late: list[Event] = []
    ended = threading.Event()

    async def body() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: app.speculator is not None, 240, "the models to load")
            assert app.owns_speculator
            app.speculator.run = _recording(app.speculator.run, events, late, ended)
            await _send(app, pilot, "Tell me a long story about a lighthouse keeper.")
            await wait_until(pilot, lambda: app.panel.timeline.row_count >= 1, 180, "the first step")
            assert app.generating
            await pilot.press("ctrl+q")  # the reply stops first and is kept; then the unsaved chat is asked about
            await wait_for_screen(pilot, app, ConfirmDiscardScreen, 10)
            kept = app.transcript.entries[-1]
            assert kept.role == "assistant" and kept.content and kept.finish.reason == "cancelled"
            await pilot.press("y")
            await asyncio.wait_for(asyncio.shield(app._task), 30)  # run_test's task: done once the app closed
        assert await asyncio.to_thread(ended.wait, 30), "the engine thread did not end within 30 s of quitting"

    try:
        run(body())
        fin = events[-1]
        assert isinstance(fin, ReplyFinished) and fin.reason == "cancelled", fin
        if getattr(app.speculator, "separate_process", False):  # what reaches the relay late may be its own backlog
            heard = app.speculator.cancel_heard
            assert heard is not None, "the engine process never heard the cancel"
            steps = sum(isinstance(e, StepVerified) for e in events)
            assert steps - heard[1] <= 1, f"the engine went on past the step in flight: {steps} steps, heard at {heard}"
        else:  # in process the engine's events reach the relay as they are made
            assert sum(isinstance(e, StepVerified) for e in late) <= 1, "the engine went on past the step in flight"
        assert app._cancel.is_set()
    finally:
        if ended.is_set():  # never free the models under a running engine thread
            app.speculator.close()


def test_engine_thread_crash_ends_the_reply_with_a_notice(speculator) -> None:
    """An unexpected exception in the engine thread (not a SkippyError) is reported, not raised."""

    class Crashing:
        def __init__(self, inner) -> None:
            self._inner = inner

        def __getattr__(self, name: str):
            return getattr(self._inner, name)

        def run(self, messages, gen, cancel):
            for i, ev in enumerate(self._inner.run(messages, gen, cancel)):
                yield ev
                if i == 1:
                    raise RuntimeError("boom")

    async def body() -> None:
        app = SkippyApp(ui_config(max_tokens=12), speculator=Crashing(speculator))
        async with app.run_test(size=SIZE) as pilot:
            await _send(app, pilot, "Say something.")
            await wait_until(pilot, lambda: not app.generating, 120, "the crash to be handled")
            msg = app.query(AssistantMessage).last()
            assert msg.has_class("-error") and not msg.has_class("-streaming")
            assert "RuntimeError: boom" in msg.border_subtitle
            assert any("boom" in n.message for n in app._notifications)
            assert [e.role for e in app.transcript.entries] == ["user"]  # the failed reply is not kept
            assert app.panel.timeline.row_count == 1  # the one step that arrived was shown

    run(body())


async def _continue_replayed(app: SkippyApp, pilot, saved: Transcript, same_pair: Any) -> None:
    """Once the models load, a new message continues the replayed conversation: the engine's
    prompt is the whole conversation, the transcript gains the turn, the next turn reuses the caches.

    ``same_pair``: an in-process speculator on the same models, to tokenize with (the app's
    engine runs in a child process)."""
    await wait_until(pilot, lambda: app.speculator is not None, 240, "the models to load")
    spec = same_pair
    assert app.owns_speculator and not app.replay and app.transcript == saved
    assert "spec on" in status_text(app) and "replay" not in status_text(app)
    question = "And what is 3+3?"
    conversation = _prompt(spec, saved, question)
    alone = _prompt(spec, Transcript(), question)
    await _reply(app, pilot, question)
    started = app.transcript.entries[-1].started
    # fresh caches: one prefill of every earlier turn plus the question
    assert started.n_prompt == len(conversation) > len(alone)
    assert started.target_sync == SyncInfo("reset", 0, len(conversation) - 1)
    assert app.transcript.entries[:4] == saved.entries
    assert [(e.role, e.content) for e in app.transcript.entries[4:5]] == [("user", question)]
    assert [e.role for e in app.transcript.entries] == ["user", "assistant"] * 3
    assert len(app.query(AssistantMessage)) == 3 and len(app.query(UserMessage)) == 3
    # the turn after it extends the target's cache past the continued conversation
    await _reply(app, pilot, "Thanks.")
    after = app.transcript.entries[-1].started
    assert after.target_sync.kind == "extend" and after.target_sync.start >= started.n_prompt, after.target_sync


def _close_owned(app: SkippyApp) -> None:
    if app.speculator is not None and app.owns_speculator and not app.generating:
        app.speculator.close()


def test_cli_replay_continue_loads_the_models_and_continues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, speculator: Any
) -> None:
    """``skippy-tui replay FILE --continue``: the app the CLI builds is driven here instead of run."""
    cfg = tmp_path / "config.toml"
    cfg.write_text("[target]\nthreads = 1\nthreads_batch = 1\n", "utf-8")  # as ui_config: fast on a shared machine
    built: list[SkippyApp] = []
    monkeypatch.setattr(launch, "_run", lambda make_app: built.append(make_app()) or 0)
    assert main(["replay", str(CHAT_JSON), "--continue", "--max-tokens", "6", "--config", str(cfg)]) == 0
    (app,) = built

    async def body() -> None:
        async with app.run_test(size=SIZE) as pilot:
            assert app.transcript_path == CHAT_JSON and (app.loading or app.speculator is not None)
            await _continue_replayed(app, pilot, Transcript.load(CHAT_JSON), speculator)

    try:
        run(body())
    finally:
        _close_owned(app)


def test_f5_loads_the_models_into_a_replay_and_continues(speculator: Any) -> None:
    app = SkippyApp(
        ui_config(max_tokens=6), transcript=Transcript.load(CHAT_JSON), transcript_path=CHAT_JSON, load_models=False
    )

    async def body() -> None:
        async with app.run_test(size=SIZE) as pilot:
            assert app.replay and app.speculator is None and "no models loaded (f5 loads them)" in status_text(app)
            await pilot.press("f5")
            await wait_until(pilot, lambda: app.loading or app.speculator is not None, 5, "the load to start")
            await _continue_replayed(app, pilot, Transcript.load(CHAT_JSON), speculator)

    try:
        run(body())
    finally:
        _close_owned(app)


def test_a_load_says_when_llama_cpp_rounds_n_ctx(smollm2_f32: Path) -> None:
    app = SkippyApp(ui_config(target={"n_ctx": 100}), load_models=False)

    async def body() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f5")
            await wait_until(pilot, lambda: app.speculator is not None, 120, "the models to load")
            await pilot.pause()
            n_ctx = app.speculator.n_ctx
            assert n_ctx > 100  # llama.cpp pads the KV cache to 256
            notes = [n.message for n in app._notifications]
            assert f"llama.cpp rounded n_ctx 100 to {n_ctx} tokens." in notes, notes

    try:
        run(body())
    finally:
        _close_owned(app)


def test_f4_turns_speculation_off_and_on_again(speculator) -> None:
    speculator.update(n_draft=4, source="model")  # every speculative step proposes

    async def body() -> None:
        app = SkippyApp(ui_config(max_tokens=8), speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            assert "spec on k=4" in status_text(app)
            await pilot.press("f4")
            await wait_until(pilot, lambda: "spec off" in status_text(app), 5, "the status to say off")
            await _reply(app, pilot, "Name a colour.")
            off = app.transcript.entries[-1]
            assert not off.started.speculative and off.finish.n_drafted == 0
            assert off.steps and all(not st.proposed and st.k_reason == "speculation off" for st in off.steps)
            await pilot.press("f4")
            await wait_until(pilot, lambda: "spec on k=4" in status_text(app), 5, "the status to say on")
            await _reply(app, pilot, "Name a fruit.")
            on = app.transcript.entries[-1]
            assert on.started.speculative and on.finish.n_drafted > 0
            assert all(_proposes(st) for st in on.steps)

    run(body())


def test_ctrl_n_clears_the_chat_and_the_next_reply_starts_from_empty_caches(speculator) -> None:
    async def body() -> None:
        # history off: with it on the chat is kept there, and Ctrl+N asks nothing
        app = SkippyApp(ui_config(max_tokens=6, ui={"history": False}), speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            await _reply(app, pilot, "Name a colour.")
            first = app.transcript.entries[-1].started
            await _reply(app, pilot, "Name another one.")
            assert app.transcript.entries[-1].started.target_sync.kind == "extend"  # a chat reuses its caches
            await pilot.press("ctrl+n")
            await wait_for_screen(pilot, app, ConfirmDiscardScreen, 10)  # not saved: asked first
            await pilot.press("enter")
            await wait_until(pilot, lambda: not app.transcript.entries and bool(app.query(Welcome)), 5, "a new chat")
            assert not app.query(UserMessage) and not app.query(AssistantMessage)
            assert app.transcript_path is None and app.panel.timeline.row_count == 0
            assert "ctx 0/4096" in status_text(app)
            # the same first message again: kept caches would make this a truncate, a new chat resets them
            await _reply(app, pilot, "Name a colour.")
            started = app.transcript.entries[-1].started
            assert started.n_prompt == first.n_prompt
            assert started.target_sync == SyncInfo("reset", 0, started.n_prompt - 1)
            assert [e.role for e in app.transcript.entries] == ["user", "assistant"]

    run(body())


def _exact_part(app: SkippyApp) -> list[str]:
    return [p for p in status_text(app).split(" │ ") if p.startswith(("exact", "not exact", "auto: "))]


def test_status_bar_says_how_verification_stays_exact(speculator, monkeypatch: pytest.MonkeyPatch) -> None:
    """The status bar's verification field follows the profile and ``speculator.invariance``: the
    probe's result on this build under the default profile (auto), then a limit of 7 rows, one row
    (auto: one batch, not bit-exact, and a warning says so; exact: row by row) and no limit;
    "not exact" with ``exact = false``; nothing when off."""
    from skippy_tui.engine.policy.exactness import NOT_BIT_EXACT

    inv = speculator.invariance
    assert inv is not None and speculator.verify_rows == inv.chunk and speculator.speculation.profile == "auto"
    shown = {None: "exact", 1: "exact ≤1 row"}
    cases = [
        inv,
        Invariance(rows=7, probed=17, max_diff=1.13),
        Invariance(rows=1, probed=1, max_diff=0.0, note="built with LLAMAFILE"),
        Invariance(rows=None, probed=17, max_diff=0.0),
    ]
    initial = speculator.speculation

    async def body() -> None:
        app = SkippyApp(ui_config(), speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            for profile in ("auto", "exact"):
                monkeypatch.setattr(speculator, "speculation", dataclasses.replace(initial, profile=profile))
                for case in cases:
                    monkeypatch.setattr(speculator, "invariance", case)
                    app._update_status()
                    want = shown.get(case.rows, f"exact ≤{case.rows} rows")
                    if profile == "auto":
                        want = "auto: not bit-exact" if case.chunk < 2 else f"auto: {want}"
                    assert _exact_part(app) == [want], (profile, case)
            # a load on such a build warns once, in words
            monkeypatch.setattr(speculator, "speculation", initial)
            monkeypatch.setattr(speculator, "invariance", cases[2])
            app._verification_notice(speculator)

            def said() -> list[Any]:
                return [n for n in app._notifications if n.title == "Not bit-exact"]

            await wait_until(pilot, lambda: bool(said()), 10, "the warning")
            assert len(said()) == 1 and NOT_BIT_EXACT in said()[0].message.lower(), said()
            monkeypatch.setattr(speculator, "invariance", None)
            speculator.update(exact=False)
            app._update_status()
            assert _exact_part(app) == ["not exact"]
            speculator.update(enabled=False)
            app._update_status()
            assert _exact_part(app) == [] and "spec off" in status_text(app)

    run(body())
