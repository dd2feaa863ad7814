"""The speculative loop on real models: sync, equality with plain decoding, stops, text."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import pytest
from helpers import PROMPTS, Run, assert_verified_in_batches, load, restore, user

from skippy_tui.engine.drafting.model import FOLD_MAX, ModelDrafter, Proposal
from skippy_tui.engine.events import SyncInfo
from skippy_tui.engine.native.devices import system_info
from skippy_tui.engine.native.invariance import cpu_model
from skippy_tui.engine.native.model import Context, LoadParams, Model
from skippy_tui.engine.sampling.params import SamplingParams
from skippy_tui.engine.settings import GenerationSettings
from skippy_tui.engine.speculator import Speculator

GEN = GenerationSettings(max_tokens=40)


@pytest.fixture(scope="module")
def plain_refs(plain: Speculator) -> dict[str, tuple[int, ...]]:
    return {p: Run(plain.run(user(p), GEN)).finish.token_ids for p in PROMPTS}


@pytest.fixture(autouse=True)
def _fresh(request: pytest.FixtureRequest):
    """Module-scoped models, but every test starts from their load-time settings and empty caches."""
    yield
    for name in ("spec", "plain"):
        if name in request.fixturenames:
            restore(request.getfixturevalue(name))


# -- draft sync on a real model ------------------------------------------------------


@pytest.fixture
def draft_runner(smollm2_q4_1: Path):
    made: list = []

    def make() -> ModelDrafter:
        m = Model(smollm2_q4_1, LoadParams())
        c = Context(m, LoadParams(n_ctx=256, n_batch=64, n_ubatch=64))
        made.append((c, m))
        return ModelDrafter(m, c)

    yield make
    for c, m in made:
        c.close()
        m.close()


def test_incremental_sync_proposes_what_a_fresh_reset_does(draft_runner) -> None:
    incremental = draft_runner()
    m = incremental.model
    context = m.tokenize("<|im_start|>user\nName three colours.<|im_end|>\n<|im_start|>assistant\n", False)
    assert incremental.sync(context).kind == "reset"
    first = incremental.propose(context, 2, 0.0).tokens
    # both proposed tokens accepted, then the verifier commits a third token
    extended = [*context, *first, m.tokenize(" and", False)[0]]
    assert incremental.cache.state.plan(extended).__class__.__name__ == "Extend"
    # the one token a proposal taken whole leaves is decoded in the next proposal's first batch
    assert incremental.sync(extended) == SyncInfo("extend", len(context) + 1, len(extended) - 1, folded=True)
    got = incremental.propose(extended, 4, 0.0).tokens
    assert incremental.cache.state.tokens == (*extended, *got[:-1])  # drafting never decodes its last token

    fresh = draft_runner()
    assert fresh.sync(extended).kind == "reset"
    assert fresh.propose(extended, 4, 0.0).tokens == got


def test_a_truncate_plan_leaves_the_draft_as_a_fresh_session_would(draft_runner) -> None:
    incremental = draft_runner()
    m = incremental.model
    context = m.tokenize("<|im_start|>user\nCount to ten.<|im_end|>\n<|im_start|>assistant\n", False)
    incremental.sync(context)
    proposal = incremental.propose(context, 4, 0.0).tokens
    # the verifier accepted one token and corrected the second
    correction = m.tokenize(" seven", False)[0]
    assert correction != proposal[1]
    diverged = [*context, proposal[0], correction]
    info = incremental.sync(diverged)
    assert info.kind == "truncate" and info.start == info.end == len(context) + 1
    got = incremental.propose(diverged, 4, 0.0).tokens

    fresh = draft_runner()
    fresh.sync(diverged)
    assert fresh.propose(diverged, 4, 0.0).tokens == got
    # an edited earlier message: truncate deep into the prefix, then extend
    edited = [*context[:10], *m.tokenize(" something else entirely", False), *context[-5:]]
    info = incremental.sync(edited)
    assert info.kind == "truncate" and info.start == 10 and info.end == len(edited) - 1
    got = incremental.propose(edited, 3, 0.0).tokens
    fresh = draft_runner()
    fresh.sync(edited)
    assert fresh.propose(edited, 3, 0.0).tokens == got


def _propose_counting_decodes(
    drafter: ModelDrafter, context: list[int], monkeypatch: pytest.MonkeyPatch
) -> tuple[list[int], tuple[int, ...]]:
    """Rows of each draft decode a 4-token proposal after ``context`` made, and its tokens."""
    calls: list[int] = []
    real = drafter.cache.ctx.decode

    def counted(tokens, pos0, n_logits=1):
        calls.append(len(tokens))
        return real(tokens, pos0, n_logits)

    monkeypatch.setattr(drafter.cache.ctx, "decode", counted)
    got = drafter.propose(context, 4, 0.0).tokens
    monkeypatch.setattr(drafter.cache.ctx, "decode", real)
    return calls, got


def test_a_rejection_then_a_plain_step_folds_the_correction_into_the_next_proposal(draft_runner, monkeypatch) -> None:
    """After a rejection the draft holds a rejected token where the correction belongs; a plain
    step then commits one more. The sync truncates and leaves the one correction token to the
    proposal's first call (two rows), not a decode of its own that auto would take for the
    steady sync of every proposal taken whole (it charged ~9 ms to each step that way)."""
    drafter = draft_runner()
    m = drafter.model
    context = m.tokenize("<|im_start|>user\nCount to ten.<|im_end|>\n<|im_start|>assistant\n", False)
    drafter.sync(context)
    proposal = drafter.propose(context, 4, 0.0).tokens
    correction, plain = m.tokenize(" seven", False)[0], m.tokenize(" and", False)[0]
    assert correction != proposal[1]
    # one accepted, the second corrected, then a plain step: the draft did not see the correction
    after = [*context, proposal[0], correction, plain]
    info = drafter.sync(after)
    assert info == SyncInfo("truncate", len(context) + 1, len(context) + 2, folded=True)
    assert drafter.cache.ctx.pos_max() == len(context)  # truncated, nothing decoded yet
    assert drafter.behind(after) == 1
    calls, got = _propose_counting_decodes(drafter, after, monkeypatch)
    assert calls[0] == 2  # the correction and the plain token, in one batch
    assert drafter.cache.state.tokens == (*after, *got[:-1])
    assert drafter.cache.ctx.pos_max() == len(after) + len(got) - 2
    fresh = draft_runner()
    fresh.sync(after)
    assert fresh.propose(after, 4, 0.0).tokens == got


def test_a_short_catch_up_folds_into_the_first_call_and_proposes_what_a_fresh_draft_does(
    draft_runner, monkeypatch
) -> None:
    """Tokens the draft did not see (an n-gram step's, a few plain steps') up to FOLD_MAX
    are decoded with the token drafting starts from, in one batch: one draft call fewer
    than a prefill then a one-row call, and the same proposal."""
    drafter = draft_runner()
    m = drafter.model
    context = m.tokenize("<|im_start|>user\nName three colours.<|im_end|>\n<|im_start|>assistant\n", False)
    drafter.sync(context)
    drafter.propose(context, 1, 0.0)  # drafting decodes context[-1]: the cache holds the context
    # what steps the draft did not draft committed: it lacks all but the last, which drafting starts from
    added = m.tokenize(" Red, blue and green, of course.", False)[: FOLD_MAX + 1]
    behind = [*context, *added]
    assert drafter.behind(behind) == FOLD_MAX
    info = drafter.sync(behind)
    assert info == SyncInfo("extend", len(context), len(behind) - 1, folded=True)
    assert drafter.cache.ctx.pos_max() == len(context) - 1  # planned, not decoded
    calls, got = _propose_counting_decodes(drafter, behind, monkeypatch)
    assert calls == [FOLD_MAX + 1, *[1] * (len(calls) - 1)]  # the catch-up and behind[-1]: one batch
    assert drafter.cache.state.tokens == (*behind, *got[:-1])
    fresh = draft_runner()
    fresh.sync(behind)
    assert fresh.propose(behind, 4, 0.0).tokens == got


# -- greedy speculative == plain greedy ------------------------------------------------


@pytest.mark.parametrize("k", [1, 4, 8])
def test_default_pair_greedy_output_equals_plain(k: int, spec: Speculator, plain_refs) -> None:
    spec.update(n_draft=k)
    runs = []
    for prompt, ref in plain_refs.items():
        run = Run(spec.run(user(prompt), GEN))
        assert run.finish.token_ids == ref, f"k={k} diverged on {prompt!r}"
        assert run.finish.n_drafted > 0
        runs.append(run)
    assert_verified_in_batches(spec, runs, at_least=k + 1)


def test_a_draft_never_proposes_an_id_the_target_lacks(spec: Speculator, plain_refs) -> None:
    """A draft vocabulary may hold a few ids more than the target's: drafting stops before
    one (it could only fail to decode). Simulated on the real pair by lowering the limit
    below ids the draft proposes; the output still equals plain decoding."""
    drafter = spec.model_drafter
    assert drafter is not None
    full = drafter.vocab_limit
    spec.update(n_draft=4, source="model")
    try:
        prompt, ref = next(iter(plain_refs.items()))
        proposed = {t.id for st in Run(spec.run(user(prompt), GEN)).steps for t in st.proposed}
        limit = sorted(proposed)[len(proposed) // 2]  # half the ids it proposed are now "missing"
        drafter.vocab_limit = limit
        run = Run(spec.run(user(prompt), GEN))
        assert run.finish.token_ids == ref
        assert all(t.id < limit for st in run.steps for t in st.proposed)
        assert run.finish.n_drafted > 0
    finally:
        drafter.vocab_limit = full


class WrongDrafter:
    """A real draft model whose every third proposed token is replaced by a wrong one."""

    def __init__(self, inner: ModelDrafter) -> None:
        self.inner = inner
        self.source = "model"
        self.cache = inner.cache
        self.n = 0

    def room(self, context: Sequence[int]) -> int:
        return self.inner.room(context)

    def sync(self, context: Sequence[int], epoch: object | None = None) -> SyncInfo:
        return self.inner.sync(context, epoch)

    def propose(self, context: Sequence[int], k: int, p_min: float, rule=None) -> Proposal:
        p = self.inner.propose(context, k, p_min, rule)
        toks = list(p.tokens)
        for i in range(len(toks)):
            self.n += 1
            if self.n % 3 == 0:
                toks[i] = (toks[i] + 17) % 49152
        return Proposal(tuple(toks), p.probs, p.rows)

    def reset(self) -> None:
        self.inner.reset()


def test_a_draft_proposing_wrong_tokens_still_yields_plain_output(spec: Speculator, plain_refs) -> None:
    honest = spec.drafter
    spec.drafter = WrongDrafter(honest)  # type: ignore[assignment]
    try:
        kinds = set()
        runs = []
        for k in (1, 4, 8):
            spec.update(n_draft=k)
            for prompt, ref in plain_refs.items():
                run = Run(spec.run(user(prompt), GEN))
                assert run.finish.token_ids == ref, f"k={k} diverged on {prompt!r}"
                kinds |= {s.sync.kind for s in run.steps}
                assert run.finish.acceptance_rate < 1.0
                runs.append(run)
        assert "truncate" in kinds  # rejections roll the draft back, not reset it
        assert_verified_in_batches(spec, runs, at_least=9)
    finally:
        spec.drafter = honest


def test_gemma_self_pair_greedy_output_equals_plain(gemma3_270m: Path, cache_dir: Path) -> None:
    plain = load(gemma3_270m, None, cache_dir)
    refs = {p: Run(plain.run(user(p), GEN)).finish.token_ids for p in PROMPTS}
    plain.close()
    s = load(gemma3_270m, gemma3_270m, cache_dir)
    try:
        runs = []
        for k in (1, 4, 8):
            s.update(n_draft=k)
            for prompt, ref in refs.items():
                run = Run(s.run(user(prompt), GEN))
                got = run.finish.token_ids
                at = next((i for i, (a, b) in enumerate(zip(got, ref, strict=False)) if a != b), None)
                assert got == ref, (
                    f"k={k} diverged on {prompt!r} at token {at}; probe: "
                    f"{s.invariance.label() if s.invariance else None} on {cpu_model()!r} [{system_info()}]"
                )
                # the draft is the target: anything less than full acceptance is batch variance
                assert run.finish.n_drafted > 0 and run.finish.acceptance_rate == 1.0, (k, prompt)
                runs.append(run)
        assert_verified_in_batches(s, runs, at_least=9)
    finally:
        s.close()


# -- steps, KV bookkeeping, events -------------------------------------------------------


def test_each_step_leaves_both_caches_holding_committed_tokens(spec: Speculator) -> None:
    spec.update(n_draft=4)
    run = Run(spec.run(user(PROMPTS[3]), GenerationSettings(max_tokens=48)))
    prompt_len = run.started.n_prompt
    committed = 0
    for st in run.steps:
        assert st.n_past_before == prompt_len - 1 + committed
        committed += st.n_committed if run.finish.reason != "eos" or st is not run.steps[-1] else st.n_accepted
        assert st.n_past_after == prompt_len - 1 + min(committed, run.finish.n_tokens)
        assert st.committed is not None and st.commit_kind in ("bonus", "correction")
        assert (st.commit_kind == "bonus") == (st.n_accepted == len(st.proposed))
        assert all(0.0 <= t.prob <= 1.0 for t in st.proposed)
        if st.n_accepted < len(st.proposed):
            assert len(st.target_top) == 5 and len(st.draft_top) == 5
            assert st.target_top[0].id == st.committed.id  # greedy correction = target's argmax
        assert st.draft_ms >= 0 and st.verify_ms > 0
        # the one token a whole proposal leaves rides in the next proposal's first draft call
        # (or a truncate's re-extend: a rejection, then a plain step), as a short catch-up does
        n_sync = st.sync.end - st.sync.start
        assert st.sync.folded == (st.sync.kind in ("extend", "truncate") and 0 < n_sync <= FOLD_MAX)
    assert any(st.sync.folded for st in run.steps)  # greedy on the default pair: most proposals are taken whole
    # the target cache holds the prompt and the reply but the last token
    assert spec.n_past == prompt_len + run.finish.n_tokens - 1
    draft_state = spec.drafter.cache.state.tokens  # type: ignore[union-attr]
    assert len(draft_state) >= prompt_len - 1


def test_acceptance_totals_add_up(spec: Speculator) -> None:
    run = Run(spec.run(user(PROMPTS[1]), GEN))
    f = run.finish
    assert f.n_drafted == sum(len(s.proposed) for s in run.steps)
    assert f.n_accepted == sum(s.n_accepted for s in run.steps)
    assert f.acceptance_rate == pytest.approx(f.n_accepted / f.n_drafted)
    spec_steps = [s for s in run.steps if s.proposed]
    assert f.mean_accepted_length == pytest.approx(f.n_accepted / len(spec_steps))
    assert f.per_position[0] == pytest.approx(sum(1 for s in spec_steps if s.n_accepted >= 1) / len(spec_steps))
    assert f.tokens_per_second > 0 and f.n_steps == len(run.steps)


def test_streamed_text_equals_a_one_shot_detokenize(spec: Speculator) -> None:
    for prompt in PROMPTS[:4]:
        run = Run(spec.run(user(prompt), GEN))
        assert run.streamed == run.finish.text == spec.target.detokenize(list(run.finish.token_ids))


def test_emoji_and_cjk_stream_without_broken_characters(spec: Speculator) -> None:
    for prompt in ("Reply with only this: 🎉🚀", "How do you write 'thank you' in Japanese?"):
        run = Run(spec.run(user(prompt), GenerationSettings(max_tokens=24)))
        assert any(ord(ch) > 0x2E80 for ch in run.streamed), run.streamed
        for st in run.steps:
            assert "\ufffd" not in st.text
        assert run.streamed == spec.target.detokenize(list(run.finish.token_ids))
        # some token must have been a partial character for this to test anything
        pieces = [spec.target.piece(t) for t in run.finish.token_ids]
        assert any(_not_utf8(p) for p in pieces)


def _not_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def test_eos_inside_an_accepted_block_ends_the_reply_there(spec: Speculator, plain: Speculator) -> None:
    spec.update(n_draft=8)
    prompt = user("What is the capital of France?")
    run = Run(spec.run(prompt, GEN))
    ref = Run(plain.run(prompt, GEN)).finish
    assert run.finish.reason == "eos" == ref.reason
    assert run.finish.token_ids == ref.token_ids
    last = run.steps[-1]
    eos = spec.target.eos
    ids = [t.id for t in last.proposed]
    # the EOS was proposed and accepted, with more proposed tokens after it in the block
    assert eos in ids[: last.n_accepted] and ids.index(eos) < len(ids) - 1
    # the reply ended before the target's own token: none is reported as committed
    assert last.committed is None and last.commit_kind == "none"
    from skippy_tui.cli import trace_line
    from skippy_tui.engine.events import event_from_dict

    assert "(reply ended)" in trace_line(last) and event_from_dict(last.to_dict()) == last
    assert eos not in run.finish.token_ids
    assert spec.n_past == run.started.n_prompt - 1 + run.finish.n_tokens


def test_a_stop_string_spanning_tokens_ends_and_is_never_streamed(spec: Speculator, plain_refs) -> None:
    prompt = "What is the capital of France?"
    full = spec.target.detokenize(list(plain_refs[prompt]))
    assert "capital of" in full
    run = Run(spec.run(user(prompt), GenerationSettings(max_tokens=40, stop=("capital of",))))
    assert run.finish.reason == "stop"
    assert run.finish.text == full[: full.index("capital of")]
    assert run.streamed == run.finish.text
    # text that might have begun the stop string was held back, never shown
    assert all("capital" not in s.text for s in run.steps)


def test_max_tokens_cuts_inside_a_block(spec: Speculator, plain_refs) -> None:
    spec.update(n_draft=8)
    try:
        prompt = PROMPTS[3]
        run = Run(spec.run(user(prompt), GenerationSettings(max_tokens=7)))
        assert run.finish.reason == "max_tokens"
        assert run.finish.token_ids == plain_refs[prompt][:7]
        assert max(s.k for s in run.steps) <= 6  # k clamped to what can still be committed
    finally:
        spec.update(n_draft=4)


def test_a_full_context_window_ends_cleanly(smollm2_f32: Path, smollm2_q4_1: Path, cache_dir: Path) -> None:
    s = load(smollm2_f32, smollm2_q4_1, cache_dir, n_ctx=64, n_draft=8)
    try:
        run = Run(s.run(user("Write a long story about a dragon."), GenerationSettings(max_tokens=500)))
        assert run.finish.reason == "context_full"
        assert run.finish.error == ""
        n_ctx = s.n_ctx  # llama.cpp rounds the window up (to 256 here)
        assert run.started.n_prompt + run.finish.n_tokens == n_ctx + 1  # every slot used, last token undecoded
        assert run.finish.n_past == n_ctx
        for st in run.steps:
            assert st.n_past_before + 1 + st.k <= n_ctx  # k clamped so the verify batch fits
        # a prompt that alone overflows the window
        over = Run(s.run(user("word " * (n_ctx + 50)), GEN))
        assert over.finish.reason == "context_full"
        assert f"context window holds {n_ctx}" in over.finish.error
    finally:
        s.close()


def test_cancel_returns_within_one_step(spec: Speculator) -> None:
    cancel = threading.Event()
    events = []
    for ev in spec.run(user(PROMPTS[8]), GenerationSettings(max_tokens=200), cancel):
        events.append(ev)
        if ev.type == "step" and ev.index == 2:
            cancel.set()
    run = Run(events)
    assert run.finish.reason == "cancelled"
    assert len(run.steps) == 3
    # the engine is usable right after
    again = Run(spec.run(user(PROMPTS[0]), GEN))
    assert again.finish.reason == "eos"


def test_multi_turn_reuses_both_caches(spec: Speculator) -> None:
    spec.forget()
    convo = user("Name a planet.")
    first = Run(spec.run(convo, GEN))
    assert first.started.target_sync.kind == "reset"
    assert first.started.draft_sync.kind == "reset" and first.steps[0].sync.kind == "synced"
    convo += [{"role": "assistant", "content": first.finish.text}, {"role": "user", "content": "Another one?"}]
    second = Run(spec.run(convo, GEN))
    assert second.started.target_sync.kind == "extend"
    assert second.started.draft_sync.kind in ("extend", "truncate")
    # regenerate: the same conversation again rolls back to the prompt
    regen = Run(spec.run(convo, GEN))
    assert regen.started.target_sync.kind == "truncate"
    assert regen.started.target_sync.end == regen.started.n_prompt - 1
    assert regen.finish.token_ids == second.finish.token_ids
    # edit the last user message: truncate to the shared prefix
    convo[-1] = {"role": "user", "content": "And a moon?"}
    edited = Run(spec.run(convo, GEN))
    assert edited.started.target_sync.kind == "truncate"
    assert edited.started.target_sync.start < second.started.n_prompt - 1


def test_sampled_generation_is_reproducible_by_seed(spec: Speculator, plain: Speculator) -> None:
    hot = GenerationSettings(max_tokens=32, sampling=SamplingParams(temperature=0.9, seed=42))
    a = Run(spec.run(user(PROMPTS[1]), hot)).finish
    b = Run(spec.run(user(PROMPTS[1]), hot)).finish
    assert a.token_ids == b.token_ids
    other = GenerationSettings(max_tokens=32, sampling=SamplingParams(temperature=0.9, seed=7))
    c = Run(spec.run(user(PROMPTS[1]), other)).finish
    assert c.token_ids != a.token_ids
    # plain sampling with the same seed is reproducible too
    p1 = Run(plain.run(user(PROMPTS[1]), hot)).finish
    p2 = Run(plain.run(user(PROMPTS[1]), hot)).finish
    assert p1.token_ids == p2.token_ids


def test_live_settings_apply_from_the_next_step(spec: Speculator) -> None:
    ks = []
    for ev in spec.run(user(PROMPTS[8]), GenerationSettings(max_tokens=40)):
        if ev.type == "step":
            ks.append(ev.k)
            if ev.index == 1:
                spec.update(n_draft=2)
    spec.update(n_draft=4)
    assert ks[0] == 4 and all(k <= 2 for k in ks[2:])


def test_chat_template_bos_handling(spec: Speculator, gemma3_270m: Path, cache_dir: Path) -> None:
    from skippy_tui.engine.chat import prompt_tokens, template_for

    # SmolLM2 wants no BOS of its own: the tokens are exactly the rendered template's
    toks = prompt_tokens(spec.target, spec.template, user("hi"))
    assert not spec.target.add_bos
    assert toks == spec.target.tokenize(spec.template.render(user("hi")), add_special=False)
    g = load(gemma3_270m, None, cache_dir)
    try:
        gt = prompt_tokens(g.target, g.template, user("hi"))
        assert gt[0] == g.target.bos and gt.count(g.target.bos) == 1
        # a template that itself emits BOS still yields exactly one
        jinja = template_for(g.target, "{{ bos_token }}{{ messages[0]['content'] }}", "gemma3", None)
        assert prompt_tokens(g.target, jinja, user("hi")).count(g.target.bos) == 1
    finally:
        g.close()


# -- p_min, n_min, fallbacks and failures on the real pair -----------------------------------


def test_p_min_stops_drafting_early_and_n_min_turns_short_proposals_into_plain_steps(
    spec: Speculator, plain_refs
) -> None:
    prompt = PROMPTS[2]
    spec.update(n_draft=8, p_min=0.8)
    run = Run(spec.run(user(prompt), GEN))
    assert run.finish.token_ids == plain_refs[prompt]
    short = [s for s in run.steps if 0 < len(s.proposed) < s.k]
    assert short, "p_min never stopped a proposal early"
    assert all(t.prob >= 0.8 for s in run.steps for t in s.proposed)
    spec.update(n_min=3)
    run = Run(spec.run(user(prompt), GEN))
    assert run.finish.token_ids == plain_refs[prompt]
    # a proposal shorter than n_min is dropped: the step decodes plainly after drafting
    assert all(len(s.proposed) == 0 or len(s.proposed) >= 3 for s in run.steps)
    dropped = [s for s in run.steps if s.k > 0 and not s.proposed]
    assert dropped and all(s.commit_kind == "plain" for s in dropped)


def test_a_memory_that_cannot_drop_part_of_a_sequence_falls_back_to_reset(
    spec: Speculator, plain_refs, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a recurrent or hybrid model's memory does: every rollback becomes a reset, still exact."""
    honest = spec.drafter
    monkeypatch.setattr(honest.cache.ctx, "remove_from", lambda pos: False)  # type: ignore[union-attr]
    monkeypatch.setattr(spec, "drafter", WrongDrafter(honest))  # every third token wrong: rejections
    prompt = PROMPTS[4]
    run = Run(spec.run(user(prompt), GEN))
    assert run.finish.token_ids == plain_refs[prompt]
    kinds = [s.sync.kind for s in run.steps]
    assert "reset" in kinds[1:] and "truncate" not in kinds  # a rejection forces a reset
    for s in run.steps:
        if s.sync.kind == "reset":
            assert s.sync.start == 0 and s.sync.end == s.n_past_before  # the whole prefix again


