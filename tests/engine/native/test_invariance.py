"""The load-time batch-invariance probe, checked against a denser scan on real models.

The probe's claim ("every verify batch up to ``rows`` rows gives each row the
logits of a single-row decode, bit for bit") is what makes greedy speculation
token-identical to plain decoding; here it is checked at many positions the
probe itself never visits, on whatever CPU runs the tests.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from helpers import EXACT, THREADS

from skippy_tui.engine.jsoncache import write_entry
from skippy_tui.engine.native.devices import system_info
from skippy_tui.engine.native.invariance import DEEP, Invariance, cached_probe, cpu_model, variant_build
from skippy_tui.engine.native.model import Context, LoadParams, Model


def _scan(ctx: Context, rows: int, last: int, every: int) -> list[tuple[int, int, float]]:
    """(start, size, Δlogit) for each batch of 2..rows rows at start = 1, 1+every, … that differs."""
    model = ctx.model
    text = "Speculative decoding drafts tokens cheaply and verifies them in one target batch. " * 20
    tokens = model.tokenize(text, add_special=False)[: last + every + rows + 1]
    ctx.clear()
    ctx.prefill(tokens[:1], 0)
    ref = {i: ctx.decode([tokens[i]], i, 1)[0] for i in range(1, len(tokens))}
    bad = []
    for start in range(1, last, every):
        ctx.remove_from(start)  # the cache holds single-row decodes before start
        for size in range(2, rows + 1):
            out = ctx.decode(tokens[start : start + size], start, size)
            diff = float(np.abs(out - np.stack([ref[start + j] for j in range(size)])).max())
            if diff:
                bad.append((start, size, diff))
            ctx.remove_from(start)
        for i in range(start, start + every):
            ctx.decode([tokens[i]], i, 1)
    ctx.clear()
    return bad


def _check(path: Path, max_rows: int, tmp_path: Path, monkeypatch) -> None:
    import skippy_tui.engine.native.invariance as inv_mod

    lp = LoadParams(n_ctx=512, n_batch=64, n_ubatch=64, threads=THREADS, **EXACT)
    with Model(path, lp) as model:
        ctx = Context(model, lp)
        try:
            # what report raises ends the probe (a quit while it runs), its cache cleared
            class Stop(Exception):
                pass

            def quit_at_a_third(fraction: float) -> None:
                if fraction > 0.3:
                    raise Stop

            with pytest.raises(Stop):
                cached_probe(ctx, 17, lp, tmp_path, quit_at_a_third)
            assert ctx.pos_max() == -1 and not list(tmp_path.glob("invariance/*.json"))
            # a fresh cache: the first call really probes, the second must come from disk
            fractions: list[float] = []
            inv = cached_probe(ctx, 17, lp, tmp_path, fractions.append)
            # 0 as it starts measuring, then rising in steps of ~5 % to the end (to where a
            # variant size ended it)
            assert fractions == sorted(fractions) and fractions[0] == 0 and 0 < fractions[1] <= 0.1, fractions
            assert inv.rows is not None or fractions[-1] >= 0.95, fractions
            assert list((tmp_path / "invariance").glob("*.json")), "the probe result was not cached"
            monkeypatch.setattr(inv_mod, "probe", lambda *a: (_ for _ in ()).throw(AssertionError("probed again")))
            again = cached_probe(ctx, 17, lp, tmp_path)
            assert (again.rows, again.probed, again.max_diff, again.windows) == (
                inv.rows,
                inv.probed,
                inv.max_diff,
                inv.windows,
            )
            assert inv.timings_ms and not again.timings_ms  # stale timings are not reused
            monkeypatch.undo()
            # the claim must be one the scan can test: a build that verifies row by row fails here
            assert inv.chunk >= 2, f"{inv.label()} on {cpu_model()!r} [{system_info()}]"
            rows = min(inv.chunk, max_rows)
            bad = _scan(ctx, rows, last=140, every=9)
        finally:
            ctx.close()
    assert not bad, (
        f"probe said {inv.label()}, but batches differ from single rows at (start, size, Δlogit) {bad[:8]} "
        f"on {cpu_model()!r} [{system_info()}]"
    )


def test_gemma_probe_holds_at_every_scanned_position(gemma3_270m: Path, tmp_path: Path, monkeypatch) -> None:
    _check(gemma3_270m, 9, tmp_path, monkeypatch)


def test_default_target_probe_holds_at_every_scanned_position(smollm2_f32: Path, tmp_path: Path, monkeypatch) -> None:
    _check(smollm2_f32, 9, tmp_path, monkeypatch)


def test_flash_attention_on_the_target_is_probed_where_it_splits_a_row(smollm2_f32: Path, tmp_path: Path) -> None:
    # with flash attention a one-row decode from position 256 (a 512-cell KV view) adds up unlike a
    # batch's rows: the early windows alone certified it exact; a cached verdict without the deep
    # window is probed again
    params = LoadParams(n_ctx=1024, n_batch=64, n_ubatch=64, threads=THREADS, flash_attn="on", repack=False)
    with Model(smollm2_f32, params) as model:
        ctx = Context(model, params)
        try:
            stale = Invariance(None, 5, 0.0, (4, 60))
            cache = tmp_path / "cache"
            inv = cached_probe(ctx, 5, params, cache)
            assert DEEP in inv.windows and inv.rows is not None and inv.rows < 5, inv.label()
            # an entry written before the deep window existed is not trusted
            entry = next((cache / "invariance").glob("*.json"))
            write_entry(entry, dataclasses.asdict(stale))
            again = cached_probe(ctx, 5, params, cache)
            assert DEEP in again.windows and again.rows == inv.rows
            # with flash attention off nothing changes: two windows, exact
            off = dataclasses.replace(params, flash_attn="off")
        finally:
            ctx.close()
    with Model(smollm2_f32, off) as model:
        ctx = Context(model, off)
        try:
            inv = cached_probe(ctx, 5, off, cache)
            assert inv.rows is None and DEEP not in inv.windows, inv.label()
        finally:
            ctx.close()


def test_the_build_under_test_can_verify_in_batches() -> None:
    """The suite's identity tests mean something only on a batch-invariant build (README, Exactness)."""
    note = variant_build(LoadParams(n_gpu_layers=0), 30)
    assert note == "", f"{note} [{system_info()}]"


