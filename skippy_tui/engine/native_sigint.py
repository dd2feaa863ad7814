"""Ctrl+C during a native call: stop the C code, then raise KeyboardInterrupt in Python.

Pure Python (no llama.cpp import), so it is testable without a model.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator


@contextlib.contextmanager
def deferred_sigint(on_interrupt: Callable[[], None]) -> Iterator[None]:
    """Turn Ctrl+C during a native call into ``on_interrupt()``, then KeyboardInterrupt after it.

    Python runs the SIGINT handler inside whatever ctypes callback the C code
    calls next (abort, progress), where an exception is printed as "Exception
    ignored" and swallowed. Here the handler only records the interrupt and
    asks the native code to stop; KeyboardInterrupt is raised once it has
    returned. A no-op off the main thread or where SIGINT is not Python's
    default handler (the Textual app reads Ctrl+C as a key).

    Raises:
        KeyboardInterrupt: Ctrl+C arrived while the block ran.
    """
    if threading.current_thread() is not threading.main_thread() or (
        signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):
        yield
        return
    hit: list[bool] = []

    def handler(_signum: int, _frame: object) -> None:
        hit.append(True)
        on_interrupt()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    except BaseException:
        if hit:
            raise KeyboardInterrupt from None
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
    if hit:
        raise KeyboardInterrupt
