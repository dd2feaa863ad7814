"""The UI yields the CPU to the engine: its threads run at the lowest priority.

On a CPU build the engine's llama.cpp threads use every core, and each decode
ends at a barrier: when the UI thread (rendering, layout) takes a core, one
llama.cpp thread waits and the others spin, so every millisecond of UI work
costs the engine about as much again. Measured on 2 cores, 512 tokens at k=4
(``tools/app_speed.py``): 0.66 × headless with equal priorities, the engine in a
thread of the app (with the engine process and ui/timeline.py: 0.97–1.0).

Linux lets an unprivileged process raise (never lower) a *thread's* nice
value, and a new thread inherits its creator's. So the engine's worker threads
are started first (at the normal priority; llama.cpp's threads are created by
them and inherit it), made the event loop's default executor — where
Textual's thread workers run — and only then are the UI's threads
(the event loop, Textual's input and output threads) lowered. The UI still gets
every idle moment, and all of the CPU between replies.

With ``[ui] engine = "process"`` (engine/process.py) the engine runs in a child
process; a child starts with the nice value of the thread that starts it, so
the load worker (one of these engine threads) starts it at the normal priority.
The threads that only relay the child's events (its pipe reader, and the reply's
relay, :func:`yield_cpu_to_engine`'s executor) run at the UI's priority.

Lowest means ``SCHED_IDLE`` where Linux has it, and nice 19 besides: a woken
engine thread preempts a ``SCHED_IDLE`` thread at once, where at nice 19 it could
wait for the UI thread's time slice to end. Measured on 2 cores, 512 tokens at
k = 4 (``tools/app_speed.py``, medians of 3): app / headless 0.915 at nice 19,
0.969–0.983 (four runs) with ``SCHED_IDLE`` for the UI's threads and the relays.
A thread cannot leave ``SCHED_IDLE`` again without privileges, so only threads
that never run the engine nor start its process are lowered. The price: under
another program's CPU-bound load the UI gets a smaller share than at nice 19
(``yield_cpu = false`` gives equal priorities).
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

ENGINE_THREADS = 4
"""Worker threads kept at normal priority (loading, generation and a spare or two)."""

UI_NICE = 19


def lower(tid: int, nice: int = UI_NICE) -> bool:
    """Give thread ``tid`` (a native id) the lowest CPU priority: nice ``nice`` and, where
    the OS has it, ``SCHED_IDLE``. False where the OS refuses (or has neither)."""
    if sys.platform != "linux" or not hasattr(os, "setpriority"):
        return False
    try:
        os.setpriority(os.PRIO_PROCESS, tid, max(nice, os.getpriority(os.PRIO_PROCESS, tid)))
    except OSError:
        return False
    if hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(tid, os.SCHED_IDLE, os.sched_param(0))
        except OSError:
            pass  # nice 19 stays
    return True


def yield_cpu_to_engine(loop: asyncio.AbstractEventLoop, nice: int = UI_NICE) -> ThreadPoolExecutor | None:
    """Start the engine's worker threads at normal priority as ``loop``'s default executor,
    then give every other thread of this process the lowest priority (:func:`lower`).

    Returns an executor of one thread at the UI's priority, for relaying a reply's events
    from an engine in another process; None where threads cannot be reprioritised (not
    Linux: nothing changes) or the OS refuses (the engine's pool is in place either way).
    """
    if sys.platform != "linux" or not hasattr(os, "setpriority"):
        return None
    pool = ThreadPoolExecutor(max_workers=ENGINE_THREADS, thread_name_prefix="skippy-engine")
    started = threading.Barrier(ENGINE_THREADS + 1)
    for _ in range(ENGINE_THREADS):  # each blocks until all have started: four threads exist
        pool.submit(started.wait, 5.0)
    try:
        started.wait(5.0)
    except threading.BrokenBarrierError:
        pool.shutdown(wait=False)
        return None
    loop.set_default_executor(pool)
    engine = {t.native_id for t in threading.enumerate() if t.name.startswith("skippy-engine")}
    for t in threading.enumerate():
        if t.native_id is not None and t.native_id not in engine and not lower(t.native_id, nice):
            return None
    # started from this (lowered) thread, the relay's thread inherits its priority
    relay = ThreadPoolExecutor(max_workers=1, thread_name_prefix="skippy-relay")
    relay.submit(lambda: None).result()
    return relay
