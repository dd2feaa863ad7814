"""Speculators on the default pair, shared by the engine's test modules (one per module that uses it)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import load

from skippy_tui.engine.speculator import Speculator


@pytest.fixture(scope="module")
def plain(smollm2_f32: Path, cache_dir: Path) -> Iterator[Speculator]:
    """The F32 target alone: plain decoding."""
    s = load(smollm2_f32, None, cache_dir)
    yield s
    s.close()


@pytest.fixture(scope="module")
def spec(smollm2_f32: Path, smollm2_q4_1: Path, cache_dir: Path) -> Iterator[Speculator]:
    """The default pair (F32 target, Q4_1 draft) with the engine's default speculation settings."""
    s = load(smollm2_f32, smollm2_q4_1, cache_dir)
    yield s
    s.close()


@pytest.fixture(scope="module")
def pair(smollm2_f32: Path, smollm2_q4_1: Path, cache_dir: Path) -> Iterator[Speculator]:
    """The default pair drafting 4 tokens a step."""
    s = load(smollm2_f32, smollm2_q4_1, cache_dir, n_draft=4)
    yield s
    s.close()
