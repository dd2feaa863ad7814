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
and — with greedy sampling — whether the output was token-identical to plain.
Over all runs: the target's verify ms by batch size, the draft's ms per token,
the break-even acceptance for each k (the per-position acceptance at which k
ties plain decoding, from the measured costs), and the best fixed k.

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
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .engine.adaptive import Costs, break_even_acceptance

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


@dataclass(frozen=True)
class BenchPrompt:
    """One prompt of the suite. ``length``: its max tokens as a multiple of ``--max-tokens``."""

    name: str
    kind: str
    text: str
    length: float = 1.0


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
)
WARMUP_PROMPT = "Name three colours."

DEFAULT_KS = (1, 2, 4, 8)


@dataclass(frozen=True)
class Method:
    """A decoding method: its column name and the speculation settings it runs with."""

    name: str
    settings: dict[str, Any]
    needs_model: bool = False


def methods_for(ks: Sequence[int], has_model: bool, extra: Sequence[str] = ()) -> list[Method]:
    """plain, k=… (fixed), auto, ngram (and ``ngram+model`` when asked); model methods only with a draft."""
    out = [Method("plain", {"enabled": False})]
    if has_model:
        out += [Method(f"k={k}", {"enabled": True, "source": "model", "n_draft": k}, True) for k in ks]
        out.append(Method("auto", {"enabled": True, "source": "model", "n_draft": "auto"}, True))
    out.append(Method("ngram", {"enabled": True, "source": "ngram", "n_draft": "auto"}))
    if has_model and "ngram+model" in extra:
        out.append(Method("ngram+model", {"enabled": True, "source": "ngram+model", "n_draft": "auto"}, True))
    return out


@dataclass
class RunResult:
    """One generation: totals and the per-step measurements the summary needs."""

    tokens_per_second: float
    n_tokens: int
    n_steps: int
    n_drafted: int
    n_accepted: int
    n_spec_steps: int
    draft_ms: float
    verify_by_batch: dict[int, list[float]]
    draft_call_ms: list[float]
    sync_ms: list[float]
    drafted_at: list[int]
    accepted_at: list[int]
    ks: list[int]
    token_ids: tuple[int, ...]
    reason: str
    error: str = ""
    draft_prefill_ms: float = 0.0


def run_once(speculator: Any, prompt: str, gen: Any, system: str = "") -> RunResult:
    """Generate one reply from an empty cache and collect its measurements."""
    speculator.forget()
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    verify: dict[int, list[float]] = {}
    calls: list[float] = []
    syncs: list[float] = []
    drafted_at: list[int] = []
    accepted_at: list[int] = []
    ks: list[int] = []
    draft_ms = 0.0
    prev_k = 0
    n_spec = 0  # steps with a proposal (as AcceptanceStats counts them)
    finish = None
    draft_prefill_ms = 0.0
    for ev in speculator.run(messages, gen):
        if ev.type == "reply_started":
            draft_prefill_ms = ev.draft_prefill_ms  # the draft's prompt fill, outside generation time
        elif ev.type == "step":
            m = len(ev.proposed)
            ks.append(ev.k)
            n_spec += m > 0
            verify.setdefault(m + 1, []).append(ev.verify_ms)
            if ev.k > 0:
                draft_ms += ev.draft_ms
                calls.append(ev.draft_ms / max(1, min(ev.k, m + 1)))
                if prev_k > 0:
                    syncs.append(ev.sync_ms)
            while len(drafted_at) < m:
                drafted_at.append(0)
                accepted_at.append(0)
            for i in range(m):
                drafted_at[i] += 1
                accepted_at[i] += i < ev.n_accepted
            prev_k = ev.k
        elif ev.type == "finish":
            finish = ev
    assert finish is not None
    return RunResult(
        tokens_per_second=decode_rate(finish.n_tokens, finish.generation_ms),
        n_tokens=finish.n_tokens,
        n_steps=finish.n_steps,
        n_drafted=finish.n_drafted,
        n_accepted=finish.n_accepted,
        n_spec_steps=n_spec,
        draft_ms=draft_ms,
        verify_by_batch=verify,
        draft_call_ms=calls,
        sync_ms=syncs,
        drafted_at=drafted_at,
        accepted_at=accepted_at,
        ks=ks,
        token_ids=finish.token_ids,
        reason=finish.reason,
        error=finish.error,
        draft_prefill_ms=draft_prefill_ms,
    )


