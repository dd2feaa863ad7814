"""Tiny random-weight models for tests, made by ``tools/tiny_gguf.py`` and cached on disk.

``tiny_model("qwen35", mtp=1)`` returns the path of that model in
``<repo>/.cache/tiny-gguf/``, generating it the first time. The file name holds
the arch, the options and a hash of the generator's source, so editing the
generator regenerates (and the outdated file of the same options is removed).
Files are written atomically, so parallel sessions never see a partial one.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "tiny_gguf.py"
CACHE = ROOT / ".cache" / "tiny-gguf"


@functools.cache
def generator() -> ModuleType:
    """``tools/tiny_gguf.py`` as a module (``tools`` is not a package)."""
    spec = importlib.util.spec_from_file_location("tiny_gguf", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it executes
    spec.loader.exec_module(module)
    return module


@functools.cache
def _source_hash() -> str:
    return hashlib.sha256(TOOL.read_bytes()).hexdigest()[:12]


def tiny_model(arch: str, **opts: object) -> Path:
    """Path of the tiny ``arch`` model with ``opts`` (``write_tiny_gguf``'s keywords), made once."""
    stem = "_".join([arch, *(f"{k}{v}" for k, v in sorted(opts.items()))])
    dest = CACHE / f"{stem}.{_source_hash()}.gguf"
    if not dest.is_file():
        CACHE.mkdir(parents=True, exist_ok=True)
        generator().write_tiny_gguf(dest, arch, **opts)
        for old in CACHE.glob(f"{stem}.*.gguf"):  # the same options from an older generator
            if old != dest:
                old.unlink(missing_ok=True)
    return dest
