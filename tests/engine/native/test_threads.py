"""The note for an environment that makes llama.cpp's OpenMP threads sleep at every barrier."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from skippy_tui.engine.threads import openmp_loaded, thread_wait_note


@pytest.mark.parametrize(
    ("environ", "slow"),
    [
        ({}, False),
        ({"OMP_WAIT_POLICY": "active"}, False),
        ({"OMP_WAIT_POLICY": " PASSIVE "}, True),
        ({"GOMP_SPINCOUNT": "0"}, True),
        ({"GOMP_SPINCOUNT": "10000"}, False),
    ],
)
def test_a_sleeping_wait_policy_gets_a_note_on_an_openmp_build(environ: dict[str, str], slow: bool) -> None:
    note = thread_wait_note(environ, openmp=True)
    assert bool(note) is slow
    if slow:
        assert "2x slower" in note and next(iter(environ)) in note
    assert thread_wait_note(environ, openmp=False) == ""  # a build without OpenMP ignores them


def test_openmp_is_told_from_the_process_maps(tmp_path: Path) -> None:
    maps = tmp_path / "maps"
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/x86_64-linux-gnu/libgomp.so.1\n")
    with_gomp = openmp_loaded(maps)
    maps.write_text("7f00-7f01 r-xp 0 08:01 1 /usr/lib/libc.so.6\n")
    without = openmp_loaded(maps)
    if sys.platform.startswith("linux"):
        assert (with_gomp, without, openmp_loaded(tmp_path / "missing")) == (True, False, None)
    else:
        assert with_gomp is without is None


@pytest.mark.usefixtures("smollm2_f32")
def test_run_says_when_the_wait_policy_slows_decoding() -> None:
    """The real build, the real CLI: the note is printed where llama.cpp runs on OpenMP."""
    env = {**os.environ, "PYTHONIOENCODING": "utf-8", "OMP_WAIT_POLICY": "passive"}
    cmd = [sys.executable, "-m", "skippy_tui", "run", "Hi", "--max-tokens", "2", "--no-draft"]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert ("note: OMP_WAIT_POLICY=passive" in r.stderr) is bool(openmp_loaded()), r.stderr
    env.pop("OMP_WAIT_POLICY")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and "OMP_WAIT_POLICY" not in r.stderr, r.stderr
