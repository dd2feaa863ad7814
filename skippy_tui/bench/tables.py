"""Markdown tables from saved bench reports (``skippy-tui bench --save``), kept in step with them.

A Markdown file marks where a table of a report goes::

    <!-- results: results/bench-default-T0.json speed -->
    (generated: everything up to the closing marker is replaced)
    <!-- /results -->

The path is relative to the Markdown file; the kind is one of :data:`KINDS`
(``about``: what ran where and when; ``speed``: tokens/s of each method by prompt,
as a ratio to plain; ``acceptance``: acceptance rate by prompt; ``rollback``: how a
hybrid or recurrent target dropped rejected rows, beside the verify of the same step;
``goals``: the report's goals, met or not). ``python -m skippy_tui.bench.tables
FILE.md`` rewrites every block from its report; :func:`stale` names the blocks that
differ from what their report gives (a test holds ``docs/performance.md`` to it).
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

MARKER = re.compile(r"<!-- results: (?P<path>\S+) (?P<kind>\w+) -->\n(?P<body>.*?)<!-- /results -->", re.S)


def _fmt(x: float | None, spec: str, suffix: str = "") -> str:
    return "–" if x is None else f"{x:{spec}}{suffix}"


def about(report: dict[str, Any]) -> str:
    """One paragraph: the models, the machine, the build, the date and the settings."""
    meta = report.get("meta", {})
    where = meta.get("machine", {})
    parts = [f"target `{meta.get('target')}`"]
    if meta.get("target_memory") and meta.get("target_memory") != "attention":
        parts[-1] += f" ({meta['target_memory']}, rollback by {meta.get('target_rollback')})"
    if meta.get("draft"):
        parts.append(f"draft `{meta['draft']}`")
    if meta.get("mtp"):
        parts.append("MTP heads" + (" (drafter file)" if meta.get("mtp_external") else " in the target"))
    temp = report.get("temperature", 0.0)
    settings = f"T = {temp:g}" + (f", {report.get('sampler')} sampler" if temp else ", greedy")
    settings += f", {meta.get('repeats')} repeats, up to {meta.get('max_tokens')} tokens, {meta.get('threads')} threads"
    lines = [
        ", ".join(parts) + f"; {settings}.",
        f"Verification: {meta.get('verify', '?')}.",
    ]
    if where:
        lines.append(
            f"Machine: {where.get('cpu', '?')} ({where.get('cpus', '?')} CPUs); llama-cpp-python "
            f"{where.get('llama_cpp_python', '?')}; skippy-tui {where.get('skippy_tui', '?')}; "
            f"{where.get('date', '?')}; load average at the start {meta.get('loadavg_1min', '?')}."
        )
    return "\n".join(lines) + "\n"


def _table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out) + "\n"


def _methods(report: dict[str, Any]) -> list[str]:
    results = report.get("results", {})
    first = next(iter(results.values()), {})
    return list(report.get("meta", {}).get("methods") or first)


def speed(report: dict[str, Any]) -> str:
    """Tokens/s of plain decoding and every method's ratio to it, by prompt (≠: not
    token-identical to plain), and the geometric mean of the ratios."""
    methods = _methods(report)
    rows = []
    for prompt, cells in report.get("results", {}).items():
        row = [prompt]
        for m in methods:
            c = cells.get(m)
            if c is None:
                row.append("")
            elif m == "plain":
                row.append(_fmt(c.get("tokens_per_second"), ".1f", " tok/s"))
            else:
                mark = "" if c.get("identical_to_plain", True) is not False else " ≠"
                row.append(_fmt(c.get("ratio_to_plain"), ".2f", "×") + mark)
        rows.append(row)
    geo = report.get("geomean_ratio_to_plain") or {}
    rows.append(["**geomean**", "1.00×", *(_fmt(geo.get(m), ".2f", "×") for m in methods[1:])])
    return _table(["prompt", *methods], rows)


def acceptance(report: dict[str, Any]) -> str:
    """Acceptance rate (accepted / drafted) of every drafting method, by prompt."""
    methods = [m for m in _methods(report) if m != "plain"]
    rows = [
        [prompt, *(_fmt((cells.get(m) or {}).get("acceptance_rate"), ".0%") for m in methods)]
        for prompt, cells in report.get("results", {}).items()
    ]
    return _table(["prompt", *methods], rows)


def rollback(report: dict[str, Any]) -> str:
    """How the target dropped rejected rows: steps, ms, rows, and the share of the same step's verify."""
    pooled = (report.get("costs") or {}).get("rollback") or {}
    rows = []
    for via, s in pooled.items():
        if not isinstance(s, dict):
            continue
        rows.append([
            via, str(s.get("steps", "")), _fmt(s.get("ms"), ".3f", " ms"), _fmt(s.get("dropped"), ".1f"),
            _fmt(s.get("redecoded"), ".1f"), _fmt(s.get("verify_ms"), ".2f", " ms"),
            _fmt(s.get("share_of_verify"), ".2%"),
        ])  # fmt: skip
    if not rows:
        return "No step dropped rows.\n"
    return _table(["via", "steps", "rollback", "rows dropped", "decoded again", "verify of the step", "share"], rows)


def goals(report: dict[str, Any]) -> str:
    """The report's goals with their verdicts (``…_met`` keys)."""
    g = report.get("goals") or {}
    rows = [[name.removesuffix("_met").replace("_", " "), "met" if ok else "**not met**"]
            for name, ok in g.items() if name.endswith("_met") and ok is not None]  # fmt: skip
    return _table(["goal", "verdict"], rows) if rows else "No goals.\n"


KINDS: dict[str, Callable[[dict[str, Any]], str]] = {
    "about": about, "speed": speed, "acceptance": acceptance, "rollback": rollback, "goals": goals,
}  # fmt: skip


def render(markdown: str, base: Path) -> str:
    """``markdown`` with every marked block regenerated from its report (paths under ``base``).

    Raises:
        ValueError: an unknown kind, or a report that cannot be read.
    """

    def block(m: re.Match[str]) -> str:
        kind, path = m["kind"], base / m["path"]
        if kind not in KINDS:
            raise ValueError(f"unknown table kind {kind!r} (known: {', '.join(KINDS)})")
        try:
            report = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError) as e:
            raise ValueError(f"cannot read the report {path}: {e}") from e
        return f"<!-- results: {m['path']} {kind} -->\n{KINDS[kind](report)}<!-- /results -->"

    return MARKER.sub(block, markdown)


def stale(path: Path) -> list[str]:
    """The marked blocks of ``path`` whose text differs from what their report gives."""
    text = path.read_text("utf-8")
    fresh = render(text, path.parent)
    old, new = MARKER.findall(text), MARKER.findall(fresh)
    return [f"{p} {k}" for (p, k, a), (_, _, b) in zip(old, new) if a != b]


def main(argv: list[str] | None = None) -> int:
    """``python -m skippy_tui.bench.tables FILE.md...``: rewrite the marked tables in place."""
    paths = [Path(a) for a in (sys.argv[1:] if argv is None else argv)]
    if not paths:
        sys.stderr.write("usage: python -m skippy_tui.bench.tables FILE.md...\n")
        return 2
    for path in paths:
        try:
            text = path.read_text("utf-8")
            fresh = render(text, path.parent)
        except (OSError, ValueError) as e:
            sys.stderr.write(f"error: {path}: {e}\n")
            return 1
        if fresh != text:
            from ..engine.jsoncache import atomic_write_text

            atomic_write_text(path, fresh)
            sys.stderr.write(f"{path}: tables regenerated\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
