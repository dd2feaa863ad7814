"""Sync-plan bookkeeping: the reference draft runner's cases, plus Truncate."""

from __future__ import annotations

import pytest

from skippy_tui.engine.drafting.sync import AlreadySynced, DraftSyncState, Extend, Reset, Truncate, common_prefix_len


def state(tokens: list[int]) -> DraftSyncState:
    return DraftSyncState(tokens)


# -- the reference's cases (reference_plan = its three-way semantics) --------------


def test_an_empty_session_always_resets() -> None:
    assert state([]).plan([1, 2, 3]) == Reset(to=2)
    # a one-token context has an empty prefix: still a reset, prefilling nothing
    assert state([]).plan([1]) == Reset(to=0)


def test_a_synced_prefix_extends_by_the_delta_only() -> None:
    assert state([1, 2]).plan([1, 2, 3, 4, 5]) == Extend(from_=2, to=4)


def test_an_exactly_synced_prefix_is_a_no_op() -> None:
    assert state([1, 2, 3]).plan([1, 2, 3, 4]) == AlreadySynced()


def test_divergence_resets_in_the_reference_semantics() -> None:
    assert state([1, 9]).reference_plan([1, 2, 3, 4]) == Reset(to=3)
    # a rejected proposal leaves the session longer than the target
    assert state([1, 2, 3, 4]).reference_plan([1, 2, 3]) == Reset(to=2)


def test_proposal_steps_join_the_synced_prefix_so_the_next_sync_extends() -> None:
    synced = state([1, 2])
    synced.record_proposal_step(3)
    synced.record_proposal_step(4)
    assert synced.plan([1, 2, 3, 4, 5, 6]) == Extend(from_=4, to=5)


def test_a_rejected_proposal_step_forces_a_reset_in_the_reference() -> None:
    synced = state([1, 2])
    synced.record_proposal_step(3)
    assert synced.reference_plan([1, 2, 9, 10]) == Reset(to=3)


def test_recording_a_reset_replaces_the_whole_prefix() -> None:
    synced = state([1, 2, 3])
    synced.record_reset([7, 8])
    assert synced.plan([7, 8, 9]) == AlreadySynced()
    assert synced.reference_plan([1, 2, 3]) == Reset(to=2)


def test_an_extend_plan_indexes_the_context_the_caller_slices() -> None:
    context = [1, 2, 3, 4, 5]
    plan = state([1, 2]).plan(context)
    assert isinstance(plan, Extend)
    assert context[plan.from_ : plan.to] == [3, 4]


# -- beyond the reference: truncate to the shared prefix ---------------------------


@pytest.mark.parametrize(
    ("synced", "context", "expected"),
    [
        # rejected proposal 3 (committed 9 instead): keep [1, 2], prefill [9]
        ([1, 2, 3], [1, 2, 9, 10], Truncate(keep=2, to=3)),
        # the session is longer than the target prefix: pure rollback
        ([1, 2, 3, 4], [1, 2, 3], Truncate(keep=2, to=2)),
        # an edited message in the middle of the conversation
        ([1, 2, 3, 4, 5], [1, 2, 7, 8, 9, 10], Truncate(keep=2, to=5)),
        # nothing shared at all: reset
        ([5, 6], [1, 2, 3], Reset(to=2)),
        # same length, different last token
        ([1, 9], [1, 2, 3, 4], Truncate(keep=1, to=3)),
    ],
)
def test_divergence_after_a_shared_prefix_truncates(synced: list[int], context: list[int], expected: object) -> None:
    assert state(synced).plan(context) == expected


def test_recording_a_truncate_then_extend_reaches_the_target() -> None:
    s = state([1, 2, 3, 4])
    context = [1, 2, 7, 8, 9]
    plan = s.plan(context)
    assert plan == Truncate(keep=2, to=4)
    s.record_truncate(plan.keep)
    s.record_extend(context[plan.keep : plan.to])
    assert s.plan(context) == AlreadySynced()
    assert s.tokens == (1, 2, 7, 8)


def test_a_failed_decode_records_nothing() -> None:
    # the caller records only after success; planning alone never changes state
    s = state([1, 2])
    s.plan([1, 2, 3, 4])
    assert s.tokens == (1, 2)


def test_common_prefix_len() -> None:
    assert common_prefix_len([1, 2, 3], [1, 2, 4]) == 2
    assert common_prefix_len([], [1]) == 0
    assert common_prefix_len([1, 2], [1, 2, 3]) == 2


class CountingTokens(list):
    """A token list that counts element reads (indexing and slicing), to prove what a plan compares."""

    reads = 0

    def __getitem__(self, i):
        out = super().__getitem__(i)
        CountingTokens.reads += len(out) if isinstance(i, slice) else 1
        return out


def test_within_an_epoch_a_plan_compares_only_the_new_tokens():
    """A reply's context only grows, so a step's sync must cost O(new tokens), not O(context)."""
    context = CountingTokens(range(10_000, 14_000))
    s = DraftSyncState()
    epoch = object()
    s.record_reset(context[:-1])
    s.mark_synced(epoch)
    for step in range(20):
        context += [20_000 + step, 30_000 + step]  # a step commits two tokens
        CountingTokens.reads = 0
        plan = s.plan(context, epoch)
        assert plan == Extend(from_=len(context) - 3, to=len(context) - 1)
        assert CountingTokens.reads <= 8, CountingTokens.reads
        s.record_extend(context[plan.from_ : plan.to])
        s.mark_synced(epoch)
    # a proposal the target rejected: still only the tail is compared, and the plan is right
    s.record_extend([7, 8, 9])
    context.append(5)
    CountingTokens.reads = 0
    assert s.plan(context, epoch) == Truncate(keep=len(context) - 2, to=len(context) - 1)
    assert CountingTokens.reads <= 8
    # without the epoch (or in another one) everything is compared again
    CountingTokens.reads = 0
    s.plan(context)
    assert CountingTokens.reads >= 4000
    assert s.plan(context, object()) == Truncate(keep=len(context) - 2, to=len(context) - 1)


def test_an_epoch_does_not_trust_what_was_truncated_or_reset():
    epoch = object()
    s = state([1, 2, 3, 4])
    s.mark_synced(epoch)
    s.record_truncate(2)
    s.record_extend([9, 9])
    # positions 2, 3 changed after the mark: they must be compared, not trusted
    assert s.plan([1, 2, 3, 4, 5], epoch) == Truncate(keep=2, to=4)
    s.record_reset([7])
    assert s.plan([1, 2, 3], epoch) == Reset(to=2)
