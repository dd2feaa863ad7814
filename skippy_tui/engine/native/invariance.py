"""How large a verify batch may be while staying bit-identical to plain decoding.

Greedy speculation is lossless only if the target gives a row the same logits
inside a batch as alone. llama.cpp's kernels do not promise that: on a 2-core
AVX-512 CPU, Gemma 3 270M Q4_K_M rows are bit-identical in batches of up to 7
rows and then differ by up to 1.5 logits (other matrix paths take over at 8),
while SmolLM2 F32 stays identical at every size; another CPU may switch
elsewhere. So instead of assuming, the engine measures: decode a short fixed
text row by row, then as one batch of every size from 2 up, in two windows
(early positions, and past position 64 where SIMD loop bounds and KV views
have grown; a third from 512 KV cells when flash attention may be on), and
keep the largest size below the first that differs anywhere.
Sizes are not bisected: nothing promises that exactness is monotone in the
size. At least 17 rows are probed, so k can be raised to 16 at run time and
stay exact; at most 33, since every size costs a decode. Verification then
splits a longer batch into chunks of the largest exact size (an extra decode
only when k + 1 exceeds it). The result depends only on the
model file, the build, the CPU and the numeric load settings, so it is cached
on disk (:func:`cached_probe`).

One kind of build is known without probing: llama.cpp's default CPU build
uses llamafile's sgemm for batches, and there rows differ from single-row
decodes at many positions, even in batches of 2, so no window could certify
a size. Such a build verifies row by row (:func:`variant_build`).
"""

from __future__ import annotations

import importlib.metadata
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import median

import numpy as np

from ..jsoncache import file_key, read_entry, write_entry
from .devices import backend_name, system_info
from .model import Context, LoadParams

_PROBE_TEXT = "The quick brown fox jumps over the lazy dog, then naps in the warm afternoon sun by the river. "
_PREFIX = 4
_LATE = 60  # the second window starts here and runs past position 64
DEEP = 300
"""Where a third window starts when the target's flash attention may be on. From position
256 a decode attends over 512 KV cells (llama.cpp pads the view to 256), and there its CPU
flash attention splits a one-row decode's keys across threads (a batch's never), so a row
alone adds up in another order there and nowhere shallower; with it off, nowhere."""
MIN_PROBED_ROWS = 17
MAX_PROBED_ROWS = 33  # every size is probed, so the cost grows with its square


@dataclass(frozen=True, slots=True)
class Invariance:
    """Result of :func:`probe`.

    ``rows``: the largest batch size (≤ ``probed``) such that every size up
    to it gives rows equal to single-row decodes bit for bit in every window;
    ``None`` when every probed size matched (no limit known). ``max_diff``:
    the largest absolute logit difference at the first size that differed
    (0.0 when exact). ``windows``: the first positions of the probed windows.
    ``timings_ms``: decode time (ms) by batch size seen while probing (size
    1 = the median single-row decode), a first estimate of verify costs.
    """

    rows: int | None
    probed: int
    max_diff: float
    windows: tuple[int, ...] = ()
    timings_ms: dict[int, float] = field(default_factory=dict)
    note: str = ""  # why rows is 1 without a probe (see variant_build)

    @property
    def chunk(self) -> int:
        """The longest verify batch known to be exact: ``rows``, else ``probed``."""
        return self.rows if self.rows is not None else self.probed

    def label(self) -> str:
        if self.note:
            return f"exact row by row: {self.note}"
        if self.rows is None:
            return f"exact (batches ≤ {self.probed} probed)"
        return f"exact in chunks of {self.rows} (Δlogit {self.max_diff:.3g} at {self.rows + 1} rows)"


def probe_rows(k_max: int) -> int:
    """How many rows to probe for a configured k_max: 17 ≤ k_max + 1 ≤ 33."""
    return min(max(k_max + 1, MIN_PROBED_ROWS), MAX_PROBED_ROWS)


def _rows(ctx: Context, max_rows: int) -> int:
    """The largest batch probed: ``max_rows`` as the batch and the window (past the prefix) allow."""
    return max(1, min(max_rows, ctx.n_batch, ctx.n_ctx - _PREFIX))


