"""The bounds contract: every violation is a BoundsError naming key, value and bound."""

from __future__ import annotations

import math

import pytest

from skippy_tui.engine.bounds import (
    MAX_PROMPT_TOKENS,
    ContextCapacity,
    validate_capacity,
    validate_prompt_len,
    validate_speculation,
)
from skippy_tui.engine.errors import BoundsError
from skippy_tui.engine.sampling.params import SamplingParams
from skippy_tui.engine.settings import GenerationSettings, SpeculationSettings


def test_valid_speculation_settings_pass() -> None:
    validate_speculation(1, 4, 0, 0.0)
    validate_speculation(4096, 4096, 4096, 1.0)


@pytest.mark.parametrize(
    ("args", "key"),
    [
        ((0, 4, 0, 0.0), "n_seq"),
        ((4097, 4, 0, 0.0), "n_seq"),
        ((1, 0, 0, 0.0), "n_draft"),
        ((1, 4097, 0, 0.0), "n_draft"),
        ((1, 4, 5, 0.0), "n_min"),
        ((1, 4, -1, 0.0), "n_min"),
        ((1, 4, 0, math.nan), "p_min"),
        ((1, 4, 0, math.inf), "p_min"),
        ((1, 4, 0, 1.1), "p_min"),
        ((1, 4, 0, -0.1), "p_min"),
    ],
)
def test_each_violation_names_its_key_value_and_bound(args: tuple, key: str) -> None:
    with pytest.raises(BoundsError) as info:
        validate_speculation(*args)
    err = info.value
    assert err.key == key
    assert key in str(err) and "must be" in str(err)


def test_speculation_settings_validate_on_construction() -> None:
    with pytest.raises(BoundsError, match="n_draft = 0"):
        SpeculationSettings(n_draft=0)
    with pytest.raises(BoundsError, match="p_min"):
        SpeculationSettings(p_min=float("nan"))
    with pytest.raises(BoundsError, match=r"n_min = 9 .*0\.\.8"):
        SpeculationSettings(n_draft=8, n_min=9)


def test_capacity_needs_n_draft_plus_one_rows() -> None:
    ok = ContextCapacity("target", n_batch=9, n_ubatch=1)
    validate_capacity(ok, ok, 8)
    with pytest.raises(BoundsError, match=r"target\.n_batch = 8 .*>= 9"):
        validate_capacity(ContextCapacity("target", 8, 8), ok, 8)
    with pytest.raises(BoundsError, match=r"draft\.n_batch"):
        validate_capacity(ok, ContextCapacity("draft", 4, 4), 8)


def test_recurrent_models_need_micro_batch_and_slots() -> None:
    rec = ContextCapacity("draft", n_batch=4, n_ubatch=4, recurrent_or_hybrid=True, recurrent_slots=3)
    validate_capacity(rec, rec, 3)
    with pytest.raises(BoundsError, match="n_ubatch"):
        validate_capacity(rec, ContextCapacity("draft", 4, 3, True, 3), 3)
    with pytest.raises(BoundsError, match="recurrent_slots"):
        validate_capacity(rec, ContextCapacity("draft", 4, 4, True, 2), 3)


def test_prompt_length_bound() -> None:
    validate_prompt_len(MAX_PROMPT_TOKENS)
    with pytest.raises(BoundsError, match="1048576"):
        validate_prompt_len(MAX_PROMPT_TOKENS + 1)


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": math.nan}, "temperature"),
        ({"top_k": -1}, "top_k"),
        ({"top_p": 1.5}, "top_p"),
        ({"min_p": -0.1}, "min_p"),
        ({"seed": -3}, "seed"),
    ],
)
def test_sampling_bounds(kwargs: dict, key: str) -> None:
    with pytest.raises(BoundsError) as info:
        SamplingParams(**kwargs)
    assert info.value.key == key


def test_generation_bounds() -> None:
    with pytest.raises(BoundsError, match="max_tokens"):
        GenerationSettings(max_tokens=0)