def test_probe_size_is_bounded_and_exact_results_still_chunk() -> None:
    from skippy_tui.engine.native.invariance import probe_rows

    assert [probe_rows(k) for k in (1, 16, 20, 32, 500)] == [17, 17, 21, 33, 33]
    assert Invariance(None, 33, 0.0).chunk == 33  # n_draft 500 verifies in chunks of 33
    assert Invariance(7, 17, 1.0).chunk == 7


def test_a_llamafile_cpu_build_verifies_row_by_row_without_probing() -> None:
    lp = LoadParams(n_gpu_layers=0)
    flags = "CPU : AVX2 = 1 | LLAMAFILE = {} | OPENMP = 1 |"
    note = variant_build(lp, 30, flags.format(1))
    assert "LLAMAFILE" in note and "-DGGML_LLAMAFILE=OFF" in note and "exact = false" in note
    assert variant_build(lp, 30, flags.format(0)) == ""
    assert variant_build(lp, 30, "CPU : AVX2 = 1 |") == ""


def test_a_llamafile_build_loads_verifying_row_by_row_and_stays_exact(
    gemma3_270m: Path, cache_dir: Path, monkeypatch
) -> None:
    """The real pair, with system_info reporting a LLAMAFILE build, profile exact: no probe,
    rows = 1, still exact."""
    from helpers import Run, load, user

    import skippy_tui.engine.native.invariance as inv_mod
    from skippy_tui.engine.sampling.params import SamplingParams
    from skippy_tui.engine.settings import GenerationSettings

    monkeypatch.setattr(inv_mod, "system_info", lambda: system_info() + " LLAMAFILE = 1 |")
    monkeypatch.setattr(inv_mod, "probe", lambda *a: (_ for _ in ()).throw(AssertionError("probed")))
    gen = GenerationSettings(SamplingParams(temperature=0.0), max_tokens=24)
    prompt = user("Explain in two sentences why the sky is blue.")
    spec = load(gemma3_270m, gemma3_270m, cache_dir, n_draft=3, profile="exact")
    try:
        assert spec.invariance is not None and spec.invariance.rows == 1 and spec.verify_rows == 1
        assert "LLAMAFILE" in spec.invariance.label() and "row by row" in spec.invariance.label()
        ids = Run(spec.run(prompt, gen)).finish.token_ids
        verdict = spec.verdict()  # a draft as costly as the target, and k + 1 single-row verifies
        assert verdict is not None and verdict < 1.0, verdict
        spec.update(enabled=False)
        assert Run(spec.run(prompt, gen)).finish.token_ids == ids
    finally:
        spec.close()


def test_auto_on_a_llamafile_build_verifies_in_one_batch_and_says_it_is_not_bit_exact(
    gemma3_270m: Path, cache_dir: Path, monkeypatch
) -> None:
    """Issue 56: the default profile on a build that certifies no batch: no probe, one verify
    decode per step (k + 1 rows), priced as one by auto's cost model, and every reply says so."""
    from helpers import Run, load, user

    import skippy_tui.engine.native.invariance as inv_mod
    from skippy_tui.engine.policy.exactness import NOT_BIT_EXACT, plan_of
    from skippy_tui.engine.sampling.params import SamplingParams
    from skippy_tui.engine.settings import GenerationSettings

    monkeypatch.setattr(inv_mod, "system_info", lambda: system_info() + " LLAMAFILE = 1 |")
    monkeypatch.setattr(inv_mod, "probe", lambda *a: (_ for _ in ()).throw(AssertionError("probed")))
    gen = GenerationSettings(SamplingParams(temperature=0.0), max_tokens=24)
    prompt = user("Explain in two sentences why the sky is blue.")
    spec = load(gemma3_270m, gemma3_270m, cache_dir, n_draft=3)
    try:
        assert spec.speculation.profile == "auto"
        plan = plan_of(spec)
        assert plan is not None and not plan.exact and plan.rows is None and spec.verify_rows is None
        assert NOT_BIT_EXACT in plan.label(spec.invariance) and "LLAMAFILE" in plan.why
        ctx = spec.target_cache.ctx
        sizes: list[int] = []
        decode = ctx.decode
        monkeypatch.setattr(ctx, "decode", lambda toks, *a: sizes.append(len(toks)) or decode(toks, *a))
        run = Run(spec.run(prompt, gen))
        assert run.started is not None and run.started.verify == "not bit-exact"
        # each step's verify is one decode of [last, d1..dk]: never split into single rows
        assert max(sizes) == 4 and sizes.count(4) >= len([s for s in run.steps if len(s.proposed) == 3]) > 0
        # the cost model prices a batch as one decode (a chunk of 1 would price 4 rows at 4 decodes)
        costs = spec.policies.verify_costs
        assert costs.chunk is None and costs.at(4) < 4 * costs.at(1), costs.measured()
    finally:
        spec.close()


