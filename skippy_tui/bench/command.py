"""``skippy-tui bench``: does speculation pay on this machine, with this pair?

One load of the target (and draft), then a fixed prompt suite — chat, code, two
rewrite-a-given-text-with-small-edits prompts, long-form — decoded by every
method in turn: plain decoding, fixed k (default 1, 2, 4, 8), adaptive k
(``n_draft = "auto"``) and n-gram drafting (prompt lookup, adaptive k). Methods
are switched at runtime with :meth:`Speculator.update`, so every figure comes
from the same process, models and caches. A target with usable MTP heads adds
the same fixed and adaptive k drafted by its heads (``mtp k=4``, ``mtp auto``;
source ``mtp``); without a draft model those are the only model-drafted columns
(source ``model`` would run the heads again) and ngram+model is ``ngram+mtp``.
The ``default`` column is source ``auto`` in every case. Each repeat rotates the
method order (slow drifts of a shared machine then hit every method alike);
tokens/s are medians over repeats.

What it reports, per prompt and method: tokens/s of decoding (generated
tokens over generation time, the prompt's prefill excluded — the target's as
the engine counts it, and here the draft's first fill with the prompt too, as
llama.cpp's speculative example counts both) and its ratio to plain,
acceptance rate, mean accepted length (accepted draft tokens per speculative
step, bonus not counted), acceptance by position, draft ms per drafted token,
and whether the output was token-identical to plain. Over all runs: the
target's verify ms by batch size, the draft's ms per token, the break-even
acceptance for each k (the per-position acceptance at which k ties plain
decoding, from the measured costs), and the best fixed k (the draft model's and
the heads' apart). The header says the target's memory (attention, hybrid,
recurrent) and how it drops rejected rows (``kv``, ``snapshot``: llama.cpp's own
recurrent snapshots, ``restore``: a saved state restored and the kept rows decoded
again); for every step that dropped rows the target's rollback ms, rows dropped
and decoded again are reported by that kind, beside the same step's verify (its
ms and rows), per method and pooled, with the goal that a snapshot rollback costs
at most a tenth of its step's verify.

Sampling (temperature > 0): every method of one (prompt, repeat) runs with the
same seed (the base seed + the repeat index), so the coupled sampler must give
plain decoding's text token for token and the methods decode the same text;
``--sampler coupled,rejection`` adds the model methods under the rejection
sampler (columns ``k=4 rej``), whose text differs (same distribution only). A
greedy k=4 pass over the same prompts afterwards gives the acceptance the
coupled sampler is compared with, and the sampler's own cost per verify row is
measured at 49,152 and 262,144 vocabulary sizes.

``--identity`` runs a different grid instead: prompts × k × draft source (the
draft model, the MTP heads, n-gram, auto) × penalties off/on, each reply compared
token for token with plain sampling at the same seed (no timing).

``tools/bench_tiny.sh`` runs the bench on tiny random-weight models (a hybrid
target with an MTP head, a recurrent one) at T = 0 and 0.8, saving the JSON under
``docs/results/``.

The adaptive policies keep what they measured across the whole bench, as they
do across the turns of a chat; an unmeasured warm-up pass (``--warmup``) runs
first so that the first measured prompt does not pay for the policy's first
measurements, the page cache or the allocator.

This module is the command (flags, loading, assembling the report); the work
is split by job: :mod:`.suite` (prompts and methods), :mod:`.run`
(running them), :mod:`.stats` (summaries, costs, goals),
:mod:`.sampler` (the sampler's cost), :mod:`.render` (text), on
top of :mod:`.core` (one measured run; shared with :mod:`.profiles`).
Nothing here is imported by the engine; the CLI wires it as a subcommand.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from ..cli_common import add_model_flags, config_from_args, path_arg, stderr_progress
from ..engine.bounds import MAX_DRAFT_TOKENS
from ..engine.sampling.params import SAMPLERS, SamplingParams
from .core import BenchPrompt, Progress, draft_model, models_meta, prompt_tokens_cap, provenance, repeat_seed
from .core import loadavg as _loadavg
from .render import render_identity, render_text
from .run import draw_seed, run_bench, run_greedy_reference, run_identity
from .sampler import sampler_cost, target_rows
from .stats import acceptance_source, identity_summary, summarise
from .suite import (
    CONTROL,
    DEFAULT_KS,
    EXTRA,
    IDENTITY_KS,
    IDENTITY_TEMPERATURE,
    IDENTITY_TOKENS,
    PENALTIES_ON,
    SUITE,
    acceptance_k,
    methods_for,
    penalty_settings,
)


def _int_list(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not ks or any(not 1 <= k <= MAX_DRAFT_TOKENS for k in ks):
        raise argparse.ArgumentTypeError(f"expected integers in 1..{MAX_DRAFT_TOKENS}, got {text!r}")
    return ks


def _prompt_list(text: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    known = {p.name for p in SUITE + EXTRA} | {p.kind for p in SUITE + EXTRA}
    bad = [n for n in names if n not in known]
    if bad or not names:
        what = bad[0] if bad else text
        raise argparse.ArgumentTypeError(f"unknown prompt {what!r}; known: {', '.join(sorted(known))}")
    return names


def prompts_epilog() -> str:
    """``bench --help``'s last lines: the names ``--prompts`` takes (set apart from the flags'
    help, whose wrapping would break a name at its hyphen)."""
    prompts = SUITE + EXTRA
    kinds = sorted({p.kind for p in prompts} - {p.name for p in prompts})
    return (
        "prompts (--prompts takes names or kinds, comma-separated):\n"
        f"  the suite: {', '.join(p.name for p in SUITE)}\n"
        f"  short:     {', '.join(p.name for p in EXTRA)} (--identity runs them too)\n"
        f"  kinds:     {', '.join(kinds)} (every prompt of that kind)"
    )


def _sampler_list(text: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    if not names or any(n not in SAMPLERS for n in names) or len(set(names)) < len(names):
        raise argparse.ArgumentTypeError(f"expected distinct samplers from {', '.join(SAMPLERS)}, got {text!r}")
    return names


def add_bench_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``skippy-tui bench`` on the CLI's subparsers."""
    # "resolve": the bench's --sampler (a list) replaces the model flags' single choice
    b = sub.add_parser(
        "bench",
        help="measure plain vs speculative decoding on a fixed prompt suite",
        conflict_handler="resolve",
        epilog=prompts_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,  # the epilog's lines as written
    )
    b.add_argument("--repeats", type=int, default=5, metavar="N", help="runs per prompt and method (median; default 5)")
    b.add_argument(
        "--k", type=_int_list, default=None, metavar="K,K",
        help="fixed k values (default 1,2,4,8; with --identity 1,4,8, auto always added)",
    )  # fmt: skip
    b.add_argument(
        "--prompts", type=_prompt_list, default=None, metavar="NAMES",
        help="a subset of the suite, by name or kind (listed at the end)",
    )  # fmt: skip
    # a no-op kept so that old scripts still run (ngram+model always runs): not in --help
    b.add_argument("--with-combined", action="store_true", default=False, help=argparse.SUPPRESS)
    b.add_argument("--no-warmup", action="store_true", default=False, help="skip the unmeasured warm-up pass")
    b.add_argument(
        "--identity", action="store_true", default=False,
        help="same-seed identity grid instead: prompts x k x source x penalties off/on (T=0.8, 48 tokens by default)",
    )  # fmt: skip
    b.add_argument(
        "--profiles", action="store_true", default=False,
        help="the exact, auto and fast profiles side by side instead: tokens/s plain and speculative, "
        "replies differing from plain (per prompt) and the target's top-2 logit margin there",
    )  # fmt: skip
    b.add_argument(
        "--control", action="store_true", default=False,
        help=f"also run the default configuration a second time ('{CONTROL}', its own learned state): "
        "its ratio to the default shows how far this machine's noise alone moves two equal methods",
    )  # fmt: skip
    b.add_argument(
        "--fresh", action="store_true", default=False,
        help="every reply starts with no learned adaptive state, as a new `run` or session's first reply "
        "(default: each method keeps its own across its replies, as a session does)",
    )  # fmt: skip
    b.add_argument("--json", action="store_true", default=False, help="print the report as JSON on stdout")
    b.add_argument("--save", type=path_arg, default=None, metavar="FILE", help="also write the JSON report to FILE")
    b.add_argument("--no-progress", action="store_true", default=False, help="no progress bar on stderr")
    add_model_flags(b, sub=True)
    b.add_argument(
        "--sampler", type=_sampler_list, metavar="S[,S]",
        help="coupled or rejection; a list (coupled,rejection) adds the model methods under the others ('k=4 rej')",
    )  # fmt: skip
    b.set_defaults(func=cmd_bench)
    return b


