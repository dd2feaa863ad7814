"""Drafting with MTP heads, integrated in the target's file or in a separate drafter file.

Tiny ``qwen35`` models from ``tools/tiny_gguf.py``: the echo target's greedy output mostly
repeats its last token, and its MTP block drafts "the same token again", so its
proposals are accepted some of the time and rejected the rest; the sidecar file holds
the same block alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import THREADS, Run, user
from test_hybrid import LP, PROMPT, load_tiny, spec_and_plain

from skippy_tui.engine.errors import IncompatibleModelsError, ModelFileError
from skippy_tui.engine.load.loader import EngineSpec, check_spec, load_speculator
from skippy_tui.engine.native.model import LoadParams
from skippy_tui.engine.sampling.params import SamplingParams
from skippy_tui.engine.settings import GenerationSettings, ModelSpec, SpeculationSettings

GREEDY = GenerationSettings(SamplingParams(temperature=0.0), max_tokens=48)


def proposals(run: Run) -> list[tuple[int, ...]]:
    return [tuple(t.id for t in st.proposed) for st in run.steps]


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_the_targets_own_heads_reproduce_plain_decoding(tiny_qwen35_mtp_echo: Path, cache_dir: Path,
                                                         temperature: float) -> None:  # fmt: skip
    s = load_tiny(tiny_qwen35_mtp_echo, None, cache_dir, source="mtp")
    try:
        assert s.drafter is s.mtp_drafter and s.drafter.source == "mtp" and not s.mtp_drafter.external
        spec, plain = spec_and_plain(s, temperature, max_tokens=60)
        assert spec.finish.token_ids == plain.finish.token_ids
        assert spec.started.draft_source == "mtp"
        drafted = [st for st in spec.steps if st.proposed]
        assert drafted and all(st.draft_source == "mtp" for st in drafted)
        assert all(p.prob is not None for st in drafted for p in st.proposed)  # the head's own distribution
        if temperature == 0.0:  # some accepted, some rejected
            assert 0 < spec.finish.n_accepted < spec.finish.n_drafted
            assert any(st.rollback is not None and st.rollback.via == "snapshot" for st in spec.steps)
    finally:
        s.close()


def test_the_head_follows_the_targets_cache(tiny_qwen35_mtp_echo: Path, cache_dir: Path) -> None:
    """After every step the head holds a prefix of what the target holds, and none of its guesses."""
    s = load_tiny(tiny_qwen35_mtp_echo, None, cache_dir, source="mtp")
    try:
        head = s.mtp_drafter.cache
        for ev in s.run(PROMPT, GREEDY):
            if ev.type == "step":
                held, target = head.state.tokens, s.target_cache.state.tokens
                assert target[: len(held)] == held
                assert head.ctx.pos_max() + 1 == len(held)  # the drafted rows left the head's cache
        s.forget()
        assert len(head.state) == 0 and head.ctx.pos_max() == -1
    finally:
        s.close()


def test_a_synced_head_proposes_what_a_fresh_one_does(tiny_qwen35_mtp_echo: Path, cache_dir: Path) -> None:
    """The reference's property: incremental sync (a second turn) equals a reset and a full fill."""
    s = load_tiny(tiny_qwen35_mtp_echo, None, cache_dir, source="mtp")
    try:
        first = Run(s.run(PROMPT, GREEDY))
        reply = {"role": "assistant", "content": first.finish.text}
        follow_up = [*PROMPT, reply, {"role": "user", "content": "Again."}]
        incremental = Run(s.run(follow_up, GREEDY))
        assert incremental.started.draft_sync.kind == "extend"
        s.forget()
        fresh = Run(s.run(follow_up, GREEDY))
        assert fresh.started.draft_sync.kind == "reset"
        assert proposals(incremental) == proposals(fresh)
        assert incremental.finish.token_ids == fresh.finish.token_ids
    finally:
        s.close()