def test_plain_decoding_loads_without_the_probe_and_the_first_speculative_reply_runs_it(
    smollm2_f32: Path, cache_dir: Path, monkeypatch
) -> None:
    """--no-draft skips the exactness probe (nothing speculates); switching an n-gram source
    on later probes before that reply, and the reply still equals plain decoding."""
    from helpers import Run, assert_verified_in_batches, load, user

    import skippy_tui.engine.native.invariance as inv_mod
    from skippy_tui.engine.sampling.params import SamplingParams
    from skippy_tui.engine.settings import GenerationSettings

    calls: list[int] = []
    real = inv_mod.cached_probe

    def counting(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    monkeypatch.setattr(inv_mod, "cached_probe", counting)
    import skippy_tui.engine.load.loader as loader_mod

    monkeypatch.setattr(loader_mod, "cached_probe", counting)
    gen = GenerationSettings(SamplingParams(temperature=0.0), max_tokens=40)
    prompt = user("Repeat exactly: the cat sat on the mat, the cat sat on the mat, the cat sat on the mat.")
    spec = load(smollm2_f32, None, cache_dir, n_draft=4)
    try:
        assert not spec.speculation.enabled
        assert calls == [] and spec.invariance is None and spec.exactness_probe is not None
        plain = Run(spec.run(prompt, gen))
        assert calls == []  # a plain reply needs no probe
        spec.update(enabled=True, source="ngram")
        spec_run = Run(spec.run(prompt, gen))
        assert calls == [1] and spec.invariance is not None and spec.exactness_probe is None
        assert spec_run.finish.token_ids == plain.finish.token_ids
        assert_verified_in_batches(spec, [spec_run])
        Run(spec.run(prompt, gen))
        assert calls == [1]  # once
    finally:
        spec.close()


def test_the_window_size_does_not_probe_again(smollm2_f32: Path, tmp_path: Path, monkeypatch) -> None:
    """n_ctx chooses no kernel: a verdict measured in a large window serves a small one (where
    n_ctx below n_batch also caps the ubatch), and the logits there are the same bit for bit."""
    import skippy_tui.engine.native.invariance as inv_mod

    big = LoadParams(n_ctx=1024, n_batch=512, n_ubatch=512, threads=THREADS, **EXACT)
    small = dataclasses.replace(big, n_ctx=256)
    logits = []
    with Model(smollm2_f32, big) as model:
        tokens = model.tokenize("The window holds the chat; the kernels do the sums. " * 8, add_special=False)[:40]
        for params in (big, small):
            ctx = Context(model, params)
            try:
                if params is big:
                    inv = cached_probe(ctx, 5, params, tmp_path)
                    monkeypatch.setattr(inv_mod, "probe", lambda *a: (_ for _ in ()).throw(AssertionError("probed")))
                else:
                    assert ctx.n_ubatch == 256  # capped by the window: once part of the cache key
                    again = cached_probe(ctx, 5, params, tmp_path)
                    assert (again.rows, again.probed, again.windows) == (inv.rows, inv.probed, inv.windows)
                ctx.prefill(tokens[:30], 0)
                logits.append(ctx.decode(tokens[30:35], 30, 5))
            finally:
                ctx.close()
    assert np.array_equal(logits[0], logits[1])
    assert len(list((tmp_path / "invariance").glob("*.json"))) == 1


def test_a_verdict_from_a_small_window_is_probed_again_in_a_larger_one(smollm2_f32: Path, tmp_path: Path) -> None:
    """With flash attention on, a 256-token window cannot hold the deep window: its verdict
    looked less far than a larger window needs, so there the probe runs again."""
    small = LoadParams(n_ctx=256, n_batch=64, n_ubatch=64, threads=THREADS, flash_attn="on", repack=False)
    big = dataclasses.replace(small, n_ctx=1024)
    with Model(smollm2_f32, small) as model:
        for params, deep in ((small, False), (big, True), (small, True)):
            ctx = Context(model, params)
            try:
                inv = cached_probe(ctx, 5, params, tmp_path)
                assert (DEEP in inv.windows) is deep, inv.windows  # the last: the big one's, from the cache
            finally:
                ctx.close()