DEFAULT_BENCH_TOKENS = 128


def cmd_bench(args: argparse.Namespace) -> int:
    from ..engine.load.loader import load_speculator
    from ..engine.native.sigint import sigint_scope

    if args.repeats < 1:
        sys.stderr.write("skippy-tui: error: --repeats must be >= 1\n")
        return 2
    if args.save is not None and not (args.save.parent.is_dir() and os.access(args.save.parent, os.W_OK)):
        # checked first: a bench takes minutes and its figures must not be lost at the end
        sys.stderr.write(f"skippy-tui: error: --save {args.save}: no writable folder {args.save.parent}\n")
        return 2
    if args.with_combined:
        sys.stderr.write("skippy-tui: note: --with-combined is no longer needed: ngram+model always runs\n")
    samplers = getattr(args, "sampler", None)
    if isinstance(samplers, tuple):
        args.sampler = samplers[0]  # the config takes the first; the others become extra columns
    cfg = config_from_args(args)
    if "generation.max_tokens" not in cfg.present:
        cfg.set("generation", "max_tokens", IDENTITY_TOKENS if args.identity else DEFAULT_BENCH_TOKENS)
    if args.identity and "sampling.temperature" not in cfg.present:
        cfg.set("sampling", "temperature", IDENTITY_TEMPERATURE)
    ks = args.k or (IDENTITY_KS if args.identity else DEFAULT_KS)
    spec = cfg.engine_spec()  # a target's MTP heads load unless drafts are off (EngineSpec.heads)
    # the load checks capacity for the largest k any method will ask for
    k_top = max(*ks, spec.speculation.n_draft_max)
    if args.k:  # a --k the batch cannot hold is a bad flag (exit 2), found before any weights load
        from ..engine.errors import BoundsError
        from ..engine.load.loader import check_capacity

        try:
            check_capacity(spec, max(args.k), with_draft=spec.use_draft)
        except BoundsError as e:
            sys.stderr.write(f"skippy-tui: error: --k {max(args.k)}: {e}\n")
            return 2
    spec = dataclasses.replace(spec, speculation=dataclasses.replace(spec.speculation, n_draft=k_top, enabled=True))
    gen = cfg.generation()
    samplers = samplers if isinstance(samplers, tuple) else (gen.sampling.sampler,)
    if gen.sampling.greedy and len(samplers) > 1 and not args.identity:
        sys.stderr.write("skippy-tui: note: greedy decoding is the same under every sampler; running the first only\n")
        samplers = samplers[:1]
    base_seed = gen.sampling.seed if gen.sampling.seed is not None else draw_seed()
    pool = SUITE + EXTRA if args.identity or args.prompts else SUITE
    prompts = [p for p in pool if args.prompts is None or p.name in args.prompts or p.kind in args.prompts]
    if getattr(args, "profiles", False):
        from .profiles import cmd_profiles, render_profiles

        report = cmd_profiles(args, cfg, gen, prompts, base_seed, stderr_progress)
        return _emit(args, report, render_profiles(report))
    speculator = load_speculator(spec, stderr_progress() if not args.no_progress else (lambda s, f: None))
    try:
        system = cfg.get("generation", "system_prompt") or ""
        head = {
            "mode": "identity" if args.identity else "bench",
            "temperature": gen.sampling.temperature,
            "sampler": samplers[0],
            "samplers": list(samplers),
            "seed": base_seed,
            "sampling": sampling_settings(gen.sampling),
        }
        t0 = time.perf_counter()
        load_before = _loadavg()
        with sigint_scope():  # as `run`: one SIGINT handler for the whole bench
            if args.identity:
                report = head | _identity_report(args, speculator, gen, prompts, ks, samplers, base_seed, system)
            else:
                report = head | _bench_report(args, speculator, gen, prompts, ks, samplers, base_seed, system)
        report["meta"] = _meta(speculator, spec, gen, prompts, ks) | {
            "repeats": 1 if args.identity else args.repeats,
            "fresh": args.fresh,
            "methods": report.pop("methods", []),
            "seconds": round(time.perf_counter() - t0, 1),
            "loadavg_1min": [load_before, _loadavg()],
        }
    finally:
        speculator.close()
    return _emit(args, report, render_identity(report) if args.identity else render_text(report))


