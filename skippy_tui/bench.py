"""``skippy-tui bench``: does speculation pay on this machine, with this pair?

One load of the target (and draft), then a fixed prompt suite — chat, code, two
rewrite-a-given-text-with-small-edits prompts, long-form — decoded by every
method in turn: plain decoding, fixed k (default 1, 2, 4, 8), adaptive k
(``n_draft = "auto"``) and n-gram drafting (prompt lookup, adaptive k). Methods
are switched at runtime with :meth:`Speculator.update`, so every figure comes
from the same process, models and caches. Each repeat rotates the method order
(slow drifts of a shared machine then hit every method alike); tokens/s are
medians over repeats.

What it reports, per prompt and method: tokens/s of decoding (generated
tokens over generation time, the prompt's prefill excluded — the target's as
the engine counts it, and here the draft's first fill with the prompt too, as
llama.cpp's speculative example counts both) and its ratio to plain,
acceptance rate, mean accepted length (accepted draft tokens per speculative
step, bonus not counted), acceptance by position, draft ms per drafted token,
and whether the output was token-identical to plain. Over all runs: the
target's verify ms by batch size, the draft's ms per token, the break-even
acceptance for each k (the per-position acceptance at which k ties plain
decoding, from the measured costs), and the best fixed k.

Sampling (temperature > 0): every method of one (prompt, repeat) runs with the
same seed (the base seed + the repeat index), so the coupled sampler must give
plain decoding's text token for token and the methods decode the same text;
``--sampler coupled,rejection`` adds the model methods under the rejection
sampler (columns ``k=4 rej``), whose text differs (same distribution only). A
greedy k=4 pass over the same prompts afterwards gives the acceptance the
coupled sampler is compared with, and the sampler's own cost per verify row is
measured at 49,152 and 262,144 vocabulary sizes.

``--identity`` runs a different grid instead: prompts × k × draft source ×
penalties off/on, each reply compared token for token with plain sampling at
the same seed (no timing).

The adaptive policies keep what they measured across the whole bench, as they
do across the turns of a chat; an unmeasured warm-up pass (``--warmup``) runs
first so that the first measured prompt does not pay for the policy's first
measurements, the page cache or the allocator.

Nothing here is imported by the engine; the CLI wires it as a subcommand.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import secrets
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .bench_core import (
    BenchPrompt,
    Progress,
    RunResult,
    first_difference,
    messages_for,
    prompt_tokens_cap,
    repeat_seed,
    run_once,
)
from .bench_core import fmt as _fmt
from .bench_core import loadavg as _loadavg
from .bench_core import ratio as _ratio
from .bench_core import rounded as _round
from .cli_common import add_model_flags, config_from_args, stderr_progress
from .engine.adaptive import Costs, break_even_acceptance
from .engine.bounds import MAX_DRAFT_TOKENS
from .engine.sampling import SAMPLERS, PenaltyWindow, SamplingParams, candidates, top_ids
from .engine.verify import gumbel_pick

LIGHTHOUSE = (
    "The old lighthouse stood on the edge of the cliff for more than a hundred years. Every night its "
    "keeper climbed the narrow stairs to light the lamp, and every morning he wrote the weather in a small "
    "blue notebook. Ships passing the rocky coast trusted its beam, and the fishermen of the village said "
    "that no storm had ever put it out. When the keeper grew old, his daughter took over the work, and she "
    "kept the same notebook on the same shelf beside the lamp."
)
TYPOS = (
    "Our team meeting will take place on Thursday at ten oclock in the main conference room. Please bring "
    "your laptop and the latest version of the project report. We will discus the budget for the next "
    "quarter, review the timeline, and agree on the tasks for each member of the team. If you can not "
    "attend, send a short summary of your progres to the project manager before the meeting begins."
)


CODE_TO_EDIT = """def summarize(items, key, limit=10):
    \"\"\"Group items by key and return the largest groups with their totals.\"\"\"
    groups = {}
    for item in items:
        name = item.get(key)
        if name is None:
            continue
        group = groups.setdefault(name, {"count": 0, "total": 0.0})
        group["count"] += 1
        group["total"] += float(item.get("amount", 0))
    ranked = sorted(groups.items(), key=lambda pair: pair[1]["total"], reverse=True)
    result = []
    for name, group in ranked[:limit]:
        average = group["total"] / group["count"]
        result.append({"name": name, "count": group["count"], "total": group["total"], "average": average})
    return result
