"""Ctrl+C during a native call: stop the C code, then raise KeyboardInterrupt in Python.

Pure Python (no llama.cpp import), so it is testable without a model.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator


class _Scope:
    """The SIGINT handler a :func:`sigint_scope` installed, and the native call it guards now."""

    def __init__(self) -> None:
        self.on_interrupt: Callable[[], None] | None = None
        self.hit = False

    def handler(self, _signum: int, _frame: object) -> None:
        if self.on_interrupt is None:
            raise KeyboardInterrupt  # between native calls: Python's default behaviour
        self.hit = True
        self.on_interrupt()


_scope: _Scope | None = None  # set only on the main thread, inside sigint_scope


def _python_handles_sigint() -> bool:
    return threading.current_thread() is threading.main_thread() and (
        signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )


@contextlib.contextmanager
def sigint_scope() -> Iterator[None]:
    """Install :func:`deferred_sigint`'s handler once for many native calls (a whole reply).

    Each ``deferred_sigint`` block otherwise swaps the SIGINT handler in and out
    around its one call: two ``sigaction`` system calls per decode, 0.3 % of a
    plain step on a 2-core CPU (py-spy). Inside the scope a block only points
    the installed handler at its ``on_interrupt``; between blocks Ctrl+C raises
    KeyboardInterrupt at once, as Python's default handler does. A no-op off the
    main thread, inside another scope, or where SIGINT is not Python's default.
    """
    global _scope
    if _scope is not None or not _python_handles_sigint():
        yield
        return
    scope = _Scope()
    previous = signal.signal(signal.SIGINT, scope.handler)
    _scope = scope
    try:
        yield
    finally:
        _scope = None
        signal.signal(signal.SIGINT, previous)


@contextlib.contextmanager
def deferred_sigint(on_interrupt: Callable[[], None]) -> Iterator[None]:
    """Turn Ctrl+C during a native call into ``on_interrupt()``, then KeyboardInterrupt after it.

    Python runs the SIGINT handler inside whatever ctypes callback the C code
    calls next (abort, progress), where an exception is printed as "Exception
    ignored" and swallowed. Here the handler only records the interrupt and
    asks the native code to stop; KeyboardInterrupt is raised once it has
    returned. A no-op off the main thread or where SIGINT is not Python's
    default handler (the Textual app reads Ctrl+C as a key). Inside a
    :func:`sigint_scope` no handler is swapped.

    Raises:
        KeyboardInterrupt: Ctrl+C arrived while the block ran.
    """
    scope = _scope
    if scope is not None and scope.on_interrupt is None and threading.current_thread() is threading.main_thread():
        yield from _guarded(scope, on_interrupt)
        return
    if not _python_handles_sigint():
        yield
        return
    own = _Scope()
    previous = signal.signal(signal.SIGINT, own.handler)
    try:
        yield from _guarded(own, on_interrupt)
    finally:
        signal.signal(signal.SIGINT, previous)


def _guarded(scope: _Scope, on_interrupt: Callable[[], None]) -> Iterator[None]:
    """The body of a guarded block: ``scope``'s handler calls ``on_interrupt`` until it ends."""
    scope.hit = False
    scope.on_interrupt = on_interrupt
    try:
        yield
    except BaseException:
        if scope.hit:
            raise KeyboardInterrupt from None
        raise
    finally:
        hit, scope.on_interrupt, scope.hit = scope.hit, None, False
    if hit:
        raise KeyboardInterrupt