def _emit(args: argparse.Namespace, report: dict[str, Any], text: str) -> int:
    """Print the report (text, or JSON with ``--json``) and write ``--save``; the exit status."""
    from ..engine.jsoncache import atomic_write_text

    sys.stdout.write((json.dumps(report, indent=2) if args.json else text) + "\n")
    if args.save is not None:
        try:
            atomic_write_text(args.save, json.dumps(report, indent=2) + "\n")
        except OSError as e:
            sys.stderr.write(f"skippy-tui: error: cannot write {args.save}: {e.strerror or e}\n")
            return 1
    return 0


def sampling_settings(params: SamplingParams) -> dict[str, Any]:
    """The report's filter and penalty settings (the seed and sampler are reported apart)."""
    return {k: getattr(params, k) for k in ("top_k", "top_p", "min_p", *PENALTIES_ON, "repeat_last_n")}


def _bench_report(
    args: argparse.Namespace,
    speculator: Any,
    gen: Any,
    prompts: Sequence[BenchPrompt],
    ks: Sequence[int],
    samplers: Sequence[str],
    base_seed: int,
    system: str,
) -> dict[str, Any]:
    """The suite: every method, then (sampled) the greedy reference and the sampler's cost."""
    greedy = gen.sampling.greedy
    has_model, has_mtp = draft_model(speculator) is not None, speculator.mtp_drafter is not None
    methods = methods_for(ks, has_model, samplers, control=getattr(args, "control", False), has_mtp=has_mtp)
    reference = (has_model or has_mtp) and not greedy
    total = len(prompts) * (len(methods) * args.repeats + reference) + (0 if args.no_warmup else len(methods))
    progress = Progress(total, enabled=not args.no_progress)
    try:
        cells = run_bench(
            speculator,
            gen,
            prompts,
            methods,
            args.repeats,
            not args.no_warmup,
            progress,
            system,
            base_seed,
            fresh=args.fresh,
        )
        k_ref, source_ref = acceptance_k(ks), acceptance_source(methods)
        greedy_ref = (
            run_greedy_reference(speculator, gen, prompts, k_ref, progress, system, source_ref) if reference else None
        )
    finally:
        progress.close()
    replies = [(p.text, cells[p.name]["plain"].runs[0].token_ids) for p in prompts]
    rows, histories = target_rows(speculator, replies, system)
    return {
        "seeds": [repeat_seed(base_seed, r) for r in range(args.repeats)],
        **summarise(cells, prompts, methods, ks, greedy, greedy_ref),
        "sampler_cost_us": sampler_cost(rows, histories, gen.sampling),
        "methods": [m.name for m in methods],
    }


