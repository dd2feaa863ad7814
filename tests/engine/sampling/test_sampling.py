"""Sampling rules on explicit distributions and fixed logit rows (no model).

The statistical tests run at fixed seed sets, so each is deterministic; their
power is stated where they compare distributions.
"""

from __future__ import annotations

import ctypes
import math

import llama_cpp
import numpy as np
import pytest

from skippy_tui.engine.errors import BoundsError
from skippy_tui.engine.sampling import noise
from skippy_tui.engine.sampling.params import PenaltyWindow, SamplingParams, candidates, top_ids, top_prob, top_softmax
from skippy_tui.engine.sampling.verify import (
    EXPECTED_MAX_CANDIDATES,
    ReplySampler,
    coupled_acceptance,
    expected_acceptance,
    verify_greedy,
)

UNFILTERED = {"top_k": 0, "top_p": 1.0, "min_p": 0.0}


@pytest.mark.parametrize(
    ("proposal", "argmax", "expected"),
    [
        ([5, 6, 7], [5, 6, 7, 8], (3, 8)),  # all accepted: bonus 8
        ([5, 6, 7], [5, 9, 7, 8], (1, 9)),  # mismatch at 1: correction 9
        ([5], [4, 1], (0, 4)),  # first rejected
        ([], [3], (0, 3)),  # no proposal: plain step
    ],
)
def test_greedy_accepts_the_longest_matching_prefix(proposal, argmax, expected) -> None:
    assert verify_greedy(proposal, argmax) == expected


# -- public noise -------------------------------------------------------------------


def test_noise_depends_only_on_its_coordinates() -> None:
    ids = np.array([0, 5, 49151, 262143])
    a = noise.gumbel(7, 100, ids)
    # the same value whatever other ids are asked for with it, and in any order
    assert noise.gumbel(7, 100, ids[::-1])[::-1].tolist() == a.tolist()
    assert noise.gumbel(7, 100, ids[2:3])[0] == a[2]
    assert not np.any(noise.gumbel(8, 100, ids) == a)  # another seed
    assert not np.any(noise.gumbel(7, 101, ids) == a)  # another position
    assert not np.any(noise.gumbel(7, 100, ids, noise.DRAFT) == a)  # another stream


def test_noise_is_uniform_and_independent_across_ids() -> None:
    # 200k uniforms: each decile holds 10 % (4 sigma: ±0.27 %), neighbours uncorrelated
    u = noise.uniforms(3, 9, np.arange(200_000))
    assert np.all((u > 0) & (u < 1))
    hist = np.histogram(u, bins=10, range=(0, 1))[0] / u.shape[0]
    assert np.all(np.abs(hist - 0.1) < 4 * math.sqrt(0.09 / u.shape[0]))
    assert abs(np.corrcoef(u[:-1], u[1:])[0, 1]) < 0.01
    across_positions = np.array([noise.uniform(3, p, noise.ACCEPT) for p in range(20_000)])
    assert abs(across_positions.mean() - 0.5) < 4 * math.sqrt(1 / 12 / 20_000)


# -- filters: llama.cpp's default chain ---------------------------------------------


