"""The UI yields the CPU to the engine (Linux): checked in a child process, so pytest's
own threads keep their priority."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CHILD = r"""
import asyncio, os, threading
from skippy_tui.ui.priority import relay_executor, yield_cpu_to_engine

def nice(tid):
    return os.getpriority(os.PRIO_PROCESS, tid)

async def main():
    loop = asyncio.get_running_loop()
    assert yield_cpu_to_engine(loop)
    me = lambda: (threading.current_thread().name, nice(threading.get_native_id()))
    engine = await loop.run_in_executor(None, me)
    # a thread the engine starts (as llama.cpp does per decode) inherits the engine's priority
    def spawn():
        out = []
        t = threading.Thread(target=lambda: out.append(nice(threading.get_native_id())))
        t.start(); t.join()
        return out[0]
    child = await loop.run_in_executor(None, spawn)
    relay = relay_executor().submit(lambda: nice(threading.get_native_id())).result()
    print(nice(threading.get_native_id()), engine[0], engine[1], child, relay)

asyncio.run(main())
"""


@pytest.mark.skipif(sys.platform != "linux", reason="thread priorities are Linux-only")
def test_the_ui_threads_run_below_the_engine_threads() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, check=True)
    ui, name, engine, child, relay = out.stdout.split()
    assert int(ui) == 19 and int(relay) == 19
    assert name.startswith("skippy-engine") and int(engine) < 19 and int(child) == int(engine)


APP = r"""
import asyncio, os, sys, threading
sys.path.insert(0, sys.argv[1])
from ui_helpers import ui_config, wait_until
from skippy_tui.ui.app import SkippyApp

def nice(tid):
    return os.getpriority(os.PRIO_PROCESS, tid)

async def main():
    cfg = ui_config(max_tokens=48, ui={"engine": "process"})
    # "default": as the launcher starts the app, with the config's yield_cpu
    yield_cpu = bool(cfg.get("ui", "yield_cpu")) if sys.argv[2] == "default" else True
    app = SkippyApp(cfg, yield_cpu=yield_cpu)
    start = nice(threading.get_native_id())
    seen = {}
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: app.speculator is not None, 240, "the models to load")
        app.prompt.load_text("Tell me a story about a dragon.")
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.generating, 10, "the reply to start")
        while app.generating:
            for t in threading.enumerate():
                if t.native_id is not None:
                    seen[t.name.split("_")[0]] = nice(t.native_id)
            seen["ui"] = nice(threading.get_native_id())  # the event loop's thread
            await pilot.pause(0.02)
        engine = nice(app.speculator.pid)
        await pilot.press("ctrl+q")
    finish = app.transcript.entries[-1].finish.reason
    print(start, seen["ui"], engine, seen.get("skippy-engine-pipe"), seen.get("skippy-relay"), finish)

asyncio.run(main())
"""


@pytest.mark.skipif(sys.platform != "linux", reason="thread priorities are Linux-only")
@pytest.mark.models  # loads the default pair (not through a fixture)
def test_an_engine_process_keeps_its_priority_and_its_relays_yield_as_the_ui_does() -> None:
    """The child decodes at the normal priority; the app's threads that only pass its events
    on (the pipe reader, the relay) run at the UI's nice 19, so they do not preempt it."""
    start, ui, engine, reader, relay, reason = _app_priorities("true")
    assert int(start) < 19
    assert int(engine) < 19 and reason in ("eos", "max_tokens")
    assert ui == reader == relay == "19"


def _app_priorities(yield_cpu: str) -> list[str]:
    here = str(Path(__file__).parent)
    out = subprocess.run([sys.executable, "-c", APP, here, yield_cpu], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()[-6:]


@pytest.mark.skipif(sys.platform != "linux", reason="thread priorities are Linux-only")
@pytest.mark.models  # the app in the child loads the default pair
def test_by_default_the_ui_keeps_the_normal_priority_under_other_programs_load() -> None:
    """Issue 57.12: at nice 19 the UI starved under other programs' load (keys and Esc took
    seconds). By default every thread of the app, the engine's included, stays where it started."""
    start, ui, engine, reader, relay, reason = _app_priorities("default")
    assert reason in ("eos", "max_tokens")
    assert ui == engine == reader == start and relay == "None"  # no relay thread: the worker passes events on


def test_the_input_thread_makes_room_for_keys_clicks_scrolls_and_pastes_not_moves() -> None:
    from textual import events

    from skippy_tui.ui.priority import room_making_driver

    class Base:  # the platform driver's part that matters: it passes each event on
        def __init__(self) -> None:
            self.passed: list[object] = []

        def process_message(self, message: object) -> None:
            self.passed.append(message)

    calls: list[int] = []
    driver = room_making_driver(Base, lambda: calls.append(len(driver.passed)))()  # type: ignore[arg-type]
    mouse = dict(widget=None, x=1, y=1, delta_x=0, delta_y=0, button=1, shift=False, meta=False, ctrl=False)
    acts = [events.Key("escape", None), events.Paste("x"), events.MouseDown(**mouse), events.MouseScrollUp(**mouse)]
    for event in [events.MouseMove(**mouse), *acts, events.Resize.from_dimensions((80, 24), None)]:
        driver.process_message(event)
    assert calls == [1, 2, 3, 4]  # each act before it is passed on; moves and resizes never
    assert len(driver.passed) == 6 and type(driver).__name__ == "RoomMakingBase"
