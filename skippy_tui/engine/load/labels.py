"""Short labels for models: the file's stem and its quantization, the same everywhere.

Pure string work on a path and header fields, so the engine's progress and
messages, the CLI and the app name a model alike.
"""

from __future__ import annotations

import re
from pathlib import Path

SHARD_RE = re.compile(r"^(?P<stem>.*)-(?P<idx>\d{5})-of-(?P<count>\d{5})\.gguf$")
"""A split model's file name, llama.cpp's ``gguf-split`` pattern: ``stem-0000N-of-0000M.gguf``."""


def short_name(name: str, width: int = 28) -> str:
    """``name`` cut to ``width`` characters, its last one an ellipsis when cut."""
    return name if len(name) <= width else name[: width - 1] + "…"


def model_label(path: str | Path | None, name: str, file_type: str, width: int = 40) -> str:
    """A short label that tells two models apart: the file's stem and its quantization.

    ``SmolLM2-135M-Instruct.Q4_1.gguf`` (file type Q4_1) → ``SmolLM2-135M-Instruct Q4_1``:
    the GGUF's ``general.name`` is often the same for a target and its draft (or,
    as SmolLM2's ``Smollm2 135M 8k Lc100K Mix1 Ep2``, a training run's name), the
    file names are not. A split model's ``-00001-of-00003`` is dropped. The stem
    is shortened to fit ``width`` characters; the quantization is always kept.
    Without a path, the GGUF name stands in for the stem.
    """
    stem = name
    if path:
        split = SHARD_RE.match(Path(path).name)
        stem = split["stem"] if split else Path(path).name.removesuffix(".gguf")
    if file_type:
        at = stem.lower().rfind(file_type.lower())
        if at > 0:  # drop the quantization from the stem with its separator; it is shown apart
            stem = (stem[:at].rstrip(".-_ ") + stem[at + len(file_type) :]).strip(".-_ ") or stem
    tail = f" {file_type}" if file_type else ""
    return short_name(stem, max(width - len(tail), 4)) + tail
