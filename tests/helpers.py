"""Small helpers for the real-model tests."""

from __future__ import annotations

import dataclasses
import weakref
from collections.abc import Iterable
from pathlib import Path

from skippy_tui.engine.events import Event, ReplyFinished, ReplyStarted, StepVerified
from skippy_tui.engine.load.loader import EngineSpec, Window, load_speculator
from skippy_tui.engine.native.model import LoadParams
from skippy_tui.engine.settings import ModelSpec, SpeculationSettings
from skippy_tui.engine.speculator import Speculator

PROMPTS = [
    "What is the capital of France?",
    "Write a haiku about autumn leaves.",
    "Explain in two sentences why the sky is blue.",
    "Write a Python function that returns the n-th Fibonacci number.",
    "List three fruits that are red.",
    "Translate 'good morning' into Spanish and German.",
    "What is 17 times 23? Show your working.",
    "Give me a short recipe for pancakes.",
    "Summarise the plot of Romeo and Juliet in one paragraph.",
    "Rewrite this sentence more formally: hey, can u send me the file asap?",
]


# Batch-invariant CPU kernels (see README, "Exactness"): a row's logits do not
# depend on how many rows the batch holds, so verify == plain decoding bit for bit.
EXACT = {"flash_attn": "off", "repack": False}
THREADS = 2
"""Pinned, so a test decodes the same way on any machine (0 would take every core)."""

_initial: weakref.WeakKeyDictionary[Speculator, SpeculationSettings] = weakref.WeakKeyDictionary()


def load(
    target: Path,
    draft: Path | None,
    cache_dir: Path,
    n_draft: int = 4,
    n_ctx: int = 1024,
    load_params: dict | None = None,
    window: Window | None = None,
    **spec: object,
) -> Speculator:
    lp = LoadParams(
        n_ctx=n_ctx, n_batch=256, n_ubatch=256, threads=THREADS, **(EXACT if load_params is None else load_params)
    )
    s = load_speculator(
        EngineSpec(
            target=ModelSpec(target, lp),
            draft=ModelSpec(draft, lp) if draft else None,
            speculation=SpeculationSettings(
                **{"enabled": draft is not None, "n_draft": n_draft, "source": "model", **spec}
            ),  # type: ignore[arg-type]
            cache_dir=cache_dir,
            use_draft=draft is not None,
        ),
        window=window,
    )
    return track(s)


def track(s: Speculator) -> Speculator:
    """Remember ``s``'s current settings as the ones :func:`restore` goes back to."""
    _initial[s] = s.speculation
    return s


def restore(s: Speculator) -> None:
    """Back to the settings it was loaded with, empty KV caches and nothing learned by
    ``auto`` (module-scoped models, but every test starts from the same state)."""
    initial = _initial.get(s)
    if initial is not None and s.speculation != initial:
        fields = {f.name: getattr(initial, f.name) for f in dataclasses.fields(initial)}
        if s.model_drafter is None and fields["source"] == "model":
            del fields["source"]  # a target alone cannot switch back to "model"; enabled=False is what counts
        s.update(**fields)
    s.forget()
    s.reset_policies()


def largest_verify_batch(runs: Iterable[Run]) -> int:
    """The most rows any step of these replies verified in one batch (proposal + 1)."""
    return max((len(s.proposed) + 1 for r in runs for s in r.steps), default=0)


def assert_verified_in_batches(spec: Speculator, runs: Iterable[Run], at_least: int = 2) -> None:
    """Speculative == plain must not hold by construction: batches of several rows were
    verified, and this build does not split them into single rows."""
    assert largest_verify_batch(runs) >= at_least
    assert spec.verify_rows is None or spec.verify_rows > 1, (
        f"verification went row by row ({spec.invariance.label() if spec.invariance else None}): "
        "rebuild llama-cpp-python with CMAKE_ARGS=-DGGML_LLAMAFILE=OFF (README, Exactness)"
    )


class Run:
    """The events of one reply, split by kind."""

    def __init__(self, events: Iterable[Event]) -> None:
        self.events = list(events)
        self.started = next((e for e in self.events if isinstance(e, ReplyStarted)), None)
        self.steps = [e for e in self.events if isinstance(e, StepVerified)]
        fins = [e for e in self.events if isinstance(e, ReplyFinished)]
        assert len(fins) == 1, self.events
        self.finish = fins[0]

    @property
    def streamed(self) -> str:
        return "".join(s.text for s in self.steps) + self.finish.tail


def user(text: str, system: str | None = None) -> list[dict[str, str]]:
    msgs = [{"role": "system", "content": system}] if system else []
    return [*msgs, {"role": "user", "content": text}]