"""


SUITE: tuple[BenchPrompt, ...] = (
    BenchPrompt("chat", "chat", "What are three simple habits that help people sleep better? Explain each briefly."),
    BenchPrompt(
        "code",
        "code",
        "Write a Python function is_palindrome(s) that ignores case and punctuation. "
        "Include a docstring and two example calls.",
    ),
    BenchPrompt(
        "rewrite-replace",
        "rewrite",
        "Rewrite the following text exactly, but replace the word 'lighthouse' with 'tower'. "
        "Change nothing else.\n\n" + LIGHTHOUSE,
    ),
    BenchPrompt(
        "rewrite-typos",
        "rewrite",
        "Correct the spelling mistakes in the following text and change nothing else. "
        "Reply with the corrected text only.\n\n" + TYPOS,
    ),
    BenchPrompt("long-form", "long-form", "Write a detailed essay about the history of the printing press.", 2.0),
    # where the sources disagree most: a long copy with one change, and free text that quotes nothing
    BenchPrompt(
        "code-edit",
        "rewrite",
        "Return the following Python function with one change: rename the parameter 'items' to "
        "'records'. Change nothing else.\n\n" + CODE_TO_EDIT,
        2.0,
    ),
    BenchPrompt(
        "free-form",
        "free-form",
        "Imagine a city in the year 2300. Describe a morning walk through it, in your own words.",
    ),
)
# More prompts for the identity grid (short replies, so the grid stays cheap)
EXTRA: tuple[BenchPrompt, ...] = (
    BenchPrompt("haiku", "short", "Write a haiku about autumn leaves."),
    BenchPrompt("recipe", "short", "Give me a short recipe for pancakes."),
    BenchPrompt("translate", "short", "Translate 'good morning' into Spanish and German."),
    BenchPrompt("arithmetic", "short", "What is 17 times 23? Show your working."),
    BenchPrompt("sky", "short", "Explain in two sentences why the sky is blue."),
    BenchPrompt("formal", "short", "Rewrite this sentence more formally: hey, can u send me the file asap?"),
)
WARMUP_PROMPT = "Name three colours."

DEFAULT_KS = (1, 2, 4, 8)
IDENTITY_KS = (1, 4, 8)  # plus auto
ACCEPTANCE_K = 4  # the k at which sampled acceptance is compared with greedy
SHORT = {"coupled": "cpl", "rejection": "rej"}  # column suffix of a method under a second sampler

# The issue's goals (thresholds of the ratios the report computes)
GOAL_ADAPTIVE = 0.95  # auto >= 0.95 x max(plain, best fixed k), every prompt
GOAL_DEFAULT = 0.95  # the default configuration >= 0.95 x the best other method, and >= plain, every prompt
GOAL_NGRAM_REWRITE = 1.5  # n-gram >= 1.5 x plain on rewrite prompts
GOAL_BEST_FIXED = 1.05  # sampled: best fixed k >= 1.05 x plain, every prompt
GOAL_ACCEPTANCE = 0.85  # sampled: coupled acceptance at k=4 >= 0.85 x greedy acceptance


@dataclass(frozen=True)
class Method:
    """A decoding method: its column name, the speculation settings it runs with and
    its overrides of the bench's sampling settings (e.g. the sampler).

    ``variant``: "" for the main columns, else the suffix of a second sampler's
    column (``rej``); costs and goals are taken from the main columns only.
    """

    name: str
    settings: dict[str, Any]
    needs_model: bool = False
    sampling: dict[str, Any] = field(default_factory=dict)
    variant: str = ""

    @property
    def sampler(self) -> str:
        return self.sampling.get("sampler", "coupled")


DEFAULT = "default"
"""The column of the default configuration: source = "auto", n_draft = "auto"."""


def methods_for(ks: Sequence[int], has_model: bool, samplers: Sequence[str] = ("coupled",)) -> list[Method]:
    """plain, k=… (fixed), auto, ngram, ngram+model and the default configuration (auto
    source and k); model methods only with a draft.

    Every method runs under ``samplers[0]``; each further sampler repeats the
    model methods (``k=4 rej``). Plain decoding is the same under any sampler.
    """
    first = {"sampler": samplers[0]}
    out = [Method("plain", {"enabled": False}, sampling=first)]
    model = [(f"k={k}", {"enabled": True, "source": "model", "n_draft": k}) for k in ks]
    model.append(("auto", {"enabled": True, "source": "model", "n_draft": "auto"}))
    model.append(("ngram+model", {"enabled": True, "source": "ngram+model", "n_draft": "auto"}))
    model.append((DEFAULT, {"enabled": True, "source": "auto", "n_draft": "auto"}))
    if has_model:
        out += [Method(name, st, True, first) for name, st in model[:-2]]
    out.append(Method("ngram", {"enabled": True, "source": "ngram", "n_draft": "auto"}, sampling=first))
    if has_model:
        out += [Method(name, st, True, first) for name, st in model[-2:]]
    else:  # the default without a draft model: auto between the n-gram proposal and plain
        out.append(Method(DEFAULT, model[-1][1], False, first))
    for s in samplers[1:] if has_model else ():
        out += [Method(f"{name} {SHORT[s]}", st, True, {"sampler": s}, SHORT[s]) for name, st in model]
    return out


def draw_seed() -> int:
    """A base seed when none is configured (31 bits: short enough to retype as --seed)."""
    return secrets.randbits(31)


@dataclass
class Cell:
    """All repeats of one (prompt, method)."""

    runs: list[RunResult] = field(default_factory=list)

    @property
    def tokens_per_second(self) -> float:
        return statistics.median(r.tokens_per_second for r in self.runs) if self.runs else 0.0

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted over drafted tokens, pooled over the runs."""
        drafted = sum(r.n_drafted for r in self.runs)
        return sum(r.n_accepted for r in self.runs) / drafted if drafted else None

    def first_difference(self, plain: Cell) -> int | None:
        """The first token index where a run differs from plain's run of the same repeat
        (same seed), over all repeats; ``None`` when every run is token-identical."""
        diffs = [first_difference(p.token_ids, r.token_ids) for r, p in zip(self.runs, plain.runs)]
        diffs = [d for d in diffs if d is not None]
        return min(diffs) if diffs else None

    def summary(self, plain: Cell | None) -> dict[str, Any]:
        runs = self.runs
        drafted = sum(r.n_drafted for r in runs)
        accepted = sum(r.n_accepted for r in runs)
        spec_steps = sum(r.n_spec_steps for r in runs)
        d_at = _sum_lists([r.drafted_at for r in runs])
        a_at = _sum_lists([r.accepted_at for r in runs])
        tps = self.tokens_per_second
        plain_tps = plain.tokens_per_second if plain is not None else 0.0
        identical, first = None, None
        if plain is not None and plain.runs and runs:
            first = self.first_difference(plain)
            identical = first is None
        ks = [k for r in runs for k in r.ks]
        return {
            "tokens_per_second": round(tps, 2),
            "tokens_per_second_runs": [round(r.tokens_per_second, 2) for r in runs],
            "ratio_to_plain": round(tps / plain_tps, 3) if plain_tps > 0 else None,
            "n_tokens": runs[0].n_tokens if runs else 0,
            "acceptance_rate": round(accepted / drafted, 4) if drafted else None,
            "mean_accepted_length": round(accepted / spec_steps, 3) if spec_steps else None,
            "acceptance_by_position": [round(a / d, 3) if d else None for a, d in zip(a_at, d_at)],
            "draft_ms_per_token": round(sum(r.draft_ms for r in runs) / drafted, 3) if drafted else None,
            "draft_prefill_ms": round(statistics.median(r.draft_prefill_ms for r in runs), 1) if runs else 0.0,
            "mean_k": round(sum(ks) / len(ks), 2) if ks else 0.0,
            "plain_step_share": round(sum(1 for k in ks if k == 0) / len(ks), 3) if ks else 0.0,
            "identical_to_plain": identical,
            "first_difference": first,
            "errors": sorted({r.error for r in runs if r.reason == "error"}),
        }


def _sum_lists(lists: Sequence[Sequence[int]]) -> list[int]:
    out: list[int] = []
    for lst in lists:
        out += [0] * (len(lst) - len(out))
        for i, v in enumerate(lst):
            out[i] += v
    return out


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def settings_for(gen: Any, method: Method, seed: int, max_tokens: int | None = None) -> Any:
    """``gen`` with the method's sampling overrides, ``seed`` and (optionally) a length."""
    sampling = dataclasses.replace(gen.sampling, seed=seed, **method.sampling)
    return dataclasses.replace(gen, sampling=sampling, max_tokens=max_tokens or gen.max_tokens)


