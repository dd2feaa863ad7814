"""Settings saved from the app ("Save settings as defaults"): ``saved.toml``.

The app never writes the user's config file (its comments and layout stay as the
user wrote them). It writes its own small TOML file beside it, which
:func:`skippy_tui.config.load_config` reads under the config file: what the user
wrote in the config file wins, and the app says so when it saves a value the file
overrides. The file is replaced whole (written aside, then renamed), so a crash or
a full disk leaves the previous one, never half of one.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .config import SAVED_KEYS, Config, ConfigError, _check_value, read_saved, saved_path

HEADER = (
    "# Settings saved from skippy-tui (Ctrl+P: Save settings as defaults, or F8's Add folder).\n"
    "# The app rewrites this file; the config file beside it (config.toml) wins over it.\n"
    "# Delete it to go back to the config file and the built-in defaults.\n"
)


def toml_value(value: Any) -> str:
    """``value`` as TOML: a bool, an int, a finite float, a string or a list of strings.

    Raises:
        ConfigError: any other value (nothing the app saves is one).
    """
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)  # "0.8", "1e-05": both TOML floats
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list) and all(isinstance(x, str) for x in value):
        return "[" + ", ".join(_toml_string(x) for x in value) + "]"
    raise ConfigError(f"cannot save {value!r} as a setting")


def _toml_string(text: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's, but for DEL, which TOML wants escaped;
    a lone surrogate (no UTF-8 for it) becomes U+FFFD."""
    text = text.encode("utf-8", "replace").decode("utf-8") if not text.isascii() else text
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def to_toml(values: Mapping[str, Mapping[str, Any]]) -> str:
    """The saved file's text: its header, then one table per section (sections and keys in
    :data:`SAVED_KEYS`' order)."""
    parts = [HEADER]
    for section, keys in SAVED_KEYS.items():
        table = values.get(section, {})
        lines = [f"{key} = {toml_value(table[key])}" for key in keys if key in table]
        if lines:
            parts.append(f"\n[{section}]\n" + "\n".join(lines) + "\n")
    return "".join(parts)


def save_defaults(values: Mapping[str, Mapping[str, Any]], path: Path | None = None) -> Path:
    """Merge ``values`` into the saved settings and write the file atomically; returns its path.

    A saved file that cannot be read is replaced (it is the app's own, and ``values`` is
    what the user asked to keep now).

    Raises:
        ConfigError: a key the app does not save, a bad value, or the file cannot be written
            (the previous file, if any, is left as it was).
    """
    path = path or saved_path()
    try:
        merged = read_saved(path)
    except ConfigError:
        merged = {}
    for section, table in values.items():
        for key, value in table.items():
            if key not in SAVED_KEYS.get(section, ()):
                raise ConfigError(f"[{section}] {key} is not a setting the app saves")
            merged.setdefault(section, {})[key] = _check_value(None, section, key, value)
    _write_atomically(path, to_toml(merged))
    return path


def _write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, flush it to disk, then rename it
    over ``path`` (a rename within one folder is atomic)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise ConfigError(f"cannot save the settings in {path.parent}: {e.strerror or e}") from e
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise ConfigError(f"cannot save the settings to {path}: {e.strerror or e}") from e


def overridden(config: Config, values: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The saved keys of ``values`` that ``config``'s file sets to something else
    (``"[sampling] temperature = 0.7"``): the file wins at the next start."""
    out = []
    for section, table in values.items():
        for key, value in table.items():
            name = f"{section}.{key}"
            if name in config.file_values and config.file_values[name] != value:
                out.append(f"[{section}] {key} = {toml_value(config.file_values[name])}")
    return out
