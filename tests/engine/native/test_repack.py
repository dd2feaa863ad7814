"""CPU weight repacking is tried in a child first: a crash there turns it off, with a note."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest
from helpers import load, user

from skippy_tui.engine.native import repack
from skippy_tui.engine.native.model import Context, LoadParams, Model
from skippy_tui.engine.native.repack import repack_crash
from skippy_tui.engine.settings import GenerationSettings


def test_a_child_killed_by_a_signal_turns_repacking_off_and_is_remembered(smollm2_q4_1, tmp_path, monkeypatch):
    """The child stands in for llama.cpp's AMX kernel on a VM that does not allow AMX."""
    monkeypatch.setattr(repack, "_CHILD", "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    note = repack_crash(smollm2_q4_1, LoadParams(threads=2, repack=True), tmp_path)
    assert "repacking is off for SmolLM2-135M-Instruct.Q4_1.gguf" in note and "SIGSEGV" in note

    def no_child(*a, **kw):
        raise AssertionError("the verdict is cached")

    monkeypatch.setattr(subprocess, "Popen", no_child)
    assert repack_crash(smollm2_q4_1, LoadParams(threads=2, repack=True), tmp_path) == note


def test_a_quit_during_the_child_stops_it_at_once(smollm2_q4_1, tmp_path, monkeypatch):
    monkeypatch.setattr(repack, "_CHILD", "import time; time.sleep(30)")
    t = time.monotonic()
    calls = []
    note = repack_crash(smollm2_q4_1, LoadParams(repack=True), tmp_path, lambda: calls.append(1) or len(calls) > 5)
    assert note == "" and time.monotonic() - t < 5.0
    assert not list(tmp_path.rglob("*.json"))  # a cancelled probe is no verdict


@pytest.mark.parametrize("child", ["pass", "raise SystemExit(3)"])
def test_a_child_that_exits_keeps_repacking(smollm2_q4_1, tmp_path, monkeypatch, child):
    """A normal exit, or an error the real load will report itself, is no crash."""
    monkeypatch.setattr(repack, "_CHILD", child)
    assert repack_crash(smollm2_q4_1, LoadParams(threads=2, repack=True), tmp_path) == ""


def test_where_the_child_survives_the_model_loads_and_decodes_with_repacking(smollm2_q4_1, tmp_path: Path):
    """On the real Q4_1 draft: the child's verdict is a sentence or nothing, and where it is
    nothing, this process loads the model with repacking and decodes (on this project's
    AMX-reporting VM the child is killed, and the model then loads without it)."""
    params = LoadParams(n_ctx=128, threads=2, repack=True)
    note = repack_crash(smollm2_q4_1, params, tmp_path)
    assert note == "" or "killed by" in note
    with Model(smollm2_q4_1, params if not note else LoadParams(n_ctx=128, threads=2)) as model:
        ctx = Context(model, params)
        try:
            logits = ctx.decode(model.tokenize("Hello, world.", True), 0, 1)
        finally:
            ctx.close()
    assert logits.shape[-1] == model.n_vocab


def test_the_pair_loads_with_repacking_asked_for_and_says_where_it_is_off(smollm2_f32, smollm2_q4_1, tmp_path):
    """``repack = true`` on both models (as ``profile = "fast"`` sets it): the pair loads and
    decodes whatever the machine allows, and the load note names each model whose child
    was killed (the Q4_1 draft on an AMX-reporting VM that forbids AMX)."""
    params = {"flash_attn": "off", "repack": True}
    crashes = [
        repack_crash(p, LoadParams(n_ctx=1024, threads=2, repack=True), tmp_path) for p in (smollm2_f32, smollm2_q4_1)
    ]
    sp = load(smollm2_f32, smollm2_q4_1, tmp_path, load_params=params, exact=False)
    try:
        finish = [e for e in sp.run(user("Say hello."), GenerationSettings(max_tokens=8)) if e.type == "finish"]
        assert finish and finish[0].n_tokens > 0
        for crash in crashes:
            assert (crash in sp.load_note) if crash else True
        assert ("repacking is off" in sp.load_note) == any(crashes)
    finally:
        sp.close()
