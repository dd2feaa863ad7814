"""CPU weight repacking (``repack = true``), tried in a child process before a model loads with it.

llama.cpp gives repacked weights the CPU buffer types its build and the CPU's reported
instruction set allow. On a VM whose CPU reports AMX while the hypervisor does not let a
process use the tiles, the first AMX matrix multiply kills the process (SIGSEGV, or SIGILL
in llama.cpp's own tools, in ``tinygemm_kernel_amx`` for a Q4_1 draft on a 2-vCPU Xeon
VM): the app vanished under ``profile = "fast"``. A crash cannot be caught in-process, so
a child loads the model with repacking and decodes a few tokens; a child killed by a
signal means the model loads without it. The verdict is cached per model file, build,
CPU and load settings.
"""

from __future__ import annotations

import dataclasses
import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ..jsoncache import file_key, read_entry, write_entry
from .devices import system_info
from .invariance import cpu_model
from .model import LoadParams

CHILD_TIMEOUT_S = 300.0
"""Seconds the child may take (loading a large model included); past it, no verdict."""

_CHILD = """
import json, sys
from pathlib import Path
from skippy_tui.engine.native.model import Context, LoadParams, Model
fields = json.loads(sys.argv[2])
params = LoadParams(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})
with Model(Path(sys.argv[1]), params) as model:
    ctx = Context(model, params)
    try:
        ctx.decode(model.tokenize("Hello, world. Hello, world.", True)[:8], 0, 1)
    finally:
        ctx.close()
"""


def repack_crash(
    path: Path, params: LoadParams, cache_dir: Path | None, cancelled: Callable[[], bool] = lambda: False
) -> str:
    """Why ``path`` must load without CPU weight repacking here, or ``""``.

    ``params`` are the model's load settings (``repack`` on). The child loads the model
    with a 64-token context and decodes 8 tokens (seconds for a small model; once per
    model, build and CPU when ``cache_dir`` is given). Only a child killed by a signal
    counts: a file llama.cpp refuses, a timeout or any other failure is left to the real
    load to report. ``cancelled`` is polled while the child runs (a quit during the load
    stops it at once); a cancelled probe returns ``""`` and is not cached.
    """
    probe = dataclasses.replace(params, n_ctx=64, n_batch=64, n_ubatch=64, repack=True)
    key = (probe.n_gpu_layers, probe.device, probe.flash_attn, probe.threads, probe.rpc)
    entry = cache_dir / "repack" / f"{file_key(path, system_info(), cpu_model(), key)}.json" if cache_dir else None
    cached = read_entry(entry) if entry is not None else None
    if isinstance(cached, dict) and isinstance(cached.get("crash"), str):
        return cached["crash"]
    args = [sys.executable, "-c", _CHILD, str(path), json.dumps(dataclasses.asdict(probe))]
    try:
        child = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    except OSError:
        return ""
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while (rc := child.poll()) is None:
        if cancelled() or time.monotonic() > deadline:
            child.kill()
            child.wait()
            return ""
        time.sleep(0.02)
    crash = ""
    if rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.valid_signals() else "a signal"
        crash = (
            f"CPU weight repacking is off for {path.name}: with it llama.cpp was killed by {name} "
            "on this machine (e.g. a VM that reports AMX but does not let a process use it)"
        )
    if entry is not None:
        write_entry(entry, {"crash": crash})
    return crash