def run_bench(
    speculator: Any,
    gen: Any,
    prompts: Sequence[BenchPrompt],
    methods: Sequence[Method],
    repeats: int,
    warmup: bool = True,
    progress: Progress | None = None,
    system: str = "",
    base_seed: int = 0,
) -> dict[str, dict[str, Cell]]:
    """Every method on every prompt, ``repeats`` times; returns ``cells[prompt][method]``.

    Every method of one repeat runs with the seed ``repeat_seed(base_seed, r)``,
    so sampled replies are comparable token for token with plain's.
    """
    cells: dict[str, dict[str, Cell]] = {p.name: {m.name: Cell() for m in methods} for p in prompts}
    if warmup:
        for m in methods:
            speculator.update(**m.settings)
            run_once(speculator, WARMUP_PROMPT, settings_for(gen, m, base_seed, min(gen.max_tokens, 32)), system)
            if progress:
                progress.update(f"warm-up {m.name}")
    for r in range(repeats):
        order = list(methods[r % len(methods) :]) + list(methods[: r % len(methods)])
        seed = repeat_seed(base_seed, r)
        for p in prompts:
            for m in order:
                speculator.update(**m.settings)
                g = settings_for(gen, m, seed, prompt_tokens_cap(gen, p))
                cells[p.name][m.name].runs.append(run_once(speculator, p.text, g, system))
                if progress:
                    progress.update(f"{p.name} {m.name} (repeat {r + 1}/{repeats})")
    return cells


def greedy_method(k: int) -> Method:
    """Greedy decoding at fixed k: the acceptance a sampled k is compared with."""
    return Method(f"k={k} greedy", {"enabled": True, "source": "model", "n_draft": k}, True, {"temperature": 0.0})


def run_greedy_reference(
    speculator: Any,
    gen: Any,
    prompts: Sequence[BenchPrompt],
    k: int,
    progress: Progress | None = None,
    system: str = "",
) -> dict[str, Cell]:
    """Greedy k on every prompt once (greedy is deterministic), after the measured runs.

    Only its acceptance is used; it runs last so that the adaptive policy's
    acceptance estimates, shared by every method of a draft source, are not
    fed greedy steps while the sampled methods are measured.
    """
    m = greedy_method(k)
    speculator.update(**m.settings)
    out = {}
    for p in prompts:
        out[p.name] = Cell([run_once(speculator, p.text, settings_for(gen, m, 0, prompt_tokens_cap(gen, p)), system)])
        if progress:
            progress.update(f"{p.name} {m.name}")
    return out


def cost_summary(cells: dict[str, dict[str, Cell]], ks: Sequence[int], methods: Sequence[Method]) -> dict[str, Any]:
    """Verify ms by batch size, draft ms per token, sync ms, break-even acceptance per k
    (from the main columns: a second sampler's draft and verify rows cost otherwise)."""
    verify: dict[int, list[float]] = {}
    model_calls: list[float] = []
    ngram_calls: list[float] = []
    syncs: list[float] = []
    prefills: list[float] = []
    main = {m.name for m in methods if not m.variant}
    for row in cells.values():
        for name, cell in row.items():
            if name not in main:
                continue
            for run in cell.runs:
                for b, v in run.verify_by_batch.items():
                    verify.setdefault(b, []).extend(v)
                if name.startswith("k=") or name == "auto":
                    model_calls += run.draft_call_ms
                    syncs += run.sync_ms
                    if run.draft_prefill_ms > 0:
                        prefills.append(run.draft_prefill_ms)
                elif name == "ngram":
                    ngram_calls += run.draft_call_ms
    verify_ms = {b: round(statistics.median(v), 2) for b, v in sorted(verify.items())}
    draft = _median(model_calls)
    out: dict[str, Any] = {
        "verify_ms_by_batch": verify_ms,
        "verify_samples_by_batch": {b: len(v) for b, v in sorted(verify.items())},
        "draft_ms_per_token": round(draft, 3) if draft is not None else None,
        "ngram_ms_per_lookup": round(_median(ngram_calls), 4) if ngram_calls else None,
        "sync_ms_per_step": round(_median(syncs), 3) if syncs else None,
        "draft_prefill_ms": round(_median(prefills), 1) if prefills else None,
        "break_even_acceptance": {},
    }
    if draft is None or 1 not in verify_ms:
        return out
    top = max(ks) + 1
    known = sorted(verify_ms)
    table = [_interp(verify_ms, known, b) for b in range(1, top + 1)]
    costs = Costs(table, draft, _median(syncs) or draft, 0.0)
    for k in ks:
        be = break_even_acceptance(k, costs)
        out["break_even_acceptance"][k] = round(be, 3) if be is not None else None
    return out


def _interp(v: dict[int, float], known: list[int], b: int) -> float:
    if b in v:
        return v[b]
    lo = max((x for x in known if x < b), default=None)
    hi = min((x for x in known if x > b), default=None)
    if lo is None:
        return v[hi]  # type: ignore[index]
    if hi is None:
        return v[lo]
    return v[lo] + (v[hi] - v[lo]) * (b - lo) / (hi - lo)


def summarise(
    cells: dict[str, dict[str, Cell]],
    prompts: Sequence[BenchPrompt],
    methods: Sequence[Method],
    ks: Sequence[int],
    greedy: bool,
    greedy_ref: dict[str, Cell] | None = None,
) -> dict[str, Any]:
    """The JSON-ready report: per-prompt results, costs, best k and the issues' goals.

    ``greedy_ref``: greedy runs at ``acceptance_k(ks)`` per prompt (sampled benches),
    the reference of the acceptance goal.
    """
    results: dict[str, dict[str, Any]] = {}
    best: dict[str, Any] = {}
    adaptive_ok: dict[str, Any] = {}
    ngram_ok: dict[str, Any] = {}
    default_ok: dict[str, Any] = {}
    for p in prompts:
        row = cells[p.name]
        plain = row.get("plain")
        results[p.name] = {m.name: {**row[m.name].summary(plain), "sampler": m.sampler} for m in methods}
        plain_tps = plain.tokens_per_second if plain else 0.0
        fixed = {k: row[f"k={k}"].tokens_per_second for k in ks if f"k={k}" in row}
        if fixed:
            kb = max(fixed, key=lambda k: fixed[k])
            best[p.name] = {"k": kb, "tokens_per_second": round(fixed[kb], 2)}
            best[p.name]["ratio_to_plain"] = round(fixed[kb] / plain_tps, 3) if plain_tps else None
            if "auto" in row:
                ref = max(plain_tps, fixed[kb])
                ratio = row["auto"].tokens_per_second / ref if ref else None
                met = bool(ratio and ratio >= GOAL_ADAPTIVE)
                adaptive_ok[p.name] = {"ratio": round(ratio, 3) if ratio else None, "met": met}
        if greedy and p.kind == "rewrite" and "ngram" in row and plain_tps:
            # a copy only at temperature 0: sampled text drifts from the source it rewrites
            ratio = row["ngram"].tokens_per_second / plain_tps
            ngram_ok[p.name] = {"ratio": round(ratio, 3), "met": ratio >= GOAL_NGRAM_REWRITE}
        if DEFAULT in row and plain_tps:
            others = {m.name: row[m.name].tokens_per_second for m in methods if m.name != DEFAULT and not m.variant}
            best_other = max(others, key=lambda n: others[n])
            mine = row[DEFAULT].tokens_per_second
            ratio = mine / others[best_other] if others[best_other] else None
            default_ok[p.name] = {
                "ratio": round(ratio, 3) if ratio else None,
                "best_other": best_other,
                "ratio_to_plain": round(mine / plain_tps, 3),
                "met": bool(ratio and ratio >= GOAL_DEFAULT and mine >= plain_tps),
            }
    same, total = identity_counts(cells, prompts, methods, greedy)
    best_ok = {} if greedy else best_fixed_goal(best)
    acceptance = None if greedy else acceptance_goal(cells, prompts, methods, greedy_ref, acceptance_k(ks))
    goals = {
        "adaptive_vs_best": adaptive_ok,
        "adaptive_met": all(v["met"] for v in adaptive_ok.values()) if adaptive_ok else None,
        "ngram_rewrite_vs_plain": ngram_ok,
        "ngram_met": all(v["met"] for v in ngram_ok.values()) if ngram_ok else None,
        "default_vs_best": default_ok,
        "default_met": all(v["met"] for v in default_ok.values()) if default_ok else None,
        "identical_met": same == total if total else None,
        "identical_runs": {"identical": same, "total": total},
        "best_fixed_vs_plain": best_ok,
        "best_fixed_met": all(v["met"] for v in best_ok.values()) if best_ok else None,
        "acceptance_vs_greedy": acceptance,
        "acceptance_met": acceptance["met"] if acceptance else None,
    }
    geo = {}
    for m in methods:
        ratios = [results[p.name][m.name]["ratio_to_plain"] for p in prompts]
        ratios = [r for r in ratios if r]
        geo[m.name] = round(math.exp(sum(math.log(r) for r in ratios) / len(ratios)), 3) if ratios else None
    return {
        "results": results,
        "geomean_ratio_to_plain": geo,
        "best_fixed_k": best,
        "costs": cost_summary(cells, ks, methods),
        "goals": goals,
    }


