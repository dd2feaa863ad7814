"""Acceptance counts by draft position, and the rates :class:`~.adaptive.AdaptiveK` reads from them.

A proposal's position i + 1 is judged only where the draft offered it and tokens up to i
were accepted, so counts are kept per position and decayed. Two readings: per position,
each smoothed towards the one before it (:func:`smoothed`); or a run-length (geometric)
model, one rate for the first position and one pooled over all later ones
(:func:`run_lengths`), for a source whose proposals are copies. Pure Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass
class PositionCounts:
    """Decayed counts by draft position: offered/asked and accepted/reached."""

    asked: list[float] = field(default_factory=list)
    offered: list[float] = field(default_factory=list)
    reached: list[float] = field(default_factory=list)
    accepted: list[float] = field(default_factory=list)

    def grow(self, n: int) -> None:
        for lst in (self.asked, self.offered, self.reached, self.accepted):
            lst.extend([0.0] * (n - len(lst)))

    def decay(self, f: float) -> None:
        for lst in (self.asked, self.offered, self.reached, self.accepted):
            for i in range(len(lst)):
                lst[i] *= f

    def add(self, k: int, n_proposed: int, n_accepted: int, expected: Sequence[float | None] = ()) -> None:
        """One judged proposal; ``expected[i]``: the probability that position ``i + 1`` was
        accepted, counted instead of the outcome where known (the same mean, less noise)."""
        self.grow(k)
        for i in range(k):
            if n_proposed >= i:  # position i+1 was asked for, the draft had offered i
                self.asked[i] += 1
                if n_proposed > i:
                    self.offered[i] += 1
            if n_proposed > i and n_accepted >= i:  # position i+1 offered, tokens <= i accepted
                self.reached[i] += 1
                e = expected[i] if i < len(expected) else None
                self.accepted[i] += e if e is not None else float(n_accepted > i)


def run_lengths(
    num: Sequence[float],
    den: Sequence[float],
    n: int,
    first_prior: float,
    weight: float,
    later_prior: float | None = None,
) -> list[float]:
    """Conditional acceptance by position for a run-length (geometric) model: position 1
    (is the proposal right at all), with a prior of ``weight`` pseudo-counts at
    ``first_prior``, and one rate for every later position (does a run, once started, go
    on), pooled over all of them, with its prior at ``later_prior`` (default: the first
    position's rate).

    Per position, the deepest positions are seen only in the few longest proposals: one
    rejection there (a long n-gram copy that ran into an edit) set the rate of every
    position after it, which were then never tried, so proposals stayed at that length
    however long the copies ran.
    """
    x0, d0 = (num[0], den[0]) if num and den else (0.0, 0.0)
    first = (x0 + weight * first_prior) / (d0 + weight)
    prior = first if later_prior is None else later_prior
    later = (sum(num[1:]) + prior * weight) / (sum(den[1:]) + weight)
    return geometric(first, later, n)


def geometric(first: float, later: float, n: int) -> list[float]:
    """``[first, later, later, ...]``, ``n`` long: the run-length model's rates by position."""
    return ([first] + [later] * max(n - 1, 0))[:n]


def smoothed(num: Sequence[float], den: Sequence[float], n: int, first_prior: float, weight: float) -> list[float]:
    """Per-position rates with a prior of ``weight`` pseudo-counts at the previous position's rate."""
    out: list[float] = []
    prior = first_prior
    for i in range(n):
        d = den[i] if i < len(den) else 0.0
        x = num[i] if i < len(num) else 0.0
        rate = (x + weight * prior) / (d + weight)
        out.append(rate)
        prior = rate
    return out


# An n-gram source's acceptance is kept apart by how many tokens in a row it has just
# predicted right (0, 1-3, 4-11, 12+): a copy in progress goes on far more often than a
# match found in free text, and pooled counts let failed guesses in one reply hold back
# the copy in the next (it took six steps to go past k=7 on a 28-token copy). The run is
# also read from the context (``AdaptiveK.copying``): a copy the draft model began counts.
RUN_BUCKETS = (1, 4, 12)
RUN_PRIOR_WEIGHT = 2.0  # pseudo-counts of the shorter runs' rates in a bucket's estimate


def run_bucket(run: int) -> int:
    """The :data:`RUN_BUCKETS` index of a run of ``run`` tokens predicted right in a row."""
    return sum(run >= b for b in RUN_BUCKETS)
