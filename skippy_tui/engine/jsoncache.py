"""Files written whole or not at all, and small JSON memo files under the cache dir.

One atomic writer serves transcripts, UI state, bench reports and the caches
(GGUF headers, probe results); :func:`file_key` is the one identity of a model
file that cache entries are keyed by.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from pathlib import Path
from typing import Any


def _write_aside(path: Path, text: str) -> Path:
    """``text`` (UTF-8) written and synced to a new temp file beside ``path``; its path.

    Raises:
        OSError: the folder is missing or not writable (no temp file is left).
    """
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    # not mkstemp: its 0600 would stick; 0666 minus the umask is what a plain open() gives
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return tmp


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` so a reader sees the old file or the new, never half.

    Raises:
        OSError: the folder is missing or not writable (no temp file is left).
    """
    path = Path(path)
    tmp = _write_aside(path, text)
    try:
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def exclusive_write_text(path: Path, text: str) -> bool:
    """Write ``text`` (UTF-8) to ``path`` whole, only if nothing is there yet: False, writing
    nothing, when the name is taken (also by another process at the same moment).

    The file is written aside and hard-linked into place, which fails when the name exists:
    a reader never sees it half-written. Where the file system has no hard links, the name
    is claimed empty first (``O_EXCL``) and the text renamed over it.

    Raises:
        OSError: the folder is missing or not writable (no temp file is left).
    """
    path = Path(path)
    tmp = _write_aside(path, text)
    try:
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError:  # no hard links here: claim the name, then fill it
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            except FileExistsError:
                return False
            os.replace(tmp, path)
        return True
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def remove_stale_temps(folder: Path) -> int:
    """Delete the temp files :func:`atomic_write_text` left in ``folder`` when its process
    died mid-write (a kill while saving); a live process's are kept. Returns how many went."""
    removed = 0
    try:
        candidates = list(Path(folder).glob(".*.tmp"))
    except OSError:
        return 0
    for tmp in candidates:
        parts = tmp.name.rsplit(".", 3)  # ".name", pid, hex, "tmp"
        if len(parts) != 4 or not parts[1].isdigit():
            continue
        pid = int(parts[1])
        if pid == os.getpid() or _alive(pid):
            continue
        with contextlib.suppress(OSError):
            tmp.unlink()
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, but not ours to signal
        return True
    return True


def file_key(path: Path, *extra: object) -> str:
    """A cache key for ``path`` as it is now (resolved path, size, mtime) plus ``extra``: 32 hex chars."""
    st = path.stat()
    parts = [str(path.resolve()), str(st.st_size), str(st.st_mtime_ns), *map(str, extra)]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:32]


def read_entry(path: Path) -> Any | None:
    """The JSON in ``path``, or ``None`` when it is missing or unreadable (then it is rebuilt)."""
    try:
        return json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None


def write_entry(path: Path, data: Any) -> None:
    """Write ``data`` as JSON atomically; failures are ignored.

    A cache entry we cannot write only costs time on the next start; a
    half-written one is never left behind.
    """
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(data))