def _windows(ctx: Context, max_rows: int, deep: bool) -> list[int]:
    """First positions of the probed windows (``max_rows`` as :func:`_rows` bounds it)."""
    late = max(_LATE, _PREFIX + max_rows)
    windows = [_PREFIX] + ([late] if late + max_rows <= ctx.n_ctx else [])
    if deep and late < DEEP and DEEP + max_rows <= ctx.n_ctx:
        windows.append(DEEP)
    return windows


def probe(ctx: Context, max_rows: int, deep: bool = False, report: Callable[[float], None] | None = None) -> Invariance:
    """Measure batch invariance on ``ctx`` (whose KV cache is cleared before and after).

    Costs up to ``2 × max_rows`` single decodes and ``2 × (max_rows - 1)``
    batch decodes of a short text (a few seconds on a 2-core CPU; minutes on a
    busy one). ``deep``: also a window at :data:`DEEP` where the window holds it
    (flash attention not off: about 240 more tokens of prefill and up to
    ``max_rows`` more of each decode). ``report`` is called with 0 before the first
    decode, then with the fraction done (0..1, every 5 % or so); what it raises ends
    the probe.

    Raises:
        DecodeError, ContextFullError: from llama.cpp (the cache is cleared).
    """
    max_rows = _rows(ctx, max_rows)
    windows = _windows(ctx, max_rows, deep)
    total = len(windows) * (2 * max_rows - 1)  # decodes, were every size exact: never fewer
    done, shown = 0, 0.0

    def tick() -> None:
        nonlocal done, shown
        done += 1
        if report is not None and done / total - shown >= 0.05:
            shown = done / total
            report(shown)

    need = windows[-1] + max_rows
    model = ctx.model
    text = _PROBE_TEXT
    tokens = model.tokenize(text, add_special=False)
    while len(tokens) < need:
        text += _PROBE_TEXT
        tokens = model.tokenize(text, add_special=False)
    timings: dict[int, list[float]] = {}
    limit, worst = max_rows, 0.0  # sizes up to limit are still exact everywhere
    if report is not None:  # the probe starts measuring (a cached verdict reports nothing)
        report(0.0)
    try:
        ctx.clear()
        ctx.prefill(tokens[:_PREFIX], 0)
        filled = _PREFIX
        for start in windows:
            if limit < 2:
                break
            if start > filled:
                ctx.prefill(tokens[filled:start], filled)
            rewind = _rewinder(ctx, start)
            rows = tokens[start : start + max_rows]
            ref = []
            for i, t in enumerate(rows[:limit]):
                t0 = time.perf_counter()
                ref.append(ctx.decode([t], start + i, 1)[0])
                timings.setdefault(1, []).append((time.perf_counter() - t0) * 1000)
                tick()
            for size in range(2, limit + 1):
                rewind()
                t0 = time.perf_counter()
                out = ctx.decode(rows[:size], start, size)
                timings.setdefault(size, []).append((time.perf_counter() - t0) * 1000)
                tick()
                diff = float(np.abs(out - np.stack(ref[:size])).max())
                if diff != 0.0:
                    limit, worst = size - 1, diff
                    break
            rewind()
            filled = start
    finally:
        ctx.clear()
    ms = {b: median(v[1:] if b == 1 and len(v) > 1 else v) for b, v in timings.items() if b <= limit}
    exact = limit == max_rows and worst == 0.0
    return Invariance(None if exact else limit, max_rows, worst, tuple(windows), ms)


def _rewinder(ctx: Context, start: int) -> Callable[[], None]:
    """How the probe returns ``ctx`` to its first ``start`` tokens: a KV cache drops the
    tail; a recurrent state cannot drop a whole batch, so it goes back to a saved state."""
    if ctx.rollback == "kv":

        def drop() -> None:
            ctx.remove_from(start)

        return drop
    saved = ctx.capture(full=True)
    return lambda: ctx.restore(saved)