def test_an_external_drafter_file_drafts_as_the_integrated_head(
    tiny_qwen35_echo: Path, tiny_qwen35_mtp_echo: Path, tiny_qwen35_mtp_sidecar: Path, cache_dir: Path
) -> None:
    integrated = load_tiny(tiny_qwen35_mtp_echo, None, cache_dir, source="mtp")
    try:
        a = Run(integrated.run(PROMPT, GREEDY))
    finally:
        integrated.close()
    external = load_tiny(tiny_qwen35_echo, tiny_qwen35_mtp_sidecar, cache_dir, source="mtp")
    try:
        assert external.mtp_drafter is not None and external.mtp_drafter.external
        assert external.model_drafter is external.mtp_drafter  # "model" drafts with it too: no draft model
        b = Run(external.run(PROMPT, GREEDY))
    finally:
        external.close()
    assert proposals(a) == proposals(b) and a.finish.token_ids == b.finish.token_ids


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_auto_chooses_among_plain_ngram_and_the_heads(tiny_qwen35_mtp_echo: Path, cache_dir: Path,
                                                      temperature: float) -> None:  # fmt: skip
    s = load_tiny(tiny_qwen35_mtp_echo, None, cache_dir, source="auto", n_draft="auto")
    try:
        assert s.drafter.source == "auto" and s.drafter.model is s.mtp_drafter
        spec, plain = spec_and_plain(s, temperature, max_tokens=60)
        assert spec.finish.token_ids == plain.finish.token_ids
        assert {st.draft_source for st in spec.steps} <= {"", "mtp", "ngram"}
    finally:
        s.close()


def test_the_source_switches_at_run_time(tiny_qwen35_mtp_echo: Path, cache_dir: Path) -> None:
    s = load_tiny(tiny_qwen35_mtp_echo, None, cache_dir, source="ngram")
    try:
        s.update(source="mtp")
        run = Run(s.run(PROMPT, GREEDY))
        assert any(st.draft_source == "mtp" for st in run.steps)
        s.update(source="model")  # no draft model: the heads draft for it
        assert s.drafter is s.mtp_drafter
    finally:
        s.close()


def test_the_head_keeps_drafting_after_the_window_grows(tiny_qwen35_mtp_echo: Path, cache_dir: Path) -> None:
    lp = LoadParams(n_ctx=4096, n_batch=128, n_ubatch=128, threads=THREADS, flash_attn="off", repack=False)
    s = load_tiny(tiny_qwen35_mtp_echo, None, cache_dir, lp=lp, source="mtp")
    try:
        before = s.target_cache.ctx.n_ctx
        long = user("tick " * 900)
        spec = Run(s.run(long, GREEDY))
        assert s.target_cache.ctx.n_ctx > before and s.mtp_drafter.cache.ctx.n_ctx > before
        assert any(st.proposed for st in spec.steps)
        s.update(enabled=False)
        s.forget()
        plain = Run(s.run(long, GREEDY))
        assert spec.finish.token_ids == plain.finish.token_ids
    finally:
        s.close()


def test_heads_llama_cpp_cannot_run_turn_speculation_off_with_the_reason(tiny_models, cache_dir: Path) -> None:
    """Two NextN blocks of a qwen35 would abort the process in llama.cpp: refused before any MTP context."""
    s = load_tiny(tiny_models("qwen35", mtp=2), None, cache_dir, source="mtp")
    try:
        assert s.mtp_drafter is None and not s.speculation.enabled
        assert "one MTP block" in s.load_note
        assert Run(s.run(PROMPT, GenerationSettings(max_tokens=4))).finish.reason == "max_tokens"
    finally:
        s.close()


def test_a_drafter_file_of_another_width_is_refused(tiny_models, tiny_qwen35_echo: Path, cache_dir: Path) -> None:
    wide = tiny_models("qwen35", mtp=1, mtp_only=True, embd=128)
    spec = SpeculationSettings(enabled=True, n_draft=4, source="mtp")
    with pytest.raises(IncompatibleModelsError, match="128 wide"):
        load_speculator(EngineSpec(ModelSpec(tiny_qwen35_echo, LP), ModelSpec(wide, LP), spec, cache_dir, True))


def test_a_drafter_file_is_no_target_and_drafts_only_for_its_architecture(
    tiny_qwen35_mtp_sidecar: Path, tiny_qwen35_echo: Path, tiny_mamba_echo: Path, cache_dir: Path
) -> None:
    """Both refused from the headers, before llama.cpp opens a context it cannot run on the file."""
    spec = SpeculationSettings(enabled=True, n_draft=4, source="mtp")
    as_target = EngineSpec(ModelSpec(tiny_qwen35_mtp_sidecar, LP), ModelSpec(tiny_qwen35_echo, LP), spec, cache_dir)
    with pytest.raises(ModelFileError, match=r"is an MTP drafter file .* not as the target"):
        check_spec(as_target)
    other_arch = EngineSpec(ModelSpec(tiny_mamba_echo, LP), ModelSpec(tiny_qwen35_mtp_sidecar, LP), spec, cache_dir)
    with pytest.raises(IncompatibleModelsError, match=r"hidden states of qwen35 models.* is mamba"):
        check_spec(other_arch)
