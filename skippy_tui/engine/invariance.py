"""How large a verify batch may be while staying bit-identical to plain decoding.

Greedy speculation is lossless only if the target gives a row the same logits
inside a batch as alone. llama.cpp's kernels do not promise that: on a 2-core
AVX-512 CPU, Gemma 3 270M Q4_K_M rows are bit-identical in batches of up to 7
rows and then differ by up to 1.1 logits (other matrix paths take over at 8),
while SmolLM2 F32 stays identical at every size. So instead of assuming, the
engine measures once at load: decode a short fixed text row by row, then in
batches, and keep the largest batch size whose rows match exactly (bisected;
kernels switch at a threshold). At least 17 rows are probed, so k can be
raised to 16 at run time and stay exact. Verification then splits a longer batch into chunks of that
size (an extra decode only when k + 1 exceeds it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .native import Context

_PROBE_TEXT = "The quick brown fox jumps over the lazy dog, then naps in the warm afternoon sun by the river. "
_PREFIX = 4
MIN_PROBED_ROWS = 17


@dataclass(frozen=True, slots=True)
class Invariance:
    """Result of :func:`probe`.

    ``rows``: the largest batch (≤ ``probed``) whose rows equal single-row
    decodes bit for bit; ``None`` when every probed size matched (no limit
    known). ``max_diff``: the largest absolute logit difference seen at
    ``probed`` rows (0.0 when exact).
    """

    rows: int | None
    probed: int
    max_diff: float

    def label(self) -> str:
        if self.rows is None:
            return f"exact (batches ≤ {self.probed} probed)"
        return f"exact in chunks of {self.rows} (Δlogit {self.max_diff:.3g} at {self.probed})"


def probe(ctx: Context, max_rows: int) -> Invariance:
    """Measure batch invariance on ``ctx`` (whose KV cache is cleared before and after).

    Costs ``max_rows`` single decodes plus about ``log2(max_rows)`` batch
    decodes of a short text.

    Raises:
        DecodeError, ContextFullError: from llama.cpp (the cache is cleared).
    """
    max_rows = max(1, min(max_rows, ctx.n_batch, ctx.n_ctx - _PREFIX))
    model = ctx.model
    text = _PROBE_TEXT
    tokens = model.tokenize(text, add_special=False)
    while len(tokens) < _PREFIX + max_rows:
        text += _PROBE_TEXT
        tokens = model.tokenize(text, add_special=False)
    prefix, rows = tokens[:_PREFIX], tokens[_PREFIX : _PREFIX + max_rows]
    try:
        ctx.clear()
        ctx.prefill(prefix, 0)
        single = np.concatenate([ctx.decode([t], _PREFIX + i, 1) for i, t in enumerate(rows)])

        def diff(size: int) -> float:
            ctx.remove_from(_PREFIX)
            return float(np.abs(ctx.decode(rows[:size], _PREFIX, size) - single[:size]).max())

        worst = diff(max_rows)
        if worst == 0.0:
            return Invariance(None, max_rows, 0.0)
        # kernels switch at a threshold, so exactness is monotone in the size: bisect
        lo, hi = 1, max_rows  # lo is exact, hi is not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if diff(mid) == 0.0:
                lo = mid
            else:
                hi = mid
        return Invariance(lo, max_rows, worst)
    finally:
        ctx.clear()