def expects_identity(method: Method, greedy: bool) -> bool:
    """Must this method's output equal plain's at the same seed? Greedy: always;
    sampled: under the coupled sampler (rejection keeps the distribution only)."""
    return method.name != "plain" and (greedy or method.sampler == "coupled")


def identity_counts(
    cells: dict[str, dict[str, Cell]], prompts: Sequence[BenchPrompt], methods: Sequence[Method], greedy: bool
) -> tuple[int, int]:
    """``(identical, total)`` runs among those expected to equal plain's run of their repeat."""
    same = total = 0
    for p in prompts:
        plain = cells[p.name].get("plain")
        if plain is None:
            continue
        for m in methods:
            if expects_identity(m, greedy):
                pairs = list(zip(cells[p.name][m.name].runs, plain.runs))
                total += len(pairs)
                same += sum(r.token_ids == ref.token_ids for r, ref in pairs)
    return same, total


def best_fixed_goal(best: dict[str, Any]) -> dict[str, Any]:
    """Per prompt: the best fixed k's ratio to plain against the sampled goal."""
    return {
        p: {
            "k": b["k"],
            "ratio": b["ratio_to_plain"],
            "met": bool(b["ratio_to_plain"] and b["ratio_to_plain"] >= GOAL_BEST_FIXED),
        }
        for p, b in best.items()
    }


def acceptance_k(ks: Sequence[int]) -> int:
    """The k at which sampled acceptance is compared with greedy: 4, else the largest asked."""
    return ACCEPTANCE_K if ACCEPTANCE_K in ks else max(ks)


def _model_method(methods: Sequence[Method], k: int, sampler: str) -> Method | None:
    return next(
        (
            m
            for m in methods
            if m.settings.get("source") == "model" and m.settings.get("n_draft") == k and m.sampler == sampler
        ),
        None,
    )


def acceptance_goal(
    cells: dict[str, dict[str, Cell]],
    prompts: Sequence[BenchPrompt],
    methods: Sequence[Method],
    greedy_ref: dict[str, Cell] | None,
    k: int,
) -> dict[str, Any] | None:
    """Coupled acceptance at k over greedy acceptance at k on the same prompts
    (pooled over prompts for the goal; per prompt, and rejection's, for reading)."""
    coupled = _model_method(methods, k, "coupled")
    if coupled is None or not greedy_ref:
        return None
    rejection = _model_method(methods, k, "rejection")

    def rates(cell_of: Callable[[str], Cell]) -> tuple[float | None, dict[str, float | None]]:
        per = {p.name: cell_of(p.name).acceptance_rate for p in prompts}
        return Cell([r for p in prompts for r in cell_of(p.name).runs]).acceptance_rate, per

    c_all, c_per = rates(lambda p: cells[p][coupled.name])
    g_all, g_per = rates(lambda p: greedy_ref[p])
    r_all, r_per = rates(lambda p: cells[p][rejection.name]) if rejection else (None, {})
    ratio = _ratio(c_all, g_all)
    out: dict[str, Any] = {
        "k": k,
        "coupled": _round(c_all),
        "greedy": _round(g_all),
        "rejection": _round(r_all),
        "ratio": ratio,
        "met": ratio is not None and ratio >= GOAL_ACCEPTANCE,
        "prompts": {},
    }
    for p in prompts:
        entry = {"coupled": _round(c_per[p.name]), "greedy": _round(g_per[p.name])}
        if rejection:
            entry["rejection"] = _round(r_per[p.name])
        entry["ratio"] = _ratio(c_per[p.name], g_per[p.name])
        out["prompts"][p.name] = entry
    return out


# -- the sampler's own cost -------------------------------------------------------------

SAMPLER_VOCABS = (49_152, 262_144)  # SmolLM2 / Llama-3-like sizes, and Gemma 3's
SAMPLER_ROWS = 64
SYNTHETIC_HEAD = 256  # top logits a resized row keeps as they are


def target_rows(
    speculator: Any, replies: Sequence[tuple[str, Sequence[int]]], system: str = "", n: int = SAMPLER_ROWS
) -> tuple[list[np.ndarray], list[list[int]]]:
    """Up to ``n`` of the target's logits rows at reply positions — the rows a verify
    step samples from — with the history each row follows (for penalty windows).

    ``replies``: (prompt, reply tokens) pairs, e.g. the bench's plain runs. The
    replies are decoded again as one batch per prompt; both caches are emptied after.
    """
    from .engine.chat import prompt_tokens

    ctx = speculator.target_cache.ctx
    rows: list[np.ndarray] = []
    histories: list[list[int]] = []
    try:
        for text, reply in replies:
            prompt = prompt_tokens(speculator.target, speculator.template, messages_for(text, system))
            room = min(n - len(rows), ctx.n_batch, ctx.n_ctx - len(prompt) + 1)
            batch = [prompt[-1], *reply[:-1]][: max(room, 0)]
            if not batch:
                continue
            speculator.forget()
            ctx.prefill(prompt[:-1], 0)
            rows += list(ctx.decode(batch, len(prompt) - 1, len(batch)))
            histories += [[*prompt, *reply[:i]] for i in range(len(batch))]
            if len(rows) >= n:
                break
    finally:
        speculator.forget()  # the bookkeeping knew nothing of these decodes
    return rows, histories


