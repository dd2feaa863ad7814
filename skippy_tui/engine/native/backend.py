"""llama-cpp-python's binding, llama.cpp's one-time initialisation, and its log sink.

llama.cpp's own log lines are captured into a ring buffer (never printed) so
that error messages can quote them (:func:`recent_log`). Every other
``native*`` module takes the binding from here, so a broken install is one
clear :class:`SkippyError` wherever it is first noticed.
"""

from __future__ import annotations

import ctypes
import threading
from collections import deque

from ..errors import SkippyError

try:
    import llama_cpp  # re-exported: the other native modules take the binding from here
except ImportError as e:  # pragma: no cover - exercised only on broken installs
    raise SkippyError(f"llama-cpp-python is not installed or failed to load: {e}") from e

_LOG: deque[str] = deque(maxlen=64)
_init_lock = threading.Lock()
_initialised = False


@llama_cpp.llama_log_callback
def _log_sink(level: int, text: bytes, _user: ctypes.c_void_p) -> None:  # pragma: no cover - native callback
    if text:
        line = text.decode("utf-8", "replace").rstrip("\n")
        if line.strip(" ."):
            _LOG.append(line)


def ensure_backend() -> None:
    """Initialise llama.cpp once per process and route its logs into the ring buffer."""
    global _initialised
    with _init_lock:
        if _initialised:
            return
        llama_cpp.llama_log_set(_log_sink, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()
        _initialised = True


def recent_log(n: int = 6) -> str:
    """The last ``n`` meaningful llama.cpp log lines, for error messages."""
    lines = [ln for ln in _LOG if "error" in ln.lower() or "failed" in ln.lower()] or list(_LOG)
    return " | ".join(lines[-n:])


def clear_log() -> None:
    """Forget earlier log lines, so that the next error quotes only its own."""
    _LOG.clear()
