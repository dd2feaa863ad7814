"""The engine in its own process: a :class:`Speculator` served over a pipe.

In one process the app's render loop and the engine thread share one GIL: every
llama.cpp call hands it back and forth, and a verify batch took markedly
longer in the app than headless. Here the speculator lives in a
child process (``multiprocessing``, *spawn*: the app has threads, so no fork)
and :class:`ProcessSpeculator` stands in for it with the surface the app uses:
``run`` yields the same immutable events, ``update`` returns the new settings or
raises the same error, and the attributes the status bar reads are a snapshot
the child sends after load, after each command and a few times a second during a
reply.

The messages are in engine/process/wire.py, the child's side in engine/process/child.py; this
module is the app's side: the stand-in and the load that starts the child.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import multiprocessing
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from ..errors import CancelledError, SkippyError
from ..events import Event, ReplyFinished, ReplyStarted, StepVerified
from ..load.loader import EngineSpec, Progress
from ..native.window import PromptSize
from ..settings import GenerationSettings, SpeculationSettings
from ..step import failed
from .child import child_main
from .wire import State, Static, exit_message, rebuild_error

POLL_S = 0.05
"""How often the parent checks a reply's cancel flag and live sampling while it waits."""

CANCEL_GRACE_S = 5.0
"""How long a cancelled reply or load may take to end before the child is killed."""

REQUEST_TIMEOUT_S = 10.0
"""How long ``update`` waits for the child's answer."""


def _never() -> bool:
    return False


def _noop(stage: str, fraction: float) -> None:
    pass


class ProcessSpeculator:
    """A :class:`Speculator` running in a child process, with the surface the app uses.

    Made by :func:`load_in_process`. ``run`` and ``forget`` are called from one
    worker thread; ``update``, ``abort`` and the attributes from any thread.
    ``target_info``, ``draft_info``, ``n_ctx``, ``no_rollback``, ``load_note``,
    ``backend``, ``draft_settings``, ``placements`` (where each model runs), ``model_drafter``
    and ``mtp_drafter`` (:class:`~.wire.DrafterView` or None) come with the load; ``n_past``,
    ``speculation``, ``drafter`` (a :class:`~.wire.DrafterView` or None), ``invariance`` and ``verdict()`` are the
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
        self._steps_read = (0, 0)  # (reply id, StepVerified events read from the pipe for it)
        # (reply id, steps of it the child had sent) when the child last heard a cancel: the
        # steps it sends after that are the engine's lag (at most the one in flight); the rest
        # of what reaches run's consumer after it cancelled is the relay's backlog
        self.cancel_heard: tuple[int, int] | None = None
        self.target_info, self.draft_info = static.target_info, static.draft_info
        self.n_ctx, self.no_rollback, self.load_note = static.n_ctx, static.no_rollback, static.load_note
        self.backend, self.draft_settings = static.backend, static.draft_settings
        self.placements = static.placements
        self.model_drafter, self.mtp_drafter = static.model_drafter, static.mtp_drafter
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
        busy, the child waits between two steps (at most :data:`~.child.UI_PAUSE_MAX_S`) so
        that a UI thread at a low CPU priority gets a core. Safe from any thread."""
        if self._ui_input is not None:
            (self._ui_input.set if busy else self._ui_input.clear)()

    def watch_terminal(self, path: str) -> None:
        """Let the child pause between steps while the terminal at ``path`` holds keys the
        app has not read yet (:meth:`~.child.EngineChild.make_room`): the app's input thread
        may wait for Python's GIL before it can say it is busy. Only for an app on a real
        terminal (a headless one never reads it)."""
        self._send("watch_terminal", path)

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
                    rid, steps = self._steps_read
                    if msg[1] != rid:
                        rid, steps = msg[1], 0
                    self._steps_read = (rid, steps + isinstance(msg[2], StepVerified))
                    self._events.put((msg[1], msg[2]))
                elif kind == "cancel_heard":
                    rid, steps = self._steps_read
                    self.cancel_heard = (msg[1], steps if rid == msg[1] else 0)
                elif kind == "state":
                    self._apply(msg[1])
                elif kind in ("updated", "counted"):
                    _, request, answer, error, state = msg
                    if state is not None:
                        self._apply(state)
                    waiting = self._requests.pop(request, None)
                    if waiting is not None:
                        waiting[1].extend((answer, error))
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
        return self._ask("update", changes)  # type: ignore[return-value]

    def _ask(self, kind: str, payload: object) -> object:
        """Send a request the child answers from its pipe reader (``update``, ``count``) and
        wait for the answer (at most :data:`REQUEST_TIMEOUT_S`).

        Raises:
            SkippyError: what the child raised (its type), or it has exited or does not answer.
        """
        if self.lost:
            raise SkippyError(self.lost)
        request = next(self._ids)
        done, box = threading.Event(), []
        self._requests[request] = (done, box)
        if not self._send(kind, request, payload) or not done.wait(REQUEST_TIMEOUT_S) or not box:
            self._requests.pop(request, None)
            raise SkippyError(self.lost or "the engine process did not answer")
        answer, error = box
        if error is not None:
            raise rebuild_error(error)
        return answer

    def count_tokens(self, messages: Sequence[dict[str, str]]) -> PromptSize:
        """``Speculator.count_tokens`` in the child, beside a reply if one runs.

        Raises:
            SkippyError: as ``Speculator.count_tokens``, or the child has exited or does not answer.
        """
        return self._ask("count", [dict(m) for m in messages])  # type: ignore[return-value]

    def forget(self) -> None:
        """Drop both KV caches in the child (a new chat); ordered before the next ``run``."""
        self._send("forget")

    def cancel_reply(self) -> None:
        """Stop the reply in flight at its next step, now: :meth:`run` forwards its ``cancel``
        only when its consumer asks for the next event, and that consumer (the app's relay)
        runs at the UI's low priority, so the child could start another step meanwhile."""
        self._send("cancel", self._rid)

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
        finished = False
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
                finished = isinstance(item[1], ReplyFinished)
                yield item[1]
                if finished:
                    return
        finally:
            if cancelled_at is None and not finished:  # left early (the consumer stopped): the child stops too
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


