"""N-gram (prompt-lookup) drafting: matcher tables, sync bookkeeping, the combined
drafter's routing, and greedy output equal to plain decoding on the real models."""

from __future__ import annotations

import json

import pytest
from helpers import Run, assert_verified_in_batches, load, restore, user

from skippy_tui.cli import main
from skippy_tui.engine.drafting.combined import HANDOFF, AutoDrafter, CombinedDrafter, build_drafter
from skippy_tui.engine.drafting.model import Proposal
from skippy_tui.engine.drafting.ngram import NgramDrafter, NgramIndex
from skippy_tui.engine.errors import BoundsError
from skippy_tui.engine.events import SyncInfo
from skippy_tui.engine.sampling.params import SamplingParams
from skippy_tui.engine.settings import GenerationSettings

# (indexed tokens, query context, k, n_max, n_min, expected proposal)
TABLE = [
    # the suffix [1, 2] occurred before: copy what followed it
    ([5, 1, 2, 3, 4, 9, 1, 2], None, 3, 3, 2, [3, 4, 9]),
    # the longest match wins over a more recent shorter one
    ([7, 1, 2, 3, 8, 2, 3, 6, 1, 2, 3], None, 2, 3, 1, [8, 2]),
    # the most recent occurrence of the same n-gram wins
    ([1, 2, 10, 1, 2, 20, 1, 2], None, 1, 2, 2, [20]),
    # the copy overlaps its own output: a repeating pattern continues
    ([4, 5, 4, 5], None, 5, 2, 2, [4, 5, 4, 5, 4]),
    ([3, 3, 3], None, 4, 2, 1, [3, 3, 3, 3]),
    # no n-gram of length >= n_min seen before
    ([1, 2, 3, 4], None, 3, 3, 2, []),
    ([1, 2, 3, 1], None, 3, 3, 2, []),  # only a 1-gram matches, n_min is 2
    ([1, 2, 3, 1], None, 3, 3, 1, [2, 3, 1]),
    # a query context longer than the index: matched against what was indexed
    ([9, 8, 7, 6], [9, 8, 7, 6, 9, 8], 2, 2, 2, [7, 6]),
    ([], [1, 2], 3, 2, 1, []),
    ([1, 2, 3], None, 0, 2, 1, []),
]


@pytest.mark.parametrize(("indexed", "query", "k", "n_max", "n_min", "expected"), TABLE)
def test_ngram_continuation_table(indexed, query, k, n_max, n_min, expected):
    idx = NgramIndex(n_max, n_min)
    idx.extend(indexed)
    ctx = indexed if query is None else query
    assert idx.continuation(ctx, k) == expected


def test_ngram_match_reports_length_and_position():
    idx = NgramIndex(4, 1)
    idx.extend([1, 2, 3, 4, 1, 2, 3])
    assert idx.match() == (3, 3)
    assert NgramIndex(2, 2).match([1]) is None


@pytest.mark.parametrize(
    "tokens, cap, expected",
    [
        ([7, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4], 16, 4),  # the 4-gram match, and the token before it differs
        ([1, 2, 3, 4, 5, 6, 9, 1, 2, 3, 4, 5, 6], 16, 6),  # the copy goes back past n_max
        ([1, 2, 3, 4, 5, 6, 9, 1, 2, 3, 4, 5, 6], 5, 5),  # ... up to the cap
        ([5, 1, 2, 9, 8, 1, 2], 16, 2),  # a short match in free text
        ([1, 2, 3, 4], 16, 0),  # no match
    ],
)
def test_ngram_copy_length(tokens, cap, expected):
    """How far the context's end already copies the span before its match."""
    idx = NgramIndex(4, 2)
    idx.extend(tokens)
    assert idx.copy_length(cap=cap) == expected
    assert idx.copy_length(tokens, cap) == expected
    for split in range(len(tokens) - 3, len(tokens) + 1):  # the last tokens as a proposal after the context
        head = NgramIndex(4, 2)
        head.extend(tokens[:split])
        assert head.copy_length_with(tokens[:split], tokens[split:], cap) == expected, split


def test_ngram_truncate_forgets_later_tokens():
    idx = NgramIndex(2, 2)
    idx.extend([1, 2, 3, 9, 9, 1, 2])
    assert idx.continuation(idx.tokens, 1) == [3]
    idx.truncate(2)
    idx.extend([7, 1, 2])
    assert idx.continuation(idx.tokens, 1) == [7]
    with pytest.raises(BoundsError):
        NgramIndex(2, 3)


