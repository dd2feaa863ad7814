"""The TOML config: where it lives, what it may hold, and how it becomes settings.

The file is optional (``skippy-tui --print-config-path`` shows where it is
looked for; ``--config PATH`` picks another). Every key has a default, listed
in ``config.example.toml``. Unknown keys and bad values are refused with the
file, the key, the value and what is allowed. CLI flags override the file.

The app adds one layer under the file: the settings saved from the app
(``saved.toml`` beside the config file, written by :mod:`skippy_tui.saved`),
read only for the app (``load_config(saved=True)``): defaults, then the saved
settings, then the config file, then flags. The user's file is never written,
so it keeps its comments, and what the user wrote there wins over what the app
saved.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import platformdirs
import tomli as _toml

from .engine.errors import BoundsError, SkippyError
from .engine.load.loader import EngineSpec
from .engine.native.model import LoadParams
from .engine.options import MODEL_OPTIONS, Option, option, schema
from .engine.sampling.params import SamplingParams
from .engine.settings import (
    FAST_LOAD,
    PROFILES,
    GenerationSettings,
    ModelSpec,
    SpeculationSettings,
    draft_load_params,
    same_file,
    validate_load_params,
)

APP = "skippy-tui"


class ConfigError(SkippyError):
    """The config file is unreadable, not TOML, or holds a bad key or value.

    ``origin``: the command-line flag the bad value came from (e.g.
    ``"--n-draft"``), empty when it came from the file.
    """

    def __init__(self, message: str, origin: str = "") -> None:
        super().__init__(message)
        self.origin = origin


class SavedSettingsError(ConfigError):
    """The settings saved from the app (``saved.toml``, at ``path``) cannot be used: the
    app's own file, so deleting it or saving again loses nothing of the user's."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


def config_path() -> Path:
    """Default config file: ``<user config dir>/skippy-tui/config.toml``."""
    return Path(platformdirs.user_config_dir(APP)) / "config.toml"


def saved_path() -> Path:
    """The settings saved from the app: ``saved.toml`` beside the default config file."""
    return config_path().parent / "saved.toml"


def cache_dir() -> Path:
    """Derived models and the GGUF header cache (``SKIPPY_TUI_CACHE_DIR`` overrides)."""
    import os

    env = os.environ.get("SKIPPY_TUI_CACHE_DIR")
    return Path(env) if env else Path(platformdirs.user_cache_dir(APP))


def data_dir() -> Path:
    """Transcripts and UI state."""
    return Path(platformdirs.user_data_dir(APP))


SCHEMA: dict[str, dict[str, Any]] = schema()
"""``{section: {key: default}}``: every key the file may hold (:data:`.engine.options.OPTIONS`)."""

_MODEL_KEYS = tuple(o.key for o in MODEL_OPTIONS)
"""The model keys of ``[target]`` and ``[draft]`` (:class:`LoadParams`'s fields)."""


_DRAFTING_SOURCES = {
    "model": "a draft model",
    "ngram+model": "a draft model",
    "mtp": "the target's MTP heads or an MTP drafter file as the draft",
}
"""[speculation] source values that draft with something loaded beside the target, and what."""


SAVED_KEYS: dict[str, tuple[str, ...]] = {
    "target": ("path",),
    "draft": ("path", "enabled"),
    "speculation": ("n_draft", "p_min", "source"),
    "sampling": tuple(SCHEMA["sampling"]),
    "generation": ("max_tokens", "system_prompt"),
    "library": ("dirs",),
}
"""What the app saves (F3's settings, F2's system prompt, F8's pair and library folders)."""


