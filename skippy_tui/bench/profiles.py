"""``skippy-tui bench --profiles``: the exact, auto and fast profiles side by side.

The profiles are loaded at once (the same files, their own load settings) and run
the same prompts, plain and with the configured speculation (the default:
``n_draft = "auto"``, ``source = "auto"``), with the same seed per repeat and
the order rotated per repeat, so each sees the machine in the same state.
``auto`` loads as ``exact`` does and differs only where the build certifies no
verify batch of 2 rows (:mod:`..engine.policy.exactness`): where it verifies as ``exact``
it is not run twice.

Per profile it reports the medians of plain and speculative tokens/s, and how
many speculative replies differed from the *same profile's* plain reply with
the same seed, in all and per prompt. For each difference it gives the margin
between the target's top two logits at the first differing position (from a
fresh decode of the plain reply's prefix): ``exact`` verifies in batches proven
bit-identical to single rows, so it should show none; ``auto`` on a build without
certified batches and ``fast`` (flash attention, repacking, one verify batch)
trade that for speed, and the margins say how close a call each difference was.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..engine.chat import prompt_tokens
from .core import (
    BenchPrompt,
    Progress,
    first_difference,
    fmt,
    loadavg,
    messages_for,
    prompt_tokens_cap,
    ratio,
    repeat_seed,
    rounded,
    run_once,
)

PROFILE_NAMES = ("exact", "auto", "fast")


@dataclass
class ProfileCell:
    """One profile's figures over every prompt and repeat."""

    plain_tps: list[float] = field(default_factory=list)
    spec_tps: list[float] = field(default_factory=list)
    differing: list[dict[str, Any]] = field(default_factory=list)
    replies_by_prompt: dict[str, int] = field(default_factory=dict)

    @property
    def replies(self) -> int:
        return sum(self.replies_by_prompt.values())

    def summary(self) -> dict[str, Any]:
        plain = statistics.median(self.plain_tps) if self.plain_tps else None
        spec = statistics.median(self.spec_tps) if self.spec_tps else None
        return {
            "plain_tokens_per_second": rounded(plain, 2),
            "speculative_tokens_per_second": rounded(spec, 2),
            "speedup": ratio(spec, plain),
            "replies": self.replies,
            "differing_from_plain": len(self.differing),
            "differences": self.differing,
            "per_prompt": self.per_prompt(),
        }

    def per_prompt(self) -> dict[str, dict[str, Any]]:
        """Per prompt: its replies, how many differed from plain, and the top-2 logit margin
        at each one's first difference."""
        out: dict[str, dict[str, Any]] = {}
        for name, n in self.replies_by_prompt.items():
            margins = [d["top2_logit_margin"] for d in self.differing if d["prompt"] == name]
            out[name] = {"replies": n, "differing_from_plain": len(margins), "top2_logit_margins": margins}
        return out


def top2_margin(speculator: Any, messages: list[dict[str, str]], reply: Sequence[int], i: int) -> float:
    """The target's top-1 minus top-2 logit before reply token ``i`` (a fresh decode of the
    prompt and ``reply[:i]``; the speculator's caches are emptied before and after)."""
    tokens = [*prompt_tokens(speculator.target, speculator.template, messages), *reply[:i]]
    ctx = speculator.target_cache.ctx
    speculator.forget()
    try:
        ctx.prefill(tokens[:-1], 0)
        logits = ctx.decode([tokens[-1]], len(tokens) - 1, 1)[0]
    finally:
        speculator.forget()
    top = np.partition(logits, -2)[-2:]
    return float(top[1] - top[0])


def _checked(result: Any) -> Any:
    if result.reason == "error":
        raise RuntimeError(result.error)
    return result


