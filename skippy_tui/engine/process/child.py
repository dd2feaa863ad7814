"""The engine process's side: load a :class:`Speculator` and serve the app over a pipe.

The child reads the pipe on a thread of its own, so a cancel, an abort, an F3
update or a new sampling reaches a reply that is running; ``run``, ``forget``
and ``close`` are queued for its main thread, in order (the messages:
engine/process/wire.py; the app's side: engine/process/proxy.py).

Its stdout goes to its stderr, which it inherits from the app (there, the log
file: ``ui/launch.py``), so nothing it prints lands on the screen. It ignores
SIGINT (the app handles quitting) and exits when the pipe closes, so a killed
app leaves no orphan.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import struct
import threading
import time
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

try:  # POSIX only, as a terminal to watch is (imported once: make_room runs every step)
    import fcntl
    import termios
except ImportError:  # pragma: no cover - Windows
    fcntl = termios = None  # type: ignore[assignment]

from ..events import ReplyFinished, StepVerified
from ..load.loader import EngineSpec
from ..sampling.params import SamplingParams
from ..step import failed
from .wire import error_payload, state_of, static_of

STATE_EVERY_S = 0.25
"""How often the child sends its state during a reply (the status bar's verdict, n_past)."""

UI_PAUSE_MAX_S = 0.25
"""The longest the child waits between two steps for the app's UI to handle input (s)."""
UI_PAUSE_POLL_S = 0.002
"""How often the child looks whether the UI is done meanwhile (s)."""


class ChildGeneration:
    """The reply's settings in the child; the pipe reader replaces ``sampling`` (F3 mid-reply),
    and the engine reads it afresh at every step."""

    def __init__(self, max_tokens: int, stop: Sequence[str], sampling: SamplingParams) -> None:
        self.max_tokens = max_tokens
        self.stop = tuple(stop)
        self.sampling = sampling


class EngineChild:
    """The child's side: the speculator, the pipe reader thread, and the main loop."""

    def __init__(self, conn: Connection, ui_input: Any = None) -> None:
        self.conn = conn
        self.ui_input = ui_input  # a multiprocessing Event: set while the app's UI handles input
        self.send_lock = threading.Lock()
        self.jobs: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self.load_cancel = threading.Event()
        self.spec: Any = None
        self.loaded = threading.Event()
        self.reply: tuple[int, ChildGeneration, threading.Event] | None = None
        self.terminal: int | None = None  # the app's terminal (watch_terminal): unread keys pause steps

    def send(self, *msg: Any) -> None:
        with self.send_lock:
            self.conn.send(msg)

    def read(self) -> None:
        """The pipe reader: commands that act on a running reply act here; the rest queue."""
        try:
            while True:
                msg = self.conn.recv()
                kind = msg[0]
                if kind == "run":
                    _, rid, messages, max_tokens, stop, sampling = msg
                    self.reply = (rid, ChildGeneration(max_tokens, stop, sampling), threading.Event())
                    self.jobs.put(("run", self.reply, messages))
                elif kind == "sampling":
                    if self.reply is not None and self.reply[0] == msg[1]:
                        self.reply[1].sampling = msg[2]
                elif kind == "cancel":
                    if self.reply is not None and self.reply[0] == msg[1]:
                        self.cancel_reply()
                elif kind == "abort":
                    if self.reply is not None:
                        self.cancel_reply()
                    if self.spec is not None:
                        self.spec.abort()
                elif kind == "cancel_load":
                    self.load_cancel.set()
                elif kind == "watch_terminal":
                    self.watch_terminal(msg[1])
                elif kind == "update":
                    self.update(msg[1], msg[2])
                elif kind == "count":
                    self.count(msg[1], msg[2])
                else:  # forget, close
                    self.jobs.put(msg)
        except (EOFError, OSError):  # the app is gone: so is this process
            os._exit(0)

    def cancel_reply(self) -> None:
        """Cancel the reply in flight (the engine stops before its next step) and say so
        once: events the parent reads after ``cancel_heard`` were made after the cancel
        arrived, so it can tell the engine's lag from its own relay's."""
        if self.reply is None:
            return
        rid, _, cancel = self.reply
        if not cancel.is_set():
            cancel.set()
            self.send("cancel_heard", rid)

    def update(self, request: int, changes: dict[str, Any]) -> None:
        self.loaded.wait()
        try:
            settings = self.spec.update(**changes)
        except Exception as e:  # SkippyError and anything unexpected: the caller raises it
            self.send("updated", request, None, error_payload(e), state_of(self.spec))
            return
        self.send("updated", request, settings, None, state_of(self.spec))

    def count(self, request: int, messages: list[dict[str, str]]) -> None:
        """Answer a ``count`` from the reader thread: a reply may be running meanwhile, and
        tokenizing only reads the vocabulary."""
        self.loaded.wait()
        try:
            self.send("counted", request, self.spec.count_tokens(messages), None, None)
        except Exception as e:  # SkippyError and anything unexpected: the caller raises it
            self.send("counted", request, None, error_payload(e), None)

    def serve(self, spec: EngineSpec) -> None:
        from ..load.loader import load_speculator

        threading.Thread(target=self.read, name="skippy-pipe", daemon=True).start()
        try:
            self.spec = load_speculator(
                spec, lambda s, f: self.send("progress", s, f), self.load_cancel.is_set, huge_pages="background"
            )
        except BaseException as e:
            self.send("load_error", error_payload(e))
            return
        self.loaded.set()
        self.send("loaded", static_of(self.spec), state_of(self.spec))
        while True:
            job = self.jobs.get()
            if job[0] == "close":
                break
            if job[0] == "forget":
                self.spec.forget()
                self.send("state", state_of(self.spec))
            elif job[0] == "run":
                self.run(*job[1:])
        self.spec.close()
        self.send("closed")

    def run(self, reply: tuple[int, ChildGeneration, threading.Event], messages: list[dict[str, str]]) -> None:
        rid, gen, cancel = reply
        last = time.monotonic()
        try:
            for ev in self.spec.run(messages, gen, cancel):
                now = time.monotonic()
                # the state before the last event: the app reads it (n_past, lost) as the reply ends
                if isinstance(ev, ReplyFinished) or now - last >= STATE_EVERY_S:
                    last = now
                    self.send("state", state_of(self.spec))
                self.send("event", rid, ev)
                if isinstance(ev, StepVerified):
                    self.make_room()
        except Exception as e:  # the engine never raises on purpose; say it rather than die
            self.send("state", state_of(self.spec))
            self.send("event", rid, failed(f"{type(e).__name__}: {e}", self.spec.n_past))

    def watch_terminal(self, path: str) -> None:
        """Watch the app's terminal ``path`` (e.g. ``/dev/tty``) for keys its UI has not read
        yet (:meth:`make_room`); nothing happens where it cannot be opened."""
        with contextlib.suppress(OSError):
            self.terminal = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)

    def _unread_bytes(self) -> int:
        """Bytes the terminal holds that nobody has read (it never reads them); 0 when not watching."""
        if self.terminal is None or fcntl is None:
            return 0
        try:
            return struct.unpack("i", fcntl.ioctl(self.terminal, termios.FIONREAD, b"\0\0\0\0"))[0]
        except OSError:
            self.terminal = None
            return 0

    def make_room(self) -> None:
        """Between two steps, wait while the app's UI handles a key or a click (at most
        :data:`UI_PAUSE_MAX_S`). On a CPU build the engine's threads fill every core, and
        the UI shares them with them (and with other programs; below them all with
        ``[ui] yield_cpu``, ui/priority.py): without the pause a key waited for the UI
        thread to get a core; a step boundary is where stopping costs the least.

        The UI says it is busy from its input thread, which needs a core and Python's GIL
        first: in a long chat Esc stayed unread, or unanswered, for 0.1-3 s. So input still
        unread in the terminal (:meth:`watch_terminal`) pauses the step too, until the UI
        reads it; a lone byte (a key: Esc, which Textual passes on only after its 0.1 s
        escape delay, a letter, a Ctrl key) until the UI has answered it as well. Longer
        input (a mouse move, an arrow, a paste) only until it is read."""
        flag = self.ui_input
        unread = self._unread_bytes()
        if unread == 0 and (flag is None or not flag.is_set()):
            return
        lone = unread == 1
        answered = False
        deadline = time.monotonic() + UI_PAUSE_MAX_S
        while True:
            busy = flag is not None and flag.is_set()
            answered = answered or busy
            if not busy and not self._unread_bytes() and (answered or not lone):
                break
            if time.monotonic() >= deadline:  # an answer that never came must not slow every step
                if flag is not None:
                    flag.clear()
                break
            time.sleep(UI_PAUSE_POLL_S)


def child_main(conn: Connection, spec: EngineSpec, ui_input: Any = None) -> None:
    """The child process: load ``spec`` and serve commands until ``close`` or the pipe closes.
    ``ui_input``: the Event the app sets while its UI handles input (:meth:`EngineChild.make_room`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C is the app's to handle
    with contextlib.suppress(OSError):
        os.dup2(2, 1)  # stdout is the app's terminal: anything printed goes where stderr goes
    EngineChild(conn, ui_input).serve(spec)