@dataclass
class StartedEngine:
    """An engine process started on ``spec`` (:func:`start_engine`) whose load nobody waits
    for yet: :func:`load_in_process` takes it over, :meth:`discard` ends it."""

    spec: EngineSpec
    process: Any
    conn: Connection
    ui_input: Any

    def discard(self) -> None:
        """End the child unused (its spec is not the one to load, or the app is leaving)."""
        self.conn.close()  # the child exits on EOF; make sure
        if self.process.is_alive():
            self.process.kill()
        self.process.join(2.0)


def start_engine(spec: EngineSpec) -> StartedEngine:
    """Start a child process that loads ``spec`` (``load_speculator``) and return at once;
    :func:`load_in_process` with ``started=`` waits for it.

    The app starts it before it imports and draws its UI, so the child's imports and
    the model load (~0.6 s with warm caches on 2 cores) overlap the UI's (~0.7 s).
    Start it from a thread at the engine's priority: the child inherits the
    calling thread's nice value, and its fd 2 (where its stdout goes too).

    Raises:
        OSError: the process could not be started.
    """
    ctx = multiprocessing.get_context("spawn")
    _start_resource_tracker()
    conn, child_conn = ctx.Pipe()
    ui_input = ctx.Event()
    process = ctx.Process(target=child_main, args=(child_conn, spec, ui_input), name="skippy-engine", daemon=True)
    process.start()
    child_conn.close()  # the child holds the only other end: its exit reads as EOF here
    return StartedEngine(spec, process, conn, ui_input)


def load_in_process(
    spec: EngineSpec,
    progress: Progress = _noop,
    cancelled: Callable[[], bool] = _never,
    started: StartedEngine | None = None,
) -> ProcessSpeculator:
    """Start a child process that loads ``spec`` (``load_speculator``) and serves it, or
    take over ``started`` (:func:`start_engine`) when it was started on an equal spec
    (otherwise it is discarded and a child started here).

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
    if started is not None and started.spec != spec:
        started.discard()
        started = None
    engine = started if started is not None else start_engine(spec)
    process, conn, ui_input = engine.process, engine.conn, engine.ui_input
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
                raise rebuild_error(msg[1])
            elif msg[0] == "loaded":
                loaded = ProcessSpeculator(process, conn, msg[1], msg[2], ui_input)
                if cancelled_at is not None or cancelled():  # too late for the child to stop
                    loaded.close()
                    raise CancelledError("model load cancelled")
                return loaded
    except BaseException:
        engine.discard()
        raise