def decode_rate(n_tokens: int, decode_ms: float) -> float:
    """Tokens per second of decoding (the prompt's prefill into either model excluded)."""
    return n_tokens * 1000.0 / decode_ms if decode_ms > 0 else 0.0


@dataclass
class Cell:
    """All repeats of one (prompt, method)."""

    runs: list[RunResult] = field(default_factory=list)

    @property
    def tokens_per_second(self) -> float:
        return statistics.median(r.tokens_per_second for r in self.runs) if self.runs else 0.0

    def summary(self, plain: Cell | None, greedy: bool) -> dict[str, Any]:
        runs = self.runs
        drafted = sum(r.n_drafted for r in runs)
        accepted = sum(r.n_accepted for r in runs)
        spec_steps = sum(r.n_spec_steps for r in runs)
        d_at = _sum_lists([r.drafted_at for r in runs])
        a_at = _sum_lists([r.accepted_at for r in runs])
        tps = self.tokens_per_second
        plain_tps = plain.tokens_per_second if plain is not None else 0.0
        identical = None
        if greedy and plain is not None and plain.runs:
            ref = plain.runs[0].token_ids
            identical = all(r.token_ids == ref for r in runs)
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


class Progress:
    """A progress bar on stderr (redrawn in place on a terminal, a line per prompt otherwise)."""

    def __init__(self, total: int, stream: Any = None, enabled: bool = True) -> None:
        self.total, self.done = total, 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.perf_counter()

    def update(self, label: str, advance: int = 1) -> None:
        self.done += advance
        if not self.enabled:
            return
        width = 24
        filled = int(width * self.done / max(self.total, 1))
        elapsed = time.perf_counter() - self.t0
        eta = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        bar = f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {label}"
        bar += f"  ({elapsed:.0f}s, ~{eta:.0f}s left)"
        if self.tty:
            self.stream.write("\r\x1b[K" + bar)
        else:
            self.stream.write(bar + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def run_bench(
    speculator: Any,
    gen: Any,
    prompts: Sequence[BenchPrompt],
    methods: Sequence[Method],
    repeats: int,
    warmup: bool = True,
    progress: Progress | None = None,
    system: str = "",
) -> dict[str, dict[str, Cell]]:
    """Every method on every prompt, ``repeats`` times; returns ``cells[prompt][method]``."""
    cells: dict[str, dict[str, Cell]] = {p.name: {m.name: Cell() for m in methods} for p in prompts}
    if warmup:
        short = dataclasses.replace(gen, max_tokens=min(gen.max_tokens, 32))
        for m in methods:
            speculator.update(**m.settings)
            run_once(speculator, WARMUP_PROMPT, short, system)
            if progress:
                progress.update(f"warm-up {m.name}")
    for r in range(repeats):
        order = list(methods[r % len(methods) :]) + list(methods[: r % len(methods)])
        for p in prompts:
            g = dataclasses.replace(gen, max_tokens=max(1, round(gen.max_tokens * p.length)))
            for m in order:
                speculator.update(**m.settings)
                cells[p.name][m.name].runs.append(run_once(speculator, p.text, g, system))
                if progress:
                    progress.update(f"{p.name} {m.name} (repeat {r + 1}/{repeats})")
    return cells


def cost_summary(cells: dict[str, dict[str, Cell]], ks: Sequence[int]) -> dict[str, Any]:
    """Verify ms by batch size, draft ms per token, sync ms, break-even acceptance per k."""
    verify: dict[int, list[float]] = {}
    model_calls: list[float] = []
    ngram_calls: list[float] = []
    syncs: list[float] = []
    prefills: list[float] = []
    for row in cells.values():
        for name, cell in row.items():
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
) -> dict[str, Any]:
    """The JSON-ready report: per-prompt results, costs, best k and the issue's goals."""
    results: dict[str, dict[str, Any]] = {}
    best: dict[str, Any] = {}
    adaptive_ok: dict[str, Any] = {}
    ngram_ok: dict[str, Any] = {}
    for p in prompts:
        row = cells[p.name]
        plain = row.get("plain")
        results[p.name] = {m.name: row[m.name].summary(plain, greedy) for m in methods}
        plain_tps = plain.tokens_per_second if plain else 0.0
        fixed = {k: row[f"k={k}"].tokens_per_second for k in ks if f"k={k}" in row}
        if fixed:
            kb = max(fixed, key=lambda k: fixed[k])
            best[p.name] = {"k": kb, "tokens_per_second": round(fixed[kb], 2)}
            best[p.name]["ratio_to_plain"] = round(fixed[kb] / plain_tps, 3) if plain_tps else None
            if "auto" in row:
                ref = max(plain_tps, fixed[kb])
                ratio = row["auto"].tokens_per_second / ref if ref else None
                met = bool(ratio and ratio >= 0.95)
                adaptive_ok[p.name] = {"ratio": round(ratio, 3) if ratio else None, "met": met}
        if p.kind == "rewrite" and "ngram" in row and plain_tps:
            ratio = row["ngram"].tokens_per_second / plain_tps
            ngram_ok[p.name] = {"ratio": round(ratio, 3), "met": ratio >= 1.5}
    identical = [r["identical_to_plain"] for row in results.values() for r in row.values()]
    goals = {
        "adaptive_vs_best": adaptive_ok,
        "adaptive_met": all(v["met"] for v in adaptive_ok.values()) if adaptive_ok else None,
        "ngram_rewrite_vs_plain": ngram_ok,
        "ngram_met": all(v["met"] for v in ngram_ok.values()) if ngram_ok else None,
        "identical_met": all(identical) if greedy and identical else None,
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
        "costs": cost_summary(cells, ks),
        "goals": goals,
    }


