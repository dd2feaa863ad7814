"""The verify plan a profile and the probe's verdict give (engine/policy/exactness.py), without a model."""

from __future__ import annotations

import pytest

from skippy_tui.engine.native.invariance import Invariance
from skippy_tui.engine.policy.exactness import NOT_BIT_EXACT, VerifyPlan, verify_plan, why_uncertified

CHUNKS_OF_7 = Invariance(rows=7, probed=17, max_diff=1.13)
EVERY_SIZE = Invariance(rows=None, probed=17, max_diff=0.0)
ONE_ROW = Invariance(rows=1, probed=17, max_diff=0.0312)
LLAMAFILE = Invariance(
    rows=1, probed=0, max_diff=0.0,
    note="this llama.cpp was built with LLAMAFILE sgemm, whose batched rows differ from single rows; reinstall it",
)  # fmt: skip


@pytest.mark.parametrize("profile", ["auto", "exact"])
def test_certified_chunks_verify_exactly_under_auto_and_exact(profile: str) -> None:
    assert verify_plan(profile, True, CHUNKS_OF_7) == VerifyPlan(7, True, True)
    assert verify_plan(profile, True, CHUNKS_OF_7).short() == "exact ≤7 rows"
    # every size probed matched: batches still split at the largest size probed
    plan = verify_plan(profile, True, EVERY_SIZE)
    assert plan is not None and plan.rows == 17 and plan.exact and plan.short() == "exact"


@pytest.mark.parametrize("inv", [ONE_ROW, LLAMAFILE], ids=["probed", "llamafile"])
def test_auto_verifies_in_one_batch_where_fewer_than_two_rows_are_certified(inv: Invariance) -> None:
    plan = verify_plan("auto", True, inv)
    assert plan is not None and plan.rows is None and not plan.exact and plan.checked
    assert plan.short() == "not bit-exact"
    assert NOT_BIT_EXACT in plan.label(inv) and plan.label(inv).startswith("one batch")
    # exact keeps every row bit-identical, row by row
    exact = verify_plan("exact", True, inv)
    assert exact is not None and exact.rows == 1 and exact.exact and exact.short() == "exact ≤1 row"


def test_why_a_build_certifies_nothing_is_said_without_the_rebuild_advice() -> None:
    why = why_uncertified(LLAMAFILE)
    assert why == "this llama.cpp was built with LLAMAFILE sgemm, whose batched rows differ from single rows"
    assert why_uncertified(ONE_ROW) == "a batch of 2 rows differs from single rows by up to 0.0312 in a logit"


def test_fast_and_exact_false_verify_in_one_unchecked_batch_and_a_pending_probe_is_no_plan() -> None:
    fast = verify_plan("fast", False, None)
    assert fast is not None and (fast.rows, fast.exact, fast.checked) == (None, False, False)
    assert fast.short() == "not exact" and "profile fast" in fast.label(None)
    off = verify_plan("auto", False, None)
    assert off is not None and not off.exact and "exact = false" in off.label(None)
    assert verify_plan("auto", True, None) is None  # the probe runs before the first speculative reply