def test_ngram_drafter_sync_kinds_and_proposal():
    d = NgramDrafter(3, 2)
    assert d.sync([1, 2, 3, 4]) == SyncInfo("reset", 0, 4)
    assert d.sync([1, 2, 3, 4]) == SyncInfo("synced")
    assert d.sync([1, 2, 3, 4, 1, 2]) == SyncInfo("extend", 4, 6)
    p = d.propose([1, 2, 3, 4, 1, 2], 3, 0.5)
    assert p.tokens == (3, 4, 1) and p.probs == (None, None, None) and p.rows == () and p.source == "ngram"
    assert d.sync([1, 2, 9]) == SyncInfo("truncate", 2, 3)
    assert d.propose([1, 2, 9], 3, 0.0).tokens == ()
    assert d.sync([5]) == SyncInfo("reset", 0, 1)
    assert d.room([1] * 10) > 1 << 20


class FakeModel:
    """A ModelDrafter stand-in that records calls."""

    source = "model"

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.cache = object()

    def room(self, context):
        return 100

    def sync(self, context, epoch=None):
        self.calls.append("sync")
        return SyncInfo("extend", len(context) - 2, len(context) - 1)

    def propose(self, context, k, p_min, rule=None):
        self.calls.append("propose")
        return Proposal(tuple([42] * k), tuple([0.9] * k), (), "model")

    def reset(self):
        self.calls.append("reset")


def test_combined_drafter_routes_ngram_first_then_model():
    model = FakeModel()
    c = CombinedDrafter(NgramDrafter(2, 2), model)  # type: ignore[arg-type]
    ctx = [1, 2, 3, 1, 2]
    info = c.sync(ctx)
    assert info.kind == "reset"  # the index's plan: the model was not touched
    assert c.propose(ctx, 2, 0.0).tokens == (3, 1)
    assert model.calls == []
    ctx = [1, 2, 3, 1, 2, 5]
    assert c.sync(ctx) == SyncInfo("extend", 4, 5)  # no match: the model's plan
    p = c.propose(ctx, 2, 0.0)
    assert p.tokens == (42, 42) and p.source == "model"
    assert model.calls == ["sync", "propose"]
    c.reset()
    assert model.calls[-1] == "reset" and len(c.ngram.index) == 0


def test_build_drafter():
    model = FakeModel()
    assert build_drafter("model", None) is None
    assert build_drafter("model", model) is model  # type: ignore[arg-type]
    assert build_drafter("ngram", model).source == "ngram"  # type: ignore[arg-type,union-attr]
    assert build_drafter("ngram+model", model).source == "ngram+model"  # type: ignore[arg-type,union-attr]
    assert build_drafter("ngram+model", None).source == "ngram"  # type: ignore[union-attr]


# -- real models ----------------------------------------------------------------------------------

PASSAGE = (
    "The old lighthouse stood on the edge of the cliff for more than a hundred years. Every night its "
    "keeper climbed the narrow stairs to light the lamp."
)
PROMPTS = [
    "Repeat the following text exactly:\n\n" + PASSAGE,
    # partly repetitive: the n-gram drafter finds matches, some right, some wrong
    "Write the days of the week, then write them again in reverse order.",
]
GEN = GenerationSettings(SamplingParams(temperature=0.0), max_tokens=48)


@pytest.fixture(scope="module")
def target_only(smollm2_f32, cache_dir):
    sp = load(smollm2_f32, None, cache_dir)
    yield sp
    sp.close()


@pytest.fixture(autouse=True)
def _fresh(request):
    yield
    for name in ("pair", "target_only"):
        if name in request.fixturenames:
            restore(request.getfixturevalue(name))


def test_a_routed_model_hands_a_copy_to_the_ngram(pair):
    """Under ``auto``, a model proposal whose tokens copy an earlier span for HANDOFF tokens
    stops there (the next step's n-gram goes on with the copy for almost nothing); in
    free text it runs to k."""
    span = " The old lighthouse stood on the edge of the cliff for more than a hundred years."
    copy = pair.target.tokenize(f"Say it twice:{span} Again:{span[:8]}", False)
    free = pair.target.tokenize("Write about the sea.", False)
    drafter = AutoDrafter(NgramDrafter(), pair.model_drafter)
    drafter.route = "model"
    for context, stops in ((copy, True), (free, False)):
        drafter.reset()
        drafter.available(context, 32)
        drafter.sync(context)
        proposal = drafter.propose(context, 8, 0.0)
        assert proposal.stopped is stops, pair.target.detokenize(list(proposal.tokens))
        if stops:  # copying went on as far as the hand-off, and no further
            assert 0 < len(proposal.tokens) < 8
            index = drafter.ngram.index
            assert index.copy_length_with(context, proposal.tokens) >= HANDOFF
            assert index.copy_length_with(context, proposal.tokens[:-1]) < HANDOFF
        else:
            assert len(proposal.tokens) == 8