def run_profiles(
    speculators: dict[str, Any],
    gen: Any,
    prompts: Sequence[BenchPrompt],
    repeats: int,
    base_seed: int,
    system: str = "",
    progress: Progress | None = None,
    warmup: bool = True,
) -> dict[str, Any]:
    """Run every prompt ``repeats`` times, plain and speculative, under each profile.

    ``speculators``: profile name -> a loaded speculator with speculation enabled.
    Returns the JSON-ready ``profiles`` section (see the README's bench schema).
    """
    cells = {name: ProfileCell() for name in speculators}
    spec_settings = {name: s.speculation for name, s in speculators.items()}
    names = list(speculators)
    for r in range(-1 if warmup else 0, repeats):
        seed = repeat_seed(base_seed, max(r, 0))
        order = names[r % len(names) :] + names[: r % len(names)] if r >= 0 else names
        for prompt in prompts:
            g = dataclasses.replace(
                gen,
                sampling=dataclasses.replace(gen.sampling, seed=seed),
                max_tokens=prompt_tokens_cap(gen, prompt),
            )
            for name in order:
                s = speculators[name]
                s.update(enabled=False)
                plain = _checked(run_once(s, prompt.text, g, system))
                s.update(**{f.name: getattr(spec_settings[name], f.name) for f in dataclasses.fields(s.speculation)})
                spec = _checked(run_once(s, prompt.text, g, system))
                if r < 0:
                    continue  # the warm-up pass: caches and page-ins, not measured
                cell = cells[name]
                cell.plain_tps.append(plain.tokens_per_second)
                cell.spec_tps.append(spec.tokens_per_second)
                cell.replies_by_prompt[prompt.name] = cell.replies_by_prompt.get(prompt.name, 0) + 1
                i = first_difference(plain.token_ids, spec.token_ids)
                if i is not None:
                    messages = messages_for(prompt.text, system)
                    margin = top2_margin(s, messages, plain.token_ids, i) if i < len(plain.token_ids) else None
                    cell.differing.append(
                        {"prompt": prompt.name, "seed": seed, "index": i, "top2_logit_margin": rounded(margin, 4)}
                    )
                if progress is not None:
                    progress.update(f"{prompt.name} {name}")
    out: dict[str, Any] = {name: cell.summary() for name, cell in cells.items()}
    for name in ("auto", "fast"):
        if "exact" in out and name in out:
            e, o = out["exact"], out[name]
            out[f"{name}_over_exact"] = {
                "plain": ratio(o["plain_tokens_per_second"], e["plain_tokens_per_second"]),
                "speculative": ratio(o["speculative_tokens_per_second"], e["speculative_tokens_per_second"]),
            }
    return out


def render_profiles(report: dict[str, Any]) -> str:
    """The profiles table as text, then the differences per prompt."""
    meta, prof = report["meta"], report["profiles"]
    spec = meta["speculation"]
    lines = [
        f"skippy-tui bench --profiles — target {meta['target']}, draft {meta['draft'] or 'none'}",
        f"{meta['sampling_label']}, n_draft {spec['n_draft']}, source {spec['source']}, "
        f"{meta['repeats']} repeats x {len(meta['prompts'])} prompts, seed {report['seed']} + repeat",
        "",
        f"{'profile':<8} {'plain tok/s':>12} {'spec tok/s':>11} {'speedup':>8}  differing from plain  "
        "top-2 logit margin at the first difference",
    ]
    for name in PROFILE_NAMES:
        c = prof.get(name)
        if c is None:
            continue
        margins = ", ".join(
            f"{d['prompt']}@{d['index']}: {d['top2_logit_margin']}" if d["top2_logit_margin"] is not None else "-"
            for d in c["differences"]
        )
        plain, spec_tps = fmt(c["plain_tokens_per_second"], ".1f"), fmt(c["speculative_tokens_per_second"], ".1f")
        lines.append(
            f"{name:<8} {plain:>12} {spec_tps:>11} {fmt(c['speedup'], '.2f') + '×':>8}"
            f"  {c['differing_from_plain']:>3}/{c['replies']:<17} {margins or '-'}"
        )
    for name, why in meta.get("not_run", {}).items():
        lines.append(f"{name:<8} not run apart: {why}")
    lines += ["", *_per_prompt_lines(prof)]
    for name in ("auto", "fast"):
        ratios = prof.get(f"{name}_over_exact")
        if ratios:
            plain, spec_ratio = fmt(ratios["plain"], ".2f"), fmt(ratios["speculative"], ".2f")
            lines.append(f"{name} / exact: plain {plain}×, speculative {spec_ratio}×")
    lines.append(f"(load {meta['loadavg_1min'][0]} → {meta['loadavg_1min'][1]}, {meta['seconds']} s)")
    lines += ["", *(f"verify, {name}: {label}" for name, label in meta["verify"].items())]
    return "\n".join(lines)


