"""UI fixtures: the real default pair, loaded once for the UI tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ui_helpers import ui_config


@pytest.fixture(scope="session")
def speculator(smollm2_f32: Path) -> Any:
    """The embedded default pair (F32 target, Q4_1 draft), loaded once for the UI tests."""
    from skippy_tui.engine.loader import load_speculator

    spec = load_speculator(ui_config().engine_spec())
    yield spec
    spec.close()
