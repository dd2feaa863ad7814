"""The draft finder: which models of the library can draft for a target, and how well.

:func:`skippy_tui.library.draft_candidates` sorts the library into compatible
drafts and the others (with the vocabulary check's reason); a target whose file
has MTP heads lists them first ("integrated MTP"), and an MTP drafter file
counts as a draft for targets of its architecture. On request,
:func:`measure_draft` runs each compatible pair on a few fixed prompts, one
pair loaded at a time: every prompt greedy, plainly and with k = 4 drafting
(the draft model, or the MTP heads: ``source = "mtp"``), side by side in the
same process, so the two are measured under the same machine state. From the
speculative runs come the acceptance rate, the mean accepted length and the
acceptance by position; from both the target's verify cost by batch size and
the draft's cost per token. The engine's cost
model (:func:`~skippy_tui.engine.policy.cost_model.expected_rates`) turns those into an
estimated speedup at k = 4, which ranks the drafts; the measured speedup
(speculative over plain tokens/s, this run) stands beside it.

No UI imports; the ``drafts`` command is at the bottom.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..cli_common import path_arg
from ..engine.errors import SkippyError
from ..engine.load.labels import model_label
from ..engine.load.loader import EngineSpec, load_speculator
from ..engine.policy.cost_model import Costs, expected_rates
from ..engine.policy.measurements import VerifyCosts
from ..engine.sampling.params import SamplingParams
from ..engine.settings import GenerationSettings, numeric_settings
from ..library import DraftCandidate, LibraryEntry, human_params, human_size, table
from .core import RunResult, run_once

K = 4
"""Tokens per proposal while measuring (a common fixed k; acceptance figures are quoted at it)."""

PROMPTS = (
    "Explain in two sentences why the sky is blue.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "Give me a short recipe for pancakes.",
)
"""Short, fixed prompts of different kinds (explanation, code, list), so every draft sees the same text."""

MAX_TOKENS = 64
"""Reply length per prompt while measuring."""

WARMUP_TOKENS = 8


@dataclass(frozen=True)
class DraftMeasurement:
    """One pair measured on :data:`PROMPTS`, greedy.

    ``acceptance_rate``: accepted / drafted tokens. ``mean_accepted_length``:
    accepted draft tokens per speculative step (the bonus/correction token not
    counted). ``acceptance_by_position``: P(position i accepted | positions
    before it accepted), i = 1..k. ``draft_ms_per_token``: median ms of one
    draft decode; ``target_ms_per_token``: median ms of one plain target step
    (a 1-row decode); ``draft_cost``: their ratio. ``estimated_speedup``: the
    cost model's tokens/s at k over plain's, from these measurements.
    ``measured_speedup``: speculative over plain tokens/s (decoding only, the
    prompt's prefill excluded). ``identical_replies``: prompts whose speculative
    reply equals the plain one token for token (greedy decoding: all, on an
    exact build).
    """

    k: int
    n_prompts: int
    n_tokens: int
    acceptance_rate: float | None
    mean_accepted_length: float | None
    acceptance_by_position: tuple[float, ...]
    draft_ms_per_token: float | None
    target_ms_per_token: float | None
    draft_cost: float | None
    estimated_speedup: float | None
    plain_tokens_per_second: float
    spec_tokens_per_second: float
    measured_speedup: float | None
    identical_replies: int


@dataclass(frozen=True)
class DraftResult:
    """A candidate and, when measured, its figures or why the measurement failed."""

    candidate: DraftCandidate
    measurement: DraftMeasurement | None = None
    error: str | None = None
    settings: str = ""  # the numeric settings it was measured with (settings.numeric_settings)

    def to_dict(self) -> dict[str, Any]:
        c = self.candidate
        e = c.entry
        d: dict[str, Any] = {
            "name": c.name if c.integrated else e.name,  # the GGUF's own name; the heads have no file
            "label": c.name,
            "source": "mtp" if c.mtp else "model",
            "integrated": c.integrated,
            "path": str(e.path),
            "quantization": e.quantization,
            "n_params": e.n_params,
            "size_bytes": e.size_bytes,
            "compatible": c.compatible,
            "why_not": c.why_not,
        }
        if self.measurement is not None:
            d["measurement"] = dataclasses.asdict(self.measurement)
        if self.error is not None:
            d["error"] = self.error
        if self.settings:
            d["draft_settings"] = self.settings
        return d


# -- the figures -------------------------------------------------------------------------


def conditional_acceptance(drafted_at: Sequence[int], accepted_at: Sequence[int], k: int) -> list[float]:
    """``a_1..a_k``: P(position i accepted | offered, the ones before accepted).

    ``drafted_at[i]`` counts steps that proposed position i+1 and
    ``accepted_at[i]`` steps that accepted it (summed over runs). At a fixed k
    every proposal has k tokens (except where the reply's end clamps it), so the
    steps that reached position i+1 are those that accepted position i. An
    unmeasured position repeats the one before (0 for the first).
    """
    drafted = [*drafted_at, *[0] * k][:k]
    accepted = [*accepted_at, *[0] * k][:k]
    out: list[float] = []
    for i in range(k):
        reached = min(drafted[i], accepted[i - 1]) if i > 0 else drafted[i]
        if reached:
            out.append(accepted[i] / reached)
        else:
            out.append(out[-1] if out else 0.0)
    return out


def estimated_speedup(
    accept: Sequence[float], verify_ms: dict[int, float], draft_ms: float, sync_ms: float, k: int
) -> float | None:
    """The engine's cost model at ``k`` over plain decoding (tokens/s ratio).

    ``verify_ms``: median ms of a target decode by batch size (rows); sizes not
    measured are interpolated as the adaptive policy does. ``None`` without a
    1-row figure.
    """
    if 1 not in verify_ms:
        return None
    vc = VerifyCosts()
    for b, ms in verify_ms.items():
        vc.add(b, ms)
    costs = Costs([vc.at(b) or 0.0 for b in range(1, k + 2)], draft_ms, sync_ms)
    rates = expected_rates(k, list(accept), costs)
    return rates[k] / rates[0] if rates[0] > 0 else None


def summarise(plain: Sequence[RunResult], spec: Sequence[RunResult], k: int = K) -> DraftMeasurement:
    """The figures of one pair from its plain and speculative runs (same prompts, same order)."""

    def rate(runs: Sequence[RunResult]) -> float:
        seconds = sum(r.n_tokens / r.tokens_per_second for r in runs if r.tokens_per_second > 0)
        return sum(r.n_tokens for r in runs) / seconds if seconds > 0 else 0.0

    def med(values: Sequence[float]) -> float | None:
        return statistics.median(values) if values else None

    drafted = sum(r.n_drafted for r in spec)
    accepted = sum(r.n_accepted for r in spec)
    spec_steps = sum(r.n_spec_steps for r in spec)
    drafted_at = _sum_lists([r.drafted_at for r in spec])
    accepted_at = _sum_lists([r.accepted_at for r in spec])
    accept = conditional_acceptance(drafted_at, accepted_at, k)
    by_batch: dict[int, list[float]] = {}
    for r in (*plain, *spec):
        for b, v in r.verify_by_batch.items():
            by_batch.setdefault(b, []).extend(v)
    verify_ms = {b: statistics.median(v) for b, v in sorted(by_batch.items())}
    target_ms = med([v for r in plain for v in r.verify_by_batch.get(1, [])])
    draft_ms = med([v for r in spec for v in r.draft_call_ms])
    sync_ms = med([v for r in spec for v in r.sync_ms]) or 0.0
    est = estimated_speedup(accept, verify_ms, draft_ms, sync_ms, k) if draft_ms is not None else None
    plain_rate, spec_rate = rate(plain), rate(spec)
    return DraftMeasurement(
        k=k,
        n_prompts=len(spec),
        n_tokens=sum(r.n_tokens for r in spec),
        acceptance_rate=_r(accepted / drafted if drafted else None),
        mean_accepted_length=_r(accepted / spec_steps if spec_steps else None),
        acceptance_by_position=tuple(round(a, 4) for a in accept),
        draft_ms_per_token=_r(draft_ms),
        target_ms_per_token=_r(target_ms),
        draft_cost=_r(draft_ms / target_ms if draft_ms is not None and target_ms else None),
        estimated_speedup=_r(est),
        plain_tokens_per_second=round(plain_rate, 2),
        spec_tokens_per_second=round(spec_rate, 2),
        measured_speedup=_r(spec_rate / plain_rate if plain_rate > 0 else None),
        identical_replies=sum(p.token_ids == s.token_ids for p, s in zip(plain, spec)),
    )


def _r(v: float | None) -> float | None:
    return round(v, 4) if v is not None else None


def _sum_lists(lists: Sequence[Sequence[int]]) -> list[int]:
    out: list[int] = []
    for lst in lists:
        out += [0] * (len(lst) - len(out))
        for i, v in enumerate(lst):
            out[i] += v
    return out


# -- measuring ---------------------------------------------------------------------------


def measure_draft(
    spec: EngineSpec,
    prompts: Sequence[str] = PROMPTS,
    max_tokens: int = MAX_TOKENS,
    k: int = K,
    source: str = "model",
) -> DraftMeasurement:
    """Load ``spec``'s target and draft, run every prompt plain and at fixed ``k``
    (greedy), close both models, return the figures. ``source``: ``model`` (the draft
    model) or ``mtp`` (MTP heads: the target's own, or ``spec``'s MTP drafter file).

    Plain and speculative runs alternate per prompt, after an unmeasured warm-up
    of each, so a drift of a shared machine hits both alike.

    Raises:
        SkippyError: the pair cannot be loaded (file, bounds, compatibility).
    """
    speculation = dataclasses.replace(spec.speculation, enabled=True, source=source, n_draft=k)
    spec = dataclasses.replace(spec, speculation=speculation, use_draft=True)
    gen = GenerationSettings(SamplingParams(temperature=0.0), max_tokens=max_tokens)
    warm = dataclasses.replace(gen, max_tokens=min(WARMUP_TOKENS, max_tokens))
    speculator = load_speculator(spec)
    try:
        plain_mode = {"enabled": False}
        spec_mode = {"enabled": True, "source": source, "n_draft": k}
        for mode in (plain_mode, spec_mode):
            speculator.update(**mode)
            run_once(speculator, prompts[0], warm)
        plain: list[RunResult] = []
        specs: list[RunResult] = []
        for p in prompts:
            speculator.update(**plain_mode)
            plain.append(_checked(run_once(speculator, p, gen)))
            speculator.update(**spec_mode)
            specs.append(_checked(run_once(speculator, p, gen)))
    finally:
        speculator.close()
    return summarise(plain, specs, k)


def _checked(run: RunResult) -> RunResult:
    if run.reason == "error":
        raise SkippyError(run.error or "generation failed")
    return run


def measure_all(
    spec_for: Callable[[Path], EngineSpec],
    candidates: Sequence[DraftCandidate],
    max_tokens: int = MAX_TOKENS,
    on_start: Callable[[int, DraftCandidate], None] | None = None,
) -> list[DraftResult]:
    """Measure every compatible candidate (one pair loaded at a time) and rank them by
    estimated speedup, best first; a pair that fails keeps its one-line reason and
    goes last. ``spec_for(path)``: the spec with that draft, its load settings as the
    config makes them (the target's numeric ones for the target's own file)."""
    results = []
    todo = [c for c in candidates if c.compatible]
    for i, c in enumerate(todo):
        if on_start is not None:
            on_start(i, c)
        settings = ""
        try:
            spec = candidate_spec(spec_for, c)
            settings = numeric_settings(spec.target.load, spec.draft.load if spec.draft else spec.target.load)
            measured = measure_draft(spec, max_tokens=max_tokens, source="mtp" if c.mtp else "model")
            results.append(DraftResult(c, measured, settings=settings))
        except SkippyError as e:
            results.append(DraftResult(c, error=str(e), settings=settings))
    return rank(results)


def candidate_spec(spec_for: Callable[[Path], EngineSpec], c: DraftCandidate) -> EngineSpec:
    """The target's spec drafting with ``c``: its file as the draft (load settings as the
    config makes them for that file), or no draft file for the target's own MTP heads."""
    spec = spec_for(c.entry.path)
    if c.integrated:
        return dataclasses.replace(spec, draft=None, use_draft=False, heads=True)
    return dataclasses.replace(spec, use_draft=True)


def rank(results: Sequence[DraftResult]) -> list[DraftResult]:
    """Best estimated speedup first; unmeasured or failed ones last (stable)."""

    def key(r: DraftResult) -> float:
        m = r.measurement
        return -(m.estimated_speedup or 0.0) if m is not None else float("inf")

    return sorted(results, key=key)


# -- output ------------------------------------------------------------------------------


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def render(target: Any, results: Sequence[DraftResult], others: Sequence[DraftCandidate], n_broken: int) -> str:
    """The ``drafts`` report: compatible drafts (measured and ranked, or listed), then the others and why."""
    name = model_label(target.path, target.name, target.file_type)
    lines = [f"target: {name} ({human_params(target.n_params)}) {target.path}", ""]
    measured = any(r.measurement is not None or r.error is not None for r in results)
    if not results:
        lines.append("no compatible draft in the library")
    elif measured:
        m0 = next((r.measurement for r in results if r.measurement is not None), None)
        k = m0.k if m0 is not None else K
        head = ["#", "DRAFT", "QUANT", "ACCEPT", "MEAN_ACC", "DRAFT_COST", "EST_SPEEDUP", "MEASURED", "PLAIN_TOK/S"]
        rows = [[*head, "PATH"]]
        for i, r in enumerate(results, 1):
            c, m = r.candidate, r.measurement
            e = c.entry
            if m is None:
                rows.append([str(i), _draft_name(c), e.quantization, "failed", "", "", "", "", "", _where(c)])
                continue
            rows.append(
                [
                    str(i),
                    _draft_name(c),
                    e.quantization,
                    _pct(m.acceptance_rate),
                    "-" if m.mean_accepted_length is None else f"{m.mean_accepted_length:.2f}",
                    "-" if m.draft_cost is None else f"{m.draft_cost:.2f}",
                    _x(m.estimated_speedup),
                    _x(m.measured_speedup),
                    f"{m.plain_tokens_per_second:.1f}",
                    _where(c),
                ]
            )
        lines.append(f"compatible drafts, ranked by estimated speedup (greedy, k={k}, {len(PROMPTS)} prompts):")
        lines.append(table(rows, right=(0, 3, 4, 5, 6, 7, 8)))
        lines += [f"  {_draft_name(r.candidate)}: failed: {r.error}" for r in results if r.error is not None]
        # a draft with other kernels than its target's disagrees with it by their rounding alone
        lines += [f"  {_draft_name(r.candidate)} runs with {r.settings}" for r in results if r.settings]
        lines.append(
            "ACCEPT: accepted / drafted tokens; MEAN_ACC: accepted per step (bonus not counted); DRAFT_COST: "
            "ms per draft token / ms per target token; EST_SPEEDUP: the cost model; MEASURED: tokens/s vs plain"
        )
    else:
        rows = [["DRAFT", "QUANT", "PARAMS", "SIZE", "PATH"]]
        for r in results:
            c = r.candidate
            e = c.entry
            if c.integrated:  # no file of its own: the heads are part of the target's weights
                rows.append([_draft_name(c), "", "", "", _where(c)])
                continue
            rows.append([_draft_name(c), e.quantization, human_params(e.n_params), human_size(e.size_bytes), _where(c)])
        lines.append("compatible drafts (--measure ranks them):")
        lines.append(table(rows, right=(2, 3)))
    if others:
        lines += ["", "not compatible:"]
        lines += [f"  {_draft_name(c)} ({_where(c)}): {c.why_not}" for c in others]
    if n_broken:
        lines += ["", f"{n_broken} unreadable file(s) skipped (skippy-tui models lists them)"]
    return "\n".join(lines)


def _draft_name(c: DraftCandidate) -> str:
    """``integrated MTP (1 head)``, ``tiny-qwen35-mtp (MTP drafter)``, or the model's name."""
    if c.integrated:
        n = c.entry.mtp_heads
        return f"{c.name} ({n} head{'s' if n != 1 else ''})" if n else c.name
    return f"{c.name} (MTP drafter)" if c.mtp else c.name


def _where(c: DraftCandidate) -> str:
    return "in the target's file" if c.integrated else str(c.entry.path)


# -- the `drafts` command ------------------------------------------------------------------


def add_drafts_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``skippy-tui drafts``."""
    from ..library import add_library_args

    p = sub.add_parser("drafts", help="list (and with --measure, rank) the library's drafts for a target")
    p.add_argument("--target", type=path_arg, metavar="PATH", required=True, help="target GGUF")
    add_library_args(p)
    p.add_argument(
        "--measure", action="store_true", default=False,
        help=f"run each compatible pair greedy at k={K} on {len(PROMPTS)} fixed prompts, plain beside it",
    )  # fmt: skip
    p.add_argument(
        "--max-tokens", type=int, default=MAX_TOKENS, metavar="N",
        help=f"reply length per prompt with --measure (default {MAX_TOKENS})",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", default=False, help="the report as JSON on stdout")
    p.set_defaults(func=cmd_drafts)
    return p


def cmd_drafts(args: argparse.Namespace) -> int:
    """``skippy-tui drafts``: exit 0, or 1 when the target is unusable or a measurement failed."""
    from ..config import cache_dir, load_config
    from ..engine.load.gguf_info import cached_model_info
    from ..library import draft_candidates, scan_for_args

    if args.max_tokens < 1:
        sys.stderr.write("skippy-tui: error: --max-tokens must be >= 1\n")
        return 2
    cache = cache_dir()
    target = cached_model_info(args.target, cache / "gguf-info")  # ModelFileError: one line, exit 1
    if target.mtp_only:
        sys.stderr.write(
            f"skippy-tui: error: {target.path.name} is an MTP drafter file, not a model: "
            "pass its target as --target (the drafter is listed among its drafts)\n"
        )
        return 1
    found = scan_for_args(args)
    entries: list[LibraryEntry] = found[1] if found is not None else []
    candidates = draft_candidates(target, entries, cache)
    others = [c for c in candidates if not c.compatible]
    results = [DraftResult(c) for c in candidates if c.compatible]
    if args.measure and results:
        cfg = load_config(getattr(args, "config", None))
        cfg.set("target", "path", str(target.path))
        cfg.set("draft", "enabled", True)

        def spec_for(path: Path) -> EngineSpec:  # the [draft] load keys apply, as in the app
            cfg.set("draft", "path", str(path))
            return cfg.engine_spec()

        spec_for(results[0].candidate.entry.path)  # a config problem: one line, before anything loads

        def started(i: int, c: DraftCandidate) -> None:
            where = "the target's own heads" if c.integrated else c.entry.path.name
            sys.stderr.write(f"measuring {_draft_name(c)} ({where}) {i + 1}/{len(results)}\n")

        results = measure_all(spec_for, candidates, args.max_tokens, started)
    n_broken = sum(e.broken for e in entries)
    if args.json:
        doc = {
            "target": target.summary(),
            "measured": bool(args.measure),
            "drafts": [r.to_dict() for r in results],
            "incompatible": [DraftResult(c).to_dict() for c in others],
            "broken": n_broken,
        }
        sys.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(render(target, results, others, n_broken) + "\n")
    failed = [r for r in results if r.error is not None]
    for r in failed:
        name = "integrated MTP" if r.candidate.integrated else r.candidate.entry.path.name
        sys.stderr.write(f"skippy-tui: error: {name}: {r.error}\n")
    return 1 if failed else 0