@dataclass
class Config:
    """The merged config: defaults, then (in the app) the saved settings, then the file,
    then CLI overrides.

    ``values[section][key]``; ``source`` is the file it came from (or None).
    """

    values: dict[str, dict[str, Any]] = field(default_factory=lambda: {s: dict(v) for s, v in SCHEMA.items()})
    source: Path | None = None
    present: set[str] = field(default_factory=set)
    origins: dict[str, str] = field(default_factory=dict)  # "section.key" -> the flag that set it
    file_values: dict[str, Any] = field(default_factory=dict)  # "section.key" -> as the config file sets it

    def get(self, section: str, key: str) -> Any:
        return self.values[section][key]

    def set(self, section: str, key: str, value: Any, origin: str = "") -> None:
        """Override one key, checked like a file value; ``origin`` names the CLI flag it came from.

        Raises:
            ConfigError: a value of the wrong type (naming ``origin``, else the file).
        """
        if origin:
            try:
                self.values[section][key] = _check_value(None, section, key, value)
            except ConfigError as e:
                raise ConfigError(f"{origin}: {e}", origin) from e
            self.origins[f"{section}.{key}"] = origin
        else:
            self.values[section][key] = _check_value(self.source, section, key, value)
            self.origins.pop(f"{section}.{key}", None)  # no longer the flag's value (e.g. the F8 picker's)
        self.present.add(f"{section}.{key}")

    # -- turning it into engine settings -----------------------------------------

    def engine_spec(self) -> EngineSpec:
        """Target/draft/speculation settings.

        Raises:
            ConfigError: a value is out of its bounds (names file and key); with
                several bad keys, every one of them, a line each.
        """
        try:
            return self._engine_spec()
        except ConfigError as e:
            raise self._every_problem(e) from e

    def generation(self) -> GenerationSettings:
        """Sampling, max tokens and stop strings.

        Raises:
            ConfigError: as :meth:`engine_spec`.
        """
        try:
            return self._generation()
        except ConfigError as e:
            raise self._every_problem(e) from e

    def _every_problem(self, first: ConfigError) -> ConfigError:
        """``first``, with every other key set in the file or by a flag that is out of
        bounds on its own (each checked against the defaults of the others)."""
        lines = [str(first)]
        first_key = getattr(first.__cause__, "key", None)
        for name in sorted(self.present):
            section, key = name.split(".", 1)
            alone = Config(source=self.source, present={name})
            alone.values[section][key] = self.values[section][key]
            if name in self.origins:
                alone.origins[name] = self.origins[name]
            for build in (alone._engine_spec, alone._generation):
                try:
                    build()
                except ConfigError as e:
                    if first_key is not None and getattr(e.__cause__, "key", None) == first_key:
                        continue  # the first error's key, against the others' defaults: a second verdict
                    if str(e) not in lines:
                        lines.append(str(e))
                except SkippyError:
                    pass
        if len(lines) == 1:
            return first
        return ConfigError("\n".join(lines), first.origin)

    def _engine_spec(self) -> EngineSpec:
        with self._located():
            sp = self.values["speculation"]
            if sp["profile"] not in PROFILES:
                raise BoundsError("speculation.profile", sp["profile"], "one of " + ", ".join(PROFILES))
            fast = sp["profile"] == "fast"
            t = dict(self.values["target"])
            if fast:  # flash attention and repacking on, unless the file or a flag set them
                t.update({k: v for k, v in FAST_LOAD.items() if f"target.{k}" not in self.present})
            t_load = LoadParams(**{k: _load_value(k, t[k]) for k in _MODEL_KEYS})
            validate_load_params("target", t_load)
            target = ModelSpec(Path(t["path"]).expanduser() if t["path"] else None, t_load, t["chat_template"] or None)
            d = self.values["draft"]
            overrides = {k: _load_value(k, d[k]) for k in _MODEL_KEYS if d[k] is not None}
            d_path = Path(d["path"]).expanduser() if d["path"] else None
            # the target's own file (or a request for it) drafts with the target's numeric settings
            like = bool(d["like_target"]) or same_file(target.path, d_path)
            d_load = draft_load_params(t_load, overrides, like)
            validate_load_params("draft", d_load)
            draft = None
            if d_path is not None or target.path is None:
                draft = ModelSpec(d_path, d_load)
            use_draft = bool(d["enabled"]) and (draft is not None)
            # a target with MTP heads drafts with them where no draft model is loaded (None: a file
            # that cannot be read yet may have them; the loader says what is wrong with it)
            has = _has_heads(target.path) if d["enabled"] and not use_draft and target.path is not None else False
            heads = has is not False
            lacking = has is False if sp["source"] == "mtp" else has is not True
            if (
                not use_draft
                and lacking
                and self.origins.get("speculation.source")
                and sp["source"] in _DRAFTING_SOURCES
            ):
                # asked for by flag, a model source without a model would quietly decode plainly
                why = (
                    f"{self.origins['draft.enabled']} turns it off" if "draft.enabled" in self.origins
                    else "[draft] enabled = false" if not d["enabled"]
                    else "the configured target has none: pass --draft or set [draft] path"
                )  # fmt: skip
                flag = self.origins["speculation.source"]
                if sp["source"] == "mtp" and d["enabled"]:
                    why = "its file has none llama.cpp can run; an MTP drafter file goes in --draft"
                need = _DRAFTING_SOURCES[sp["source"]]
                raise ConfigError(f"{flag} {sp['source']} needs {need} ({why}); ngram drafts without one", flag)
            # without a draft model only an n-gram source asked for by name still drafts:
            # --no-draft alone means plain decoding
            ngram_asked = "speculation.source" in self.present and sp["source"] != "model"
            speculation = SpeculationSettings(
                enabled=bool(sp["enabled"]) and (use_draft or heads or ngram_asked),
                n_draft=sp["n_draft"],
                n_min=sp["n_min"],
                p_min=float(sp["p_min"]),
                source=sp["source"],
                n_draft_max=sp["n_draft_max"],
                exact=bool(sp["exact"]) and not fast,
                n_draft_max_ngram=sp["n_draft_max_ngram"],
                profile=sp["profile"],
            )
            return EngineSpec(target, draft, speculation, cache_dir(), use_draft=use_draft, heads=bool(d["enabled"]))

    def _generation(self) -> GenerationSettings:
        with self._located():
            s = self.values["sampling"]
            g = self.values["generation"]
            sampling = SamplingParams(
                temperature=float(s["temperature"]),
                top_k=s["top_k"],
                top_p=float(s["top_p"]),
                min_p=float(s["min_p"]),
                seed=None if s["seed"] == "random" else s["seed"],
                sampler=s["sampler"],
                repeat_penalty=float(s["repeat_penalty"]),
                repeat_last_n=s["repeat_last_n"],
                presence_penalty=float(s["presence_penalty"]),
                frequency_penalty=float(s["frequency_penalty"]),
            )
            return GenerationSettings(sampling, g["max_tokens"], tuple(g["stop"]))

    def _located(self) -> _Locate:
        return _Locate(self.source, self.origins)


