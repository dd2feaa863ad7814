"""The engine in its own process: a :class:`Speculator` served over a pipe.

In one process the app's render loop and the engine thread share one GIL: every
llama.cpp call hands it back and forth, and on 2 cores a verify batch took
48-56 ms in the app against 34-41 ms headless. Here the speculator lives in a
child process (``multiprocessing``, *spawn*: the app has threads, so no fork)
and :class:`ProcessSpeculator` stands in for it with the surface the app uses:
``run`` yields the same immutable events, ``update`` returns the new settings or
raises the same error, and the attributes the status bar reads are a snapshot
the child sends after load, after each command and a few times a second during a
reply.

Wire format: tuples ``(kind, *payload)``, pickled by :mod:`multiprocessing`.
Parent to child: ``run``, ``sampling``, ``cancel``, ``abort``, ``update``,
``forget``, ``cancel_load``, ``close``. Child to parent: ``progress``,
``loaded``, ``load_error``, ``event``, ``state``, ``updated``. The child reads
the pipe on a thread of its own, so a cancel, an abort, an F3 update or a new
sampling reaches a reply that is running; ``run``, ``forget`` and ``close`` are
queued for its main thread, in order.

The child's stdout goes to its stderr, which it inherits from the app (there,
the log file: ``ui/launch.py``), so nothing it prints lands on the screen. It
ignores SIGINT (the app handles quitting) and exits when the pipe closes, so a
killed app leaves no orphan.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from .errors import CancelledError, SkippyError
from .events import Event, ReplyFinished, ReplyStarted, StepVerified
from .gguf_info import ModelInfo
from .invariance import Invariance
from .loader import EngineSpec, Progress
from .sampling import SamplingParams
from .settings import GenerationSettings, SpeculationSettings
from .step import failed

STATE_EVERY_S = 0.25
"""How often the child sends its state during a reply (the status bar's verdict, n_past)."""

POLL_S = 0.05
"""How often the parent checks a reply's cancel flag and live sampling while it waits."""

UI_PAUSE_MAX_S = 0.25
"""The longest the child waits between two steps for the app's UI to handle input (s)."""
UI_PAUSE_POLL_S = 0.002
"""How often the child looks whether the UI is done meanwhile (s)."""

CANCEL_GRACE_S = 5.0
"""How long a cancelled reply or load may take to end before the child is killed."""

REQUEST_TIMEOUT_S = 10.0
"""How long ``update`` waits for the child's answer."""


def _never() -> bool:
    return False


def _noop(stage: str, fraction: float) -> None:
    pass


# -- errors across the pipe ------------------------------------------------------------


def _error_payload(e: BaseException) -> tuple[type[BaseException], str, dict[str, Any]]:
    """An exception as (type, message, attributes): BoundsError's __init__ takes three
    arguments, so pickling the exception itself would fail to rebuild it."""
    attrs = {k: v for k, v in vars(e).items() if not k.startswith("_")}
    return (type(e) if isinstance(e, SkippyError) else SkippyError), str(e), attrs


def _rebuild(payload: tuple[type[BaseException], str, dict[str, Any]]) -> BaseException:
    """The exception :func:`_error_payload` described: same type, message and attributes."""
    cls, message, attrs = payload
    e = cls.__new__(cls)
    Exception.__init__(e, message)
    e.__dict__.update(attrs)
    return e


def exit_message(exitcode: int | None) -> str:
    """One line for a child that ended: ``the engine process exited (signal 9)``."""
    if exitcode is None:
        return "the engine process stopped answering"
    if exitcode < 0:
        return f"the engine process exited (signal {-exitcode})"
    return f"the engine process exited (code {exitcode})"


# -- what the child tells the parent about its speculator --------------------------------


@dataclass(frozen=True)
class DrafterView:
    """What the app reads of a drafter: ``source`` (model, ngram, ngram+model, auto)."""

    source: str


@dataclass(frozen=True)
class Static:
    """What does not change after load."""

    target_info: ModelInfo | None
    draft_info: ModelInfo | None
    n_ctx: int
    no_rollback: str
    load_note: str
    backend: str


@dataclass(frozen=True)
class State:
    """What a command or a step may change."""

    n_past: int
    speculation: SpeculationSettings
    drafter: DrafterView | None
    invariance: Invariance | None
    verdict: float | None
    remote: str  # the RPC devices in use (``RPC0@host:port``…), or ""
    lost: str  # why an RPC server the models use is lost, or ""


def _static(spec: Any) -> Static:
    from .native_devices import backend_name

    return Static(spec.target_info, spec.draft_info, spec.n_ctx, spec.no_rollback, spec.load_note, backend_name())


def _state(spec: Any) -> State:
    from .rpc import remote_label, speculator_lost

    remote, lost = remote_label(spec), speculator_lost(spec)
    drafter = DrafterView(spec.drafter.source) if spec.drafter is not None else None
    return State(spec.n_past, spec.speculation, drafter, spec.invariance, spec.verdict(), remote, lost)


# -- the child ---------------------------------------------------------------------------


class _ChildGeneration:
    """The reply's settings in the child; the pipe reader replaces ``sampling`` (F3 mid-reply),
    and the engine reads it afresh at every step."""

    def __init__(self, max_tokens: int, stop: Sequence[str], sampling: SamplingParams) -> None:
        self.max_tokens = max_tokens
        self.stop = tuple(stop)
        self.sampling = sampling


class _Child:
    """The child's side: the speculator, the pipe reader thread, and the main loop."""

    def __init__(self, conn: Connection, ui_input: Any = None) -> None:
        self.conn = conn
        self.ui_input = ui_input  # a multiprocessing Event: set while the app's UI handles input
        self.send_lock = threading.Lock()
        self.jobs: queue.Queue[tuple[Any, ...]] = queue.Queue()
        self.load_cancel = threading.Event()
        self.spec: Any = None
        self.loaded = threading.Event()
        self.reply: tuple[int, _ChildGeneration, threading.Event] | None = None

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
                    self.reply = (rid, _ChildGeneration(max_tokens, stop, sampling), threading.Event())
                    self.jobs.put(("run", self.reply, messages))
                elif kind == "sampling":
                    if self.reply is not None and self.reply[0] == msg[1]:
                        self.reply[1].sampling = msg[2]
                elif kind == "cancel":
                    if self.reply is not None and self.reply[0] == msg[1]:
                        self.reply[2].set()
                elif kind == "abort":
                    if self.reply is not None:
                        self.reply[2].set()
                    if self.spec is not None:
                        self.spec.abort()
                elif kind == "cancel_load":
                    self.load_cancel.set()
                elif kind == "update":
                    self.update(msg[1], msg[2])
                else:  # forget, close
                    self.jobs.put(msg)
        except (EOFError, OSError):  # the app is gone: so is this process
            os._exit(0)

    def update(self, request: int, changes: dict[str, Any]) -> None:
        self.loaded.wait()
        try:
            settings = self.spec.update(**changes)
        except Exception as e:  # SkippyError and anything unexpected: the caller raises it
            self.send("updated", request, None, _error_payload(e), _state(self.spec))
            return
        self.send("updated", request, settings, None, _state(self.spec))

    def serve(self, spec: EngineSpec) -> None:
        from .loader import load_speculator

        threading.Thread(target=self.read, name="skippy-pipe", daemon=True).start()
        try:
            self.spec = load_speculator(spec, lambda s, f: self.send("progress", s, f), self.load_cancel.is_set)
        except BaseException as e:
            self.send("load_error", _error_payload(e))
            return
        self.loaded.set()
        self.send("loaded", _static(self.spec), _state(self.spec))
        while True:
            job = self.jobs.get()
            if job[0] == "close":
                break
            if job[0] == "forget":
                self.spec.forget()
                self.send("state", _state(self.spec))
            elif job[0] == "run":
                self.run(*job[1:])
        self.spec.close()
        self.send("closed")

    def run(self, reply: tuple[int, _ChildGeneration, threading.Event], messages: list[dict[str, str]]) -> None:
        rid, gen, cancel = reply
        last = time.monotonic()
        try:
            for ev in self.spec.run(messages, gen, cancel):
                now = time.monotonic()
                # the state before the last event: the app reads it (n_past, lost) as the reply ends
                if isinstance(ev, ReplyFinished) or now - last >= STATE_EVERY_S:
                    last = now
                    self.send("state", _state(self.spec))
                self.send("event", rid, ev)
                if isinstance(ev, StepVerified):
                    self.make_room()
        except Exception as e:  # the engine never raises on purpose; say it rather than die
            self.send("state", _state(self.spec))
            self.send("event", rid, failed(f"{type(e).__name__}: {e}", self.spec.n_past))

    def make_room(self) -> None:
        """Between two steps, wait while the app's UI handles a key or a click (at most
        :data:`UI_PAUSE_MAX_S`). On a CPU build the engine's threads fill every core and
        the UI runs at nice 19 (ui/priority.py): without the pause a key waited 1-2 s for
        the UI thread to get a core; a step boundary is where stopping costs the least."""
        flag = self.ui_input
        if flag is None or not flag.is_set():
            return
        deadline = time.monotonic() + UI_PAUSE_MAX_S
        while flag.is_set():
            if time.monotonic() >= deadline:  # an answer that never came must not slow every step
                flag.clear()
                break
            time.sleep(UI_PAUSE_POLL_S)


def _child_main(conn: Connection, spec: EngineSpec, ui_input: Any = None) -> None:
    """The child process: load ``spec`` and serve commands until ``close`` or the pipe closes.
    ``ui_input``: the Event the app sets while its UI handles input (:meth:`_Child.make_room`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl+C is the app's to handle
    with contextlib.suppress(OSError):
        os.dup2(2, 1)  # stdout is the app's terminal: anything printed goes where stderr goes
    _Child(conn, ui_input).serve(spec)


# -- the parent --------------------------------------------------------------------------


class ProcessSpeculator:
    """A :class:`Speculator` running in a child process, with the surface the app uses.

    Made by :func:`load_in_process`. ``run`` and ``forget`` are called from one
    worker thread; ``update``, ``abort`` and the attributes from any thread.
    ``target_info``, ``draft_info``, ``n_ctx``, ``no_rollback``, ``load_note``,
    ``backend`` come with the load; ``n_past``, ``speculation``, ``drafter``
    (a :class:`DrafterView` or None), ``invariance`` and ``verdict()`` are the
    child's latest snapshot. A child that exits ends the reply in flight with
    ``reason="error"`` and :attr:`lost` says why.
    """

    separate_process = True

    def __init__(self, process: Any, conn: Connection, static: Static, state: State, ui_input: Any = None) -> None:
        self._process = process
        self._conn = conn
        self._ui_input = ui_input
        self._send_lock = threading.Lock()
        self._events: queue.Queue[tuple[int, Event] | None] = queue.Queue()
        self._requests: dict[int, tuple[threading.Event, list[Any]]] = {}
        self._ids = itertools.count(1)
        self._rid = 0
        self._closing = False
        self.exited = ""  # why the child ended, once it has
        self.target_info, self.draft_info = static.target_info, static.draft_info
        self.n_ctx, self.no_rollback, self.load_note = static.n_ctx, static.no_rollback, static.load_note
        self.backend = static.backend
        self._apply(state)
        self._reader = threading.Thread(target=self._read, name="skippy-engine-pipe", daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int | None:
        """The child's process id."""
        return self._process.pid

    @property
    def relay_threads(self) -> tuple[int, ...]:
        """Native ids of this process's threads that only pass the child's messages on
        (the pipe reader): an app may lower their CPU priority (ui/priority.py)."""
        return (self._reader.native_id,) if self._reader.native_id is not None else ()

    def ui_input(self, busy: bool) -> None:
        """Say that the app's UI is handling input (``busy``) or is done with it. While
        busy, the child waits between two steps (at most :data:`UI_PAUSE_MAX_S`) so
        that a UI thread at a low CPU priority gets a core. Safe from any thread."""
        if self._ui_input is not None:
            (self._ui_input.set if busy else self._ui_input.clear)()

    @property
    def lost(self) -> str:
        """Why this speculator can no longer answer (its process exited, an RPC server is lost), or ``""``."""
        return self.exited or self._lost_rpc

    def _apply(self, state: State) -> None:
        self.n_past, self.speculation, self.drafter = state.n_past, state.speculation, state.drafter
        self.invariance, self._verdict = state.invariance, state.verdict
        self.remote, self._lost_rpc = state.remote, state.lost

    def _send(self, *msg: Any) -> bool:
        try:
            with self._send_lock:
                self._conn.send(msg)
            return True
        except (OSError, ValueError):  # closed or broken: the reader reports the exit
            return False

    def _read(self) -> None:
        try:
            while True:
                msg = self._conn.recv()
                kind = msg[0]
                if kind == "event":
                    self._events.put((msg[1], msg[2]))
                elif kind == "state":
                    self._apply(msg[1])
                elif kind == "updated":
                    _, request, settings, error, state = msg
                    self._apply(state)
                    waiting = self._requests.pop(request, None)
                    if waiting is not None:
                        waiting[1].extend((settings, error))
                        waiting[0].set()
                elif kind == "closed":
                    break
        except (EOFError, OSError):
            pass
        self._process.join(1.0)
        if not self._closing:
            self.exited = exit_message(self._process.exitcode)
        self._events.put(None)
        for waiting in list(self._requests.values()):
            waiting[0].set()

    # -- the Speculator surface ---------------------------------------------------------

    def verdict(self) -> float | None:
        """The child's latest estimate of tokens/s over plain decoding (see ``Speculator.verdict``)."""
        return self._verdict

    def update(self, **changes: object) -> SpeculationSettings:
        """Change speculation settings in the child (validated there); from its next step.

        Raises:
            BoundsError, SkippyError: as ``Speculator.update``; SkippyError too when
                the child has exited or does not answer.
        """
        if self.lost:
            raise SkippyError(self.lost)
        request = next(self._ids)
        done, box = threading.Event(), []
        self._requests[request] = (done, box)
        if not self._send("update", request, changes) or not done.wait(REQUEST_TIMEOUT_S) or not box:
            self._requests.pop(request, None)
            raise SkippyError(self.lost or "the engine process did not answer")
        settings, error = box
        if error is not None:
            raise _rebuild(error)
        return settings

    def forget(self) -> None:
        """Drop both KV caches in the child (a new chat); ordered before the next ``run``."""
        self._send("forget")

    def abort(self) -> None:
        """Make the child's native decode in flight return early (quit mid-reply)."""
        self._send("abort")

    def run(
        self, messages: Sequence[dict[str, str]], gen: GenerationSettings, cancel: threading.Event | None = None
    ) -> Iterator[Event]:
        """The reply's events from the child, as ``Speculator.run`` yields them.

        ``gen.sampling`` is read while the reply runs and each new value is sent
        on (LiveGeneration: F3 mid-reply); ``cancel`` is forwarded when set.
        """
        if self.lost:
            yield failed(self.lost, self.n_past)
            return
        self._rid += 1
        rid = self._rid
        sampling = gen.sampling
        self._send("run", rid, [dict(m) for m in messages], gen.max_tokens, tuple(gen.stop), sampling)
        cancelled_at: float | None = None
        seen: list[Event] = []
        try:
            while True:
                try:
                    item = self._events.get(timeout=POLL_S)
                except queue.Empty:
                    item = ()
                if cancel is not None and cancel.is_set() and cancelled_at is None:
                    cancelled_at = time.monotonic()
                    self._send("cancel", rid)
                live = gen.sampling
                if live is not sampling:
                    sampling = live
                    self._send("sampling", rid, live)
                if item is None:  # the child is gone
                    self._events.put(None)  # and stays gone for any later reply
                    yield _cut_short(seen, self.lost or exit_message(None))
                    return
                if item == ():
                    if cancelled_at is not None and time.monotonic() - cancelled_at > CANCEL_GRACE_S:
                        self._kill()  # stuck in a native call: the reader reports the exit
                        cancelled_at = float("inf")
                    continue
                if item[0] != rid:  # an older reply's last events
                    continue
                seen.append(item[1])
                yield item[1]
                if isinstance(item[1], ReplyFinished):
                    return
        finally:
            if cancelled_at is None:  # left early (the consumer stopped): the child stops too
                self._send("cancel", rid)

    def close(self) -> None:
        """End the child (it frees the models first); kills it if it does not end within 2 s.

        Idempotent; safe mid-reply (the reply is aborted).
        """
        if self._closing:
            return
        self._closing = True
        self._send("abort")
        self._send("close")
        self._process.join(2.0)
        self._kill()
        with contextlib.suppress(OSError):
            self._conn.close()

    def _kill(self) -> None:
        if self._process.is_alive():
            self._process.kill()
            self._process.join(2.0)


def _cut_short(events: Sequence[Event], error: str) -> ReplyFinished:
    """The end of a reply whose engine process exited: the text and tokens its steps
    committed are kept (as an in-process error mid-reply keeps them), ``reason="error"``."""
    steps = [e for e in events if isinstance(e, StepVerified)]
    started = next((e for e in events if isinstance(e, ReplyStarted)), None)
    tokens = [t.id for st in steps for t in (*st.proposed[: st.n_accepted], st.committed) if t is not None]
    return dataclasses.replace(
        failed(error, steps[-1].n_past_after if steps else started.n_prompt if started else 0),
        token_ids=tuple(tokens),
        text="".join(span.text for st in steps for span in st.delta),
        n_tokens=len(tokens),
        n_steps=len(steps),
        seed=started.sampling.get("seed") if started is not None and started.sampling else None,
    )


_tracker_lock = threading.Lock()


def _start_resource_tracker() -> None:
    """Start multiprocessing's resource tracker (every spawn needs it) with fd 2 as its stderr.

    It passes ``sys.stderr.fileno()`` on to the tracker, and under Textual
    ``sys.stderr`` is a capture object with no usable descriptor: the spawn
    failed with "bad value(s) in fds_to_keep". In the app fd 2 is the log file.
    """
    from multiprocessing import resource_tracker

    with _tracker_lock:
        try:
            usable = sys.stderr is not None and sys.stderr.fileno() >= 0
        except (AttributeError, OSError, ValueError):
            usable = False
        if usable:
            resource_tracker.ensure_running()
            return
        captured, sys.stderr = sys.stderr, os.fdopen(2, "w", closefd=False)
        try:
            resource_tracker.ensure_running()
        finally:
            sys.stderr = captured


def load_in_process(
    spec: EngineSpec, progress: Progress = _noop, cancelled: Callable[[], bool] = _never
) -> ProcessSpeculator:
    """Start a child process that loads ``spec`` (``load_speculator``) and serves it.

    Start it from a thread at the engine's priority: the child inherits the
    calling thread's nice value. ``progress`` gets the child's load stages;
    ``cancelled`` is polled 20 times a second and forwarded, and a child that
    has not stopped 5 s later is killed (even mid-derivation of the default
    target, which llama.cpp cannot interrupt).

    Raises:
        BoundsError, ModelFileError, IncompatibleModelsError, CancelledError: as
            ``load_speculator``, same type and message; the child has exited.
        SkippyError: the child exited during the load (``exit_message``).
    """
    ctx = multiprocessing.get_context("spawn")
    _start_resource_tracker()
    conn, child_conn = ctx.Pipe()
    ui_input = ctx.Event()
    process = ctx.Process(target=_child_main, args=(child_conn, spec, ui_input), name="skippy-engine", daemon=True)
    process.start()
    child_conn.close()  # the child holds the only other end: its exit reads as EOF here
    cancelled_at: float | None = None
    try:
        while True:
            if cancelled_at is None and cancelled():
                cancelled_at = time.monotonic()
                conn.send(("cancel_load",))
            if cancelled_at is not None and time.monotonic() - cancelled_at > CANCEL_GRACE_S:
                raise CancelledError("model load cancelled")
            if not conn.poll(POLL_S):
                continue
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                process.join(1.0)
                if cancelled_at is not None:
                    raise CancelledError("model load cancelled") from None
                raise SkippyError(exit_message(process.exitcode) + " while loading the models") from None
            if msg[0] == "progress":
                progress(msg[1], msg[2])
            elif msg[0] == "load_error":
                process.join(2.0)
                raise _rebuild(msg[1])
            elif msg[0] == "loaded":
                loaded = ProcessSpeculator(process, conn, msg[1], msg[2], ui_input)
                if cancelled_at is not None or cancelled():  # too late for the child to stop
                    loaded.close()
                    raise CancelledError("model load cancelled")
                return loaded
    except BaseException:
        if process.is_alive():
            process.kill()
        process.join(2.0)
        conn.close()
        raise
