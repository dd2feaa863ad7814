"""Speculative sampling on the real models: same-seed identity, seeds, penalties,
and the sampled distribution measured on the models' own logits."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import PROMPTS, Run, load, user

from skippy_tui.engine.native.model import Context, LoadParams, Model
from skippy_tui.engine.sampling.params import SamplingParams, candidates
from skippy_tui.engine.sampling.verify import ReplySampler, coupled_acceptance
from skippy_tui.engine.settings import GenerationSettings
from skippy_tui.engine.speculator import Speculator

PENALTIES = {"repeat_penalty": 1.3, "presence_penalty": 0.2, "frequency_penalty": 0.2}


def hot(seed: int | None, max_tokens: int = 32, **kw: object) -> GenerationSettings:
    return GenerationSettings(SamplingParams(temperature=0.8, seed=seed, **kw), max_tokens=max_tokens)  # type: ignore[arg-type]


def _first_difference(a: tuple[int, ...], b: tuple[int, ...]) -> int | None:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None if len(a) == len(b) else min(len(a), len(b)))


@pytest.mark.parametrize("penalties", [False, True], ids=["no-penalties", "penalties"])
def test_coupled_sampling_equals_plain_sampling_with_the_same_seed(
    penalties: bool, spec: Speculator, plain: Speculator
) -> None:
    """The CI subset of the identity grid (``skippy-tui bench --identity`` runs all of it)."""
    extra = PENALTIES if penalties else {}
    largest_batch = 0
    try:
        for i, prompt in enumerate(PROMPTS[:3]):
            gen = hot(1000 + i, **extra)
            ref = Run(plain.run(user(prompt), gen)).finish.token_ids
            for source in ("model", "ngram"):
                for k in (1, 4, 8, "auto"):
                    spec.update(source=source, n_draft=k)
                    run = Run(spec.run(user(prompt), gen))
                    got = run.finish.token_ids
                    assert got == ref, f"{source} k={k} diverged on {prompt!r} at {_first_difference(got, ref)}"
                    if source == "model" and k != "auto":
                        assert run.finish.n_drafted > 0
                        largest_batch = max(largest_batch, *(len(s.proposed) + 1 for s in run.steps))
    finally:
        spec.update(source="model", n_draft=4)
    # identity must not hold by construction: verification really ran multi-row batches
    assert largest_batch >= 5
    assert spec.verify_rows is None or spec.verify_rows > 1, spec.invariance


def test_gemma_self_pair_samples_like_plain_and_accepts_everything(gemma3_270m: Path, cache_dir: Path) -> None:
    plain = load(gemma3_270m, None, cache_dir)
    gens = [hot(7 + i, **(PENALTIES if i % 2 else {})) for i in range(3)]
    refs = [Run(plain.run(user(p), g)).finish.token_ids for p, g in zip(PROMPTS[3:6], gens)]
    plain.close()
    s = load(gemma3_270m, gemma3_270m, cache_dir)
    try:
        for k in (4, "auto"):
            s.update(n_draft=k)
            for prompt, gen, ref in zip(PROMPTS[3:6], gens, refs):
                fin = Run(s.run(user(prompt), gen)).finish
                assert fin.token_ids == ref, f"k={k} diverged on {prompt!r} at {_first_difference(fin.token_ids, ref)}"
                if k == 4:
                    # the draft is the target: the same row and noise give the same token
                    assert fin.n_drafted > 0 and fin.acceptance_rate == 1.0
    finally:
        s.close()


def test_rejection_sampler_runs_and_reports_its_probabilities(spec: Speculator) -> None:
    """The Q4_1 draft is close to its F32 target: at T = 0.8 about one drafted token in 90
    is rejected (4 in 372 over ten 64-token replies, 2026-12-03). Four 32-token replies
    held none on a fresh machine (the tokens follow the CPU's rounding), so up to ten
    replies of up to 128 tokens run until one has rejected (several hundred judged tokens,
    as some replies end early: none has odds of about e^-6)."""
    fin = None
    saw_rejection = False
    for i, prompt in enumerate(PROMPTS):
        if saw_rejection and i >= 2:
            break
        run = Run(spec.run(user(prompt), hot(50 + i, max_tokens=128, sampler="rejection")))
        fin = run.finish
        assert fin.reason in ("eos", "max_tokens") and fin.n_drafted > 0
        assert run.started.sampling["sampler"] == "rejection"
        for step in run.steps:
            if step.n_accepted < len(step.proposed):
                saw_rejection = True
                assert step.p_target is not None and 0.0 <= step.p_target <= 1.0
                assert 0.0 < step.proposed[step.n_accepted].prob <= 1.0  # sampled from the draft: q(d) > 0
            else:
                assert step.p_target is None
    assert saw_rejection


# -- seeds ---------------------------------------------------------------------------------


def test_a_reply_without_a_seed_draws_one_reports_it_and_can_be_reproduced(spec: Speculator) -> None:
    prompt = user("Write a haiku about autumn leaves.")
    a, b = Run(spec.run(prompt, hot(None))), Run(spec.run(prompt, hot(None)))
    for run in (a, b):
        assert run.started.sampling["seed"] == run.finish.seed and not run.started.sampling["seed_fixed"]
    assert a.finish.seed != b.finish.seed
    assert a.finish.token_ids != b.finish.token_ids  # a regenerate gives a new reply
    again = Run(spec.run(prompt, hot(a.finish.seed)))
    assert again.finish.token_ids == a.finish.token_ids and again.started.sampling["seed_fixed"]
    assert again.finish.to_dict()["seed"] == a.finish.seed  # in the --json finish object


@pytest.mark.models  # loads the default pair (not through a fixture)
def test_an_explicit_seed_reproduces_across_processes_and_methods() -> None:
    def finish(*flags: str) -> dict:
        out = subprocess.run(
            [sys.executable, "-m", "skippy_tui", "run", "Tell me a short story about a cat.", "--json",
             "--temperature", "0.8", "--seed", "4242", "--max-tokens", "24", *flags],
            capture_output=True, text=True, timeout=300, check=True,
        )  # fmt: skip
        return json.loads(out.stdout.splitlines()[-1])

    ref = finish("--no-draft")
    assert ref["seed"] == 4242 and ref["n_tokens"] == 24
    for flags in (("--n-draft", "auto"), ("--n-draft", "4"), ("--draft-source", "ngram", "--n-draft", "8")):
        got = finish(*flags)
        assert got["token_ids"] == ref["token_ids"], flags


# -- a sampling change mid-reply -----------------------------------------------------------


class ChangingGeneration:
    """Generation settings whose sampling changes after the second step (as F3 does)."""

    def __init__(self) -> None:
        self.max_tokens, self.stop = 24, ()
        self.sampling = SamplingParams(temperature=0.8, seed=3)


def test_a_sampling_change_mid_reply_is_recorded_in_the_step_events(spec: Speculator) -> None:
    gen = ChangingGeneration()
    steps = []
    for ev in spec.run(user(PROMPTS[1]), gen):  # type: ignore[arg-type]
        if ev.type == "step":
            steps.append(ev)
            if ev.index == 1:
                gen.sampling = SamplingParams(temperature=0.2, seed=3, repeat_penalty=1.1)
    assert [s.sampling is not None for s in steps[:3]] == [False, False, True]
    assert steps[2].sampling["temperature"] == 0.2 and steps[2].sampling["repeat_penalty"] == 1.1
    assert steps[2].sampling["seed"] == 3
    assert all(s.sampling is None for s in steps[3:])


# -- the sampled distribution, measured on the models' own logits ---------------------------

N_SEEDS = 6000
"""Seeds per distribution test. Against any distribution at total variation >= 0.05
from the target's, the chi-square statistic's noncentrality is >= N * (2 * 0.05)^2 = 60
(Cauchy-Schwarz), so the alpha = 0.001 test with <= 8 degrees of freedom misses such a
difference with probability < 0.1 %."""


def _last_row(path: Path, tokens: list[int]) -> np.ndarray:
    m = Model(path, LoadParams())
    c = Context(m, LoadParams(n_ctx=256, n_batch=256, n_ubatch=256, flash_attn="off", repack=False))
    try:
        return c.decode(tokens, 0, 1)[0]
    finally:
        c.close()
        m.close()


@pytest.fixture(scope="module")
def real_rows(spec: Speculator, smollm2_f32: Path, smollm2_q4_1: Path) -> tuple[np.ndarray, np.ndarray]:
    """The target's and the draft's logits for the first token of a reply with many likely openings."""
    from skippy_tui.engine.chat import prompt_tokens

    tokens = prompt_tokens(spec.target, spec.template, user("Name one animal, any animal."))
    return _last_row(smollm2_f32, tokens), _last_row(smollm2_q4_1, tokens)


def _chi2_test(counts: dict[int, int], ids: np.ndarray, p: np.ndarray) -> tuple[float, float]:
    """Chi-square statistic over the candidates (cells expected below 5 pooled) and its 0.001 critical value."""
    n = sum(counts.values())
    big = n * p >= 5
    obs = [counts.get(int(i), 0) for i in ids[big]]
    exp = list(n * p[big])
    rest = n - sum(obs)
    if (~big).any():
        obs.append(rest)
        exp.append(n * p[~big].sum())
    else:
        assert rest == 0  # nothing outside the candidates
    stat = sum((o - e) ** 2 / e for o, e in zip(obs, exp))
    df = len(obs) - 1
    crit = df * (1 - 2 / (9 * df) + 3.09 * math.sqrt(2 / (9 * df))) ** 3
    return stat, crit


@pytest.mark.parametrize("sampler", ["coupled", "rejection"])
def test_first_token_distribution_on_real_logits_is_the_targets(sampler: str, real_rows) -> None:
    p_row, q_row = real_rows
    params = SamplingParams(temperature=0.8, sampler=sampler)
    p, q = candidates(p_row, params), candidates(q_row, params)
    assert p.ids.shape[0] >= 3, "pick a prompt with several likely first tokens"
    counts: dict[int, int] = {}
    accepted = 0
    rows = np.stack([p_row, p_row])
    for seed in range(N_SEEDS):
        s = ReplySampler(params, seed)
        d, _, dist = s.draft_rule(40).choose(q_row)
        v = s.verify([d], rows, 40, None, [dist])
        first = d if v.n_accepted else v.committed
        counts[first] = counts.get(first, 0) + 1
        accepted += v.n_accepted
    stat, crit = _chi2_test(counts, p.ids, p.probs())
    assert stat < crit, (counts, dict(zip(p.ids.tolist(), p.probs().round(4).tolist())))
    # acceptance: the coupling's formula (>= (1 - TV) / (1 + TV)), or sum(min(p, q)) for rejection
    ids = np.union1d(p.ids, q.ids)
    pv = np.array([p.prob_of(int(i)) for i in ids])
    qv = np.array([q.prob_of(int(i)) for i in ids])
    tv = 0.5 * np.abs(pv - qv).sum()
    expected = coupled_acceptance(pv, qv) if sampler == "coupled" else float(np.minimum(pv, qv).sum())
    rate = accepted / N_SEEDS
    assert abs(rate - expected) < 4 * math.sqrt(expected * (1 - expected) / N_SEEDS) + 1e-9
    if sampler == "coupled":
        assert expected >= (1 - tv) / (1 + tv) - 1e-12