class _Locate:
    """Re-raise a BoundsError as a ConfigError that names the flag or the file the value came from."""

    def __init__(self, source: Path | None, origins: dict[str, str]) -> None:
        self.source = source
        self.origins = origins

    def __enter__(self) -> None:
        return None

    def __exit__(self, et: Any, e: Any, tb: Any) -> None:
        if isinstance(e, BoundsError):
            # bounds name model keys "target.n_ctx" and the others bare ("n_draft")
            origin = next((o for k, o in self.origins.items() if e.key in (k, k.split(".", 1)[1])), "")
            where = f"{origin}: " if origin else f"{self.source}: " if self.source else ""
            raise ConfigError(f"{where}{e}", origin) from e


def _has_heads(path: Path) -> bool | None:
    """Whether the target's GGUF has MTP heads llama.cpp can draft with (its cached header);
    None for a file that cannot be read (the loader reports what is wrong with it)."""
    from .engine.errors import ModelFileError
    from .engine.load.gguf_info import cached_model_info

    try:
        return cached_model_info(path, cache_dir() / "gguf-info").mtp_heads > 0
    except (ModelFileError, OSError):
        return None


def _load_value(key: str, value: Any) -> Any:
    """A config value as LoadParams holds it: ``device`` "" is None, lists are tuples."""
    if key == "device":
        return value or None
    if key == "tensor_split":
        return tuple(float(x) for x in value)
    return tuple(value) if isinstance(value, list) else value


def _check_value(source: Path | None, section: str, key: str, value: Any) -> Any:
    """``value`` if its type is the option's (an integer as a float where a number is due);
    bounds and a word's choices are the engine settings' to check (they name the bound),
    but for the app's own ``[ui]`` words.

    Raises:
        ConfigError: naming the file, the key, the value and what is allowed.
    """
    opt = option(f"{section}.{key}")
    if opt.default is None and value is None:  # a draft key left to the target
        return None
    kind = opt.kind
    if isinstance(value, int) and not isinstance(value, bool) and kind == "float":
        return float(value)
    ok = {
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, float),
        "bool": lambda v: isinstance(v, bool),
        "str": lambda v: isinstance(v, str),
        "path": lambda v: isinstance(v, str),
        "word": lambda v: isinstance(v, str) and (section != "ui" or v in opt.words),
        "int|word": lambda v: v == opt.words[0] or (isinstance(v, int) and not isinstance(v, bool)),
        "bool|auto": lambda v: isinstance(v, bool) or v == "auto",
        "list[str]": lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v),
        "list[float]": lambda v: (
            isinstance(v, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)
        ),
    }[kind](value)
    if not ok:
        where = f"{source}: " if source else ""
        raise ConfigError(f"{where}[{section}] {key} = {value!r} is not allowed: expected {_allowed(opt, value)}")
    return value