def test_a_failed_draft_decode_records_nothing_it_did_not_decode(draft_runner, monkeypatch) -> None:
    from skippy_tui.engine.errors import DecodeError

    drafter = draft_runner()
    m = drafter.model
    context = m.tokenize("<|im_start|>user\nName three colours.<|im_end|>\n<|im_start|>assistant\n", False)
    drafter.sync(context)
    before = drafter.cache.state.tokens
    real = drafter.cache.ctx.decode
    calls = {"n": 0}

    def failing(tokens, pos0, n_logits=1):
        calls["n"] += 1
        if calls["n"] == 3:
            drafter.cache.ctx.remove_from(pos0)  # as a failed native decode leaves it
            raise DecodeError("injected")
        return real(tokens, pos0, n_logits)

    monkeypatch.setattr(drafter.cache.ctx, "decode", failing)
    with pytest.raises(DecodeError):
        drafter.propose(context, 6, 0.0)
    # two proposal steps decoded and recorded (the last context token and the first draft); the third not
    after = drafter.cache.state.tokens
    assert len(after) == len(before) + 2 and after[: len(before)] == before
    assert drafter.cache.ctx.pos_max() == len(after) - 1  # the bookkeeping matches the KV cache
    monkeypatch.setattr(drafter.cache.ctx, "decode", real)
    fresh = draft_runner()
    fresh.sync(context)
    # the next sync brings the failed session back to what a fresh one proposes
    drafter.sync(context)
    assert drafter.propose(context, 4, 0.0).tokens == fresh.propose(context, 4, 0.0).tokens