def _llama_chain(row: np.ndarray, p: SamplingParams, history: list[int]) -> tuple[list[int], np.ndarray]:
    """Apply llama.cpp's own samplers (penalties, top-k, top-p, min-p, temp) to a row."""
    last_n = p.repeat_last_n if p.repeat_last_n >= 0 else 1 << 20  # common_params turns -1 into n_ctx
    chain = llama_cpp.llama_sampler_chain_init(llama_cpp.llama_sampler_chain_default_params())
    for s in (
        llama_cpp.llama_sampler_init_penalties(
            row.shape[0], last_n, p.repeat_penalty, p.frequency_penalty, p.presence_penalty
        ),
        llama_cpp.llama_sampler_init_top_k(p.top_k),
        llama_cpp.llama_sampler_init_top_p(p.top_p, 0),
        llama_cpp.llama_sampler_init_min_p(p.min_p, 0),
        llama_cpp.llama_sampler_init_temp(p.temperature),
    ):
        llama_cpp.llama_sampler_chain_add(chain, s)
    try:
        for t in history:
            llama_cpp.llama_sampler_accept(chain, t)
        data = (llama_cpp.llama_token_data * row.shape[0])()
        for i, v in enumerate(row.tolist()):
            data[i].id, data[i].logit, data[i].p = i, v, 0.0
        arr = llama_cpp.llama_token_data_array(data, row.shape[0], -1, False)
        llama_cpp.llama_sampler_apply(chain, ctypes.byref(arr))
        out = arr.data[: arr.size]
        kept = [(d.id, d.logit) for d in out if math.isfinite(d.logit)]
    finally:
        llama_cpp.llama_sampler_free(chain)
    kept.sort(key=lambda x: -x[1])
    return [i for i, _ in kept], np.array([v for _, v in kept], dtype=np.float32)


def _row(seed: int, n: int) -> np.ndarray:
    """A logits row shaped like a language model's: a broad base and a few strong tokens."""
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 2.0, n)
    x[rng.choice(n, 12, replace=False)] += rng.uniform(6, 14, 12)
    return x.astype(np.float32)


CHAIN_CASES = [
    SamplingParams(temperature=0.8),  # the defaults: top_k 40, top_p 0.95, min_p 0.05
    SamplingParams(temperature=1.3, top_k=0, top_p=0.9, min_p=0.0),
    SamplingParams(temperature=0.5, top_k=0, top_p=1.0, min_p=0.02),
    SamplingParams(temperature=1.0, top_k=5, top_p=0.5, min_p=0.2),
    SamplingParams(temperature=0.7, top_k=100, top_p=0.99, min_p=0.0),
    SamplingParams(temperature=0.8, repeat_penalty=1.3, repeat_last_n=16, presence_penalty=0.4, frequency_penalty=0.3),
    SamplingParams(temperature=1.0, top_k=0, top_p=0.8, min_p=0.0, repeat_penalty=2.0, repeat_last_n=-1),
]


@pytest.mark.parametrize("params", CHAIN_CASES, ids=lambda p: f"T{p.temperature}-k{p.top_k}-p{p.top_p}-m{p.min_p}")
@pytest.mark.parametrize("n_vocab", [4096, 49152])
def test_filters_equal_llama_cpps_sampler_chain(params: SamplingParams, n_vocab: int) -> None:
    for seed in range(6):
        row = _row(seed * 31 + n_vocab, n_vocab)
        # a history that repeats some of the strongest tokens, so the penalties move the head
        head = np.argsort(-row)[:8].tolist()
        history = [*range(40), *head[::2], *head[:3], *head[:3]]
        window = PenaltyWindow(params.repeat_last_n, history)
        ours = candidates(row, params, window)
        ids, logits = _llama_chain(row, params, history if params.penalised else [])
        mine, theirs = _by_logit(ours.ids, ours.logits), _by_logit(ids, logits)
        assert mine[0] == theirs[0], (seed, params)
        np.testing.assert_allclose(mine[1], theirs[1], rtol=1e-6, atol=1e-6)


def _by_logit(ids, logits) -> tuple[list[int], np.ndarray]:
    """Candidates by falling logit, exact ties by id: neither side's sort fixes the order among
    equal logits (a row with two at 3.3179142, seen with numpy 2.4.6: llama.cpp listed them the other way)."""
    ids, logits = np.asarray(ids), np.asarray(logits)
    order = np.lexsort((ids, -logits))
    return ids[order].tolist(), logits[order]


def test_greedy_is_the_argmax_of_the_penalised_row() -> None:
    row = np.array([1.0, 5.0, 4.0, -2.0], dtype=np.float32)
    assert candidates(row, SamplingParams(temperature=0.0)).ids.tolist() == [1]
    p = SamplingParams(temperature=0.0, repeat_penalty=2.0)
    assert candidates(row, p, PenaltyWindow(64, [1])).ids.tolist() == [2]  # 5/2 < 4
    # a negative logit is multiplied by the penalty, never raised
    negative = np.array([-1.0, -1.5, -4.0], dtype=np.float32)
    assert candidates(negative, p, PenaltyWindow(64, [0])).ids.tolist() == [1]  # -1 * 2 < -1.5