def _allowed(opt: Option, value: Any) -> str:
    """What ``opt`` takes, in words, for an error about ``value``."""
    if opt.kind == "bool|auto":
        return 'true, false or "auto"'
    if opt.kind == "int|word":
        return f'an integer or "{opt.words[0]}"'
    if opt.kind == "word" and opt.section == "ui":
        return "one of " + ", ".join(f'"{w}"' for w in opt.words)
    if opt.kind.startswith("list") and isinstance(value, list):  # a list, of the wrong items
        return "a list of numbers" if opt.kind == "list[float]" else "a list of strings"
    return {"int": "an integer", "float": "a number", "bool": "true/false", "list[str]": "a list",
            "list[float]": "a list"}.get(opt.kind, "a string")  # fmt: skip


def _read_toml(path: Path) -> dict[str, Any]:
    """``path`` parsed. Raises: ConfigError: unreadable, not UTF-8, or not TOML."""
    try:
        return _toml.loads(path.read_text("utf-8"))
    except OSError as e:
        raise ConfigError(f"cannot read config {path}: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path}: not UTF-8 text ({e.reason})") from e
    except _toml.TOMLDecodeError as e:
        raise ConfigError(f"{path}: invalid TOML: {e}") from e


def _checked(path: Path, raw: dict[str, Any], allowed: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``raw``'s values, each checked (``allowed``: the sections and keys the file may hold).

    Raises:
        ConfigError: an unknown section or key, or a value of the wrong type.
    """
    out: dict[str, dict[str, Any]] = {}
    for section, table in raw.items():
        if section not in allowed:
            raise ConfigError(f"{path}: unknown section [{section}]; known: {', '.join(allowed)}")
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: {section} must be a table ([{section}])")
        for key, value in table.items():
            if key not in allowed[section]:
                raise ConfigError(f"{path}: unknown key [{section}] {key}; allowed: {', '.join(allowed[section])}")
            out.setdefault(section, {})[key] = _check_value(path, section, key, value)
    return out


def read_saved(path: Path | None = None) -> dict[str, dict[str, Any]]:
    """The settings saved from the app (``path``, default :func:`saved_path`); {} when none.

    Raises:
        SavedSettingsError: the file is unreadable or holds a bad key or value (the
            message says how to get rid of it: the app writes it, so nothing of the
            user's is lost).
    """
    path = path or saved_path()
    if not path.is_file():
        return {}
    try:
        return _checked(path, _read_toml(path), SAVED_KEYS)
    except ConfigError as e:
        why = f"{e}\n(the settings saved from the app: delete {path.name} or save them again)"
        raise SavedSettingsError(why, path) from e


def load_config(path: Path | None = None, saved: bool = False) -> Config:
    """Read the config file (``path``, else the default location if it exists); with
    ``saved``, on top of the settings saved from the app (:func:`read_saved`).

    Raises:
        ConfigError: unreadable file, TOML syntax error, unknown section or key,
            or a value of the wrong type.
    """
    explicit = path is not None
    path = Path(path).expanduser() if path is not None else config_path()
    cfg = Config(source=path if path.is_file() else None)
    if saved:
        for section, values in read_saved().items():
            cfg.values[section].update(values)
            cfg.present.update(f"{section}.{key}" for key in values)
    if not path.is_file():
        if explicit:
            raise ConfigError(f"config file not found: {path}")
        return cfg
    for section, values in _checked(path, _read_toml(path), SCHEMA).items():
        cfg.values[section].update(values)
        cfg.file_values.update({f"{section}.{key}": value for key, value in values.items()})
    cfg.present |= set(cfg.file_values)
    return cfg
