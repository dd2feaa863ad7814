"""Small helpers for the real-model tests."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from skippy_tui.engine.events import Event, ReplyFinished, ReplyStarted, StepVerified
from skippy_tui.engine.loader import EngineSpec, load_speculator
from skippy_tui.engine.native import LoadParams
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


def load(
    target: Path,
    draft: Path | None,
    cache_dir: Path,
    n_draft: int = 4,
    n_ctx: int = 1024,
    load_params: dict | None = None,
    **spec: object,
) -> Speculator:
    lp = LoadParams(n_ctx=n_ctx, n_batch=256, n_ubatch=256, **(EXACT if load_params is None else load_params))
    return load_speculator(
        EngineSpec(
            target=ModelSpec(target, lp),
            draft=ModelSpec(draft, lp) if draft else None,
            speculation=SpeculationSettings(enabled=draft is not None, n_draft=n_draft, **spec),  # type: ignore[arg-type]
            cache_dir=cache_dir,
            use_draft=draft is not None,
        )
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
