"""Verification rules on explicit distributions (no model)."""

from __future__ import annotations

import numpy as np
import pytest

from skippy_tui.engine.sampling import (
    SamplingParams,
    filtered_probs,
    sample,
    top_k_list,
    top_prob,
    verify_greedy,
    verify_stochastic,
)


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


P = np.array([0.5, 0.3, 0.15, 0.05])  # target
Q = np.array([0.1, 0.6, 0.2, 0.1])  # draft (deliberately different)


def _first_token_freq(draft_probs: np.ndarray | None, n: int, seed: int) -> np.ndarray:
    """Run one-token speculation n times; count the first committed token."""
    rng = np.random.default_rng(seed)
    counts = np.zeros(len(P))
    for _ in range(n):
        # a greedy draft always proposes Q's argmax
        d = int(np.argmax(Q)) if draft_probs is None else sample(draft_probs, rng)
        n_acc, committed = verify_stochastic(
            [d], [P, P], rng, draft_probs=None if draft_probs is None else [draft_probs]
        )
        first = d if n_acc == 1 else committed
        counts[first] += 1
    return counts / n


@pytest.mark.parametrize("draft", ["sampled", "greedy"])
def test_rejection_sampling_preserves_the_target_distribution(draft: str) -> None:
    # Leviathan et al. 2023, Theorem 1: output ~ p whatever q is.
    n = 40_000
    freq = _first_token_freq(Q if draft == "sampled" else None, n, seed=1234)
    # 4 standard errors of a binomial proportion at n draws
    tol = 4 * np.sqrt(P * (1 - P) / n)
    assert np.all(np.abs(freq - P) < tol), (freq, P)


def test_acceptance_rate_matches_theory() -> None:
    # expected acceptance for a sampled draft = sum(min(p, q))
    rng = np.random.default_rng(7)
    n, acc = 20_000, 0
    for _ in range(n):
        d = sample(Q, rng)
        n_acc, _ = verify_stochastic([d], [P, P], rng, draft_probs=[Q])
        acc += n_acc
    assert abs(acc / n - np.minimum(P, Q).sum()) < 0.02


def test_two_token_block_keeps_the_joint_distribution() -> None:
    # second position conditioned on the first: use the same p for simplicity;
    # the pair (t1, t2) must be distributed as p x p.
    rng = np.random.default_rng(99)
    n = 40_000
    counts = np.zeros((4, 4))
    for _ in range(n):
        toks: list[int] = []
        while len(toks) < 2:  # a rejection at position 0 ends the step after one token
            block = [sample(Q, rng), sample(Q, rng)]
            n_acc, c = verify_stochastic(block, [P, P, P], rng, draft_probs=[Q, Q])
            toks += [*block[:n_acc], c]
        counts[toks[0], toks[1]] += 1
    joint = np.outer(P, P)
    tol = 4 * np.sqrt(joint * (1 - joint) / n) + 1e-3
    assert np.all(np.abs(counts / n - joint) < tol)


def test_filters_and_greedy() -> None:
    logits = np.log(np.array([0.4, 0.3, 0.2, 0.1], dtype=np.float32))
    assert filtered_probs(logits, SamplingParams(temperature=0.0)).tolist() == [1.0, 0.0, 0.0, 0.0]
    p = filtered_probs(logits, SamplingParams(temperature=1.0, top_k=2, top_p=1.0, min_p=0.0))
    assert np.allclose(p, [0.4 / 0.7, 0.3 / 0.7, 0, 0])
    p = filtered_probs(logits, SamplingParams(temperature=1.0, top_k=0, top_p=0.7, min_p=0.0))
    assert np.allclose(p, [0.4 / 0.7, 0.3 / 0.7, 0, 0])
    p = filtered_probs(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.6))
    assert np.allclose(p, [0.4 / 0.7, 0.3 / 0.7, 0, 0])
    hot = filtered_probs(logits, SamplingParams(temperature=2.0, top_k=0, top_p=1.0, min_p=0.0))
    assert hot[0] < 0.4 and hot[3] > 0.1  # flatter


def test_top_helpers() -> None:
    logits = np.array([0.0, 2.0, 1.0], dtype=np.float32)
    i, p = top_prob(logits)
    assert i == 1 and abs(p - np.exp(2) / np.exp([0, 2, 1]).sum()) < 1e-6
    assert [t for t, _ in top_k_list(np.array([0.1, 0.6, 0.3]), 2)] == [1, 2]


def test_sampling_is_reproducible_by_seed() -> None:
    a = [sample(P, np.random.default_rng(5)) for _ in range(3)]
    b = [sample(P, np.random.default_rng(5)) for _ in range(3)]
    assert a == b
