"""The bench's results and their statistics: cells of runs, per-prompt summaries, costs, goals.

Per-step acceptance is accounted by :class:`~skippy_tui.engine.stats.AcceptanceStats`,
the same accumulator the engine and the app use; this module only pools and
rounds it into the report.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engine.policy.cost_model import Costs, break_even_acceptance
from ..engine.stats import AcceptanceStats
from .core import BenchPrompt, RollbackSample, RunResult, first_difference
from .core import ratio as _ratio
from .core import rounded as _round
from .suite import CONTROL, DEFAULT, MTP, Method, acceptance_k

# The goals (thresholds of the ratios the report computes)
GOAL_ADAPTIVE = 0.95  # auto >= 0.95 x max(plain, best fixed k), every prompt
GOAL_DEFAULT = 0.95  # the default configuration >= 0.95 x the best other method, and >= plain, every prompt
GOAL_NGRAM_REWRITE = 1.5  # n-gram >= 1.5 x plain on rewrite prompts
GOAL_BEST_FIXED = 1.05  # sampled: best fixed k >= 1.05 x plain, every prompt
GOAL_ACCEPTANCE = 0.85  # sampled: coupled acceptance at k=4 >= 0.85 x greedy acceptance
GOAL_ROLLBACK = 0.10  # a native (snapshot) rollback <= 0.10 x the verify of the same step's rows


@dataclass
class Cell:
    """All repeats of one (prompt, method)."""

    runs: list[RunResult] = field(default_factory=list)

    @property
    def tokens_per_second(self) -> float:
        return statistics.median(r.tokens_per_second for r in self.runs) if self.runs else 0.0

    def paired_ratio(self, other: Cell) -> float | None:
        """The median over repeats of this cell's tokens/s over ``other``'s in the same
        repeat (same seed: the same reply, greedy or under the coupled sampler); None
        without pairs.

        Sampled replies to one prompt differ in kind (a rewrite that follows its source
        runs at 150 tokens/s, the next, a paraphrase, at 55), so each method's median can
        land on a different reply, or on the same middle one; the paired ratio compares
        every method on the same replies."""
        runs = zip(self.runs, other.runs)
        pairs = [a.tokens_per_second / b.tokens_per_second for a, b in runs if b.tokens_per_second]
        return statistics.median(pairs) if pairs else None

    def acceptance(self) -> AcceptanceStats:
        """The runs' acceptance counts pooled (the engine's accumulator, merged run by run)."""
        pooled = AcceptanceStats()
        for r in self.runs:
            pooled.merge(r.acceptance())
        return pooled

    @property
    def acceptance_rate(self) -> float | None:
        """Accepted over drafted tokens, pooled over the runs; None when nothing was drafted."""
        acc = self.acceptance()
        return acc.acceptance_rate if acc.n_drafted else None

    def first_difference(self, plain: Cell) -> int | None:
        """The first token index where a run differs from plain's run of the same repeat
        (same seed), over all repeats; ``None`` when every run is token-identical."""
        diffs = [first_difference(p.token_ids, r.token_ids) for r, p in zip(self.runs, plain.runs)]
        diffs = [d for d in diffs if d is not None]
        return min(diffs) if diffs else None

    def by_source(self) -> dict[str, dict[str, float]]:
        """Per step kind (``model``, ``ngram``, ``plain``), pooled over the runs: ``steps``,
        ``tokens`` (committed), ``ms`` (sync + draft + verify; the per-step overhead left
        out), ``tokens_per_second`` and ``time_share`` (of all kinds' ms)."""
        pooled: dict[str, list[float]] = {}
        for r in self.runs:
            for kind, totals in r.by_source.items():
                pooled[kind] = [a + b for a, b in zip(pooled.get(kind, (0, 0, 0.0)), totals)]
        total = sum(ms for _, _, ms in pooled.values())
        return {
            kind: {
                "steps": int(steps),
                "tokens": int(tokens),
                "ms": round(ms, 1),
                "tokens_per_second": round(1000.0 * tokens / ms, 1) if ms > 0 else None,
                "time_share": round(ms / total, 3) if total > 0 else None,
            }
            for kind, (steps, tokens, ms) in sorted(pooled.items())
        }

    def summary(self, plain: Cell | None) -> dict[str, Any]:
        runs = self.runs
        acc = self.acceptance()
        drafted = acc.n_drafted
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
            # None, not AcceptanceStats' 0.0, where nothing was drafted: "no data", not "all rejected"
            "acceptance_rate": round(acc.acceptance_rate, 4) if drafted else None,
            "mean_accepted_length": round(acc.mean_accepted_length, 3) if acc.n_spec_steps else None,
            "acceptance_by_position": [round(a, 3) for a in acc.per_position],
            "draft_ms_per_token": round(sum(r.draft_ms for r in runs) / drafted, 3) if drafted else None,
            "draft_prefill_ms": round(statistics.median(r.draft_prefill_ms for r in runs), 1) if runs else 0.0,
            "mean_k": round(sum(ks) / len(ks), 2) if ks else 0.0,
            "plain_step_share": round(sum(1 for k in ks if k == 0) / len(ks), 3) if ks else 0.0,
            "by_source": self.by_source(),
            "rollback": rollback_summary([s for r in runs for s in r.rollbacks]),
            "identical_to_plain": identical,
            "first_difference": first,
            "errors": sorted({r.error for r in runs if r.reason == "error"}),
        }


