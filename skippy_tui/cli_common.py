"""Command-line pieces every command shares: the model flags, the config they
override, and load progress on stderr.

:mod:`skippy_tui.cli` (``run``), :mod:`skippy_tui.bench.command` and
:mod:`skippy_tui.ui.launch` (the app, ``replay``) all build on this module;
it imports none of them, so the three never import each other back.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .config import Config, load_config
from .engine.options import OPTIONS, Option

EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 1, 2, 130
"""Exit statuses: a failed generation or model problem, bad usage or config, Ctrl+C."""


def _int(text: str, also: str = "") -> int:
    """An argparse type: an integer (any sign; the bounds are the config's to check).
    ``also``: what else the flag takes, for the error (``" or 'auto'"``)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer{also}, got {text!r}") from None


def path_arg(text: str) -> Path:
    """An argparse type: a path, never empty (``Path("")`` would be the current folder,
    and an empty ``--target "$MODEL"`` a confusing "not a file: .")."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path (leave the flag out for the default)")
    return Path(text)


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _parser(opt: Option) -> Callable[[str], Any]:
    """The argparse type of a flag of ``opt``'s kind."""
    if opt.kind == "int|word":
        word = opt.words[0]
        return lambda text: word if text == word else _int(text, f" or '{word}'")
    return {"int": _int, "float": _float, "path": path_arg}.get(opt.kind, str)


FLAGGED: tuple[Option, ...] = tuple(o for o in OPTIONS if o.flag)
"""The settings a command-line flag overrides (:data:`.engine.options.OPTIONS`)."""


def _dest(opt: Option) -> str:
    return opt.flag.lstrip("-").replace("-", "_")  # type: ignore[union-attr]


def add_model_flags(p: argparse.ArgumentParser, sub: bool = False) -> None:
    """Flags shared by every command that loads models (they override the config), one per
    flagged option of :data:`.engine.options.OPTIONS`.

    On a subcommand the defaults are suppressed, so ``skippy-tui --target X run``
    and ``skippy-tui run --target X`` both work.
    """
    if sub:
        p.argument_default = argparse.SUPPRESS
    g = p.add_argument_group("models")
    g.add_argument("--config", type=path_arg, metavar="PATH", help="config file")
    s = p.add_argument_group("speculation and sampling")
    for opt in FLAGGED:
        group = g if opt.section in ("target", "draft") else s
        if opt.action == "store_false":
            group.add_argument(opt.flag, action="store_true", help=opt.help)  # type: ignore[arg-type]
        elif opt.action == "append":
            group.add_argument(opt.flag, action="append", metavar=opt.metavar, help=opt.help)  # type: ignore[arg-type]
        elif opt.kind == "word":
            group.add_argument(opt.flag, choices=opt.words, help=opt.help)  # type: ignore[arg-type]
        else:
            group.add_argument(opt.flag, type=_parser(opt), metavar=opt.metavar, help=opt.help)  # type: ignore[arg-type]


def arg_text(arg: str) -> str:
    """A command-line string as valid UTF-8: bytes that are not become U+FFFD.

    Python keeps undecodable argv bytes as lone surrogates, which no encoder
    (and no tokenizer) accepts.
    """
    return arg.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def config_from_args(args: argparse.Namespace, saved: bool = False) -> Config:
    """The config file with the command line's flags on top; with ``saved`` (the app), the
    settings saved from the app under the file (:func:`~skippy_tui.config.load_config`).

    Raises:
        ConfigError: unreadable file or a bad value (file or flag).
    """
    cfg = load_config(args.config, saved=saved)
    for opt in FLAGGED:
        value = getattr(args, _dest(opt), None)
        if value is None or value is False:  # not given (a switch's default is False)
            continue
        if opt.action == "store_false":
            value = False
        elif opt.action == "append":
            value = [arg_text(x) for x in value]
        elif isinstance(value, Path):
            value = str(value)
        cfg.set(opt.section, opt.key, value, opt.flag)  # type: ignore[arg-type]
    if getattr(args, "no_history", False):
        cfg.set("ui", "history", False, "--no-history")
    return cfg


def stderr_progress() -> Callable[[str, float], None]:
    """A load-progress callback ``(stage, fraction 0..1)`` that draws on stderr.

    On a terminal one line is redrawn in place (every 1 %); otherwise a line
    is written every 25 % so that logs stay short. Stage ``ready`` clears it.
    """
    last = {"stage": None, "pct": -10}
    tty = sys.stderr.isatty()

    def report(stage: str, fraction: float) -> None:
        pct = int(fraction * 100)
        if stage == last["stage"] and pct - last["pct"] < (1 if tty else 25) and pct < 100:
            return
        if stage == "ready":
            if tty:
                sys.stderr.write("\r\x1b[K")
            return
        last["stage"], last["pct"] = stage, pct
        if tty:
            sys.stderr.write(f"\r\x1b[K{stage} {pct:3d}%")
        else:
            sys.stderr.write(f"{stage} {pct}%\n")
        sys.stderr.flush()

    return report