def _per_prompt_lines(prof: dict[str, Any]) -> list[str]:
    """Per prompt and profile: replies differing from plain, with the top-2 logit margin at
    each first difference (``1/3 (0.012)``)."""
    names = [n for n in PROFILE_NAMES if n in prof]
    prompts = list(dict.fromkeys(p for n in names for p in prof[n].get("per_prompt", {})))
    if not names or not prompts:
        return []
    width = max(len(p) for p in prompts) + 2
    lines = [
        "replies differing from plain, per prompt (top-2 logit margin at each first difference):",
        f"{'prompt':<{width}}" + "".join(f"{n:<22}" for n in names).rstrip(),
    ]
    for p in prompts:
        cells = []
        for n in names:
            c = prof[n]["per_prompt"].get(p)
            if c is None:
                cells.append(f"{'-':<22}")
                continue
            m = ", ".join("?" if x is None else f"{x:g}" for x in c["top2_logit_margins"])
            cells.append(f"{c['differing_from_plain']}/{c['replies']}{f' ({m})' if m else ''}".ljust(22))
        lines.append((f"{p:<{width}}" + "".join(cells)).rstrip())
    return [*lines, ""]


def load_profiles(cfg: Any, load: Callable[[Any], Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """One speculator per profile from the same config (``load(engine_spec)`` loads one);
    speculation on. ``auto`` verifying as ``exact`` does (a build that certifies batches)
    is closed again: it would measure ``exact`` twice. Returns the speculators and, per
    profile left out, why. Anything loaded is closed if a later load fails."""
    from ..engine.policy.exactness import plan_of

    out: dict[str, Any] = {}
    left_out: dict[str, str] = {}
    try:
        for name in PROFILE_NAMES:
            cfg.set("speculation", "profile", name)
            spec = cfg.engine_spec()
            spec = dataclasses.replace(spec, speculation=dataclasses.replace(spec.speculation, enabled=True))
            out[name] = load(spec)
            plan = plan_of(out[name])
            if name == "auto" and "exact" in out and plan is not None and plan == plan_of(out["exact"]):
                out.pop(name).close()
                left_out[name] = f"this build certifies verify batches, so it verifies as exact does ({plan.short()})"
    except BaseException:
        for s in out.values():
            s.close()
        raise
    return out, left_out


def cmd_profiles(
    args: Any, cfg: Any, gen: Any, prompts: Sequence[BenchPrompt], base_seed: int, load_progress: Callable[[], Any]
) -> dict[str, Any]:
    """``bench --profiles``: load the profiles, run, and return the report (``meta`` included).

    ``load_progress()`` makes a fresh loading-progress reporter for each load.
    """
    import time
    from pathlib import Path

    from ..engine.load.loader import load_speculator
    from ..engine.policy.exactness import verify_label

    quiet = args.no_progress
    speculators, not_run = load_profiles(
        cfg, lambda spec: load_speculator(spec, (lambda s, f: None) if quiet else load_progress())
    )
    try:
        first = speculators["exact"]
        load_before = loadavg()
        t0 = time.perf_counter()
        total = (args.repeats + (0 if args.no_warmup else 1)) * len(prompts) * len(speculators)
        progress = Progress(total, enabled=not quiet)
        profiles = run_profiles(
            speculators, gen, prompts, args.repeats, base_seed, cfg.get("generation", "system_prompt") or "",
            progress, warmup=not args.no_warmup,
        )  # fmt: skip
        progress.close()
        sp = first.speculation
        has_model = first.model_drafter is not None
        meta = {
            "target": Path(first.target.path).name,
            "draft": Path(first.model_drafter.model.path).name if has_model else None,
            "speculation": {"n_draft": sp.n_draft, "source": sp.source},
            "sampling_label": gen.sampling.label(),
            "max_tokens": gen.max_tokens,
            "repeats": args.repeats,
            "prompts": [p.name for p in prompts],
            "verify": {n: verify_label(s) for n, s in speculators.items()},
            "not_run": not_run,
            "seconds": round(time.perf_counter() - t0, 1),
            "loadavg_1min": [load_before, loadavg()],
        }
    finally:
        for s in speculators.values():
            s.close()
    return {
        "mode": "profiles",
        "temperature": gen.sampling.temperature,
        "seed": base_seed,
        "profiles": profiles,
        "meta": meta,
    }
