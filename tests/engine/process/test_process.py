"""The engine in a child process (engine/process/): errors, load, cancel, a reply, exit.

The app-level behaviour (F3 mid-reply, Esc, a killed child, quit) is in
``tests/ui/test_app_process.py``; here the proxy is driven directly.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import EXACT

from skippy_tui.engine.errors import BoundsError, CancelledError, IncompatibleModelsError, ModelFileError, SkippyError
from skippy_tui.engine.events import ReplyFinished, ReplyStarted, StepVerified
from skippy_tui.engine.load.loader import EngineSpec, load_speculator
from skippy_tui.engine.native.model import LoadParams
from skippy_tui.engine.process.child import UI_PAUSE_MAX_S, EngineChild
from skippy_tui.engine.process.proxy import load_in_process, start_engine
from skippy_tui.engine.process.wire import error_payload, exit_message, rebuild_error
from skippy_tui.engine.settings import GenerationSettings, ModelSpec, SpeculationSettings

MESSAGES = [{"role": "user", "content": "Name three colours."}]


def _engines() -> list[multiprocessing.process.BaseProcess]:
    return [p for p in multiprocessing.active_children() if p.name == "skippy-engine"]


@pytest.mark.parametrize(
    "error",
    [
        BoundsError("n_draft", -1, "1..64"),
        ModelFileError("model file not found: /x.gguf"),
        IncompatibleModelsError("vocab size differs by 200"),
        CancelledError("model load cancelled"),
        RuntimeError("boom"),
    ],
)
def test_an_error_crosses_the_pipe_as_raised(error: Exception) -> None:
    back = rebuild_error(pickle.loads(pickle.dumps(error_payload(error))))
    # the app's dialogs depend on the type (SkippyError: shown as is) and the message
    assert type(back) is (type(error) if isinstance(error, SkippyError) else SkippyError)
    assert str(back) == str(error)
    if isinstance(error, BoundsError):
        assert (back.key, back.value, back.bound) == ("n_draft", -1, "1..64")


def test_exit_messages() -> None:
    assert exit_message(-9) == "the engine process exited (signal 9)"
    assert exit_message(1) == "the engine process exited (code 1)"
    assert exit_message(None) == "the engine process stopped answering"


def _spec(target: Path, draft: Path | None, cache_dir: Path, n_batch: int = 256, **spec: object) -> EngineSpec:
    lp = LoadParams(n_ctx=1024, n_batch=n_batch, n_ubatch=n_batch, threads=1, threads_batch=1, **EXACT)
    return EngineSpec(
        ModelSpec(target, lp),
        ModelSpec(draft, lp) if draft else None,
        SpeculationSettings(**{"enabled": draft is not None, "n_draft": 4, "source": "model", **spec}),  # type: ignore[arg-type]
        cache_dir,
        use_draft=draft is not None,
    )


def test_load_errors_reach_the_app_with_their_type_and_message(
    tmp_path: Path, cache_dir: Path, smollm2_q4_1: Path, gemma3_270m: Path
) -> None:
    """Refused before any weights load, in the child as in process: the same exception comes back."""
    specs = [
        _spec(tmp_path / "missing.gguf", None, cache_dir),
        _spec(smollm2_q4_1, smollm2_q4_1, cache_dir, n_batch=2, n_draft=8),  # no room for a verify batch
        _spec(smollm2_q4_1, gemma3_270m, cache_dir),
    ]
    for spec, expected in zip(specs, (ModelFileError, BoundsError, IncompatibleModelsError), strict=True):
        with pytest.raises(expected) as here:
            load_speculator(spec)
        with pytest.raises(expected) as there:
            load_in_process(spec)
        assert type(there.value) is type(here.value) and str(there.value) == str(here.value)
    assert not _engines()


def test_a_cancelled_load_ends_the_child(smollm2_f32: Path, smollm2_q4_1: Path, cache_dir: Path) -> None:
    stages: list[str] = []

    def cancelled() -> bool:
        return any(s.startswith("loading target") for s in stages)

    t0 = time.monotonic()
    with pytest.raises(CancelledError, match="cancelled"):
        load_in_process(
            _spec(smollm2_f32, smollm2_q4_1, cache_dir, n_draft=4), lambda s, f: stages.append(s), cancelled
        )
    assert time.monotonic() - t0 < 30
    assert "ready" not in stages and not _engines()


def test_a_load_takes_over_the_engine_started_early_on_the_same_spec(
    smollm2_f32: Path, smollm2_q4_1: Path, cache_dir: Path
) -> None:
    """The launcher starts the child before the UI (``start_engine``) and the load only
    waits for it; a child started on another spec is ended and one started on the spec asked for."""
    spec = _spec(smollm2_f32, smollm2_q4_1, cache_dir, n_draft=4)
    early = start_engine(spec)
    proxy = load_in_process(spec, started=early)
    try:
        assert proxy.pid == early.process.pid
        fin = list(proxy.run(MESSAGES, GenerationSettings(max_tokens=8)))[-1]
        assert isinstance(fin, ReplyFinished) and fin.reason != "error" and fin.n_tokens > 0
    finally:
        proxy.close()
    other = start_engine(_spec(smollm2_f32, None, cache_dir))
    proxy = load_in_process(spec, started=other)
    try:
        assert proxy.pid != other.process.pid and not other.process.is_alive()
        assert proxy.drafter is not None and proxy.drafter.source == "model"
    finally:
        proxy.close()
    # close() kills a child that has not ended within 2 s; under load its exit may take longer still
    deadline = time.monotonic() + 15
    while _engines() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _engines()


def test_a_reply_in_the_child_equals_the_reply_in_process(
    smollm2_f32: Path, smollm2_q4_1: Path, cache_dir: Path
) -> None:
    """Same greedy tokens and event sequence; update answers from the child; a killed child
    ends the reply in flight with the reason, and every later call says it too."""
    spec = _spec(smollm2_f32, smollm2_q4_1, cache_dir, n_draft=4)
    gen = GenerationSettings(max_tokens=24)
    here = load_speculator(spec)
    try:
        expected = list(here.run(MESSAGES, gen))
        size = here.count_tokens(MESSAGES)
    finally:
        here.close()
    proxy = load_in_process(spec)
    try:
        assert proxy.pid != os.getpid() and proxy.n_ctx == 1024 and proxy.drafter.source == "model"
        assert proxy.draft_settings == here.draft_settings and proxy.draft_settings.startswith("the target's: ")
        assert proxy.count_tokens(MESSAGES) == size and size.n_prompt > size.n_message > 0  # the input's count
        got = list(proxy.run(MESSAGES, gen))
        assert [type(e) for e in got] == [type(e) for e in expected]
        assert isinstance(got[0], ReplyStarted) and isinstance(got[-1], ReplyFinished)
        assert got[-1].token_ids == expected[-1].token_ids and got[-1].text == expected[-1].text
        assert [st.k for st in got if isinstance(st, StepVerified)] == [
            st.k for st in expected if isinstance(st, StepVerified)
        ]
        assert proxy.n_past == got[-1].n_past
        assert proxy.update(n_draft=2).n_draft == 2 and proxy.speculation.n_draft == 2
        with pytest.raises(BoundsError) as info:
            proxy.update(n_draft=0)
        assert info.value.key == "n_draft" and proxy.speculation.n_draft == 2
        proxy.forget()
        fin = list(proxy.run(MESSAGES, gen))[-1]
        assert fin.token_ids == expected[-1].token_ids  # k=2 from empty caches: the same greedy reply

        # the app's UI handling input: the child waits after its next step; here nobody says the
        # input was answered, so it waits UI_PAUSE_MAX_S and then clears the flag itself
        proxy.forget()
        stamps: list[float] = []
        for ev in proxy.run(MESSAGES, GenerationSettings(max_tokens=120)):
            if isinstance(ev, StepVerified):
                stamps.append(time.monotonic())
                if len(stamps) == 4:
                    proxy.ui_input(True)
        gaps = [b - a for a, b in itertools.pairwise(stamps)]
        assert len(gaps) >= 7, "the reply is long enough to see the pause"
        before = sorted(gaps[:3])[1]
        assert max(gaps[3:6]) >= before + 0.15, (before, gaps[3:6])  # one step in flight, then the pause
        assert not proxy._ui_input.is_set()

        # cancelled while the consumer lags: the child says when it heard the cancel, and at
        # most the step then in flight follows; what was sent before is the consumer's backlog
        proxy.forget()
        events = []
        story = [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}]
        for ev in proxy.run(story, GenerationSettings(max_tokens=400)):
            events.append(ev)
            if sum(isinstance(e, StepVerified) for e in events) == 2 and proxy.cancel_heard is None:
                time.sleep(0.3)  # the child runs on meanwhile
                proxy.cancel_reply()
        steps = sum(isinstance(e, StepVerified) for e in events)
        assert events[-1].reason == "cancelled" and proxy.cancel_heard is not None
        rid, heard_at = proxy.cancel_heard
        assert rid == proxy._rid and 2 <= heard_at <= steps <= heard_at + 1, (steps, proxy.cancel_heard)

        # killed mid-reply
        def kill() -> None:
            time.sleep(0.3)
            os.kill(proxy.pid, signal.SIGKILL)

        threading.Thread(target=kill).start()
        proxy.forget()
        events = list(proxy.run(MESSAGES, GenerationSettings(max_tokens=2000)))
        last, steps = events[-1], [e for e in events if isinstance(e, StepVerified)]
        assert isinstance(last, ReplyFinished) and last.reason == "error"
        assert last.error == "the engine process exited (signal 9)" == proxy.lost
        # what the steps committed is kept, as an in-process error keeps it
        assert last.text == "".join(s.text for st in steps for s in st.delta) and last.n_steps == len(steps)
        assert len(last.token_ids) == sum(st.n_accepted + 1 for st in steps)
        assert list(proxy.run(MESSAGES, gen))[-1].error == proxy.lost
        with pytest.raises(SkippyError, match="signal 9"):
            proxy.update(n_draft=3)
    finally:
        proxy.close()
    assert not _engines()


def test_the_engine_process_starts_under_a_captured_stderr(tmp_path: Path) -> None:
    """Under Textual ``sys.stderr`` is a capture object whose ``fileno()`` is -1; multiprocessing's
    resource tracker, started with the first spawn, passed that on and the spawn failed with
    "bad value(s) in fds_to_keep". A fresh interpreter, so the tracker is not running yet."""
    script = f"""