def test_a_folded_sync_whose_first_decode_fails_records_nothing_and_is_planned_again(draft_runner, monkeypatch) -> None:
    from skippy_tui.engine.errors import DecodeError

    drafter = draft_runner()
    m = drafter.model
    context = m.tokenize("<|im_start|>user\nName three colours.<|im_end|>\n<|im_start|>assistant\n", False)
    drafter.sync(context)
    first = drafter.propose(context, 2, 0.0).tokens
    extended = [*context, *first, m.tokenize(" and", False)[0]]  # both taken, then a bonus token
    held = drafter.cache.state.tokens
    assert drafter.sync(extended).folded and drafter.cache.state.tokens == held  # planned, not decoded
    assert drafter.behind(extended) == 1
    real = drafter.cache.ctx.decode

    def failing(tokens, pos0, n_logits=1):
        assert len(tokens) == 2 and pos0 == len(held)  # the extend's token and the one drafting starts from
        drafter.cache.ctx.remove_from(pos0)
        raise DecodeError("injected")

    monkeypatch.setattr(drafter.cache.ctx, "decode", failing)
    with pytest.raises(DecodeError):
        drafter.propose(extended, 4, 0.0)
    assert drafter.cache.state.tokens == held and drafter.cache.ctx.pos_max() == len(held) - 1
    monkeypatch.setattr(drafter.cache.ctx, "decode", real)
    # a folded sync no proposal followed leaves nothing pending: the next one plans the same extend
    assert drafter.sync(extended) == SyncInfo("extend", len(held), len(held) + 1, folded=True)
    got = drafter.propose(extended, 4, 0.0).tokens
    fresh = draft_runner()
    fresh.sync(extended)
    assert got == fresh.propose(extended, 4, 0.0).tokens
    # a longer extend (a catch-up past FOLD_MAX) is a prefill of its own
    longer = [*extended, *got, *m.tokenize(" blue and green and a little yellow", False)]
    info = drafter.sync(longer)
    assert info.kind == "extend" and info.end - info.start > FOLD_MAX and not info.folded
    assert drafter.cache.state.tokens == tuple(longer[:-1])


