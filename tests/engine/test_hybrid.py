"""Speculation on recurrent and hybrid targets, on tiny models the project writes itself.

Real llama.cpp, real kernels, random weights (``tools/tiny_gguf.py``): ``qwen35`` and
``lfm2`` roll their recurrent state back from snapshots (``n_rs_seq``), ``mamba`` cannot
and restores a state saved before each verify. A draft from another seed rejects almost
everything, the target's own file accepts everything: both paths run.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
from helpers import THREADS, Run, user

from skippy_tui.engine.drafting.kvcache import KvCache
from skippy_tui.engine.errors import BoundsError
from skippy_tui.engine.events import Rollback, event_from_dict
from skippy_tui.engine.load import arch
from skippy_tui.engine.load.loader import EngineSpec, load_speculator
from skippy_tui.engine.native.model import Context, LoadParams, Model
from skippy_tui.engine.sampling.params import SamplingParams
from skippy_tui.engine.settings import GenerationSettings, ModelSpec, SpeculationSettings
from skippy_tui.engine.speculator import Speculator

LP = LoadParams(n_ctx=512, n_batch=128, n_ubatch=128, threads=THREADS, flash_attn="off", repack=False)
TOKENS = list(range(300, 360))
PROMPT = user("Repeat after me: the cat sat on the mat, the cat sat on the mat.")


def load_tiny(target: Path, draft: Path | None, cache_dir: Path, lp: LoadParams = LP, **spec: object) -> Speculator:
    """A speculator over tiny models, speculation on (``use_draft``: an MTP head loads too)."""
    settings = SpeculationSettings(**{"enabled": True, "n_draft": 4, "source": "model", **spec})  # type: ignore[arg-type]
    return load_speculator(
        EngineSpec(ModelSpec(target, lp), ModelSpec(draft, lp) if draft else None, settings, cache_dir, True)
    )


def spec_and_plain(s: Speculator, temperature: float, max_tokens: int = 40) -> tuple[Run, Run]:
    """One reply speculated, then the same reply decoded plainly (a new chat each)."""
    gen = GenerationSettings(SamplingParams(temperature=temperature, seed=11), max_tokens=max_tokens)
    s.forget()
    spec = Run(s.run(PROMPT, gen))
    s.update(enabled=False)
    s.forget()
    plain = Run(s.run(PROMPT, gen))
    s.update(enabled=True)
    return spec, plain


def fresh_logits(model: Model, tokens: list[int], token: int) -> np.ndarray:
    """The logits after ``tokens`` then ``token``, from a context that saw nothing else."""
    ctx = Context(model, LP)
    try:
        ctx.prefill(tokens, 0)
        return ctx.decode([token], len(tokens), 1)[0]
    finally:
        ctx.close()


@pytest.fixture(scope="module")
def other_seed(tiny_models):
    """A draft per architecture from another seed: it proposes what the target rejects."""
    return lambda name: tiny_models(name, seed=1)


# -- what the architecture tables say, checked against llama.cpp ------------------------


@pytest.mark.parametrize("name", ["qwen35", "lfm2", "mamba", "llama"])
def test_the_arch_tables_agree_with_llama_cpp(tiny_models, name: str) -> None:
    model = Model(tiny_models(name), LP)
    ctx = Context(model, LP, n_rs_seq=4)
    try:
        kind = arch.memory_kind(model.arch)
        assert model.is_hybrid == (kind == "hybrid") and model.is_recurrent == (kind == "recurrent")
        assert ctx.rollback == arch.rollback_kind(model.arch)
        assert (ctx.n_rs_seq > 0) == (ctx.rollback == "snapshot")
    finally:
        ctx.close()
        model.close()


def test_mtp_heads_usable_names_what_llama_cpp_cannot_run() -> None:
    assert arch.mtp_heads_usable("qwen35", 1) == ""
    assert "one MTP block" in arch.mtp_heads_usable("qwen35", 2)  # llama.cpp would abort the process
    assert arch.mtp_heads_usable("step35", 3) == ""  # chained heads
    assert "no MTP draft graph" in arch.mtp_heads_usable("llama", 1)
    assert "no MTP" in arch.mtp_heads_usable("qwen35", 0)


# -- the native rollback paths ----------------------------------------------------------


@pytest.mark.parametrize("name", ["qwen35", "lfm2"])
def test_a_snapshot_rollback_leaves_the_state_of_a_fresh_prefill(tiny_models, name: str) -> None:
    model = Model(tiny_models(name), LP)
    ctx = Context(model, LP, n_rs_seq=4)
    try:
        ctx.prefill(TOKENS[:20], 0)
        ctx.decode(TOKENS[20:25], 20, 5)
        assert ctx.remove_from(22)  # 3 of the batch's 5 rows
        got = ctx.decode([7], 22, 1)[0]
        assert np.array_equal(got, fresh_logits(model, TOKENS[:22], 7))
    finally:
        ctx.close()
        model.close()


def test_a_rollback_into_an_older_micro_batch_is_refused(tiny_models) -> None:
    """llama.cpp accepts it (its snapshots then hold another batch's states): refused, nothing changes."""
    model = Model(tiny_models("qwen35"), LP)
    ctx = Context(model, LP, n_rs_seq=4)
    try:
        ctx.prefill(TOKENS[:20], 0)
        for i in range(5):  # five one-row decodes: the last micro-batch holds one token
            ctx.decode([TOKENS[20 + i]], 20 + i, 1)
        assert not ctx.remove_from(22)
        assert ctx.pos_max() == 24
        assert ctx.remove_from(25)  # nothing to drop
        wrong = ctx.decode([7], 25, 1)  # still usable; what llama.cpp alone would have done:
        ctx.clear()
        ctx.prefill(TOKENS[:20], 0)
        for i in range(5):
            ctx.decode([TOKENS[20 + i]], 20 + i, 1)
        from skippy_tui.engine.native.backend import llama_cpp

        assert llama_cpp.llama_memory_seq_rm(ctx.mem, 0, 22, -1)  # accepted by llama.cpp...
        assert not np.array_equal(ctx.decode([7], 22, 1)[0], fresh_logits(model, TOKENS[:22], 7))  # ...and wrong
        assert wrong.shape[0] == 1
    finally:
        ctx.close()
        model.close()


@pytest.mark.parametrize("name", ["qwen35", "mamba"])
def test_a_restored_state_then_the_kept_rows_again_equals_a_fresh_prefill(tiny_models, name: str) -> None:
    model = Model(tiny_models(name), LP)
    cache = KvCache(Context(model, LP))
    try:
        context = [*TOKENS[:20], 1]
        cache.sync(context)
        assert cache.mark()  # the state after 20 tokens
        cache.ctx.decode(TOKENS[20:26], 20, 6)  # a verify batch, as the speculator decodes it
        cache.state.record_extend(TOKENS[20:26])
        info = cache.sync([*TOKENS[:23], 99, 1])  # 3 kept, the rest rejected
        assert (info.kind, info.via, info.start, info.end) == ("truncate", "restore", 20, 24)
        assert info.label() == "restore 20→24"
        got = cache.ctx.decode([1], 24, 1)[0]
        assert np.array_equal(got, fresh_logits(model, [*TOKENS[:23], 99], 1))
    finally:
        cache.ctx.close()
        model.close()


def test_a_truncation_below_every_saved_state_resets(tiny_models) -> None:
    model = Model(tiny_models("mamba"), LP)
    cache = KvCache(Context(model, LP))
    try:
        cache.sync([*TOKENS[:20], 1])
        assert cache.mark()
        info = cache.sync([*TOKENS[:10], 5, 6, 1])  # an edit at position 10: the saved state is at 20
        assert (info.kind, info.start, info.end) == ("reset", 0, 12)
        assert np.array_equal(cache.ctx.decode([1], 12, 1)[0], fresh_logits(model, [*TOKENS[:10], 5, 6], 1))
    finally:
        cache.ctx.close()
        model.close()


# -- speculation reproduces plain decoding ------------------------------------------------


@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize(("name", "via"), [("qwen35", "snapshot"), ("lfm2", "snapshot"), ("mamba", "restore")])
def test_a_rejecting_draft_reproduces_plain_decoding(
    tiny_models, other_seed, cache_dir: Path, name: str, via: str, temperature: float
) -> None:
    s = load_tiny(tiny_models(name), other_seed(name), cache_dir)
    try:
        spec, plain = spec_and_plain(s, temperature)
        assert spec.finish.token_ids == plain.finish.token_ids and spec.finish.reason == plain.finish.reason
        rollbacks = [st.rollback for st in spec.steps if st.rollback is not None]
        assert rollbacks and {r.via for r in rollbacks} == {via}
        assert all(r.dropped >= 1 for r in rollbacks)
        if via == "restore":  # the kept rows are decoded again: the last token and the accepted ones
            assert all(r.redecoded >= 1 for r in rollbacks)
        # the draft (a recurrent model too) restores its own saved state after a rejection
        assert any(st.sync.via == "restore" for st in spec.steps)
        # what the target holds after the reply is what a fresh prefill holds
        ctx = s.target_cache.ctx
        held = list(s.target_cache.state.tokens)
        assert ctx.pos_max() + 1 == len(held)
        nxt = ctx.decode([2], len(held), 1)[0]
        assert np.array_equal(nxt, fresh_logits(s.target, held, 2))
    finally:
        s.close()


@pytest.mark.parametrize("temperature", [0.0, 0.8])
@pytest.mark.parametrize("name", ["qwen35", "mamba"])
def test_a_self_pair_accepts_everything_on_a_recurrent_target(
    tiny_models, cache_dir: Path, name: str, temperature: float
) -> None:
    path = tiny_models(name)
    s = load_tiny(path, path, cache_dir)
    try:
        spec, plain = spec_and_plain(s, temperature)
        assert spec.finish.token_ids == plain.finish.token_ids
        assert spec.finish.n_drafted > 0 and spec.finish.n_accepted == spec.finish.n_drafted
        assert all(st.rollback is None for st in spec.steps)
    finally:
        s.close()


@pytest.mark.parametrize("source", ["ngram", "auto"])
@pytest.mark.parametrize("name", ["qwen35", "mamba"])
def test_ngram_and_auto_sources_reproduce_plain_decoding(
    tiny_models, other_seed, cache_dir: Path, name: str, source: str
) -> None:
    s = load_tiny(tiny_models(name), other_seed(name), cache_dir, source=source, n_draft="auto")
    try:
        for temperature in (0.0, 0.8):
            spec, plain = spec_and_plain(s, temperature)
            assert spec.finish.token_ids == plain.finish.token_ids
    finally:
        s.close()


@pytest.mark.parametrize("name", ["qwen35", "mamba"])
def test_a_follow_up_turn_goes_back_to_where_the_last_reply_started(
    tiny_models, other_seed, cache_dir: Path, name: str
) -> None:
    """The chat re-renders the reply's text, whose tokens may differ from those generated: a
    recurrent target restores the state saved where that reply started, not an empty cache."""
    s = load_tiny(tiny_models(name), other_seed(name), cache_dir)
    gen = GenerationSettings(SamplingParams(temperature=0.0), max_tokens=40)
    try:
        first = Run(s.run(PROMPT, gen))
        follow = [*PROMPT, {"role": "assistant", "content": first.finish.text}, {"role": "user", "content": "More."}]
        second = Run(s.run(follow, gen))
        sync = second.started.target_sync
        assert sync.kind in ("extend", "truncate"), sync
        assert sync.start >= first.started.n_prompt - 1  # the first prompt is not decoded again
        s.forget()
        assert Run(s.run(follow, gen)).finish.token_ids == second.finish.token_ids
    finally:
        s.close()


# -- bounds, quitting, a full window ----------------------------------------------------------


def test_a_micro_batch_smaller_than_the_snapshots_need_is_refused_before_loading(
    tiny_models, other_seed, cache_dir: Path
) -> None:
    small = LoadParams(n_ctx=512, n_batch=128, n_ubatch=4, threads=THREADS)
    with pytest.raises(BoundsError) as e:
        load_tiny(tiny_models("qwen35"), other_seed("qwen35"), cache_dir, lp=small, n_draft=8)
    assert e.value.key == "target.n_ubatch" and ">= 9" in str(e.value) and "recurrent" in str(e.value)
    # a target that restores saved states needs no such micro-batch
    load_tiny(tiny_models("mamba"), other_seed("mamba"), cache_dir, lp=small, n_draft=8).close()


def test_a_target_whose_saved_state_is_over_the_bound_decodes_plainly_and_says_why(
    tiny_models, other_seed, cache_dir: Path, monkeypatch
) -> None:
    """Rolling back by a saved state needs one per step: a state over the bound turns speculation
    off at load, says why, and switching it on is refused; the reply is plain decoding."""
    from skippy_tui.engine.native import model as native

    monkeypatch.setattr(native, "MAX_STATE_BYTES", 1024)
    s = load_tiny(tiny_models("mamba"), other_seed("mamba"), cache_dir)
    try:
        assert not s.speculation.enabled
        assert "saved state" in s.no_rollback and "speculation is off" in s.no_rollback
        run = Run(s.run(PROMPT, GenerationSettings(SamplingParams(temperature=0.0), max_tokens=8)))
        assert run.finish.n_tokens > 0 and run.finish.n_drafted == 0
        with pytest.raises(BoundsError, match="saved state"):
            s.update(enabled=True)
        assert not s.speculation.enabled
    finally:
        s.close()


@pytest.mark.parametrize("name", ["qwen35", "mamba"])
def test_a_cancel_mid_reply_leaves_a_usable_engine(tiny_models, other_seed, cache_dir: Path, name: str) -> None:
    s = load_tiny(tiny_models(name), other_seed(name), cache_dir)
    try:
        _, plain = spec_and_plain(s, 0.0)
        s.forget()
        cancel = threading.Event()
        events = []
        for ev in s.run(PROMPT, GenerationSettings(SamplingParams(temperature=0.0), max_tokens=40), cancel):
            events.append(ev)
            if ev.type == "step" and ev.index == 2:
                cancel.set()
        run = Run(events)
        assert run.finish.reason == "cancelled" and len(run.steps) == 3
        again = Run(s.run(PROMPT, GenerationSettings(SamplingParams(temperature=0.0), max_tokens=40)))
        assert again.finish.token_ids == plain.finish.token_ids  # a regenerate rolls back the cancelled reply
    finally:
        s.close()


@pytest.mark.parametrize("name", ["qwen35", "mamba"])
def test_a_full_context_window_ends_cleanly_on_a_recurrent_target(
    tiny_models, other_seed, cache_dir: Path, name: str
) -> None:
    small = LoadParams(n_ctx=64, n_batch=64, n_ubatch=64, threads=THREADS)
    s = load_tiny(tiny_models(name), other_seed(name), cache_dir, lp=small, n_draft=8)
    try:
        run = Run(s.run(PROMPT, GenerationSettings(SamplingParams(temperature=0.0), max_tokens=400)))
        assert run.finish.reason == "context_full" and run.finish.error == ""
        assert run.started.n_prompt + run.finish.n_tokens == s.n_ctx + 1
        assert run.finish.n_past == s.n_ctx
        over = Run(s.run(user("word " * (s.n_ctx + 50)), GenerationSettings(max_tokens=8)))
        assert over.finish.reason == "context_full"
        s.forget()
        assert Run(s.run(PROMPT, GenerationSettings(max_tokens=4))).finish.reason == "max_tokens"
    finally:
        s.close()


# -- the records name what happened ---------------------------------------------------------


def test_a_steps_rollback_is_in_its_event_and_its_json() -> None:
    rb = Rollback("restore", 3, 2, 0.4)
    assert rb.label() == "restore 3 +2"
    assert Rollback("snapshot", 3).label() == "rollback 3" and Rollback("kv", 2).label() == "drop 2"
    assert Rollback("reset", 9, 41).label() == "reset +41"
    from skippy_tui.engine.events import StepVerified, SyncInfo

    step = StepVerified(
        index=0, n_past_before=10, n_past_after=12, k=4, sync=SyncInfo("truncate", 8, 10, via="restore"),
        proposed=(), n_accepted=1, committed=None, commit_kind="none", target_top=(), draft_top=(),
        sync_ms=0.0, draft_ms=0.0, verify_ms=0.0, delta=(), rollback=rb,
    )  # fmt: skip
    again = event_from_dict(step.to_dict())
    assert again == step and again.rollback.label() == "restore 3 +2"
    assert again.sync.label() == "restore 8→10"
    old = step.to_dict()
    del old["rollback"], old["sync"]["via"]  # a transcript from before either existed
    assert event_from_dict(old).rollback is None