import sys
from pathlib import Path
from skippy_tui.engine.errors import ModelFileError
from skippy_tui.engine.load.loader import EngineSpec
from skippy_tui.engine.process.proxy import load_in_process, start_engine
from skippy_tui.engine.settings import ModelSpec, SpeculationSettings

class Capture:  # as Textual's: no descriptor
    def write(self, text): return len(text)
    def flush(self): pass
    def fileno(self): return -1

if __name__ == "__main__":
    sys.stderr = Capture()
    spec = EngineSpec(ModelSpec(Path({str(tmp_path / "missing.gguf")!r})), None, SpeculationSettings(enabled=False),
                      Path({str(tmp_path)!r}), use_draft=False)
    try:
        load_in_process(spec)
    except ModelFileError as e:
        print("ModelFileError:", e)
"""
    path = tmp_path / "captured.py"
    path.write_text(script, "utf-8")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=120, env=env)
    assert out.stdout.startswith("ModelFileError: model file not found"), out.stdout + out.stderr


def test_the_child_waits_for_the_ui_until_it_answers_or_the_time_is_up() -> None:
    flag = threading.Event()
    child = EngineChild(conn=None, ui_input=flag)  # type: ignore[arg-type]
    t = time.monotonic()
    child.make_room()  # nothing to wait for
    assert time.monotonic() - t < 0.05
    flag.set()
    cleared: list[float] = []  # when the "UI" answered: a timer runs late on a busy CI

    def answer() -> None:
        cleared.append(time.monotonic())
        flag.clear()

    timer = threading.Timer(0.1, answer)
    timer.start()
    t = time.monotonic()
    child.make_room()
    end = time.monotonic()
    timer.join()  # a late answer must not clear the flag the next wait sets
    assert end - t >= 0.09
    if cleared and cleared[0] - t < UI_PAUSE_MAX_S - 0.05:
        assert end - cleared[0] < 0.05  # the answer ended the wait, not the time limit
    else:
        assert end - t >= UI_PAUSE_MAX_S - 0.01  # answered too late: the limit ended it
    flag.set()  # never answered: waits the longest, then clears the flag so later steps go on
    t = time.monotonic()
    child.make_room()
    assert time.monotonic() - t >= UI_PAUSE_MAX_S - 0.01 and not flag.is_set()
    EngineChild(conn=None).make_room()  # type: ignore[arg-type]  # no app flag (an in-process caller)


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_the_child_waits_while_the_terminal_holds_keys_the_ui_has_not_read() -> None:
    """The UI's input thread may wait for a core and the GIL before it can set the flag (a long
    chat's Esc stayed unread 0.1-3 s): input still in the terminal pauses the step until it is
    read, a lone key byte until the UI has answered it too (Textual passes Esc on only after
    its escape delay), at most UI_PAUSE_MAX_S. Only once the app asks; it never reads.
    Judged by when the pause ends against when the "UI" acted (timers run late on a busy CI)."""
    import select
    import tty

    main, sub = os.openpty()
    tty.setraw(sub)  # as Textual's driver sets its terminal: a key is readable at once
    flag = threading.Event()
    acted: dict[str, float] = {}

    def read() -> None:
        os.read(sub, 64)
        acted["read"] = time.monotonic()

    def answer() -> None:
        flag.set()
        time.sleep(0.02)
        acted["answered"] = time.monotonic()
        flag.clear()

    def typed(data: bytes) -> None:
        """Write to the terminal and wait until it can be read (a pty passes data on a moment later)."""
        os.write(main, data)
        assert select.select([sub], [], [], 2.0)[0]

    def pause(*ui: tuple[float, object]) -> tuple[float, float]:
        """make_room() while the "UI" acts after the given delays: (start, end)."""
        acted.clear()
        for delay, act in ui:
            threading.Timer(delay, act).start()
        t = time.monotonic()
        child.make_room()
        return t, time.monotonic()

    try:
        child = EngineChild(conn=None, ui_input=flag)  # type: ignore[arg-type]
        typed(b"\x1b")
        t, end = pause()
        assert end - t < 0.05  # not watching: the key is not its business
        os.read(sub, 16)
        child.watch_terminal(os.ttyname(sub))
        assert child.terminal is not None
        typed(b"\x1b")  # Esc: read, then answered after the escape delay
        t, end = pause((0.03, read), (0.1, answer))
        assert acted["answered"] <= end < t + UI_PAUSE_MAX_S + 0.05, (t, end, acted)
        typed(b"\x1b[<35;10;5M")  # a mouse move: read, never answered
        t, end = pause((0.03, read))
        assert acted["read"] <= end < t + UI_PAUSE_MAX_S - 0.05, (t, end, acted)
        typed(b"q")  # never read: the step waits the longest, then goes on
        t, end = pause()
        assert end - t >= UI_PAUSE_MAX_S - 0.01
        assert os.read(sub, 16) == b"q"  # the child left the key for the UI
        t, end = pause()
        assert end - t < 0.05
        EngineChild(conn=None).watch_terminal("/no/such/terminal")  # type: ignore[arg-type]
    finally:
        os.close(main)
        os.close(sub)


def test_the_child_says_which_drafters_it_holds(tiny_qwen35_mtp_echo: Path, cache_dir: Path) -> None:
    """The app offers the sources the loaded models can draft with (F3) and names the one in force:
    the stand-in carries the model drafter and the MTP heads as the child loaded them."""
    lp = LoadParams(n_ctx=512, n_batch=64, n_ubatch=64, threads=1, threads_batch=1)
    settings = SpeculationSettings(enabled=True, n_draft=4, source="ngram")
    proxy = load_in_process(EngineSpec(ModelSpec(tiny_qwen35_mtp_echo, lp), None, settings, cache_dir, True))
    try:
        assert proxy.mtp_drafter is not None and proxy.mtp_drafter.source == "mtp" and not proxy.mtp_drafter.external
        assert proxy.model_drafter is not None and proxy.model_drafter.source == "mtp"  # no draft model: the heads
        assert proxy.drafter is not None and proxy.drafter.source == "ngram"
        proxy.update(source="mtp")
        assert proxy.drafter.source == "mtp"
    finally:
        proxy.close()
