"""What every bench mode shares: the prompt type, one measured run, seeds, progress.

:mod:`skippy_tui.bench.command` (the suite, the identity grid) and
:mod:`skippy_tui.bench.profiles` (exact vs fast) both build on these.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engine.load.arch import memory_kind
from ..engine.sampling.params import MAX_SEED
from ..engine.stats import AcceptanceStats


@dataclass(frozen=True)
class BenchPrompt:
    """One prompt of the suite. ``length``: its max tokens as a multiple of ``--max-tokens``."""

    name: str
    kind: str
    text: str
    length: float = 1.0


def repeat_seed(base: int, repeat: int) -> int:
    """The seed of every method in one repeat (or of one prompt in the identity grid)."""
    return (base + repeat) % (MAX_SEED + 1)


@dataclass(frozen=True)
class RollbackSample:
    """One step whose target dropped rows it had verified (a rejection, or drafts past the
    reply's end): how (``via``: ``kv``, ``snapshot``, ``restore`` or ``reset``), rows
    dropped and decoded again, the rollback's ms, and the same step's verify: its ms and
    the rows it decoded (those the rollback dropped among them)."""

    via: str
    dropped: int
    redecoded: int
    ms: float
    verify_ms: float
    verify_rows: int


def rollback_sample(ev: Any) -> RollbackSample | None:
    """The :class:`RollbackSample` of a step event, or None when it dropped nothing."""
    rb = ev.rollback
    if rb is None:
        return None
    # the cache held n_past_after - redecoded + dropped rows before the rollback, and
    # n_past_before before the verify: the difference is what the verify decoded (a
    # snapshot target judges chunk by chunk and may stop before the batch's end)
    rows = ev.n_past_after - rb.redecoded + rb.dropped - ev.n_past_before
    return RollbackSample(rb.via, rb.dropped, rb.redecoded, rb.ms, ev.verify_ms, rows)


@dataclass
class RunResult:
    """One generation: totals and the per-step measurements the summary needs."""

    tokens_per_second: float
    n_tokens: int
    n_steps: int
    n_drafted: int
    n_accepted: int
    n_spec_steps: int
    draft_ms: float
    verify_by_batch: dict[int, list[float]]
    draft_call_ms: list[float]
    sync_ms: list[float]
    drafted_at: list[int]
    accepted_at: list[int]
    ks: list[int]
    token_ids: tuple[int, ...]
    reason: str
    error: str = ""
    draft_prefill_ms: float = 0.0
    seed: int | None = None
    by_source: dict[str, list[float]] = field(default_factory=dict)
    """Per step kind (``model``, ``ngram``: what proposed; ``plain``: nothing did): [steps,
    tokens committed, ms of sync + draft + verify]."""
    rollbacks: list[RollbackSample] = field(default_factory=list)
    """Every step whose target dropped rows (the rollback's cost beside its verify's)."""

    def acceptance(self) -> AcceptanceStats:
        """This run's acceptance counts as the engine's accumulator (timings left at 0)."""
        return AcceptanceStats(
            n_steps=self.n_steps,
            n_spec_steps=self.n_spec_steps,
            n_drafted=self.n_drafted,
            n_accepted=self.n_accepted,
            n_tokens=self.n_tokens,
            drafted_at=list(self.drafted_at),
            accepted_at=list(self.accepted_at),
        )


def run_once(speculator: Any, prompt: str, gen: Any, system: str = "") -> RunResult:
    """Generate one reply from an empty cache and collect its measurements."""
    speculator.forget()
    messages = messages_for(prompt, system)
    verify: dict[int, list[float]] = {}
    calls: list[float] = []
    syncs: list[float] = []
    acc = AcceptanceStats()  # per-position counts, as the engine and the app count them
    ks: list[int] = []
    draft_ms = 0.0
    prev_k = 0
    finish = None
    draft_prefill_ms = 0.0
    by_source: dict[str, list[float]] = {}
    rollbacks: list[RollbackSample] = []
    for ev in speculator.run(messages, gen):
        if ev.type == "reply_started":
            draft_prefill_ms = ev.draft_prefill_ms  # the draft's prompt fill, outside generation time
        elif ev.type == "step":
            m = len(ev.proposed)
            ks.append(ev.k)
            acc.add_step(m, ev.n_accepted, 0, step_ms=0.0)  # only the counts are used
            verify.setdefault(m + 1, []).append(ev.verify_ms)
            # what proposed; a step with no proposal (k = 0, or no n-gram match) is a plain one
            kind = ev.draft_source or "plain"
            steps, tokens, ms = by_source.get(kind, (0, 0, 0.0))
            by_source[kind] = [steps + 1, tokens + ev.n_committed, ms + ev.sync_ms + ev.draft_ms + ev.verify_ms]
            if (sample := rollback_sample(ev)) is not None:
                rollbacks.append(sample)
            if ev.k > 0:
                draft_ms += ev.draft_ms
                calls.append(ev.draft_ms / max(1, min(ev.k, m + 1)))
                if prev_k > 0:
                    syncs.append(ev.sync_ms)
            prev_k = ev.k
        elif ev.type == "finish":
            finish = ev
    assert finish is not None
    return RunResult(
        tokens_per_second=decode_rate(finish.n_tokens, finish.generation_ms),
        n_tokens=finish.n_tokens,
        n_steps=finish.n_steps,
        n_drafted=finish.n_drafted,
        n_accepted=finish.n_accepted,
        n_spec_steps=acc.n_spec_steps,
        draft_ms=draft_ms,
        verify_by_batch=verify,
        draft_call_ms=calls,
        sync_ms=syncs,
        drafted_at=acc.drafted_at,
        accepted_at=acc.accepted_at,
        ks=ks,
        token_ids=finish.token_ids,
        reason=finish.reason,
        error=finish.error,
        draft_prefill_ms=draft_prefill_ms,
        seed=finish.seed,
        by_source=by_source,
        rollbacks=rollbacks,
    )


def draft_model(speculator: Any) -> Any | None:
    """The draft model's drafter, or None when no draft model is loaded.

    Without one, the engine's ``model_drafter`` is the target's MTP heads (source
    ``model`` drafts with them); the bench names those ``mtp`` and never counts them
    as a draft model, so that no column runs the heads under two names.
    """
    d = speculator.model_drafter
    return None if d is None or d is getattr(speculator, "mtp_drafter", None) else d


def models_meta(speculator: Any) -> dict[str, Any]:
    """The report's model fields: target, draft model, MTP heads, and how the target's
    memory drops rejected rows (:mod:`..engine.load.arch`)."""
    draft, mtp = draft_model(speculator), getattr(speculator, "mtp_drafter", None)
    return {
        "target": Path(speculator.target.path).name,
        "target_path": str(speculator.target.path),
        "target_memory": memory_kind(speculator.target.arch),
        "target_rollback": speculator.target_cache.ctx.rollback,
        "draft": Path(draft.model.path).name if draft is not None else None,
        "draft_path": str(draft.model.path) if draft is not None else None,
        # the file whose NextN blocks draft: the target's own, or an MTP drafter file
        "mtp": Path(mtp.model.path).name if mtp is not None else None,
        "mtp_external": bool(mtp.external) if mtp is not None else None,
        # why speculation stays off on this target (a state too large to save), or ""
        "no_rollback": getattr(speculator, "no_rollback", ""),
    }


def provenance() -> dict[str, Any]:
    """Where and when a report was measured: the date (UTC), the CPU, the llama.cpp build
    (llama-cpp-python's version and llama.cpp's system line) and skippy-tui's version and
    commit (when run from a git checkout)."""
    import datetime
    import importlib.metadata
    import subprocess

    from ..engine.native.devices import system_info
    from ..engine.native.invariance import cpu_model
    from ..engine.native.model import default_threads

    def version(dist: str) -> str:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return "?"

    try:
        here = Path(__file__).resolve().parent
        commit = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "cpu": cpu_model(),
        "cpus": default_threads(),
        "llama_cpp_python": version("llama-cpp-python"),
        "build": system_info(),
        "skippy_tui": version("skippy-tui") + (f" ({commit})" if commit else ""),
    }


def messages_for(prompt: str, system: str = "") -> list[dict[str, str]]:
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]


def decode_rate(n_tokens: int, decode_ms: float) -> float:
    """Tokens per second of decoding (the prompt's prefill into either model excluded)."""
    return n_tokens * 1000.0 / decode_ms if decode_ms > 0 else 0.0


def first_difference(a: Sequence[int], b: Sequence[int]) -> int | None:
    """Index of the first token where ``a`` and ``b`` differ (the shorter one's length
    when one is a prefix of the other); ``None`` when they are equal."""
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


class Progress:
    """A progress bar on stderr (redrawn in place on a terminal, a line per prompt otherwise)."""

    def __init__(self, total: int, stream: Any = None, enabled: bool = True) -> None:
        self.total, self.done = total, 0
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.t0 = time.perf_counter()

    def update(self, label: str, advance: int = 1) -> None:
        self.done += advance
        if not self.enabled:
            return
        width = 24
        filled = int(width * self.done / max(self.total, 1))
        elapsed = time.perf_counter() - self.t0
        eta = elapsed / self.done * (self.total - self.done) if self.done else 0.0
        bar = f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} {label}"
        bar += f"  ({elapsed:.0f}s, ~{eta:.0f}s left)"
        if self.tty:
            self.stream.write("\r\x1b[K" + bar)
        else:
            self.stream.write(bar + "\n")
        self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


def prompt_tokens_cap(gen: Any, prompt: BenchPrompt) -> int:
    return max(1, round(gen.max_tokens * prompt.length))


def loadavg() -> float | None:
    """The 1-minute load average (other work competing for the CPUs), where the OS has one."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):  # pragma: no cover - not Unix
        return None


def rounded(v: float | None, digits: int = 4) -> float | None:
    """``v`` rounded, or None."""
    return round(v, digits) if v is not None else None


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b`` to 3 decimals, or None when either is missing (or ``b`` is 0)."""
    return round(a / b, 3) if a is not None and b else None


def fmt(v: Any, spec: str = ".2f", none: str = "-") -> str:
    """``v`` formatted for a table, ``none`` when missing."""
    return none if v is None else format(v, spec)
