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
    print(nice(threading.get_native_id()), engine[0], engine[1], child)

asyncio.run(main())
"""


@pytest.mark.skipif(sys.platform != "linux", reason="thread priorities are Linux-only")
def test_the_ui_threads_run_below_the_engine_threads() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60, check=True)
    ui, name, engine, child = out.stdout.split()
    assert int(ui) == 19
    assert name.startswith("skippy-engine") and int(engine) < 19 and int(child) == int(engine)
