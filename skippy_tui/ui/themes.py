"""Theme files and the small persisted UI state (chosen theme, input history).

A theme file is TOML whose keys are :class:`textual.theme.Theme` fields (see
``themes/skippy-dark.toml``). The shipped themes live in the package, in
``skippy_tui/themes/`` (installed as package data, so they load from any
install, editable or not); the repository's top-level ``themes/`` is a link to
that folder. Users add ``*.toml`` files in ``<user config dir>/themes/``; a
broken one is reported once and skipped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from importlib import resources
from pathlib import Path
from typing import Any

import tomli
from textual.color import Color, ColorParseError
from textual.theme import Theme

from ..config import config_path, data_dir
from ..transcript import atomic_write_text

_COLOR_KEYS = ("primary", "secondary", "warning", "error", "success", "accent")
_COLOR_KEYS += ("foreground", "background", "surface", "panel", "boost")
_ALLOWED = {f.name for f in fields(Theme)}


class ThemeFileError(Exception):
    """One theme file could not be used; ``str`` names the file and why."""


def builtin_theme_dir() -> Path:
    return Path(str(resources.files("skippy_tui") / "themes"))


def user_theme_dir() -> Path:
    return config_path().parent / "themes"


def load_theme_file(path: Path) -> Theme:
    """Build a Theme from one TOML file.

    Raises:
        ThemeFileError: unreadable, not TOML, unknown key, bad colour or no name.
    """
    try:
        raw = tomli.loads(Path(path).read_text("utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise ThemeFileError(f"{path}: cannot read ({e})") from e
    except tomli.TOMLDecodeError as e:
        raise ThemeFileError(f"{path}: invalid TOML: {e}") from e
    unknown = sorted(set(raw) - _ALLOWED)
    if unknown:
        raise ThemeFileError(f"{path}: unknown key {unknown[0]!r}; allowed: {', '.join(sorted(_ALLOWED))}")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise ThemeFileError(f'{path}: needs name = "..."')
    if "primary" not in raw:
        raise ThemeFileError(f'{path}: needs primary = "#rrggbb"')
    for key in _COLOR_KEYS:
        if key in raw:
            try:
                Color.parse(raw[key])
            except (ColorParseError, TypeError, ValueError):
                raise ThemeFileError(f"{path}: {key} = {raw[key]!r} is not a colour") from None
    variables = raw.get("variables", {})
    if not isinstance(variables, dict) or not all(isinstance(v, str) for v in variables.values()):
        raise ThemeFileError(f"{path}: [variables] must map names to strings")
    if not isinstance(raw.get("dark", True), bool):
        raise ThemeFileError(f"{path}: dark must be true or false")
    try:
        return Theme(**raw)
    except (TypeError, ValueError) as e:
        raise ThemeFileError(f"{path}: {e}") from e


def load_themes(extra_dirs: list[Path] | None = None) -> tuple[list[Theme], list[str]]:
    """The shipped themes, then the user's. Returns (themes, one error line per broken file)."""
    themes: list[Theme] = []
    errors: list[str] = []
    dirs = [builtin_theme_dir(), user_theme_dir(), *(extra_dirs or [])]
    for folder in dirs:
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.toml")):
            try:
                themes.append(load_theme_file(path))
            except ThemeFileError as e:
                errors.append(str(e))
    return themes, errors


# -- persisted UI state -----------------------------------------------------------------

HISTORY_MAX = 200


@dataclass
class UiState:
    """What the app remembers between runs (``<user data dir>/state.json``).

    ``theme`` is the theme last chosen in the app, and ``config_theme`` the
    config's ``[ui] theme`` at that moment: if the config names another theme
    since, the config wins (the user edited it on purpose).
    """

    theme: str = ""
    config_theme: str = ""
    history: list[str] = field(default_factory=list)

    @staticmethod
    def path() -> Path:
        return data_dir() / "state.json"

    @classmethod
    def load(cls) -> UiState:
        try:
            raw: Any = json.loads(cls.path().read_text("utf-8"))
        except (OSError, ValueError):
            return cls()
        if not isinstance(raw, dict):
            return cls()
        hist = raw.get("history", [])
        return cls(
            theme=str(raw.get("theme", "")),
            config_theme=str(raw.get("config_theme", "")),
            history=[h for h in hist if isinstance(h, str)][-HISTORY_MAX:] if isinstance(hist, list) else [],
        )

    def save(self) -> None:
        """Best effort: a read-only data dir only loses the state."""
        try:
            self.path().parent.mkdir(parents=True, exist_ok=True)
            data = {"theme": self.theme, "config_theme": self.config_theme, "history": self.history[-HISTORY_MAX:]}
            atomic_write_text(self.path(), json.dumps(data, ensure_ascii=False, indent=1))
        except OSError:
            pass

    def theme_for(self, config_theme: str) -> str:
        if self.theme and self.config_theme == config_theme:
            return self.theme
        return config_theme
