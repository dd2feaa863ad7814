"""Ctrl+C around native calls (pure Python: a real SIGINT to this process, no model)."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator

import pytest

from skippy_tui.engine.native import sigint as native_sigint
from skippy_tui.engine.native.sigint import deferred_sigint, sigint_scope


@pytest.fixture(autouse=True)
def python_handles_sigint() -> Iterator[None]:
    """Python's default SIGINT handler, as in a terminal: a job that a non-interactive shell
    started in the background (a CI script's ``cmd &``) inherits SIGINT ignored."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def ctrl_c() -> None:
    os.kill(os.getpid(), signal.SIGINT)


def test_a_block_defers_ctrl_c_until_the_native_call_returns() -> None:
    stopped: list[bool] = []
    after: list[str] = []
    with pytest.raises(KeyboardInterrupt), deferred_sigint(lambda: stopped.append(True)):
        ctrl_c()
        after.append("the call ran on")  # the handler did not raise inside the native call
    assert stopped == [True] and after == ["the call ran on"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_inside_a_scope_blocks_swap_no_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    real = signal.signal

    def counting(sig: int, handler: object) -> object:
        calls.append(handler)
        return real(sig, handler)  # type: ignore[arg-type]

    monkeypatch.setattr(signal, "signal", counting)
    with sigint_scope():
        for _ in range(100):
            with deferred_sigint(lambda: None):
                pass
    assert len(calls) == 2  # installed once, restored once
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with deferred_sigint(lambda: None):
        pass
    assert len(calls) == 4  # outside a scope: a swap per block, as before


def test_a_scope_defers_inside_blocks_and_raises_between_them() -> None:
    stopped: list[int] = []
    with sigint_scope():
        with pytest.raises(KeyboardInterrupt), deferred_sigint(lambda: stopped.append(1)):
            ctrl_c()
            stopped.append(0)
        assert stopped == [1, 0]
        with deferred_sigint(lambda: stopped.append(2)):  # the earlier interrupt is not carried over
            pass
        with pytest.raises(KeyboardInterrupt):
            ctrl_c()  # between native calls: at once, as Python's default handler
        assert stopped == [1, 0]
        with sigint_scope():  # a nested scope changes nothing
            assert native_sigint._scope is not None
    assert native_sigint._scope is None
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_exception_in_a_block_after_ctrl_c_becomes_keyboard_interrupt() -> None:
    with sigint_scope(), pytest.raises(KeyboardInterrupt), deferred_sigint(lambda: None):
        ctrl_c()
        raise RuntimeError("decode aborted")


def test_off_the_main_thread_and_under_another_handler_nothing_is_installed() -> None:
    seen: list[object] = []

    def worker() -> None:
        with sigint_scope(), deferred_sigint(lambda: None):
            seen.append(native_sigint._scope)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert seen == [None]
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # e.g. the engine child: Ctrl+C is the app's
    try:
        with sigint_scope():
            assert native_sigint._scope is None and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
