"""Command line: ``skippy-tui`` (the app), ``skippy-tui run PROMPT`` (headless).

Errors are one line on stderr and a non-zero exit, never a traceback:
exit 1 for a failed generation or model problem, 2 for bad usage or config,
130 when interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

from . import __version__
from .bench.command import add_bench_parser
from .bench.core import messages_for
from .cli_common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    add_model_flags,
    arg_text,
    config_from_args,
    path_arg,
    stderr_progress,
)
from .config import ConfigError, cache_dir, config_path, data_dir, saved_path
from .engine.errors import BoundsError, SkippyError
from .engine.native.sigint import sigint_scope
from .transcript import count


def trace_line(ev: Any) -> str:
    """One ``--trace`` line for a :class:`StepVerified` event."""
    marks = []
    for i, t in enumerate(ev.proposed):
        mark = "✓" if i < ev.n_accepted else "✗"
        marks.append(f"{t.text!r}{mark}")
    proposal = "[" + " ".join(marks) + "]" if marks else "[]"
    commit = f"+{ev.commit_kind} {ev.committed.text!r}" if ev.committed else "(reply ended)"
    if ev.p_target is not None and ev.n_accepted < len(ev.proposed):
        # why the first rejected token lost: the target's and the draft's probability of it
        q = ev.proposed[ev.n_accepted].prob
        commit += f" (p {ev.p_target:.2f}" + (f" q {q:.2f})" if q is not None else ")")
    if ev.sampling is not None:
        commit += f" [sampling now {ev.sampling['sampler']} T={ev.sampling['temperature']:g}]"
    if ev.rollback is not None:  # how the target dropped the rejected rows, and what it cost
        commit += f" target {ev.rollback.label()} {ev.rollback.ms:.1f}ms"
    return (
        f"step {ev.index:4d}  {ev.draft_source or 'plain':<6} {ev.sync.label():<16} k={ev.k} {proposal} {commit}  "
        f"n_past {ev.n_past_before}->{ev.n_past_after}  "
        f"sync {ev.sync_ms:.1f}ms draft {ev.draft_ms:.1f}ms verify {ev.verify_ms:.1f}ms"
        + (f"  ({ev.k_reason})" if ev.k_reason and ev.k_reason != "fixed" else "")
    )


def shares_terminal(out: Any, err: Any) -> bool:
    """Whether ``out`` and ``err`` write to one terminal, where their lines interleave
    on the screen (a file or pipe keeps each stream apart)."""
    try:
        if not (out.isatty() and err.isatty()):
            return False
        a, b = os.fstat(out.fileno()), os.fstat(err.fileno())
    except (AttributeError, OSError, ValueError):  # a stream without a descriptor (replaced, closed)
        return False
    return (a.st_dev, a.st_ino, a.st_rdev) == (b.st_dev, b.st_ino, b.st_rdev)


class TraceOut:
    """``--trace`` lines on stderr, each on a line of its own.

    The reply streams to stdout without line ends; where stderr shares stdout's
    terminal a trace line written mid-line was glued to the reply text
    (``Instep 0 plain``), so it starts with a line break whenever the reply's
    line is open."""

    def __init__(self, out: Any, err: Any) -> None:
        self.err = err
        self.shared = shares_terminal(out, err)
        self.line_open = False  # stdout's last text did not end its line

    def reply_text(self, text: str) -> None:
        """Note text written to stdout (call after each write)."""
        if text:
            self.line_open = not text.endswith("\n")

    def line(self, text: str) -> None:
        if self.shared and self.line_open:
            text = "\n" + text
            self.line_open = False  # the trace line ends with one: the reply goes on below it
        self.err.write(text + "\n")


def verify_line(speculator: Any, trace: bool) -> str:
    """How verification relates to plain decoding (``verify: …``), or ``""``: always with
    ``--trace``; without it where the user must know (a build that certifies no verify
    batch: ``auto`` verifies in one batch, not bit-exact; ``exact`` goes row by row)."""
    from .engine.policy.exactness import plan_of

    plan = plan_of(speculator) if speculator.speculation.enabled else None
    if plan is None:
        return ""
    inv = speculator.invariance
    uncertified = plan.checked and (not plan.exact or (inv is not None and bool(inv.note)))
    return f"verify: {plan.label(inv)}" if trace or uncertified else ""


def cmd_run(args: argparse.Namespace) -> int:
    from .engine.chat import ChatTemplate, prompt_tokens
    from .engine.load.loader import load_speculator
    from .engine.native.model import Model

    prompt = sys.stdin.buffer.read().decode("utf-8", "replace") if args.prompt == "-" else arg_text(args.prompt)
    if not prompt.strip():
        sys.stderr.write("skippy-tui: error: the prompt is empty\n")
        return EXIT_USAGE
    cfg = config_from_args(args)
    spec = cfg.engine_spec()
    gen = cfg.generation()
    system = cfg.get("generation", "system_prompt")
    messages = messages_for(prompt, arg_text(system) if system else "")

    tokens: list[int] = []

    def window(target: Model, template: ChatTemplate) -> int:
        # one reply: the window need hold only its prompt and max_tokens (n_ctx stays the cap);
        # the prompt is rendered and tokenized here once, and generated from below
        tokens.extend(prompt_tokens(target, template, messages))
        return len(tokens) + gen.max_tokens

    speculator = load_speculator(spec, stderr_progress(), window=window)
    n_ctx = speculator.n_ctx
    if speculator.load_note:
        sys.stderr.write(f"note: {speculator.load_note}\n")
    if speculator.no_rollback:
        sys.stderr.write(f"note: {speculator.no_rollback}\n")
    if line := verify_line(speculator, args.trace):
        sys.stderr.write(line + "\n")
    cancel = threading.Event()
    finish = None
    out = sys.stdout
    trace = TraceOut(out, sys.stderr)
    try:
        with sigint_scope():  # one SIGINT handler for the reply, not two sigactions per decode
            for ev in speculator.generate(tokens, gen, cancel):
                if args.json:
                    out.write(json.dumps(ev.to_dict(), ensure_ascii=False) + "\n")
                    out.flush()
                elif ev.type == "step" and ev.text:
                    out.write(ev.text)
                    out.flush()
                    trace.reply_text(ev.text)
                if args.trace and ev.type == "step":
                    trace.line(trace_line(ev))
                if ev.type == "finish":
                    finish = ev
    except KeyboardInterrupt:
        cancel.set()
        out.write("\n")
        return EXIT_INTERRUPTED
    finally:
        speculator.close()
    if finish is None:
        return EXIT_FAILED
    if not args.json:
        out.write(finish.tail + "\n")
    if args.trace or args.stats:
        sys.stderr.write(
            f"[{finish.reason}] {count(finish.n_tokens, 'token')} in {count(finish.n_steps, 'step')}, "
            f"{finish.tokens_per_second:.1f} tok/s, acceptance {finish.acceptance_rate:.1%}, "
            f"mean accepted length {finish.mean_accepted_length:.2f}"
            + (f", seed {finish.seed}" if not gen.sampling.greedy else "")
            + "\n"
        )
    if finish.reason == "error":
        sys.stderr.write(f"skippy-tui: error: {finish.error}\n")
        return EXIT_FAILED
    if finish.reason == "context_full":
        # a reply cut short is still a reply; a prompt that never fit is an error
        why = finish.error or f"the context window ({n_ctx} tokens) is full"
        sys.stderr.write(f"skippy-tui: {'error: ' if finish.n_tokens == 0 else 'stopped: '}{why}\n")
        return EXIT_FAILED if finish.n_tokens == 0 else 0
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from .ui.launch import run_replay

    return run_replay(args)


NO_HISTORY_HELP = "keep no chat history this time (nothing is written to the history folder)"


def files_epilog() -> str:
    """Where skippy-tui keeps its files on this machine (``--help``'s last lines)."""
    return (
        "files:\n"
        f"  config file      {config_path()}  (--config PATH reads another)\n"
        f'  saved defaults   {saved_path()}  (the app\'s "Save settings as defaults"; the config file wins)\n'
        f"  user data dir    {data_dir()}  (history/: every chat; transcripts/: Ctrl+S)\n"
        f"  cache            {cache_dir()}  (the derived F32 target, GGUF header caches)"
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="skippy-tui",
        description=(
            "Chat with a local LLM through speculative decoding, and watch the draft at work.\n\n"
            "With no COMMAND, skippy-tui opens the app (the chat) on the configured models,\n"
            "or on the built-in default pair when none are configured."
        ),
        epilog=(
            "keys: in the app, F1 lists every key and explains the panel; Ctrl+P (the\n"
            "command palette) lists every action with its key.\n\n" + files_epilog()
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,  # keep the lines above as written
    )
    p.add_argument("--version", action="version", version=f"skippy-tui {__version__}")
    p.add_argument("--print-config-path", action="store_true", help="print where the config file is read from")
    add_model_flags(p)
    p.add_argument("--no-history", action="store_true", help=NO_HISTORY_HELP)
    sub = p.add_subparsers(dest="command", metavar="[COMMAND]", title="commands (none: open the app)")
    r = sub.add_parser("run", help="generate one reply headless, streamed to stdout")
    r.add_argument("prompt", help="the user message ('-' reads stdin)")
    r.add_argument("--trace", action="store_true", default=False, help="one line per speculation step on stderr")
    r.add_argument("--json", action="store_true", default=False, help="every event as one JSON line on stdout")
    r.add_argument("--stats", action="store_true", default=False, help="print totals on stderr at the end")
    add_model_flags(r, sub=True)
    r.set_defaults(func=cmd_run)
    add_bench_parser(sub)
    from .bench.drafts import add_drafts_parser
    from .library import add_models_parser

    add_models_parser(sub)
    add_drafts_parser(sub)
    rp = sub.add_parser("replay", help="open the app on a saved transcript and its recorded steps, no models")
    rp.add_argument("file", type=path_arg, metavar="FILE.json", help="a transcript saved by the app")
    rp.add_argument(
        "--continue", dest="continue_", action="store_true", default=False,
        help="also load the configured models, to continue the conversation",
    )  # fmt: skip
    rp.add_argument("--no-history", action="store_true", default=argparse.SUPPRESS, help=NO_HISTORY_HELP)
    add_model_flags(rp, sub=True)
    rp.set_defaults(func=cmd_replay)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.print_config_path:
        print(config_path())
        return 0
    func = getattr(args, "func", None)
    try:
        if func is None:
            from .ui.launch import run_app

            return run_app(args)
        return func(args)
    except ConfigError as e:
        sys.stderr.write(f"skippy-tui: {'error' if e.origin else 'config error'}: {e}\n")
        return EXIT_USAGE
    except BoundsError as e:  # a value that cannot work with the models (e.g. n_batch below the verify batch)
        sys.stderr.write(f"skippy-tui: error: {e}\n")
        return EXIT_USAGE
    except SkippyError as e:
        sys.stderr.write(f"skippy-tui: error: {e}\n")
        return EXIT_FAILED
    except KeyboardInterrupt:
        sys.stderr.write("\nskippy-tui: interrupted\n")
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