def cpu_model() -> str:
    """The CPU's model name (Linux: from /proc/cpuinfo), part of the probe cache key."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def variant_build(params: LoadParams, n_layer: int, info: str | None = None) -> str:
    """Why this build cannot verify batches exactly on ``params``' device, or ``""``.

    ``info``: llama.cpp's system_info line (read when ``None``). LLAMAFILE
    sgemm matters only where some layers run on the CPU.
    """
    info = system_info() if info is None else info
    if "LLAMAFILE = 1" not in info:
        return ""
    offloaded = (params.n_gpu_layers < 0 or params.n_gpu_layers > n_layer) and (params.device or "").upper() != "CPU"
    if offloaded and backend_name() != "CPU":
        return ""
    try:
        pin = "==" + importlib.metadata.version("llama-cpp-python")
    except importlib.metadata.PackageNotFoundError:
        pin = ""
    return (
        "this llama.cpp was built with LLAMAFILE sgemm, whose batched rows differ from single rows; "
        'reinstall it with CMAKE_ARGS="-DGGML_LLAMAFILE=OFF" pip install --no-cache-dir --force-reinstall '
        f"llama-cpp-python{pin}, or set exact = false to verify in one batch"
    )


def kernel_key(ctx: Context, params: LoadParams, max_rows: int) -> tuple[object, ...]:
    """The load settings that choose the kernels the probe's decodes run, for its cache key.

    The window (``n_ctx``) is not one: the KV cells a decode reads are padded from the
    cells in use, not from the window, and the window only grows by a bit-exact copy
    (:mod:`.window`). Nor is ``n_ubatch`` beyond the largest probed batch: such a batch
    is one ubatch either way (a window smaller than ``n_batch`` caps both, and changing
    ``n_ctx`` then re-ran the probe for nothing).
    """
    rows = _rows(ctx, max_rows)
    return (params.flash_attn, params.repack, params.cache_type_k, params.cache_type_v, params.n_gpu_layers,
            params.device, params.threads, params.threads_batch, min(ctx.n_ubatch, rows), max_rows)  # fmt: skip


def cached_probe(
    ctx: Context,
    max_rows: int,
    params: LoadParams,
    cache_dir: Path | None,
    report: Callable[[float], None] | None = None,
) -> Invariance:
    """:func:`probe`, memoised on disk by (model file, build, CPU, :func:`kernel_key`).

    A missing or unreadable entry is simply measured again; writes are atomic.
    Only a fresh probe carries ``timings_ms``; ``report`` follows it (see :func:`probe`).
    A build known to be batch-variant (:func:`variant_build`) is not probed:
    the result is ``rows=1`` with the reason in ``note``.

    Raises:
        DecodeError, ContextFullError: as :func:`probe`.
    """
    note = variant_build(params, ctx.model.n_layer)
    if note:
        return Invariance(1, 0, 0.0, note=note)
    path = ctx.model.path
    deep = params.flash_attn != "off"
    if cache_dir is None or not path.is_file():
        return probe(ctx, max_rows, deep, report)
    key = file_key(path, system_info(), cpu_model(), kernel_key(ctx, params, max_rows))
    entry = cache_dir / "invariance" / f"{key}.json"
    data = read_entry(entry)
    try:
        # the verdict is a property of the file, build and CPU; the timings were the machine's
        # state at probe time (a busy machine made them several times too slow), so a cached
        # result seeds no costs and auto measures afresh
        cached = Invariance(
            rows=data["rows"],
            probed=data["probed"],
            max_diff=data["max_diff"],
            windows=tuple(data["windows"]),
        )
        # a verdict that looked at every window this context can reach holds here (one from a
        # larger window looked further); one from before the deep window existed did not look
        # where flash attention splits a row
        if cached.rows == 1 or set(_windows(ctx, _rows(ctx, max_rows), deep)) <= set(cached.windows):
            return cached
    except (ValueError, TypeError, KeyError, AttributeError):
        pass
    result = probe(ctx, max_rows, deep, report)
    write_entry(entry, asdict(result))
    return result