def _median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def rollback_summary(samples: Sequence[RollbackSample]) -> dict[str, dict[str, Any]]:
    """Per way the target dropped rows (``snapshot``, ``restore``, ``kv``, ``reset``), over
    the steps that dropped any: ``steps``; mean rows ``dropped``, ``redecoded`` and
    ``verify_rows`` (what the same step's verify decoded); median ``ms`` of the rollback and
    ``verify_ms`` of the same steps; ``share_of_verify``, the median over steps of the
    rollback's ms over its own step's verify ms (a ratio per step, so a slow stretch of a
    shared machine slows both sides of it)."""
    by: dict[str, list[RollbackSample]] = {}
    for x in samples:
        by.setdefault(x.via, []).append(x)
    out: dict[str, dict[str, Any]] = {}
    for via, xs in sorted(by.items()):
        n = len(xs)
        shares = [x.ms / x.verify_ms for x in xs if x.verify_ms > 0]
        out[via] = {
            "steps": n,
            "dropped": round(sum(x.dropped for x in xs) / n, 2),
            "redecoded": round(sum(x.redecoded for x in xs) / n, 2),
            "ms": round(statistics.median(x.ms for x in xs), 3),
            "verify_ms": round(statistics.median(x.verify_ms for x in xs), 3),
            "verify_rows": round(sum(x.verify_rows for x in xs) / n, 2),
            "share_of_verify": round(statistics.median(shares), 4) if shares else None,
        }
    return out


def _draft_costs(
    verify_ms: dict[int, float], draft: float | None, syncs: list[float], ks: Sequence[int]
) -> dict[int, float | None]:
    """The break-even acceptance per k for a drafter of ``draft`` ms per token (empty
    without a draft cost or a one-row verify)."""
    if draft is None or 1 not in verify_ms:
        return {}
    known = sorted(verify_ms)
    table = [_interp(verify_ms, known, b) for b in range(1, max(ks) + 2)]
    costs = Costs(table, draft, _median(syncs) or draft, 0.0)
    out: dict[int, float | None] = {}
    for k in ks:
        be = break_even_acceptance(k, costs)
        out[k] = round(be, 3) if be is not None else None
    return out


