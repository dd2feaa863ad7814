"""Context windows sized to the chat and grown as it needs (engine/native/window.py), on real models."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from helpers import EXACT, THREADS, Run, load, user

from skippy_tui.engine.native.devices import backend_name
from skippy_tui.engine.native.model import Context, LoadParams, Model
from skippy_tui.engine.native.window import INITIAL, fitted, grown, grows, padded
from skippy_tui.engine.settings import GenerationSettings

GEN = GenerationSettings(max_tokens=40)
# a second turn of ~1,000 tokens: it no longer fits the initial window
LONG = "Summarise this: " + "The keeper walked along the shore every morning, counting the gulls. " * 70


def test_window_sizes() -> None:
    assert [padded(n) for n in (1, 256, 257, 600)] == [256, 256, 512, 768]
    assert fitted(560, 4096, 512) == 768  # `run` with the default max_tokens
    assert fitted(100, 4096, 512) == 512  # never below the probe's windows
    assert fitted(100, 4096, 2048) == 2048  # nor below the batch: the verify chunks stay the configured ones
    assert fitted(9000, 4096, 512) == 4096  # n_ctx is the cap
    assert fitted(100, 64, 512) == 64  # a window configured below the minimum is kept
    assert fitted(246, 4096, 512, speculates=False) == 256  # plain decoding: what the reply needs
    assert fitted(560, 4096, 512, speculates=False) == 768
    assert INITIAL >= 512 + 256  # the default max_tokens and a first message


def test_windows_grow_where_v_is_transposed_in_host_memory() -> None:
    cpu = LoadParams(n_gpu_layers=0)
    assert grows(cpu) and grows(LoadParams(device="CPU"))
    assert grows(LoadParams()) == (backend_name() == "CPU")  # all layers on a GPU: allocated whole
    assert not grows(LoadParams(n_gpu_layers=0, flash_attn="on"))  # V not transposed
    assert not grows(LoadParams(n_gpu_layers=0, flash_attn="auto"))
    assert not grows(LoadParams(n_gpu_layers=0, rpc=("127.0.0.1:50052",)))


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_a_grown_context_decodes_as_the_one_it_came_from(model: str, smollm2_f32: Path, gemma3_270m: Path) -> None:
    """The KV cells move bit for bit: 600 cached tokens (past Gemma's 512-token sliding
    window), then the next decodes' logits in the new window equal the old one's."""
    path = smollm2_f32 if model == "smollm2" else gemma3_270m
    lp = LoadParams(n_ctx=1024, n_batch=256, n_ubatch=256, threads=THREADS, **EXACT)
    with Model(path, lp) as m:
        old = Context(m, lp)
        tokens = m.tokenize(LONG, add_special=False)[:604]
        old.prefill(tokens[:600], 0)
        new = grown(old, 2048)
        try:
            assert (old.n_ctx, new.n_ctx) == (1024, 2048) and new.pos_max() == old.pos_max() == 599
            for i in range(600, 604):
                a, b = old.decode([tokens[i]], i, 1)[0], new.decode([tokens[i]], i, 1)[0]
                assert np.array_equal(a, b), (i, float(np.abs(a - b).max()))
        finally:
            new.close()
            old.close()


@pytest.mark.parametrize("model", ["smollm2", "gemma3"])
def test_a_window_that_grows_mid_chat_changes_no_token(
    model: str, smollm2_f32: Path, smollm2_q4_1: Path, gemma3_270m: Path, cache_dir: Path
) -> None:
    """The second turn moves both caches (holding the first turn) into windows twice as large;
    its reply equals plain decoding in a window that was 2,048 tokens from the start."""
    target, draft = (smollm2_f32, smollm2_q4_1) if model == "smollm2" else (gemma3_270m, gemma3_270m)
    refs = []
    plain = load(target, None, cache_dir, n_ctx=2048)
    try:
        assert plain.target_cache.ctx.n_ctx == INITIAL and plain.n_ctx == 2048
        plain.fit_window(2048)  # an empty cache moves too
        assert plain.target_cache.ctx.n_ctx == 2048
        convo = user("Name three colours.")
        refs.append(Run(plain.run(convo, GEN)).finish)
        convo += [{"role": "assistant", "content": refs[0].text}, {"role": "user", "content": LONG}]
        refs.append(Run(plain.run(convo, GEN)).finish)
    finally:
        plain.close()
    s = load(target, draft, cache_dir, n_ctx=2048)
    try:
        assert s.target_cache.ctx.n_ctx == s.model_drafter.cache.ctx.n_ctx == INITIAL
        convo = user("Name three colours.")
        first = Run(s.run(convo, GEN))
        assert first.finish.token_ids == refs[0].token_ids
        assert s.target_cache.ctx.n_ctx == INITIAL  # it fitted
        convo += [{"role": "assistant", "content": first.finish.text}, {"role": "user", "content": LONG}]
        second = Run(s.run(convo, GEN))
        assert second.started.n_prompt + GEN.max_tokens > INITIAL
        assert s.target_cache.ctx.n_ctx == s.model_drafter.cache.ctx.n_ctx == 2 * INITIAL
        # the moved cells were kept (an extend, not a reset) and decode as freshly computed ones
        assert second.started.target_sync.kind == "extend"
        assert second.started.draft_sync.kind == "extend"
        assert second.finish.n_drafted > 0
        assert second.finish.token_ids == refs[1].token_ids
    finally:
        s.close()


def test_a_known_reply_gets_a_window_of_its_size(smollm2_f32: Path, smollm2_q4_1: Path, cache_dir: Path) -> None:
    """What `skippy-tui run` asks: the prompt plus max_tokens, padded; n_ctx stays the cap."""
    s = load(smollm2_f32, smollm2_q4_1, cache_dir, n_ctx=4096, window=lambda model, template: 560)
    try:
        assert s.target_cache.ctx.n_ctx == s.model_drafter.cache.ctx.n_ctx == 768
        assert s.n_ctx == 4096 and "rounded" not in s.load_note
        run = Run(s.run(user("Name a planet."), GEN))
        assert run.started.n_ctx == 4096 and run.finish.reason in ("eos", "max_tokens")
        assert s.target_cache.ctx.n_ctx == 768
    finally:
        s.close()


def test_the_window_size_changes_no_logit(smollm2_f32: Path) -> None:
    """A reply runs in a window sized to it (512 cells for `run`'s short ones) where the
    configured one is 4096: the same decodes in both, logits bit for bit (a decode
    attends over the used cells padded to 256, whatever the window)."""
    lp = LoadParams(n_ctx=4096, n_batch=512, n_ubatch=512, threads=THREADS, **EXACT)
    with Model(smollm2_f32, lp) as m:
        tokens = m.tokenize(LONG, add_special=False)[:300]
        small, large = Context(m, dataclasses.replace(lp, n_ctx=512)), Context(m, lp)
        try:
            assert (small.n_ctx, large.n_ctx) == (512, 4096)
            for ctx in (small, large):
                ctx.prefill(tokens[:40], 0)
            for i in range(40, 300):  # across a 256-cell boundary
                a, b = small.decode([tokens[i]], i, 1)[0], large.decode([tokens[i]], i, 1)[0]
                assert np.array_equal(a, b), (i, float(np.abs(a - b).max()))
        finally:
            small.close()
            large.close()