def _plain(sp, prompt):
    sp.update(enabled=False)
    sp.forget()
    return Run(sp.run(user(prompt), GEN))


@pytest.mark.parametrize(("prompt", "n_draft"), [(PROMPTS[0], "auto"), (PROMPTS[1], 6)])
def test_ngram_without_draft_model_equals_plain(target_only, prompt, n_draft):
    plain = _plain(target_only, prompt)
    target_only.update(enabled=True, source="ngram", n_draft=n_draft)
    with pytest.raises(BoundsError, match="no draft model"):
        target_only.update(source="model")
    assert target_only.speculation.source == "ngram"  # nothing changed
    target_only.forget()
    run = Run(target_only.run(user(prompt), GEN))
    assert run.finish.token_ids == plain.finish.token_ids
    assert run.started.speculative and run.started.draft_source == "ngram"
    drafted = [s for s in run.steps if s.proposed]
    assert drafted and run.finish.n_drafted > 0
    if prompt.startswith("Repeat"):
        assert run.finish.acceptance_rate > 0.5
        assert_verified_in_batches(target_only, [run], at_least=3)
    else:  # matches that the reply does not follow: rejected n-gram tokens, output still plain
        assert run.finish.acceptance_rate < 1.0
    for s in drafted:
        assert s.draft_source == "ngram" and all(t.prob is None for t in s.proposed)
        assert s.sync.kind in ("extend", "reset", "truncate", "synced")
    assert all(s.draft_source == "" for s in run.steps if not s.proposed)


@pytest.mark.parametrize("prompt", PROMPTS)
def test_ngram_and_combined_equal_plain_with_the_pair(pair, prompt):
    plain = _plain(pair, prompt)
    for source in ("ngram", "ngram+model"):
        pair.update(enabled=True, source=source, n_draft=4)
        pair.forget()
        run = Run(pair.run(user(prompt), GEN))
        assert run.finish.token_ids == plain.finish.token_ids, source
        assert run.started.draft_source == source
        assert run.finish.n_drafted > 0
    if not prompt.startswith("Repeat"):
        # the combined source used both: n-gram proposals where the context repeats, the model elsewhere
        assert {s.draft_source for s in run.steps if s.proposed} == {"ngram", "model"}
    pair.update(source="model")
    pair.forget()
    run = Run(pair.run(user(prompt), GEN))
    assert run.finish.token_ids == plain.finish.token_ids
    assert {s.draft_source for s in run.steps if s.proposed} == {"model"}


@pytest.mark.models  # the CLI loads the embedded target
def test_cli_run_with_ngram_and_no_draft(capsys):
    rc = main(["run", "Repeat exactly: one two three, one two three.", "--no-draft", "--draft-source", "ngram",
               "--max-tokens", "16", "--json"])  # fmt: skip
    assert rc == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert events[0]["type"] == "reply_started" and events[0]["draft_source"] == "ngram"
    assert events[0]["n_draft"] == "auto"  # every pair, the embedded one too, defaults to auto
    assert events[-1]["type"] == "finish" and events[-1]["reason"] in ("eos", "max_tokens")
    assert 0 < events[-1]["n_tokens"] <= 16


def test_ngram_sync_within_an_epoch_reads_only_new_tokens():
    from test_sync import CountingTokens

    d = NgramDrafter()
    epoch = object()
    context = CountingTokens(range(100, 3100))
    assert d.sync(context, epoch).kind == "reset"
    context += [1, 2]
    CountingTokens.reads = 0
    info = d.sync(context, epoch)
    assert (info.kind, info.start, info.end) == ("extend", 3000, 3002)
    assert CountingTokens.reads <= 4, CountingTokens.reads
    # an edited context in a new epoch is compared in full and truncated
    edited = [*context[:10], 7, 7, 7]
    info = d.sync(edited, object())
    assert (info.kind, info.start) == ("truncate", 10)
    assert d.index.tokens == edited
