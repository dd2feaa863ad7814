"""How llama.cpp's CPU threads wait, and a note when the environment slows them.

A CPU build of llama.cpp made with OpenMP (the default where the compiler has
it, as on Linux with gcc) runs each decode in an OpenMP team and meets at an
OpenMP barrier after every operation. ``OMP_WAIT_POLICY=passive`` (or
``GOMP_SPINCOUNT=0``) makes the waiting threads sleep at each barrier instead
of spinning, and a decode pays a wake-up per operation: measured on 2 cores
(default pair, k = 4, 512 tokens, ``skippy-tui run``, 3 runs each), 38–42 tok/s
against 87–98 tok/s unset. ``active`` (spinning between decodes too) ran
72–96 against 80–98 tok/s (4 runs each). So the engine says so at load when it
finds a policy that sleeps, rather than run 2x slower in silence.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path


def openmp_loaded(maps: Path = Path("/proc/self/maps")) -> bool | None:
    """Whether GNU OpenMP (libgomp) is mapped into this process: True/False on Linux,
    None where it cannot be told (no ``/proc``)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return "libgomp" in maps.read_text(errors="replace")
    except OSError:
        return None


def thread_wait_note(environ: Mapping[str, str] = os.environ, openmp: bool | None = None) -> str:
    """A one-line note when ``environ`` makes llama.cpp's OpenMP threads sleep at every
    barrier (``OMP_WAIT_POLICY=passive``, ``GOMP_SPINCOUNT=0``), else ``""``.

    ``openmp``: whether the build runs on OpenMP (default: :func:`openmp_loaded`, so call
    it after llama.cpp is loaded); a build without it ignores these variables.
    """
    if openmp is None:
        openmp = openmp_loaded()
    if openmp is False:
        return ""
    policy = environ.get("OMP_WAIT_POLICY", "").strip().lower()
    spin = environ.get("GOMP_SPINCOUNT", "").strip()
    if policy == "passive":
        setting = "OMP_WAIT_POLICY=passive"
    elif spin == "0":
        setting = "GOMP_SPINCOUNT=0"
    else:
        return ""
    return (
        f"{setting} makes llama.cpp's threads sleep at every barrier: decoding runs about 2x slower "
        "(unset it for skippy-tui)"
    )


def lower_threads(native_ids: Iterable[int], nice: int) -> bool:
    """Give this process's threads ``native_ids`` the nice value ``nice`` (never a lower one;
    on Linux a thread has its own).

    Returns False where the OS refuses or cannot (not Linux); nothing else changes.
    """
    if sys.platform != "linux" or not hasattr(os, "setpriority"):
        return False
    try:
        for tid in native_ids:
            os.setpriority(os.PRIO_PROCESS, tid, max(nice, os.getpriority(os.PRIO_PROCESS, tid)))
    except OSError:
        return False
    return True
