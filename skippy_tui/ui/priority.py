"""The UI's CPU priority beside the engine's, and the engine making room for the UI
when the user acts.

Nice values rank every thread of the machine, not only this app's. The UI used to
run at the lowest priority (nice 19) so that its rendering never took a core from
the engine's llama.cpp threads, which meet at a barrier after every operation (one
thread waiting for a core holds up the others). But other programs run at the normal
priority too, and under their load a UI at nice 19 got almost no CPU: keys waited
seconds for it, a dialog opened seconds late, Esc stopped a reply late or not at all
(``tools/esc_latency.sh`` with ``BURN`` busy loops beside the app measures it). So by
default (``[ui] yield_cpu = false``) every thread of the app keeps the normal
priority, the engine's included: a UI that answers at once under load is worth more
than the engine's speed beside a busy UI on an otherwise idle machine.

``[ui] yield_cpu = true`` brings the low priority back, for a machine that runs
nothing else. Linux lets an unprivileged process raise (never lower) a *thread's*
nice value, and a new thread inherits its creator's. So the engine's worker threads
are started first (at the normal priority; llama.cpp's threads are created by them
and inherit it), made the event loop's default executor, where Textual's thread
workers run, and only then are the UI's threads (the event loop, Textual's input and
output threads) lowered. With ``[ui] engine = "process"`` (engine/process/proxy.py) the
engine runs in a child process, which starts with the nice value of the thread that
starts it: the load worker, one of those engine threads. This process's threads that
only pass the child's events on (the pipe reader, the relay the reply's events go
through) then drop to the UI's nice value, since each of their wake-ups would
otherwise preempt a llama.cpp thread.

At either priority the engine makes room for the user: Textual's input thread, which
only reads the terminal, says when a key, a click, a scroll or a paste comes in
(:func:`room_making_driver`), and an engine process waits between two steps until the
UI has handled it and redrawn (at most a quarter of a second, engine/process/child.py), as it
does while the terminal holds input the UI has not read yet. Mouse moves do not count.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from textual import events
from textual.driver import Driver

from ..engine import threads

ENGINE_THREADS = 4
"""Worker threads kept at normal priority (loading, generation and a spare or two)."""

UI_NICE = 19

INPUT_EVENTS = (
    events.Key, events.Paste, events.MouseDown, events.MouseUp, events.MouseScrollDown, events.MouseScrollUp,
)  # fmt: skip
"""What the user does that the UI must answer now (mouse moves and hovering are not)."""


def room_making_driver(base: type[Driver], on_input: Callable[[], None]) -> type[Driver]:
    """``base`` whose input thread calls ``on_input`` before it passes on a key, a click,
    a scroll or a paste (:data:`INPUT_EVENTS`). The input thread only waits on the
    terminal, so it runs as soon as the user acts, even at nice 19."""

    class RoomMakingDriver(base):  # type: ignore[misc,valid-type]
        def process_message(self, message: events.Message) -> None:  # type: ignore[override]
            if isinstance(message, INPUT_EVENTS):
                on_input()
            super().process_message(message)

    RoomMakingDriver.__name__ = RoomMakingDriver.__qualname__ = f"RoomMaking{base.__name__}"
    return RoomMakingDriver


def terminal_path() -> str:
    """The terminal the app reads its keys from (its stdin's), else ``/dev/tty``."""
    try:
        return os.ttyname(sys.__stdin__.fileno())
    except (OSError, AttributeError, ValueError):
        return "/dev/tty"


def lower_threads(native_ids: Iterable[int], nice: int = UI_NICE) -> bool:
    """:func:`skippy_tui.engine.threads.lower_threads` at the UI's nice value by default."""
    return threads.lower_threads(native_ids, nice)


def relay_executor(nice: int = UI_NICE) -> ThreadPoolExecutor:
    """One thread, at nice value ``nice``, to pass an engine process's events on to the UI.

    The relay only waits and forwards, so it need not run at the engine's
    priority: at nice 0 each of its wake-ups (one per step) preempts a
    llama.cpp thread in the engine process mid-decode.
    """
    return ThreadPoolExecutor(
        max_workers=1, thread_name_prefix="skippy-relay", initializer=_lower_self, initargs=(nice,)
    )


def _lower_self(nice: int) -> None:
    lower_threads((threading.get_native_id(),), nice)


def yield_cpu_to_engine(loop: asyncio.AbstractEventLoop, nice: int = UI_NICE) -> bool:
    """Start the engine's worker threads at normal priority as ``loop``'s default executor,
    then give every other thread of this process the nice value ``nice``.

    Returns False where threads cannot be reprioritised (not Linux: nothing
    changes) or the OS refuses (the engine's pool is in place either way).
    """
    if sys.platform != "linux" or not hasattr(os, "setpriority"):
        return False
    pool = ThreadPoolExecutor(max_workers=ENGINE_THREADS, thread_name_prefix="skippy-engine")
    started = threading.Barrier(ENGINE_THREADS + 1)
    for _ in range(ENGINE_THREADS):  # each blocks until all have started: four threads exist
        pool.submit(started.wait, 5.0)
    try:
        started.wait(5.0)
    except threading.BrokenBarrierError:
        pool.shutdown(wait=False)
        return False
    loop.set_default_executor(pool)
    engine = {t.native_id for t in threading.enumerate() if t.name.startswith("skippy-engine")}
    others = (t.native_id for t in threading.enumerate() if t.native_id is not None and t.native_id not in engine)
    return lower_threads(others, nice)