def cost_summary(cells: dict[str, dict[str, Cell]], ks: Sequence[int], methods: Sequence[Method]) -> dict[str, Any]:
    """Verify ms by batch size, draft ms per token (draft model and MTP heads apart), sync
    ms, break-even acceptance per k, and the target's rollbacks beside their verifies
    (from the main columns: a second sampler's draft and verify rows cost otherwise)."""
    verify: dict[int, list[float]] = {}
    calls: dict[str, list[float]] = {"model": [], "mtp": [], "ngram": []}
    syncs: dict[str, list[float]] = {"model": [], "mtp": []}
    prefills: list[float] = []
    rollbacks: list[RollbackSample] = []
    by_method: dict[str, list[RollbackSample]] = {}
    main = {m.name: m for m in methods if not m.variant}
    for row in cells.values():
        for name, cell in row.items():
            if name not in main:
                continue
            # one draft source at a time: fixed and adaptive k of the model, of the heads, the n-gram
            source = main[name].settings.get("source")
            for run in cell.runs:
                for b, v in run.verify_by_batch.items():
                    verify.setdefault(b, []).extend(v)
                rollbacks += run.rollbacks
                by_method.setdefault(name, []).extend(run.rollbacks)
                if source in ("model", "mtp"):
                    calls[source] += run.draft_call_ms
                    syncs[source] += run.sync_ms
                    if source == "model" and run.draft_prefill_ms > 0:
                        prefills.append(run.draft_prefill_ms)
                elif source == "ngram":
                    calls["ngram"] += run.draft_call_ms
    verify_ms = {b: round(statistics.median(v), 2) for b, v in sorted(verify.items())}
    draft, mtp = _median(calls["model"]), _median(calls["mtp"])
    return {
        "verify_ms_by_batch": verify_ms,
        "verify_samples_by_batch": {b: len(v) for b, v in sorted(verify.items())},
        "draft_ms_per_token": round(draft, 3) if draft is not None else None,
        "mtp_ms_per_token": round(mtp, 3) if mtp is not None else None,
        "ngram_ms_per_lookup": round(_median(calls["ngram"]), 4) if calls["ngram"] else None,
        "sync_ms_per_step": round(_median(syncs["model"]), 3) if syncs["model"] else None,
        "mtp_sync_ms_per_step": round(_median(syncs["mtp"]), 3) if syncs["mtp"] else None,
        "draft_prefill_ms": round(_median(prefills), 1) if prefills else None,
        "break_even_acceptance": _draft_costs(verify_ms, draft, syncs["model"], ks),
        "break_even_acceptance_mtp": _draft_costs(verify_ms, mtp, syncs["mtp"], ks),
        "rollback": rollback_summary(rollbacks),
        "rollback_by_method": {n: rollback_summary(xs) for n, xs in by_method.items() if xs},
    }


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
    best_mtp: dict[str, Any] = {}
    adaptive_ok: dict[str, Any] = {}
    mtp_adaptive_ok: dict[str, Any] = {}
    ngram_ok: dict[str, Any] = {}
    default_ok: dict[str, Any] = {}
    control: dict[str, Any] = {}
    for p in prompts:
        row = cells[p.name]
        plain = row.get("plain")
        results[p.name] = {m.name: {**row[m.name].summary(plain), "sampler": m.sampler} for m in methods}
        plain_tps = plain.tokens_per_second if plain else 0.0
        for prefix, best_of, adaptive_of in (("", best, adaptive_ok), (MTP, best_mtp, mtp_adaptive_ok)):
            found = _best_fixed(row, ks, prefix, plain_tps)
            if found is not None:
                best_of[p.name], adaptive = found
                if adaptive is not None:
                    adaptive_of[p.name] = adaptive
        if greedy and p.kind == "rewrite" and "ngram" in row and plain_tps:
            # a copy only at temperature 0: sampled text drifts from the source it rewrites
            ratio = row["ngram"].tokens_per_second / plain_tps
            ngram_ok[p.name] = {"ratio": round(ratio, 3), "met": ratio >= GOAL_NGRAM_REWRITE}
        if DEFAULT in row and plain_tps:
            others = {m.name: row[m.name].tokens_per_second for m in methods if m.name != DEFAULT and not m.variant}
            best_other = max(others, key=lambda n: others[n])
            mine = row[DEFAULT].tokens_per_second
            ratio = mine / others[best_other] if others[best_other] else None
            paired = row[DEFAULT].paired_ratio(row[best_other])
            default_ok[p.name] = {
                "ratio": round(ratio, 3) if ratio else None,
                "best_other": best_other,
                "paired_ratio": round(paired, 3) if paired else None,
                "ratio_to_plain": round(mine / plain_tps, 3),
                "met": bool(ratio and ratio >= GOAL_DEFAULT and mine >= plain_tps),
            }
            if CONTROL in row and row[CONTROL].tokens_per_second:
                again = row[DEFAULT].paired_ratio(row[CONTROL])
                control[p.name] = {
                    "ratio": round(mine / row[CONTROL].tokens_per_second, 3),
                    "paired_ratio": round(again, 3) if again else None,
                }
    same, total = identity_counts(cells, prompts, methods, greedy)
    # the sampled goal asks whether any fixed k pays: the best of the draft model's and the heads'
    best_any = {
        p: max((b for b in (best.get(p), best_mtp.get(p)) if b), key=lambda b: b["tokens_per_second"])
        for p in dict.fromkeys([*best, *best_mtp])
    }
    best_ok = {} if greedy else best_fixed_goal(best_any)
    source = acceptance_source(methods)
    acceptance = None if greedy else acceptance_goal(cells, prompts, methods, greedy_ref, acceptance_k(ks), source)
    costs = cost_summary(cells, ks, methods)
    rollback = rollback_goal(costs["rollback"])
    goals = {
        "adaptive_vs_best": adaptive_ok,
        "adaptive_met": _all_met(adaptive_ok),
        "mtp_adaptive_vs_best": mtp_adaptive_ok,
        "mtp_adaptive_met": _all_met(mtp_adaptive_ok),
        "ngram_rewrite_vs_plain": ngram_ok,
        "ngram_met": all(v["met"] for v in ngram_ok.values()) if ngram_ok else None,
        "default_vs_best": default_ok,
        "default_met": all(v["met"] for v in default_ok.values()) if default_ok else None,
        # --control: the default over a second copy of itself, per prompt (no goal: the noise)
        "default_vs_control": control,
        "identical_met": same == total if total else None,
        "identical_runs": {"identical": same, "total": total},
        "best_fixed_vs_plain": best_ok,
        "best_fixed_met": all(v["met"] for v in best_ok.values()) if best_ok else None,
        "acceptance_vs_greedy": acceptance,
        "acceptance_met": acceptance["met"] if acceptance else None,
        "rollback_vs_verify": rollback,
        "rollback_met": rollback["met"] if rollback else None,
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
        "best_fixed_k_mtp": best_mtp,
        "costs": costs,
        "goals": goals,
    }


