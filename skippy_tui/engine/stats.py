"""Acceptance statistics, accumulated step by step (per reply or per session).

Definitions (the field's, with our choice stated where tools differ):

* acceptance rate = accepted draft tokens / drafted tokens;
* mean accepted length = accepted draft tokens per speculative step, *not*
  counting the bonus/correction token (vLLM's figure is this + 1);
* per-position acceptance = P(token i accepted | token i proposed);
* tokens/s = committed tokens / generation time (prefill excluded).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class AcceptanceStats:
    """Running totals. Feed each verified step to :meth:`add_step`."""

    n_steps: int = 0
    n_spec_steps: int = 0
    n_drafted: int = 0
    n_accepted: int = 0
    n_tokens: int = 0
    generation_ms: float = 0.0
    draft_ms: float = 0.0
    verify_ms: float = 0.0
    sync_ms: float = 0.0
    drafted_at: list[int] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)

    def add_step(
        self,
        n_proposed: int,
        n_accepted: int,
        n_committed: int,
        *,
        step_ms: float,
        sync_ms: float = 0.0,
        draft_ms: float = 0.0,
        verify_ms: float = 0.0,
    ) -> None:
        """Record one step: ``n_proposed`` drafted, ``n_accepted`` of them kept,
        ``n_committed`` tokens added to the reply (after stop truncation)."""
        self.n_steps += 1
        self.n_tokens += n_committed
        self.generation_ms += step_ms
        self.sync_ms += sync_ms
        self.draft_ms += draft_ms
        self.verify_ms += verify_ms
        if n_proposed <= 0:
            return
        self.n_spec_steps += 1
        self.n_drafted += n_proposed
        self.n_accepted += n_accepted
        while len(self.drafted_at) < n_proposed:
            self.drafted_at.append(0)
            self.accepted_at.append(0)
        for i in range(n_proposed):
            self.drafted_at[i] += 1
            if i < n_accepted:
                self.accepted_at[i] += 1

    def merge(self, other: AcceptanceStats) -> None:
        """Add another accumulator's totals into this one (reply → session)."""
        for name in ("n_steps", "n_spec_steps", "n_drafted", "n_accepted", "n_tokens"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        for name in ("generation_ms", "draft_ms", "verify_ms", "sync_ms"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        while len(self.drafted_at) < len(other.drafted_at):
            self.drafted_at.append(0)
            self.accepted_at.append(0)
        for i, (d, a) in enumerate(zip(other.drafted_at, other.accepted_at)):
            self.drafted_at[i] += d
            self.accepted_at[i] += a

    @property
    def acceptance_rate(self) -> float:
        return self.n_accepted / self.n_drafted if self.n_drafted else 0.0

    @property
    def mean_accepted_length(self) -> float:
        return self.n_accepted / self.n_spec_steps if self.n_spec_steps else 0.0

    @property
    def per_position(self) -> tuple[float, ...]:
        return tuple(a / d if d else 0.0 for a, d in zip(self.accepted_at, self.drafted_at))

    @property
    def tokens_per_second(self) -> float:
        return self.n_tokens * 1000.0 / self.generation_ms if self.generation_ms > 0 else 0.0