def test_penalty_window_counts_the_last_n_tokens() -> None:
    w = PenaltyWindow(3, [1, 2, 2, 3])
    assert dict(w.counts) == {2: 2, 3: 1}
    w.push(4)
    assert dict(w.counts) == {2: 1, 3: 1, 4: 1}
    copy = w.copy()
    copy.push(5)
    assert dict(w.counts) == {2: 1, 3: 1, 4: 1}  # the original is untouched
    assert dict(PenaltyWindow(-1, [1, 1, 2]).counts) == {1: 2, 2: 1}
    assert not PenaltyWindow(0, [1, 2]).counts


def test_top_helpers_find_the_head_without_a_full_sort() -> None:
    row = _row(5, 49152)
    assert top_ids(row, 40).tolist() == np.argsort(-row, kind="stable")[:40].tolist()
    assert top_ids(np.array([0.0, 2.0, 1.0], dtype=np.float32), 5).tolist() == [1, 2, 0]
    minus_inf = np.full(100, -np.inf, dtype=np.float32)
    minus_inf[7] = 1.0
    assert top_ids(minus_inf, 3)[0] == 7
    i, p = top_prob(np.array([0.0, 2.0, 1.0], dtype=np.float32))
    assert i == 1 and abs(p - np.exp(2) / np.exp([0, 2, 1]).sum()) < 1e-6
    full = np.exp(row.astype(np.float64) - row.max())
    full /= full.sum()
    for tok, prob in top_softmax(row, 5):
        assert abs(prob - full[tok]) < 1e-6


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"repeat_penalty": 0.0}, "repeat_penalty"),
        ({"repeat_penalty": float("nan")}, "repeat_penalty"),
        ({"repeat_last_n": -2}, "repeat_last_n"),
        ({"presence_penalty": float("inf")}, "presence_penalty"),
        ({"frequency_penalty": 101.0}, "frequency_penalty"),
        ({"sampler": "typical"}, "sampler"),
        ({"seed": -1}, "seed"),
    ],
)
def test_sampling_params_name_the_bad_value(kwargs: dict, key: str) -> None:
    with pytest.raises(BoundsError) as e:
        SamplingParams(**kwargs)
    assert e.value.key == key


# -- speculative sampling on explicit distributions ----------------------------------

P = np.array([0.5, 0.3, 0.15, 0.05])  # target
Q = np.array([0.1, 0.6, 0.2, 0.1])  # draft (deliberately different)


def _rows(p: np.ndarray) -> np.ndarray:
    return np.log(p).astype(np.float32)


def _chi2_critical(df: int, alpha_z: float = 3.09) -> float:
    """Upper critical value of chi-square(df) at alpha = 0.001 (Wilson–Hilferty)."""
    return df * (1 - 2 / (9 * df) + alpha_z * math.sqrt(2 / (9 * df))) ** 3


def _chi2(counts: np.ndarray, p: np.ndarray) -> float:
    n = counts.sum()
    return float(((counts - n * p) ** 2 / (n * p)).sum())


def _one_token_step(sampler: str, p: np.ndarray, q: np.ndarray | None, seed: int) -> tuple[int, bool]:
    """One speculative step with k = 1 through the engine's rules: (first token, accepted)."""
    s = ReplySampler(SamplingParams(temperature=1.0, sampler=sampler, seed=seed, **UNFILTERED), seed)
    if q is None:  # a deterministic proposal (an n-gram's): always Q's argmax
        d, dist = int(np.argmax(Q)), None
    else:
        d, _, dist = s.draft_rule(10).choose(_rows(q))
    v = s.verify([d], np.stack([_rows(p), _rows(p)]), 10, None, [dist])
    return (d if v.n_accepted == 1 else v.committed), v.n_accepted == 1


