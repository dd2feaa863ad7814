"""How SkippyApp is put together from its job mixins (no models, no running app).

Two ways a split into plain mixins can break silently: an ``@on`` handler on a
mixin is never called (Textual collects them per message-pump class), and a
mixin method named like one of Textual's own replaces it for Textual too.
"""

from __future__ import annotations

from textual.app import App
from textual.message_pump import MessagePump

from skippy_tui.ui.app import SkippyApp

MIXINS = [c for c in SkippyApp.__mro__[1:] if c.__module__.startswith("skippy_tui.")]


def test_the_app_is_made_of_one_mixin_per_job() -> None:
    assert {c.__module__.rsplit(".", 1)[1] for c in MIXINS} == {
        "generation", "context_fit", "loading", "files", "replies", "tuning", "layout", "status",
    }  # fmt: skip


def test_every_on_handler_sits_where_textual_finds_it() -> None:
    for cls in SkippyApp.__mro__:
        decorated = [n for n, v in vars(cls).items() if callable(v) and hasattr(v, "_textual_on")]
        if decorated:
            assert issubclass(cls, MessagePump), f"@on on {cls.__name__}.{decorated} is never called"
            found = {m for handlers in vars(cls)["_decorated_handlers"].values() for m, _ in handlers}
            assert {vars(cls)[n] for n in decorated} <= found


def test_no_mixin_method_replaces_one_of_textuals() -> None:
    clashes = sorted(f"{c.__name__}.{n}" for c in MIXINS for n in vars(c) if not n.startswith("__") and hasattr(App, n))
    assert clashes == []


def test_textuals_print_capture_can_flush_the_app() -> None:
    # while the app runs, Textual's stdout capture calls app._flush(stderr=...) on every flush;
    # the 20 Hz step flush was once named _flush too, and a print's flush then raised
    assert SkippyApp._flush is App._flush
