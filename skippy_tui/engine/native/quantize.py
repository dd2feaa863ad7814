"""Derive another precision of a GGUF model with llama.cpp's quantize API.

``llama_model_quantize`` with ``allow_requantize`` dequantizes a quantized model
and writes it at the requested type (F32 here, which is a plain dequantization).
The output is written to a temporary file next to the destination and renamed
into place only when llama.cpp reported success, so a crash or a quit never
leaves a half-written model behind.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from pathlib import Path

from ..errors import ModelFileError
from .backend import ensure_backend, recent_log

FTYPES = {"F32": 0, "F16": 1, "Q8_0": 7, "Q4_0": 2, "Q4_1": 3, "Q4_K_M": 15, "Q5_K_M": 17, "Q6_K": 18}
_BYTES_PER_WEIGHT = {"F32": 4.0, "F16": 2.0, "Q8_0": 1.0625}


def _n_weights(path: Path) -> int:
    from gguf import GGUFReader

    return sum(int(t.n_elements) for t in GGUFReader(path, "r").tensors)


def derive_precision(
    src: Path,
    dest: Path,
    ftype: str = "F32",
    progress: Callable[[float], None] | None = None,
    threads: int = 0,
) -> Path:
    """Write ``src`` at precision ``ftype`` to ``dest`` (atomically); reuse ``dest`` if present.

    ``progress`` receives the written fraction in [0, 1] (estimated from the
    output size), from a helper thread.

    Raises:
        ModelFileError: the source is missing, or llama.cpp failed (its log is quoted).
    """
    if dest.is_file() and dest.stat().st_size > 0:
        return dest
    if not src.is_file():
        raise ModelFileError(f"cannot derive {ftype}: source model not found: {src}")
    if ftype not in FTYPES:
        raise ModelFileError(f"unknown precision {ftype!r}; known: {', '.join(FTYPES)}")
    ensure_backend()
    import llama_cpp as L

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    expected = _n_weights(src) * _BYTES_PER_WEIGHT.get(ftype, 1.0) if progress else 0.0
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.2):
            try:
                progress(min(tmp.stat().st_size / expected, 0.99))  # type: ignore[misc]
            except (OSError, ZeroDivisionError):
                pass

    watcher = threading.Thread(target=watch, daemon=True) if progress and expected else None
    if watcher:
        watcher.start()
    params = L.llama_model_quantize_default_params()
    params.ftype = FTYPES[ftype]
    params.allow_requantize = True
    params.nthread = threads if threads > 0 else (os.cpu_count() or 1)
    try:
        rc = L.llama_model_quantize(str(src).encode(), str(tmp).encode(), ctypes.byref(params))
    finally:
        done.set()
        if watcher:
            watcher.join()
    if rc != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        raise ModelFileError(f"llama.cpp could not derive {ftype} from {src.name} (code {rc}): {recent_log()}")
    os.replace(tmp, dest)
    if progress:
        progress(1.0)
    return dest
