"""The bounds contract of a speculative session, checked before any allocation.

Bounds follow the skippy speculative-state contract: sequences 1..4096,
``n_draft`` 1..4096, ``0 <= n_min <= n_draft``, ``p_min`` finite in [0, 1], a
batch of at least ``n_draft + 1`` rows on both models (recurrent or hybrid
models also need a micro-batch of ``n_draft + 1`` and ``n_draft`` recurrent
slots), and prompts of at most 1,048,576 tokens. Each failure raises
:class:`~skippy_tui.engine.errors.BoundsError` naming the key, value and bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .errors import BoundsError
from .options import MAX_DRAFT_TOKENS

MAX_SEQUENCES = 4096
MAX_PROMPT_TOKENS = 1_048_576


def check_int(key: str, value: object, lo: int, hi: int | None = None) -> int:
    """Return ``value`` if it is an int in ``[lo, hi]``; else raise ``BoundsError``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise BoundsError(key, value, f"an integer >= {lo}" if hi is None else f"an integer in {lo}..{hi}")
    if value < lo or (hi is not None and value > hi):
        raise BoundsError(key, value, f">= {lo}" if hi is None else f"in {lo}..{hi}")
    return value


def check_unit_float(key: str, value: object) -> float:
    """Return ``value`` as a float if finite and in [0, 1]; else raise ``BoundsError``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BoundsError(key, value, "a number in [0, 1]")
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        raise BoundsError(key, value, "finite and in [0, 1]")
    return float(value)


def validate_speculation(n_seq: int, n_draft: int, n_min: int, p_min: float) -> None:
    """Validate the speculation settings.

    Raises:
        BoundsError: naming the first key out of bounds.
    """
    check_int("n_seq", n_seq, 1, MAX_SEQUENCES)
    check_int("n_draft", n_draft, 1, MAX_DRAFT_TOKENS)
    check_int("n_min", n_min, 0, n_draft)
    check_unit_float("p_min", p_min)


@dataclass(frozen=True, slots=True)
class ContextCapacity:
    """What one model's context can hold per decode (rows are tokens)."""

    name: str
    n_batch: int
    n_ubatch: int
    recurrent_or_hybrid: bool = False
    recurrent_slots: int = 0


def validate_capacity(target: ContextCapacity, draft: ContextCapacity | None, n_draft: int) -> None:
    """Check that a verify batch of ``n_draft + 1`` rows fits both contexts.

    Raises:
        BoundsError: e.g. ``target.n_batch = 4 is out of bounds: must be >= 9 (the longest
            proposal, 8 tokens, + 1)``; ``n_draft`` is the longest k any step may propose
            (``n_draft_max`` or ``n_draft_max_ngram`` when ``n_draft = "auto"``).
    """
    rows = n_draft + 1
    longest = f"the longest proposal, {n_draft} tokens"
    for cap in (target, draft):
        if cap is None:
            continue
        if cap.n_batch < rows:
            raise BoundsError(f"{cap.name}.n_batch", cap.n_batch, f">= {rows} ({longest}, + 1)")
        if cap.recurrent_or_hybrid:
            if cap.n_ubatch < rows:
                raise BoundsError(f"{cap.name}.n_ubatch", cap.n_ubatch, f">= {rows} ({longest}, + 1; recurrent model)")
            if cap.recurrent_slots < n_draft:
                raise BoundsError(
                    f"{cap.name}.recurrent_slots", cap.recurrent_slots, f">= {n_draft} ({longest}; recurrent model)"
                )


def validate_prompt_len(n_tokens: int) -> None:
    """Raise ``BoundsError`` when a prompt exceeds 1,048,576 tokens."""
    if n_tokens > MAX_PROMPT_TOKENS:
        raise BoundsError("prompt_tokens", n_tokens, f"<= {MAX_PROMPT_TOKENS}")
