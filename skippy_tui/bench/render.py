"""The bench report as text: the side-by-side tables, costs and goals, and the identity grid."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .core import fmt as _fmt
from .stats import GOAL_ACCEPTANCE, GOAL_ADAPTIVE, GOAL_BEST_FIXED, GOAL_DEFAULT, GOAL_ROLLBACK
from .suite import DEFAULT, MTP, PENALTIES_OFF, SHORT


def render_identity(report: dict[str, Any]) -> str:
    """The identity grid as text: rows (sampler, source, k), columns penalties off/on."""
    meta = report["meta"]
    lines = [
        f"skippy-tui bench --identity — {_models_label(meta)}",
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


def render_text(report: dict[str, Any]) -> str:
    """The side-by-side table and the details, as plain text."""
    meta = report["meta"]
    methods = meta["methods"]
    lines = [
        f"skippy-tui bench — {_models_label(meta)}",
        f"{meta['threads']} threads, {_sampling_label(report)}, max {meta['max_tokens']} tokens "
        f"(long-form x2), median of {meta['repeats']} repeat(s), n_draft_max {meta['n_draft_max']}"
        + (", every reply from a fresh adaptive state" if meta.get("fresh") else ""),
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
    mw = max(12, max(len(m) for m in methods) + 1)
    for m in methods:
        if m == "plain":
            continue
        pooled = _pooled_positions(report, m)
        if pooled:
            lines.append(f"  {m:<{mw}}" + " ".join(f"{i + 1}:{a:.0%}" for i, a in enumerate(pooled)))
    adaptive = [m for m in ("auto", MTP + "auto", "ngram") if m in methods]
    lines += ["", f"k chosen by {' / '.join(adaptive)} (mean k, share of plain steps)"]
    for p, row in report["results"].items():
        parts = [f"{m} {row[m]['mean_k']:.1f}, {row[m]['plain_step_share']:.0%}" for m in adaptive]
        lines.append(f"  {p:<{w}}" + ";  ".join(parts))
    if any(DEFAULT in row for row in report["results"].values()):
        lines += ["", f"{DEFAULT}'s steps by kind (tokens/s of its sync + draft + verify, share of that time)"]
        for p, row in report["results"].items():
            kinds = row.get(DEFAULT, {}).get("by_source", {}).items()
            parts = [f"{k} {_fmt(d['tokens_per_second'], '.1f')} ({_fmt(d['time_share'], '.0%')})" for k, d in kinds]
            lines.append(f"  {p:<{w}}" + ",  ".join(parts))
    lines += ["", "token-identical to plain " + ("(greedy)" if meta["greedy"] else "(same seed per repeat)")]
    for p, row in report["results"].items():
        lines.append(f"  {p:<{w}}" + _identity_line(row, methods, meta["greedy"]))
    c = report["costs"]
    lines += ["", "costs (medians over every step of every run)"]
    lines.append("  verify ms by batch size: " + "  ".join(f"{b}:{v:.1f}" for b, v in c["verify_ms_by_batch"].items()))
    lines.append(
        f"  draft ms per token: {_fmt(c['draft_ms_per_token'])} (model), "
        + (f"{_fmt(c.get('mtp_ms_per_token'))} (MTP heads), " if c.get("mtp_ms_per_token") is not None else "")
        + f"{_fmt(c['ngram_ms_per_lookup'], '.3f')} (n-gram lookup);  "
        f"draft sync per step: {_fmt(c['sync_ms_per_step'])} ms"
    )
    if c.get("draft_prefill_ms") is not None:
        lines.append(f"  draft's prefill of a prompt (not in tokens/s): {c['draft_prefill_ms']:.0f} ms")
    for key, whose in (("break_even_acceptance", ""), ("break_even_acceptance_mtp", " (MTP heads)")):
        if c.get(key):
            lines.append(
                f"  break-even acceptance per position{whose}: "
                + "  ".join(f"k={k}:{_fmt(v, '.0%', 'never')}" for k, v in c[key].items())
            )
    lines += _sampler_cost_lines(report.get("sampler_cost_us"))
    for key, whose in (("best_fixed_k", ""), ("best_fixed_k_mtp", " (MTP heads)")):
        if report.get(key):
            lines.append(
                f"  best fixed k{whose}: "
                + "  ".join(f"{p} k={b['k']} ({_fmt(b['ratio_to_plain'], '.2f')}x)" for p, b in report[key].items())
            )
    lines += _rollback_lines(c, meta)
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
    for key, whose in (("adaptive", ""), ("mtp_adaptive", " (MTP heads)")):
        if g.get(f"{key}_vs_best"):
            lines.append(
                f"  adaptive{whose} >= {GOAL_ADAPTIVE} x max(plain, best fixed k): {_yes(g[f'{key}_met'])}  "
                + "  ".join(f"{p} {_fmt(v['ratio'], '.2f')}" for p, v in g[f"{key}_vs_best"].items())
            )
    rb = g.get("rollback_vs_verify")
    if rb:
        lines.append(
            f"  a {rb['kind']} rollback <= {GOAL_ROLLBACK:.0%} of its step's verify: {_yes(rb['met'])}  "
            f"{rb['share']:.2%} (median over {rb['steps']} steps)"
        )
    if g.get("default_vs_best"):
        lines.append(
            f"  default (auto source, auto k) >= {GOAL_DEFAULT} x best other method and >= plain: "
            f"{_yes(g['default_met'])}  "
            + "  ".join(
                f"{p} {_fmt(v['ratio'], '.2f')} of {v['best_other']} (paired {_fmt(v.get('paired_ratio'), '.2f')}), "
                f"{_fmt(v['ratio_to_plain'], '.2f')}x plain"
                for p, v in g["default_vs_best"].items()
            )
        )
    if g.get("default_vs_control"):
        ratios = [v["ratio"] for v in g["default_vs_control"].values()]
        lines.append(
            f"  control, the default over a second copy of itself ({min(ratios):.2f}-{max(ratios):.2f}: "
            "what noise alone makes of equal methods here):  "
            + "  ".join(
                f"{p} {v['ratio']:.2f} (paired {_fmt(v['paired_ratio'], '.2f')})"
                for p, v in g["default_vs_control"].items()
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


def _models_label(meta: dict[str, Any]) -> str:
    """``target T.gguf (hybrid, rollback snapshot), draft D.gguf, MTP heads T.gguf``."""
    memory = meta.get("target_memory")
    target = f"target {meta['target']}" + (f" ({memory}, rollback {meta.get('target_rollback')})" if memory else "")
    text = f"{target}, draft {meta['draft'] or 'none'}"
    if meta.get("mtp"):
        text += f", MTP heads {'of ' + meta['mtp'] if meta.get('mtp_external') else 'in the target'}"
    if meta.get("no_rollback"):
        text += f" (speculation off: {meta['no_rollback']})"
    return text


def _rollback_lines(costs: dict[str, Any], meta: dict[str, Any]) -> list[str]:
    """The target's rollbacks per kind (pooled, then per method) beside the same steps' verify."""
    pooled = costs.get("rollback") or {}
    if not pooled:
        return []
    lines = [
        f"  target rollback of rows it verified and dropped (its rollback: {meta.get('target_rollback', '?')}; "
        "steps that dropped rows: median ms, mean rows, median rollback / that step's verify):"
    ]
    rows = [("all", pooled), *((m, d) for m, d in (costs.get("rollback_by_method") or {}).items())]
    w = max(len(name) for name, _ in rows) + 2
    for name, by_kind in rows:
        for via, r in by_kind.items():
            lines.append(
                f"    {name:<{w}}{via:<9} {r['steps']:>4} steps  {r['ms']:.3f} ms  dropped {r['dropped']:.1f}"
                f" redecoded {r['redecoded']:.1f}  verify {r['verify_ms']:.2f} ms of {r['verify_rows']:.1f} rows"
                f"  = {_fmt(r['share_of_verify'], '.2%')}"
            )
    return lines


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