def resize_row(row: np.ndarray, size: int, rng: np.random.Generator, head: int = SYNTHETIC_HEAD) -> np.ndarray:
    """A logits row of ``size`` tokens with ``row``'s spread: its ``head`` largest logits
    once each (what the filters keep), the rest drawn from its other logits (what
    the thresholds scan), all at random ids."""
    top = top_ids(row, head)
    rest = np.delete(row, top)
    n_fill = size - top.shape[0]
    fill = rng.choice(rest, n_fill, replace=n_fill > rest.shape[0])
    out = np.concatenate([row[top], fill]).astype(np.float32)
    return out[rng.permutation(size)]


def time_sampler(
    rows: Sequence[np.ndarray], params: SamplingParams, windows: Sequence[PenaltyWindow | None], passes: int = 3
) -> dict[str, float]:
    """Median µs per row of a verify row's sampling work: candidates (penalties,
    filters, temperature) and the Gumbel pick; the first pass warms caches too."""
    cand: list[int] = []
    pick: list[int] = []
    total: list[int] = []
    for _ in range(passes):
        for i, row in enumerate(rows):
            t0 = time.perf_counter_ns()
            c = candidates(row, params, windows[i])
            t1 = time.perf_counter_ns()
            gumbel_pick(c, 0, i)
            t2 = time.perf_counter_ns()
            cand.append(t1 - t0)
            pick.append(t2 - t1)
            total.append(t2 - t0)
    return {
        "per_row": round(statistics.median(total) / 1000, 1),
        "candidates": round(statistics.median(cand) / 1000, 1),
        "pick": round(statistics.median(pick) / 1000, 1),
    }


def sampler_cost(
    rows: Sequence[np.ndarray], histories: Sequence[Sequence[int]], params: SamplingParams
) -> dict[str, Any]:
    """The sampler's µs per verify row at each of :data:`SAMPLER_VOCABS` (and the
    target's own size): the target's own rows at its size, resized ones elsewhere.

    Greedy settings are measured at temperature 0.8 (greedy itself is one argmax).
    """
    if params.greedy:
        params = dataclasses.replace(params, temperature=0.8)
    out: dict[str, Any] = {
        "temperature": params.temperature,
        "top_k": params.top_k,
        "top_p": params.top_p,
        "min_p": params.min_p,
        "penalised": params.penalised,
        "n_rows": len(rows),
        "vocab": {},
    }
    if not rows:
        return out
    own = rows[0].shape[0]
    rng = np.random.default_rng(0)
    for size in sorted({*SAMPLER_VOCABS, own}):
        real = size == own
        sized = rows if real else [resize_row(r, size, rng) for r in rows]
        windows = [
            PenaltyWindow(params.repeat_last_n, [t for t in h if t < size]) if params.penalised else None
            for h in histories
        ]
        out["vocab"][size] = {**time_sampler(sized, params, windows), "rows": "target" if real else "synthetic"}
    return out


# -- identity grid -------------------------------------------------------------------------