def _identity_report(
    args: argparse.Namespace,
    speculator: Any,
    gen: Any,
    prompts: Sequence[BenchPrompt],
    ks: Sequence[int],
    samplers: Sequence[str],
    base_seed: int,
    system: str,
) -> dict[str, Any]:
    """The identity grid: no warm-up and no timing, one reply per case."""
    sources = identity_sources(speculator)
    grid_ks: list[int | str] = [*ks, "auto"]
    total = len(prompts) * 2 * (1 + len(samplers) * len(sources) * len(grid_ks))
    progress = Progress(total, enabled=not args.no_progress)
    try:
        cases = run_identity(speculator, gen, prompts, grid_ks, sources, samplers, base_seed, progress, system)
    finally:
        progress.close()
    return {
        "prompts": [p.name for p in prompts],
        "ks": grid_ks,
        "sources": list(sources),
        "penalties": penalty_settings(gen.sampling),
        **identity_summary(cases, gen.sampling.greedy),
    }


def identity_sources(speculator: Any) -> tuple[str, ...]:
    """The identity grid's draft sources: the draft model and the MTP heads where loaded
    (without a draft model, source ``model`` would run the heads again), the n-gram, auto."""
    model = ("model",) if draft_model(speculator) is not None else ()
    mtp = ("mtp",) if speculator.mtp_drafter is not None else ()
    return (*model, *mtp, "ngram", "auto")


def _meta(speculator: Any, spec: Any, gen: Any, prompts: Sequence[BenchPrompt], ks: Sequence[int]) -> dict[str, Any]:
    """What ran where: models (and how the target drops rejected rows), threads, context,
    lengths; how verification stays exact (or why it is not bit-exact)."""
    from ..engine.policy.exactness import verify_label

    return {
        **models_meta(speculator),
        "threads": _threads(spec.target.load.threads),
        "n_ctx": speculator.n_ctx,  # the configured window; the contexts grow to it
        "n_vocab": speculator.target.n_vocab,
        "greedy": gen.sampling.greedy,
        "max_tokens": gen.max_tokens,
        "ks": list(ks),
        "n_draft_max": spec.speculation.n_draft_max,
        "prompts": {p.name: {"kind": p.kind, "max_tokens": prompt_tokens_cap(gen, p)} for p in prompts},
        "verify": verify_label(speculator),
        "cpus": _cpus(),
        "machine": provenance(),
    }


def _cpus() -> int:
    from ..engine.native.model import default_threads

    return default_threads()


def _threads(configured: int) -> int:
    from ..engine.native.model import default_threads

    return configured if configured > 0 else default_threads()
