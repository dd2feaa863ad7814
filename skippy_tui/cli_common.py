"""Command-line pieces every command shares: the model flags, the config they
override, and load progress on stderr.

:mod:`skippy_tui.cli` (``run``), :mod:`skippy_tui.bench` and
:mod:`skippy_tui.ui.launch` (the app, ``replay``) all build on this module;
it imports none of them, so the three never import each other back.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from .config import Config, load_config
from .engine.settings import DRAFT_SOURCES, PROFILES

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


def _n_draft(text: str) -> int | str:
    return "auto" if text == "auto" else _int(text, " or 'auto'")


def _seed(text: str) -> int | str:
    return "random" if text == "random" else _int(text, " or 'random'")


def add_model_flags(p: argparse.ArgumentParser, sub: bool = False) -> None:
    """Flags shared by every command that loads models (they override the config).

    On a subcommand the defaults are suppressed, so ``skippy-tui --target X run``
    and ``skippy-tui run --target X`` both work.
    """
    if sub:
        p.argument_default = argparse.SUPPRESS
    g = p.add_argument_group("models")
    g.add_argument("--config", type=path_arg, metavar="PATH", help="config file")
    g.add_argument("--target", type=path_arg, metavar="PATH", help="target model GGUF")
    g.add_argument("--draft", type=path_arg, metavar="PATH", help="draft model GGUF")
    g.add_argument("--no-draft", action="store_true", help="plain decoding, no draft model")
    g.add_argument(
        "--n-ctx",
        type=_int,
        metavar="N",
        help="context window (tokens; run sizes it to the prompt + --max-tokens, up to this)",
    )
    g.add_argument("--n-gpu-layers", type=_int, metavar="N", help="layers to offload (-1 = all)")
    g.add_argument("--device", metavar="NAME", help="backend device, e.g. CUDA0")
    g.add_argument(
        "--rpc", action="append", metavar="HOST:PORT",
        help="llama.cpp rpc-server whose devices hold the layers (repeatable; the draft inherits)",
    )  # fmt: skip
    s = p.add_argument_group("speculation and sampling")
    s.add_argument("--n-draft", type=_n_draft, metavar="K", help='tokens per proposal (k), or "auto"')
    s.add_argument(
        "--draft-source",
        choices=DRAFT_SOURCES,
        help="what proposes: auto (per step, with --n-draft auto), the draft model, n-gram lookup, "
        "mtp (the target's multi-token-prediction heads, or an MTP drafter file given as --draft)",
    )
    s.add_argument(
        "--profile",
        choices=PROFILES,
        help="auto (the default: exact where the build certifies verify batches of 2 rows or more, "
        "else one batch, not bit-exact), exact (batches proven bit-identical to plain decoding, row by "
        "row if need be) or fast (flash attention and repacking on, one verify batch: faster, replies "
        "may differ from plain)",
    )
    s.add_argument("--n-min", type=_int, metavar="N", help="fewest proposed tokens worth verifying")
    s.add_argument("--p-min", type=_float, metavar="P", help="stop drafting below this draft probability")
    s.add_argument("--temperature", type=_float, metavar="T", help="0 = greedy")
    s.add_argument("--top-k", type=_int, metavar="K")
    s.add_argument("--top-p", type=_float, metavar="P")
    s.add_argument("--min-p", type=_float, metavar="P")
    s.add_argument("--seed", type=_seed, metavar="S", help='random seed, or "random" (a new one per reply)')
    s.add_argument(
        "--sampler", choices=("coupled", "rejection"),
        help="speculative sampling: coupled (= plain sampling with the same seed) or rejection",
    )  # fmt: skip
    s.add_argument("--repeat-penalty", type=_float, metavar="P", help="1.0 = off")
    s.add_argument("--repeat-last-n", type=_int, metavar="N", help="tokens the penalties look back (-1 = all)")
    s.add_argument("--presence-penalty", type=_float, metavar="P", help="0.0 = off")
    s.add_argument("--frequency-penalty", type=_float, metavar="P", help="0.0 = off")
    s.add_argument("--max-tokens", type=_int, metavar="N", help="reply length cap")
    s.add_argument("--stop", action="append", metavar="STR", help="stop string (repeatable)")
    s.add_argument("--system", metavar="TEXT", help="system prompt")


_FLAG_KEYS = {
    "target": ("target", "path"),
    "draft": ("draft", "path"),
    "n_ctx": ("target", "n_ctx"),
    "n_gpu_layers": ("target", "n_gpu_layers"),
    "device": ("target", "device"),
    "n_draft": ("speculation", "n_draft"),
    "draft_source": ("speculation", "source"),
    "profile": ("speculation", "profile"),
    "n_min": ("speculation", "n_min"),
    "p_min": ("speculation", "p_min"),
    "temperature": ("sampling", "temperature"),
    "top_k": ("sampling", "top_k"),
    "top_p": ("sampling", "top_p"),
    "min_p": ("sampling", "min_p"),
    "seed": ("sampling", "seed"),
    "sampler": ("sampling", "sampler"),
    "repeat_penalty": ("sampling", "repeat_penalty"),
    "repeat_last_n": ("sampling", "repeat_last_n"),
    "presence_penalty": ("sampling", "presence_penalty"),
    "frequency_penalty": ("sampling", "frequency_penalty"),
    "max_tokens": ("generation", "max_tokens"),
    "system": ("generation", "system_prompt"),
}


def arg_text(arg: str) -> str:
    """A command-line string as valid UTF-8: bytes that are not become U+FFFD.

    Python keeps undecodable argv bytes as lone surrogates, which no encoder
    (and no tokenizer) accepts.
    """
    return arg.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def config_from_args(args: argparse.Namespace) -> Config:
    """The config file with the command line's flags on top.

    Raises:
        ConfigError: unreadable file or a bad value (file or flag).
    """
    cfg = load_config(args.config)
    for attr, (section, key) in _FLAG_KEYS.items():
        value = getattr(args, attr, None)
        if value is not None:
            cfg.set(section, key, str(value) if isinstance(value, Path) else value, "--" + attr.replace("_", "-"))
    if getattr(args, "stop", None):
        cfg.set("generation", "stop", [arg_text(x) for x in args.stop], "--stop")
    if getattr(args, "rpc", None):
        cfg.set("target", "rpc", list(args.rpc), "--rpc")
    if getattr(args, "no_draft", False):
        cfg.set("draft", "enabled", False, "--no-draft")
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
