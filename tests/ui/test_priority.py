"""The UI yields the CPU to the engine (Linux): checked in a child process, so pytest's
own threads keep their priority."""

from __future__ import annotations

import subprocess
import sys

import pytest

CHILD = r"""
import asyncio, os, threading
from skippy_tui.ui.priority import yield_cpu_to_engine

def nice(tid):
    return os.getpriority(os.PRIO_PROCESS, tid)

def idle(tid):
    return int(os.sched_getscheduler(tid) == os.SCHED_IDLE)

async def main():
    loop = asyncio.get_running_loop()
    relay = yield_cpu_to_engine(loop)
    assert relay is not None
    me = lambda: (threading.current_thread().name, nice(threading.get_native_id()), idle(threading.get_native_id()))
    engine = await loop.run_in_executor(None, me)
    relayed = relay.submit(me).result()
    # a thread the engine starts (as llama.cpp does per decode) inherits the engine's priority
    def spawn():
        out = []
        t = threading.Thread(target=lambda: out.append(nice(threading.get_native_id())))
        t.start(); t.join()
        return out[0]
    child = await loop.run_in_executor(None, spawn)
    ui = threading.get_native_id()
    print(nice(ui), idle(ui), *engine, child, *relayed)

asyncio.run(main())
"""


@pytest.mark.skipif(sys.platform != "linux", reason="thread priorities are Linux-only")
def test_the_ui_threads_run_below_the_engine_threads() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, check=True)
    ui, ui_idle, name, engine, engine_idle, child, relay, relay_nice, relay_idle = out.stdout.split()
    assert int(ui) == 19 and ui_idle == "1"  # SCHED_IDLE: a woken engine thread preempts the UI at once
    assert name.startswith("skippy-engine") and int(engine) < 19 and engine_idle == "0" and int(child) == int(engine)
    # the thread that relays an engine process's events runs at the UI's priority
    assert relay.startswith("skippy-relay") and int(relay_nice) == 19 and relay_idle == "1"