N_STAT = 20_000
"""Samples per distribution test. A chi-square test of N samples has noncentrality
N * sum((p' - p)^2 / p) >= N * (2 TV)^2 against any p' at total variation TV from p
(Cauchy-Schwarz), i.e. >= 200 for TV = 0.05: the alpha = 0.001 test with 3 degrees of
freedom (critical 16.3) then misses such a p' with probability < 1e-9."""


@pytest.mark.parametrize(("sampler", "draft"), [("coupled", "model"), ("rejection", "model"), ("rejection", "ngram")])
def test_speculative_sampling_keeps_the_target_distribution(sampler: str, draft: str) -> None:
    counts = np.zeros(len(P))
    accepted = 0
    for seed in range(N_STAT):
        tok, acc = _one_token_step(sampler, P, Q if draft == "model" else None, seed)
        counts[tok] += 1
        accepted += acc
    assert _chi2(counts, P) < _chi2_critical(len(P) - 1), counts / N_STAT
    # acceptance: the coupling's exact formula, or sum(min(p, q)) for rejection (p(d) for a fixed d)
    expected = {
        ("coupled", "model"): coupled_acceptance(P, Q),
        ("rejection", "model"): float(np.minimum(P, Q).sum()),
        ("rejection", "ngram"): float(P[np.argmax(Q)]),
    }[sampler, draft]
    assert abs(accepted / N_STAT - expected) < 4 * math.sqrt(expected * (1 - expected) / N_STAT)


def test_coupled_acceptance_meets_the_total_variation_bound() -> None:
    rng = np.random.default_rng(11)
    for _ in range(200):
        p, q = rng.dirichlet(np.full(6, 0.5)), rng.dirichlet(np.full(6, 0.5))
        tv = 0.5 * np.abs(p - q).sum()
        assert coupled_acceptance(p, q) >= (1 - tv) / (1 + tv) - 1e-12
    assert abs(coupled_acceptance(P, P) - 1.0) < 1e-12


def test_the_coupled_verdict_carries_each_judged_positions_expected_acceptance() -> None:
    """Position by position, the probability the coupled sampler accepts: the exact formula
    for a sampled proposal, the target's probability of the token for a fixed one (an
    n-gram's), nothing when greedy."""
    s = ReplySampler(SamplingParams(temperature=1.0, seed=3, **UNFILTERED), 3)
    d, _, dist = s.draft_rule(10).choose(_rows(Q))
    v = s.verify([d], np.stack([_rows(P), _rows(P)]), 10, None, [dist])
    assert len(v.expected) == 1 and v.expected[0] == pytest.approx(coupled_acceptance(P, Q))
    fixed = int(np.argmax(Q))
    v = s.verify([fixed], np.stack([_rows(P), _rows(P)]), 10, None, [None])
    assert v.expected == (pytest.approx(P[fixed]),)
    greedy = ReplySampler(SamplingParams(temperature=0.0), 0)
    assert greedy.verify([0], np.stack([_rows(P), _rows(P)]), 10).expected == ()


def test_expected_acceptance_is_the_mean_of_the_outcomes_over_different_supports() -> None:
    """Top-k keeps different tokens of the target and of the draft: the expectation is taken
    over their union (a token only one of them may sample counts in its ratios), and it is
    what acceptance averages to over seeds (the counts auto learns from stay unbiased).
    Judged positions past the first carry theirs too."""
    p = np.array([0.40, 0.25, 0.20, 0.10, 0.05])
    q = np.array([0.05, 0.30, 0.35, 0.10, 0.20])
    params = {"top_k": 3, "top_p": 1.0, "min_p": 0.0}
    rows = np.stack([_rows(p)] * 3)
    accepted, expected = np.zeros(2), np.zeros(2)
    reached = np.zeros(2)
    n = N_STAT // 4
    for seed in range(n):
        s = ReplySampler(SamplingParams(temperature=1.0, seed=seed, **params), seed)
        rule = s.draft_rule(10)
        d1, _, q1 = rule.choose(_rows(q))
        d2, _, q2 = rule.choose(_rows(q))
        v = s.verify([d1, d2], rows, 10, None, [q1, q2])
        assert len(v.expected) == min(v.n_accepted + 1, 2)
        for i, e in enumerate(v.expected):
            reached[i] += 1
            accepted[i] += v.n_accepted > i
            expected[i] += e
    exact = expected_acceptance(
        *(ReplySampler(SamplingParams(temperature=1.0, **params), 0).draft_rule(0).choose(_rows(x))[2] for x in (p, q)),
        0,
    )
    assert exact is not None and expected[0] / n == pytest.approx(exact)
    for i in range(2):
        a = expected[i] / reached[i]
        assert abs(accepted[i] / reached[i] - a) < 4 * math.sqrt(a * (1 - a) / reached[i]), (i, accepted, expected)