# -- text output -------------------------------------------------------------------------


def _fmt(v: Any, spec: str = ".2f", none: str = "-") -> str:
    return none if v is None else format(v, spec)


def render_text(report: dict[str, Any]) -> str:
    """The side-by-side table and the details, as plain text."""
    meta = report["meta"]
    methods = meta["methods"]
    lines = [
        f"skippy-tui bench — target {meta['target']}, draft {meta['draft'] or 'none'}",
        f"{meta['threads']} threads, {'greedy' if meta['greedy'] else 'sampled'}, max {meta['max_tokens']} tokens "
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
    cw = 15
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
    if meta["greedy"]:
        lines += ["", "token-identical to plain (greedy)"]
        for p, row in report["results"].items():
            bad = [m for m in methods if row[m]["identical_to_plain"] is False]
            lines.append(f"  {p:<{w}}" + ("all methods" if not bad else "DIFFERENT: " + ", ".join(bad)))
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
    if report["best_fixed_k"]:
        lines.append(
            "  best fixed k: "
            + "  ".join(
                f"{p} k={b['k']} ({_fmt(b['ratio_to_plain'], '.2f')}x)" for p, b in report["best_fixed_k"].items()
            )
        )
    g = report["goals"]
    lines += ["", "goals"]
    if g["adaptive_vs_best"]:
        lines.append(
            f"  adaptive >= 0.95 x max(plain, best fixed k): {_yes(g['adaptive_met'])}  "
            + "  ".join(f"{p} {v['ratio']:.2f}" for p, v in g["adaptive_vs_best"].items())
        )
    if g["ngram_rewrite_vs_plain"]:
        lines.append(
            f"  n-gram >= 1.5 x plain on rewrite prompts: {_yes(g['ngram_met'])}  "
            + "  ".join(f"{p} {v['ratio']:.2f}x" for p, v in g["ngram_rewrite_vs_plain"].items())
        )
    if g["identical_met"] is not None:
        lines.append(f"  greedy outputs token-identical to plain: {_yes(g['identical_met'])}")
    return "\n".join(lines)


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
    if not ks or any(k < 1 for k in ks):
        raise argparse.ArgumentTypeError(f"expected integers >= 1, got {text!r}")
    return ks


def _prompt_list(text: str) -> tuple[str, ...]:
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    known = {p.name for p in SUITE} | {p.kind for p in SUITE}
    bad = [n for n in names if n not in known]
    if bad or not names:
        what = bad[0] if bad else text
        raise argparse.ArgumentTypeError(f"unknown prompt {what!r}; known: {', '.join(sorted(known))}")
    return names


def add_bench_parser(sub: Any, add_model_flags: Callable[..., None]) -> argparse.ArgumentParser:
    """Register ``skippy-tui bench`` on the CLI's subparsers."""
    b = sub.add_parser("bench", help="measure plain vs speculative decoding on a fixed prompt suite")
    b.add_argument("--repeats", type=int, default=5, metavar="N", help="runs per prompt and method (median; default 5)")
    b.add_argument("--k", type=_int_list, default=DEFAULT_KS, metavar="K,K", help="fixed k values (default 1,2,4,8)")
    b.add_argument(
        "--prompts", type=_prompt_list, default=None, metavar="NAMES", help="subset of the suite, by name or kind"
    )
    b.add_argument("--with-combined", action="store_true", default=False, help="also run ngram+model")
    b.add_argument("--no-warmup", action="store_true", default=False, help="skip the unmeasured warm-up pass")
    b.add_argument("--json", action="store_true", default=False, help="print the report as JSON on stdout")
    b.add_argument("--save", type=Path, default=None, metavar="FILE", help="also write the JSON report to FILE")
    b.add_argument("--no-progress", action="store_true", default=False, help="no progress bar on stderr")
    add_model_flags(b, sub=True)
    b.set_defaults(func=cmd_bench)
    return b


DEFAULT_BENCH_TOKENS = 128


def cmd_bench(args: argparse.Namespace) -> int:
    from .cli import _stderr_progress, config_from_args
    from .engine.jsoncache import atomic_write_text
    from .engine.loader import load_speculator

    if args.repeats < 1:
        sys.stderr.write("skippy-tui: error: --repeats must be >= 1\n")
        return 2
    if args.save is not None and not (args.save.parent.is_dir() and os.access(args.save.parent, os.W_OK)):
        # checked first: a bench takes minutes and its figures must not be lost at the end
        sys.stderr.write(f"skippy-tui: error: --save {args.save}: no writable folder {args.save.parent}\n")
        return 2
    cfg = config_from_args(args)
    if "generation.max_tokens" not in cfg.present:
        cfg.set("generation", "max_tokens", DEFAULT_BENCH_TOKENS)
    spec = cfg.engine_spec()
    # the load checks capacity for the largest k any method will ask for
    k_top = max(*args.k, spec.speculation.n_draft_max)
    spec = dataclasses.replace(spec, speculation=dataclasses.replace(spec.speculation, n_draft=k_top, enabled=True))
    gen = cfg.generation()
    prompts = [p for p in SUITE if args.prompts is None or p.name in args.prompts or p.kind in args.prompts]
    speculator = load_speculator(spec, _stderr_progress() if not args.no_progress else (lambda s, f: None))
    try:
        has_model = speculator.model_drafter is not None
        methods = methods_for(args.k, has_model, ("ngram+model",) if args.with_combined else ())
        total = len(prompts) * len(methods) * args.repeats + (0 if args.no_warmup else len(methods))
        progress = Progress(total, enabled=not args.no_progress)
        system = cfg.get("generation", "system_prompt") or ""
        t0 = time.perf_counter()
        load_before = _loadavg()
        try:
            cells = run_bench(speculator, gen, prompts, methods, args.repeats, not args.no_warmup, progress, system)
        finally:
            progress.close()
        report = summarise(cells, prompts, methods, args.k, gen.sampling.greedy)
        ctx = speculator.target_cache.ctx
        report["meta"] = {
            "target": Path(speculator.target.path).name,
            "target_path": str(speculator.target.path),
            "draft": Path(speculator.model_drafter.model.path).name if has_model else None,
            "draft_path": str(speculator.model_drafter.model.path) if has_model else None,
            "threads": _threads(spec.target.load.threads),
            "n_ctx": ctx.n_ctx,
            "greedy": gen.sampling.greedy,
            "max_tokens": gen.max_tokens,
            "repeats": args.repeats,
            "ks": list(args.k),
            "n_draft_max": spec.speculation.n_draft_max,
            "methods": [m.name for m in methods],
            "prompts": {p.name: {"kind": p.kind, "max_tokens": round(gen.max_tokens * p.length)} for p in prompts},
            "seconds": round(time.perf_counter() - t0, 1),
            "cpus": _cpus(),
            "loadavg_1min": [load_before, _loadavg()],
        }
    finally:
        speculator.close()
    if args.json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        sys.stdout.write(render_text(report) + "\n")
    if args.save is not None:
        try:
            atomic_write_text(args.save, json.dumps(report, indent=2) + "\n")
        except OSError as e:
            sys.stderr.write(f"skippy-tui: error: cannot write {args.save}: {e.strerror or e}\n")
            return 1
    return 0


def _loadavg() -> float | None:
    """The 1-minute load average (other work competing for the CPUs), where the OS has one."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # pragma: no cover - not Unix
        return None


def _cpus() -> int:
    from .engine.native import default_threads

    return default_threads()


def _threads(configured: int) -> int:
    from .engine.native import default_threads

    return configured if configured > 0 else default_threads()