def _all_met(entries: dict[str, Any]) -> bool | None:
    return all(v["met"] for v in entries.values()) if entries else None


def _best_fixed(
    row: dict[str, Cell], ks: Sequence[int], prefix: str, plain_tps: float
) -> tuple[dict[str, Any], dict[str, Any] | None] | None:
    """The fastest fixed k of one draft source (columns ``{prefix}k=…``) and its adaptive
    column's goal (``{prefix}auto`` >= 0.95 x max(plain, that k)); None without such columns."""
    fixed = {k: row[f"{prefix}k={k}"].tokens_per_second for k in ks if f"{prefix}k={k}" in row}
    if not fixed:
        return None
    kb = max(fixed, key=lambda k: fixed[k])
    best = {
        "k": kb,
        "method": f"{prefix}k={kb}",
        "tokens_per_second": round(fixed[kb], 2),
        "ratio_to_plain": round(fixed[kb] / plain_tps, 3) if plain_tps else None,
    }
    auto = row.get(f"{prefix}auto")
    if auto is None:
        return best, None
    ref = max(plain_tps, fixed[kb])
    ratio = auto.tokens_per_second / ref if ref else None
    return best, {"ratio": round(ratio, 3) if ratio else None, "met": bool(ratio and ratio >= GOAL_ADAPTIVE)}


def rollback_goal(by_kind: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """A native rollback (``snapshot``) against its own step's verify: the goal's share
    (:data:`GOAL_ROLLBACK`) of the median per-step ratio; None where no step rolled back
    that way (an attention target, or one that restores a saved state)."""
    snap = by_kind.get("snapshot")
    if not snap or snap["share_of_verify"] is None:
        return None
    share = snap["share_of_verify"]
    return {"kind": "snapshot", "steps": snap["steps"], "share": share, "met": share <= GOAL_ROLLBACK}


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
            "method": b.get("method", f"k={b['k']}"),
            "ratio": b["ratio_to_plain"],
            "met": bool(b["ratio_to_plain"] and b["ratio_to_plain"] >= GOAL_BEST_FIXED),
        }
        for p, b in best.items()
    }


def acceptance_source(methods: Sequence[Method]) -> str:
    """The draft source of the acceptance goal: the draft model's, else the MTP heads'."""
    sources = {m.settings.get("source") for m in methods}
    return "model" if "model" in sources or "mtp" not in sources else "mtp"


def _model_method(methods: Sequence[Method], k: int, sampler: str, source: str = "model") -> Method | None:
    return next(
        (
            m
            for m in methods
            if m.settings.get("source") == source and m.settings.get("n_draft") == k and m.sampler == sampler
        ),
        None,
    )


def acceptance_goal(
    cells: dict[str, dict[str, Cell]],
    prompts: Sequence[BenchPrompt],
    methods: Sequence[Method],
    greedy_ref: dict[str, Cell] | None,
    k: int,
    source: str = "model",
) -> dict[str, Any] | None:
    """Coupled acceptance at k over greedy acceptance at k on the same prompts, drafting
    with ``source`` (pooled over prompts for the goal; per prompt, and rejection's, for reading)."""
    coupled = _model_method(methods, k, "coupled", source)
    if coupled is None or not greedy_ref:
        return None
    rejection = _model_method(methods, k, "rejection", source)

    def rates(cell_of: Callable[[str], Cell]) -> tuple[float | None, dict[str, float | None]]:
        per = {p.name: cell_of(p.name).acceptance_rate for p in prompts}
        return Cell([r for p in prompts for r in cell_of(p.name).runs]).acceptance_rate, per

    c_all, c_per = rates(lambda p: cells[p][coupled.name])
    g_all, g_per = rates(lambda p: greedy_ref[p])
    r_all, r_per = rates(lambda p: cells[p][rejection.name]) if rejection else (None, {})
    ratio = _ratio(c_all, g_all)
    out: dict[str, Any] = {
        "k": k,
        "source": source,
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
