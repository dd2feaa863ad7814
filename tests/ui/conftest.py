"""UI fixtures: the real default pair, loaded once for the UI tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import restore, track
from ui_helpers import ui_config


@pytest.fixture(scope="session")
def _default_pair(smollm2_f32: Path) -> Any:
    """The embedded default pair (F32 target, Q4_1 draft), loaded once for the UI tests."""
    from skippy_tui.engine.load.loader import load_speculator

    spec = track(load_speculator(ui_config().engine_spec()))
    yield spec
    spec.close()


@pytest.fixture
def speculator(_default_pair: Any) -> Any:
    """The shared pair as loaded: its settings (a test may change k, F4 turns speculation off),
    empty KV caches and nothing learned by ``auto``, so no test depends on the one before."""
    restore(_default_pair)
    return _default_pair