def test_expected_acceptance_is_not_computed_over_too_many_candidates() -> None:
    """Filters off, a row's whole vocabulary are candidates: n x n ratios would not fit a step."""
    s = ReplySampler(SamplingParams(temperature=1.0, **UNFILTERED), 0)
    wide = np.linspace(0.0, 1.0, EXPECTED_MAX_CANDIDATES + 1).astype(np.float32)
    _, _, dist = s.draft_rule(0).choose(wide)
    assert dist is not None and expected_acceptance(dist, dist, 0) is None
    v = s.verify([1], np.stack([wide, wide]), 0, None, [dist])
    assert v.expected == (None,)


def test_coupled_proposal_of_the_target_itself_is_always_accepted() -> None:
    for seed in range(2000):
        _, acc = _one_token_step("coupled", P, P, seed)
        assert acc


def test_two_token_rejection_block_keeps_the_joint_distribution() -> None:
    # two positions: a rejection at the first ends the step after one token, and the
    # next step drafts the second again; (t1, t2) must be distributed as p x p
    n = 20_000
    counts = np.zeros((4, 4))
    for seed in range(n):
        s = ReplySampler(SamplingParams(temperature=1.0, sampler="rejection", **UNFILTERED), seed)
        toks: list[int] = []
        while len(toks) < 2:
            pos = 10 + len(toks)
            rule = s.draft_rule(pos)
            block = [rule.choose(_rows(Q)) for _ in range(2)]
            v = s.verify([b[0] for b in block], np.stack([_rows(P)] * 3), pos, None, [b[2] for b in block])
            toks += [b[0] for b in block[: v.n_accepted]] + [v.committed]
        counts[toks[0], toks[1]] += 1
    joint = np.outer(P, P).ravel()
    assert _chi2(counts.ravel(), joint) < _chi2_critical(15)


def test_plain_pick_samples_the_filtered_distribution() -> None:
    params = SamplingParams(temperature=0.7, top_k=3, top_p=1.0, min_p=0.0)
    row = _rows(np.array([0.4, 0.3, 0.2, 0.1]))
    p = candidates(row, params).probs()
    ids = candidates(row, params).ids
    counts = np.zeros(4)
    for seed in range(N_STAT):
        counts[ReplySampler(params, seed).pick(row, 0)] += 1
    assert counts[3] == 0  # filtered out by top-k
    expected = np.zeros(4)
    expected[ids] = p
    assert _chi2(counts[:3], expected[:3]) < _chi2_critical(2)


def test_penalties_see_the_drafts_before_each_row() -> None:
    # row 1 must be penalised with the draft token of row 0 in its history
    params = SamplingParams(temperature=0.0, repeat_penalty=10.0, repeat_last_n=8)
    rows = np.array([[0.0, 5.0, 4.0], [0.0, 5.0, 4.0]], dtype=np.float32)
    s = ReplySampler(params, 0)
    assert s.verify([1], rows, 0, PenaltyWindow(8, [])).committed == 2  # 5/10 < 4
    v = s.verify([2], rows, 0, PenaltyWindow(8, []))
    assert (v.n_accepted, v.committed) == (0, 1)  # 2 rejected: it is not in the history yet