def test_a_failed_target_prefill_records_nothing(spec: Speculator, monkeypatch: pytest.MonkeyPatch) -> None:
    from skippy_tui.engine.errors import DecodeError

    cache = spec.target_cache
    real = cache.ctx._decode_chunk

    def decoded_then_failed(tokens, pos0, n_logits):
        real(tokens, pos0, n_logits)  # the KV cache now holds the chunk
        raise DecodeError("injected")

    monkeypatch.setattr(cache.ctx, "_decode_chunk", decoded_then_failed)
    run = Run(spec.run(user(PROMPTS[0]), GEN))
    assert run.finish.reason == "error" and "injected" in run.finish.error
    assert cache.state.tokens == () and cache.ctx.pos_max() == -1  # nothing claimed, nothing held
    monkeypatch.undo()
    assert Run(spec.run(user(PROMPTS[0]), GEN)).finish.reason == "eos"  # usable right after


def _armed(real, message: str):
    """``real`` that raises ``DecodeError(message)`` once ``arm["on"]`` is set."""
    from skippy_tui.engine.errors import DecodeError

    arm = {"on": False}

    def call(*args, **kwargs):
        if arm["on"]:
            raise DecodeError(message)
        return real(*args, **kwargs)

    return call, arm


def test_a_verify_failure_mid_reply_ends_it_with_the_error(
    spec: Speculator, plain_refs, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompt = PROMPTS[1]
    failing, arm = _armed(spec.target_cache.ctx.decode, "injected verify failure")
    monkeypatch.setattr(spec.target_cache.ctx, "decode", failing)
    events = []
    for ev in spec.run(user(prompt), GEN):
        events.append(ev)
        if ev.type == "step" and ev.index == 1:
            arm["on"] = True  # the third step's verify decode fails
    run = Run(events)
    assert run.finish.reason == "error" and "injected verify failure" in run.finish.error
    assert len(run.steps) == 2  # the failed step emits no event
    n = sum(s.n_committed for s in run.steps)
    assert run.finish.n_tokens == n and run.finish.token_ids == plain_refs[prompt][:n]
    assert spec.n_past == run.started.n_prompt - 1 + n  # nothing of the failed batch stays cached
    monkeypatch.undo()
    assert Run(spec.run(user(prompt), GEN)).finish.token_ids == plain_refs[prompt]  # usable right after


def test_a_failed_rollback_after_a_commit_still_reports_the_step(
    spec: Speculator, plain_refs, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompt = PROMPTS[1]
    failing, arm = _armed(spec.target_cache.sync, "injected rollback failure")
    monkeypatch.setattr(spec.target_cache, "sync", failing)
    events = []
    for ev in spec.run(user(prompt), GEN):
        events.append(ev)
        if ev.type == "step" and ev.index == 1:
            arm["on"] = True  # the third step verifies and commits, then its KV removal fails
    run = Run(events)
    assert run.finish.reason == "error" and "injected rollback failure" in run.finish.error
    assert len(run.steps) == 3 and run.steps[-1].committed is not None  # the step stands, with its event
    n = sum(s.n_committed for s in run.steps)
    assert run.finish.n_tokens == n and run.finish.token_ids == plain_refs[prompt][:n]
    assert run.finish.n_steps == 3
    monkeypatch.undo()
    # the next reply rolls back what this one could not
    assert Run(spec.run(user(prompt), GEN)).finish.token_ids == plain_refs[prompt]


# -- a self-pair: the target's own file as its draft ---------------------------------------


@pytest.mark.parametrize("model", ["smollm2_q4_1", "gemma3_270m"])
def test_a_self_pair_drafts_with_the_target_s_kernels_and_accepts_every_token(
    model: str, request: pytest.FixtureRequest
) -> None:
    """The check people run on a setup: the target's own file as its draft. It loads with the
    target's numeric settings, so its logits are the target's bit for bit (with flash attention
    "auto" in the draft alone, they differed and kernel rounding read as disagreement), every
    proposal is accepted, greedy and at T = 0.8 with either sampler, and the reply is plain's."""
    import numpy as np

    from skippy_tui.config import Config
    from skippy_tui.engine.load.loader import load_speculator

    path = request.getfixturevalue(model)
    cfg = Config()
    for key, value in (("path", str(path)), ("threads", 2), ("n_ctx", 1024), ("n_batch", 256), ("n_ubatch", 256)):
        cfg.set("target", key, value)
    cfg.set("draft", "path", str(path))
    cfg.set("speculation", "n_draft", 4)
    cfg.set("speculation", "source", "model")  # the draft model alone: an n-gram proposal may be wrong
    spec = cfg.engine_spec()
    s = load_speculator(spec)
    try:
        assert s.draft_settings.startswith("the target's: flash_attn off"), s.draft_settings
        # past position 256, where CPU flash attention splits a one-row decode's keys
        tokens = s.target.tokenize(" ".join(PROMPTS) * 4, add_special=False)[:300]
        rows = []
        for ctx in (s.target_cache.ctx, s.draft_cache.ctx):
            ctx.clear()
            ctx.prefill(tokens[:-1], 0)
            rows.append(ctx.decode(tokens[-1:], len(tokens) - 1, 1))
        s.forget()
        assert np.array_equal(rows[0], rows[1]), float(np.abs(rows[0] - rows[1]).max())
        prompt = user(f"Continue this text for a while: {PROMPTS[8]} {PROMPTS[2]}")
        for sampling in (
            SamplingParams(temperature=0.0),
            SamplingParams(temperature=0.8, seed=7),
            SamplingParams(temperature=0.8, seed=7, sampler="rejection"),
        ):
            gen = GenerationSettings(sampling, max_tokens=40)
            s.forget()
            run = Run(s.run(prompt, gen))
            assert run.finish.n_drafted > 0 and run.finish.acceptance_rate == 1.0, (sampling, run.finish)
            if sampling.sampler != "rejection":  # coupled and greedy: plain decoding's reply
                s.update(enabled=False)
                s.forget()
                plain = Run(s.run(prompt, gen))
                s.update(enabled=True)
                assert plain.finish.token_ids == run.finish.token_ids
    finally:
        s.close()


def test_a_model_says_where_its_layers_run(smollm2_q4_1: Path, monkeypatch) -> None:
    """Issue 56 item 4: the status bar's placement per model, from the devices llama.cpp is given
    and n_gpu_layers; on a CPU build everything runs on the CPU whatever n_gpu_layers says."""
    import skippy_tui.engine.native.model as native
    from skippy_tui.engine.native.devices import accelerator_names
    from skippy_tui.engine.native.rpc import devices_label, placements

    with Model(smollm2_q4_1, LoadParams(n_gpu_layers=-1)) as m:
        assert m.placement == ("+".join(accelerator_names()) or "CPU")
    with Model(smollm2_q4_1, LoadParams(device="CPU")) as m:
        assert m.placement == "CPU"
    # a GPU build (the device list llama.cpp would get is the local accelerators)
    monkeypatch.setattr(native, "accelerator_names", lambda: ["CUDA0"])
    with (
        Model(smollm2_q4_1, LoadParams(n_gpu_layers=-1)) as gpu,
        Model(smollm2_q4_1, LoadParams(n_gpu_layers=10)) as part,
    ):
        assert (gpu.placement, part.placement) == ("CUDA0", "CUDA0+CPU")
        from types import SimpleNamespace

        pair = SimpleNamespace(target=gpu, draft_cache=SimpleNamespace(ctx=SimpleNamespace(model=part)))
        assert placements(pair) == [("target", "CUDA0"), ("draft", "CUDA0+CPU")]
        assert devices_label(pair) == "target CUDA0 · draft CUDA0+CPU"