PENALTIES_OFF = {"repeat_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0}
PENALTIES_ON = {"repeat_penalty": 1.3, "presence_penalty": 0.2, "frequency_penalty": 0.2}
IDENTITY_TEMPERATURE = 0.8
IDENTITY_TOKENS = 48


def penalty_settings(params: SamplingParams) -> dict[str, dict[str, Any]]:
    """The grid's ``off`` and ``on`` overrides: ``on`` keeps configured penalties,
    else :data:`PENALTIES_ON` (over ``repeat_last_n`` tokens, 64 when it is 0)."""
    on = {k: getattr(params, k) for k in PENALTIES_ON} if params.penalised else dict(PENALTIES_ON)
    on["repeat_last_n"] = params.repeat_last_n if params.repeat_last_n != 0 else 64
    return {"off": dict(PENALTIES_OFF), "on": on}


@dataclass(frozen=True)
class IdentityCase:
    """One speculative reply of the grid against plain sampling with the same seed."""

    prompt: str
    sampler: str
    source: str
    k: int | str
    penalties: str
    seed: int
    first_difference: int | None
    n_tokens: int
    error: str = ""

    @property
    def identical(self) -> bool:
        return self.first_difference is None and not self.error


def run_identity(
    speculator: Any,
    gen: Any,
    prompts: Sequence[BenchPrompt],
    ks: Sequence[int | str],
    sources: Sequence[str],
    samplers: Sequence[str],
    base_seed: int,
    progress: Progress | None = None,
    system: str = "",
) -> list[IdentityCase]:
    """Every (prompt, penalties, sampler, source, k): its reply against the plain reply
    with the same seed (prompt i uses ``repeat_seed(base_seed, i)``)."""
    cases: list[IdentityCase] = []
    for i, p in enumerate(prompts):
        seed = repeat_seed(base_seed, i)
        for pen, overrides in penalty_settings(gen.sampling).items():
            sampling = dataclasses.replace(gen.sampling, seed=seed, **overrides)
            g = dataclasses.replace(gen, sampling=sampling, max_tokens=prompt_tokens_cap(gen, p))
            speculator.update(enabled=False)
            ref = run_once(speculator, p.text, g, system)
            if progress:
                progress.update(f"{p.name} plain, penalties {pen}")
            for sampler in samplers:
                gs = dataclasses.replace(g, sampling=dataclasses.replace(g.sampling, sampler=sampler))
                for source in sources:
                    for k in ks:
                        speculator.update(enabled=True, source=source, n_draft=k)
                        run = run_once(speculator, p.text, gs, system)
                        error = run.error if run.reason == "error" else ref.error if ref.reason == "error" else ""
                        diff = first_difference(ref.token_ids, run.token_ids)
                        cases.append(IdentityCase(p.name, sampler, source, k, pen, seed, diff, run.n_tokens, error))
                        if progress:
                            progress.update(f"{p.name} {source} k={k} {sampler}, penalties {pen}")
    return cases


def identity_summary(cases: Sequence[IdentityCase], greedy: bool) -> dict[str, Any]:
    """Identity share per (sampler, source, k, penalties) and overall; the mismatches.

    ``met``: every case expected to be identical is (greedy, or the coupled
    sampler); ``None`` when none is expected (rejection only).
    """
    grid: dict[tuple[str, str, str, str], list[IdentityCase]] = {}
    for c in cases:
        grid.setdefault((c.sampler, c.source, str(c.k), c.penalties), []).append(c)
    rows = []
    for (sampler, source, _, pen), group in grid.items():
        same = sum(c.identical for c in group)
        rows.append(
            {"sampler": sampler, "source": source, "k": group[0].k, "penalties": pen,
             "identical": same, "total": len(group), "share": round(same / len(group), 4)}
        )  # fmt: skip
    expected = [c for c in cases if greedy or c.sampler == "coupled"]
    return {
        "grid": rows,
        "overall": _share(expected or cases),  # the cases that must be identical, when there are any
        "by_sampler": {
            s: _share([c for c in cases if c.sampler == s]) for s in dict.fromkeys(c.sampler for c in cases)
        },
        "met": all(c.identical for c in expected) if expected else None,
        "mismatches": [dataclasses.asdict(c) for c in cases if not c.identical],
    }


def _share(cases: Sequence[IdentityCase]) -> dict[str, Any]:
    same = sum(c.identical for c in cases)
    return {"identical": same, "total": len(cases), "share": round(same / len(cases), 4) if cases else None}


def render_identity(report: dict[str, Any]) -> str:
    """The identity grid as text: rows (sampler, source, k), columns penalties off/on."""
    meta = report["meta"]
    lines = [
        f"skippy-tui bench --identity — target {meta['target']}, draft {meta['draft'] or 'none'}",
        f"same-seed identity with plain decoding: {_sampling_label(report, identity=True)}, "
        f"max {meta['max_tokens']} tokens (long-form x2), {len(meta['prompts'])} prompts, "
        f"seed {report['seed']} + prompt index",
        f"verify: {meta['verify']}",
        "penalties on: " + ", ".join(f"{k} {v:g}" for k, v in report["penalties"]["on"].items()),
        "",
    ]
    pens = list(report["penalties"])
    cells: dict[tuple[str, str, str], dict[str, str]] = {}
    for r in report["grid"]:
        cells.setdefault((r["sampler"], r["source"], str(r["k"])), {})[r["penalties"]] = (
            f"{r['identical']}/{r['total']} {r['share']:.0%}"
        )
    lines.append(f"{'sampler':<10}{'source':<8}{'k':<6}" + "".join(f"penalties {p}".rjust(16) for p in pens))
    for (sampler, source, k), by_pen in cells.items():
        lines.append(f"{sampler:<10}{source:<8}{k:<6}" + "".join(by_pen.get(p, "-").rjust(16) for p in pens))
    o = report["overall"]
    greedy = not report["temperature"]
    lines.append("")
    for sampler, b in report["by_sampler"].items():
        expected = greedy or sampler == "coupled"
        verdict = _yes(b["identical"] == b["total"]) if expected else "reported only (same distribution, not tokens)"
        lines.append(f"{sampler}: {b['identical']}/{b['total']} identical ({_fmt(b['share'], '.1%')}) — {verdict}")
    if len(report["by_sampler"]) > 1:
        lines.append(f"overall (must be identical): {o['identical']}/{o['total']} — {_yes(report['met'])}")
    shown = [c for c in report["mismatches"] if greedy or c["sampler"] == "coupled"]
    if len(shown) < len(report["mismatches"]):
        lines.append(f"({len(report['mismatches']) - len(shown)} rejection-sampler mismatches: listed in the JSON)")
    if shown:
        lines.append("mismatches (first differing token index):")
        for c in shown:
            what = f"error: {c['error']}" if c["error"] else f"differs at token {c['first_difference']}"
            lines.append(
                f"  {c['prompt']}  {c['source']} k={c['k']} {c['sampler']}, penalties {c['penalties']}, "
                f"seed {c['seed']}: {what}"
            )
    return "\n".join(lines)


# -- text output -------------------------------------------------------------------------


def render_text(report: dict[str, Any]) -> str:
    """The side-by-side table and the details, as plain text."""
    meta = report["meta"]
    methods = meta["methods"]
    lines = [
        f"skippy-tui bench — target {meta['target']}, draft {meta['draft'] or 'none'}",
        f"{meta['threads']} threads, {_sampling_label(report)}, max {meta['max_tokens']} tokens "
        f"(long-form x2), median of {meta['repeats']} repeat(s), n_draft_max {meta['n_draft_max']}",
    ]
    load = meta.get("loadavg_1min")
    if load and None not in load:
        busy = max(load) > meta["threads"] + 1.0  # more than this process's own threads
        note = " (other work competed for the CPUs: figures are noisy)" if busy else ""
        cpus = meta.get("cpus", "?")
        lines.append(f"{cpus} CPUs, 1-min load average {load[0]:.2f} at start, {load[1]:.2f} at end{note}")
    lines += [
        "",
        "tokens/s of decoding, prompt prefill of both models excluded (ratio to plain)",
    ]
    w = max(len(n) for n in report["results"]) + 2
    cw = max(15, max(len(m) for m in methods) + 2)
    lines.append("prompt".ljust(w) + "".join(m.rjust(cw) for m in methods))
    for p, row in report["results"].items():
        cells = []
        for m in methods:
            r = row[m]
            cell = f"{r['tokens_per_second']:.1f}"
            if m != "plain" and r["ratio_to_plain"] is not None:
                cell += f" {r['ratio_to_plain']:.2f}x"
            cells.append(cell.rjust(cw))
        lines.append(p.ljust(w) + "".join(cells))
    geo = report["geomean_ratio_to_plain"]
    lines.append("geomean".ljust(w) + "".join((_fmt(geo[m], ".2f") + "x").rjust(cw) for m in methods))
    lines += ["", "acceptance rate / mean accepted length (draft tokens per step, bonus not counted)"]
    lines.append("prompt".ljust(w) + "".join(m.rjust(cw) for m in methods if m != "plain"))
    for p, row in report["results"].items():
        cells = []
        for m in methods:
            if m == "plain":
                continue
            r = row[m]
            cells.append(f"{_fmt(r['acceptance_rate'], '.0%')} / {_fmt(r['mean_accepted_length'], '.2f')}".rjust(cw))
        lines.append(p.ljust(w) + "".join(cells))
    lines += ["", "acceptance by position (all prompts' steps pooled per method)"]
    for m in methods:
        if m == "plain":
            continue
        pooled = _pooled_positions(report, m)
        if pooled:
            lines.append(f"  {m:<12}" + " ".join(f"{i + 1}:{a:.0%}" for i, a in enumerate(pooled)))
    lines += ["", "k chosen by auto / ngram (mean k, share of plain steps)"]
    for p, row in report["results"].items():
        parts = [f"{m} {row[m]['mean_k']:.1f}, {row[m]['plain_step_share']:.0%}" for m in ("auto", "ngram") if m in row]
        lines.append(f"  {p:<{w}}" + ";  ".join(parts))
    lines += ["", "token-identical to plain " + ("(greedy)" if meta["greedy"] else "(same seed per repeat)")]
    for p, row in report["results"].items():
        lines.append(f"  {p:<{w}}" + _identity_line(row, methods, meta["greedy"]))
    c = report["costs"]
    lines += ["", "costs (medians over every step of every run)"]
    lines.append("  verify ms by batch size: " + "  ".join(f"{b}:{v:.1f}" for b, v in c["verify_ms_by_batch"].items()))
    lines.append(
        f"  draft ms per token: {_fmt(c['draft_ms_per_token'])} (model), "
        f"{_fmt(c['ngram_ms_per_lookup'], '.3f')} (n-gram lookup);  "
        f"draft sync per step: {_fmt(c['sync_ms_per_step'])} ms"
    )
    if c.get("draft_prefill_ms") is not None:
        lines.append(f"  draft's prefill of a prompt (not in tokens/s): {c['draft_prefill_ms']:.0f} ms")
    if c["break_even_acceptance"]:
        lines.append(
            "  break-even acceptance per position: "
            + "  ".join(f"k={k}:{_fmt(v, '.0%', 'never')}" for k, v in c["break_even_acceptance"].items())
        )
    lines += _sampler_cost_lines(report.get("sampler_cost_us"))
    if report["best_fixed_k"]:
        lines.append(
            "  best fixed k: "
            + "  ".join(
                f"{p} k={b['k']} ({_fmt(b['ratio_to_plain'], '.2f')}x)" for p, b in report["best_fixed_k"].items()
            )
        )
    g = report["goals"]
    lines += ["", "goals"]
    a = g.get("acceptance_vs_greedy")
    if a:
        lines.append(
            f"  coupled acceptance at k={a['k']} >= {GOAL_ACCEPTANCE} x greedy: {_yes(a['met'])}  "
            f"{_fmt(a['coupled'], '.0%')} vs {_fmt(a['greedy'], '.0%')} = {_fmt(a['ratio'], '.2f')}"
            + (f"  (rejection {_fmt(a['rejection'], '.0%')})" if a["rejection"] is not None else "")
        )
    if g.get("best_fixed_vs_plain"):
        lines.append(
            f"  best fixed k >= {GOAL_BEST_FIXED} x plain: {_yes(g['best_fixed_met'])}  "
            + "  ".join(f"{p} {_fmt(v['ratio'], '.2f')}x" for p, v in g["best_fixed_vs_plain"].items())
        )
    if g["adaptive_vs_best"]:
        lines.append(
            f"  adaptive >= 0.95 x max(plain, best fixed k): {_yes(g['adaptive_met'])}  "
            + "  ".join(f"{p} {v['ratio']:.2f}" for p, v in g["adaptive_vs_best"].items())
        )
    if g.get("default_vs_best"):
        lines.append(
            f"  default (auto source, auto k) >= {GOAL_DEFAULT} x best other method and >= plain: "
            f"{_yes(g['default_met'])}  "
            + "  ".join(
                f"{p} {_fmt(v['ratio'], '.2f')} of {v['best_other']}, {_fmt(v['ratio_to_plain'], '.2f')}x plain"
                for p, v in g["default_vs_best"].items()
            )
        )
    if g["ngram_rewrite_vs_plain"]:
        lines.append(
            f"  n-gram >= 1.5 x plain on rewrite prompts: {_yes(g['ngram_met'])}  "
            + "  ".join(f"{p} {v['ratio']:.2f}x" for p, v in g["ngram_rewrite_vs_plain"].items())
        )
    if g["identical_met"] is not None:
        runs = g["identical_runs"]
        which = "greedy outputs" if meta["greedy"] else "coupled outputs (same seed)"
        lines.append(
            f"  {which} token-identical to plain: {_yes(g['identical_met'])}  "
            f"({runs['identical']}/{runs['total']} runs)"
        )
    return "\n".join(lines)


def _sampling_label(report: dict[str, Any], identity: bool = False) -> str:
    """``greedy`` or ``T=0.8 top-k 40 top-p 0.95 min-p 0.05, coupled sampler (+ rejection as 'rej')``
    (the identity grid sets the penalties itself and has no extra columns)."""
    s = report.get("sampling") or {}
    if not report.get("temperature"):
        return "greedy"
    text = f"T={report['temperature']:g} top-k {s.get('top_k')} top-p {s.get('top_p')} min-p {s.get('min_p')}"
    pens = [f"{k} {s[k]:g}" for k, off in PENALTIES_OFF.items() if s.get(k, off) != off]
    if pens and not identity:
        text += ", " + ", ".join(pens) + f" (last {s.get('repeat_last_n')})"
    samplers = report.get("samplers") or [report.get("sampler")]
    return (
        text
        + f", {samplers[0]} sampler"
        + "".join(f" (+ {x})" if identity else f" (+ {x} as '{SHORT[x]}')" for x in samplers[1:])
    )


def _identity_line(row: dict[str, Any], methods: Sequence[str], greedy: bool) -> str:
    """Which methods differ from plain: unexpected ones (coupled or greedy) first."""
    bad = [m for m in methods if row[m]["identical_to_plain"] is False]
    unexpected = [m for m in bad if greedy or row[m]["sampler"] == "coupled"]
    parts = [f"{m} (at token {row[m]['first_difference']})" for m in unexpected]
    text = "DIFFERENT: " + ", ".join(parts) if parts else "all methods" if not bad else "all coupled methods"
    rest = [m for m in bad if m not in unexpected]
    return text + (f"; rejection differs as it may: {', '.join(rest)}" if rest else "")


def _sampler_cost_lines(cost: dict[str, Any] | None) -> list[str]:
    if not cost or not cost.get("vocab"):
        return []
    lines = [
        f"  sampler per verify row (candidates + Gumbel pick; T={cost['temperature']:g}, top-k {cost['top_k']}, "
        f"top-p {cost['top_p']}, min-p {cost['min_p']}, penalties {'on' if cost['penalised'] else 'off'}; "
        f"median over {cost['n_rows']} rows x 3):"
    ]
    for size, v in cost["vocab"].items():
        src = "the target's own logits" if v["rows"] == "target" else "synthetic: the target's rows resized"
        lines.append(
            f"    {int(size):>7,} tokens: {v['per_row']:.0f} µs (candidates {v['candidates']:.0f}, "
            f"pick {v['pick']:.0f}) — {src}"
        )
    return lines


def _yes(v: bool | None) -> str:
    return "n/a" if v is None else ("met" if v else "NOT met")


def _pooled_positions(report: dict[str, Any], method: str) -> list[float]:
    """Acceptance by position pooled over prompts (weighted by drafted counts is not kept: plain mean)."""
    rows = [row[method]["acceptance_by_position"] for row in report["results"].values()]
    n = max((len(r) for r in rows), default=0)
    out = []
    for i in range(n):
        vals = [r[i] for r in rows if i < len(r) and r[i] is not None]
        if vals:
            out.append(sum(vals) / len(vals))
    return out


# -- command -------------------------------------------------------------------------------


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


def _sampler_list(text: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    if not names or any(n not in SAMPLERS for n in names) or len(set(names)) < len(names):
        raise argparse.ArgumentTypeError(f"expected distinct samplers from {', '.join(SAMPLERS)}, got {text!r}")
    return names


def add_bench_parser(sub: Any) -> argparse.ArgumentParser:
    """Register ``skippy-tui bench`` on the CLI's subparsers."""
    # "resolve": the bench's --sampler (a list) replaces the model flags' single choice
    b = sub.add_parser(
        "bench", help="measure plain vs speculative decoding on a fixed prompt suite", conflict_handler="resolve"
    )
    b.add_argument("--repeats", type=int, default=5, metavar="N", help="runs per prompt and method (median; default 5)")
    b.add_argument(
        "--k", type=_int_list, default=None, metavar="K,K",
        help="fixed k values (default 1,2,4,8; with --identity 1,4,8, auto always added)",
    )  # fmt: skip
    b.add_argument(
        "--prompts", type=_prompt_list, default=None, metavar="NAMES", help="subset of the suite, by name or kind"
    )
    b.add_argument(
        "--with-combined", action="store_true", default=False, help="(kept for old scripts: ngram+model always runs)"
    )
    b.add_argument("--no-warmup", action="store_true", default=False, help="skip the unmeasured warm-up pass")
    b.add_argument(
        "--identity", action="store_true", default=False,
        help="same-seed identity grid instead: prompts x k x source x penalties off/on (T=0.8, 48 tokens by default)",
    )  # fmt: skip
    b.add_argument(
        "--profiles", action="store_true", default=False,
        help="the exact and fast profiles side by side instead: tokens/s plain and speculative, "
        "replies differing from plain and the target's top-2 logit margin there",
    )  # fmt: skip
    b.add_argument("--json", action="store_true", default=False, help="print the report as JSON on stdout")
    b.add_argument("--save", type=Path, default=None, metavar="FILE", help="also write the JSON report to FILE")
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
    from .engine.loader import load_speculator

    if args.repeats < 1:
        sys.stderr.write("skippy-tui: error: --repeats must be >= 1\n")
        return 2
    if args.save is not None and not (args.save.parent.is_dir() and os.access(args.save.parent, os.W_OK)):
        # checked first: a bench takes minutes and its figures must not be lost at the end
        sys.stderr.write(f"skippy-tui: error: --save {args.save}: no writable folder {args.save.parent}\n")
        return 2
    samplers = getattr(args, "sampler", None)
    if isinstance(samplers, tuple):
        args.sampler = samplers[0]  # the config takes the first; the others become extra columns
    cfg = config_from_args(args)
    if "generation.max_tokens" not in cfg.present:
        cfg.set("generation", "max_tokens", IDENTITY_TOKENS if args.identity else DEFAULT_BENCH_TOKENS)
    if args.identity and "sampling.temperature" not in cfg.present:
        cfg.set("sampling", "temperature", IDENTITY_TEMPERATURE)
    ks = args.k or (IDENTITY_KS if args.identity else DEFAULT_KS)
    spec = cfg.engine_spec()
    # the load checks capacity for the largest k any method will ask for
    k_top = max(*ks, spec.speculation.n_draft_max)
    if args.k:  # a --k the batch cannot hold is a bad flag (exit 2), found before any weights load
        from .engine.errors import BoundsError
        from .engine.loader import check_capacity

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
        from .bench_profiles import cmd_profiles, render_profiles

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
        if args.identity:
            report = head | _identity_report(args, speculator, gen, prompts, ks, samplers, base_seed, system)
        else:
            report = head | _bench_report(args, speculator, gen, prompts, ks, samplers, base_seed, system)
        report["meta"] = _meta(speculator, spec, gen, prompts, ks) | {
            "repeats": 1 if args.identity else args.repeats,
            "methods": report.pop("methods", []),
            "seconds": round(time.perf_counter() - t0, 1),
            "loadavg_1min": [load_before, _loadavg()],
        }
    finally:
        speculator.close()
    return _emit(args, report, render_identity(report) if args.identity else render_text(report))


def _emit(args: argparse.Namespace, report: dict[str, Any], text: str) -> int:
    """Print the report (text, or JSON with ``--json``) and write ``--save``; the exit status."""
    from .engine.jsoncache import atomic_write_text

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
    has_model = speculator.model_drafter is not None
    methods = methods_for(ks, has_model, samplers)
    reference = has_model and not greedy
    total = len(prompts) * (len(methods) * args.repeats + reference) + (0 if args.no_warmup else len(methods))
    progress = Progress(total, enabled=not args.no_progress)
    try:
        cells = run_bench(
            speculator, gen, prompts, methods, args.repeats, not args.no_warmup, progress, system, base_seed
        )
        greedy_ref = (
            run_greedy_reference(speculator, gen, prompts, acceptance_k(ks), progress, system) if reference else None
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
    sources = ("model", "ngram", "auto") if speculator.model_drafter is not None else ("ngram", "auto")
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


def _meta(speculator: Any, spec: Any, gen: Any, prompts: Sequence[BenchPrompt], ks: Sequence[int]) -> dict[str, Any]:
    """What ran where: models, threads, context, lengths; how verification stays exact."""
    has_model = speculator.model_drafter is not None
    inv = speculator.invariance
    return {
        "target": Path(speculator.target.path).name,
        "target_path": str(speculator.target.path),
        "draft": Path(speculator.model_drafter.model.path).name if has_model else None,
        "draft_path": str(speculator.model_drafter.model.path) if has_model else None,
        "threads": _threads(spec.target.load.threads),
        "n_ctx": speculator.target_cache.ctx.n_ctx,
        "n_vocab": speculator.target.n_vocab,
        "greedy": gen.sampling.greedy,
        "max_tokens": gen.max_tokens,
        "ks": list(ks),
        "n_draft_max": spec.speculation.n_draft_max,
        "prompts": {p.name: {"kind": p.kind, "max_tokens": prompt_tokens_cap(gen, p)} for p in prompts},
        "verify": inv.label() if inv is not None else "not checked (exact = false): same-seed identity is approximate",
        "cpus": _cpus(),
    }


def _cpus() -> int:
    from .engine.native import default_threads

    return default_threads()


def _threads(configured: int) -> int:
    from .engine.native import default_threads

    return configured if configured > 0 else default_threads()
