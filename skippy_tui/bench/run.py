"""Running the bench: every method on every prompt (with warm-up and rotation), the greedy
reference, and the identity grid. Returns raw results; :mod:`.stats` summarises them."""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Sequence
from typing import Any

from .core import BenchPrompt, Progress, first_difference, prompt_tokens_cap, repeat_seed, run_once
from .stats import Cell, IdentityCase
from .suite import WARMUP_PROMPT, Method, greedy_method, penalty_settings


def draw_seed() -> int:
    """A base seed when none is configured (31 bits: short enough to retype as --seed)."""
    return secrets.randbits(31)


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
    fresh: bool = False,
) -> dict[str, dict[str, Cell]]:
    """Every method on every prompt, ``repeats`` times; returns ``cells[prompt][method]``.

    Every method of one repeat runs with the seed ``repeat_seed(base_seed, r)``,
    so sampled replies are comparable token for token with plain's. Each method
    keeps its own adaptive state (:meth:`Speculator.learned`): ``auto`` and the
    default learn only from their own replies, not from the fixed-k runs between.
    ``fresh``: every reply starts from no adaptive state instead (the verify costs
    the load measured aside), as a new ``run`` or a new session's first reply does.
    """
    cells: dict[str, dict[str, Cell]] = {p.name: {m.name: Cell() for m in methods} for p in prompts}
    learned: dict[str, object | None] = {m.name: None for m in methods}

    def use(m: Method) -> None:
        speculator.restore_learned(None if fresh else learned[m.name])
        speculator.update(**m.settings)

    def keep(m: Method) -> None:
        learned[m.name] = speculator.learned()

    if warmup:
        for m in methods:
            use(m)
            run_once(speculator, WARMUP_PROMPT, settings_for(gen, m, base_seed, min(gen.max_tokens, 32)), system)
            keep(m)
            if progress:
                progress.update(f"warm-up {m.name}")
    for r in range(repeats):
        order = list(methods[r % len(methods) :]) + list(methods[: r % len(methods)])
        seed = repeat_seed(base_seed, r)
        for p in prompts:
            for m in order:
                use(m)
                g = settings_for(gen, m, seed, prompt_tokens_cap(gen, p))
                cells[p.name][m.name].runs.append(run_once(speculator, p.text, g, system))
                keep(m)
                if progress:
                    progress.update(f"{p.name} {m.name} (repeat {r + 1}/{repeats})")
    return cells


def run_greedy_reference(
    speculator: Any,
    gen: Any,
    prompts: Sequence[BenchPrompt],
    k: int,
    progress: Progress | None = None,
    system: str = "",
    source: str = "model",
) -> dict[str, Cell]:
    """Greedy k drafting with ``source`` (the draft model, or the MTP heads) on every
    prompt once (greedy is deterministic), after the measured runs.

    Only its acceptance is used; it runs last so that the adaptive policy's
    acceptance estimates, shared by every method of a draft source, are not
    fed greedy steps while the sampled methods are measured.
    """
    m = greedy_method(k, source)
    speculator.update(**m.settings)
    out = {}
    for p in prompts:
        out[p.name] = Cell([run_once(speculator, p.text, settings_for(gen, m, 0, prompt_tokens_cap(gen, p)), system)])
        if progress:
            progress.update(f"{p.name} {m.name}")
    return out


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
