"""Small JSON memo files under the cache dir (GGUF headers, probe results)."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any


def read_entry(path: Path) -> Any | None:
    """The JSON in ``path``, or ``None`` when it is missing or unreadable (then it is rebuilt)."""
    try:
        return json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None


def write_entry(path: Path, data: Any) -> None:
    """Write ``data`` as JSON atomically (temp file + rename); failures are ignored.

    A cache entry we cannot write only costs time on the next start; a
    half-written one is never left behind.
    """
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
