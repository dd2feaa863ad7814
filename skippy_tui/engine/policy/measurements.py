"""What auto's cost model measures: recent medians (:class:`Recent`) and the target's verify
time by batch size with the machine's current slowdown (:class:`VerifyCosts`), shared by
the policies of every draft source. :mod:`.adaptive` turns them into expected rates."""

from __future__ import annotations

from collections import deque
from itertools import pairwise
from statistics import median

WINDOW = 9
"""Recent measurements kept per cost (their median is the estimate)."""


class Recent:
    """The median of the last ``n`` measurements (robust to scheduling spikes)."""

    __slots__ = ("_values",)

    def __init__(self, n: int = WINDOW) -> None:
        self._values: deque[float] = deque(maxlen=n)

    def add(self, value: float) -> None:
        self._values.append(float(value))

    def __len__(self) -> int:
        return len(self._values)

    @property
    def value(self) -> float | None:
        return median(self._values) if self._values else None


class VerifyCosts:
    """The target's verify time by batch size (``b = k + 1`` rows).

    Measured sizes use their recent median; others are interpolated linearly
    between the nearest measured sizes, or extrapolated with the slope of the
    last two (``prior_slope`` x the smallest measured cost per row when only one
    size is known). Shared by the policies of different draft sources: it is a
    property of the target and the machine.

    ``chunk``: the most rows one verify decode takes (exact verification splits a
    longer batch, :mod:`.exactness`), or ``None`` for one decode per batch. A size
    above it that was never measured costs what its chunks cost, each one a decode of
    its own: a line through the sizes up to it would price the extra decodes at one
    row's share each, and make long proposals look cheap.
    """

    def __init__(self, prior_slope: float = 0.1, chunk: int | None = None) -> None:
        self.prior_slope = prior_slope
        self.chunk = chunk
        self._by_size: dict[int, Recent] = {}
        # this step's verify time over the table's, recent steps of any policy: the table
        # holds times divided by it, so the policies sharing the table must share it too
        self.speed = Recent(5)
        # measured() as sorted points, until the next add: the chooser reads V(b) for
        # every k of every source each step (~40 reads), and each read pooled every median
        self._points: list[tuple[int, float]] | None = None
        self._cold: set[int] = set()  # sizes measured only by cold samples so far
        self._added = 0  # samples kept so far, any size: the clock of age()
        self._last: dict[int, int] = {}  # size -> _added at its newest sample

    def add(self, batch: int, ms: float, cold: bool = False) -> None:
        """One verify of ``batch`` rows that took ``ms`` (at slowdown 1).

        ``cold``: taken on a reply's first step, 10-20 % slow after the prompt's
        prefill. It stands in only while the size has no warm sample: the first warm
        one replaces it, and a cold one for a size measured warm is not kept. A policy
        that drafts takes few plain steps, so its one-row entry held three or four
        samples in a whole bench run, the warm-up's cold first step among them, and
        plain decoding was priced ~15 % dear.
        """
        r = self._by_size.get(batch)
        if cold and r is not None and batch not in self._cold:
            return
        if r is None or (batch in self._cold and not cold):
            r = self._by_size[batch] = Recent()
            self._cold.discard(batch)
            if cold:
                self._cold.add(batch)
        r.add(ms)
        self._added += 1
        self._last[batch] = self._added
        self._points = None

    def measured(self) -> dict[int, float]:
        """``{batch size: ms}`` for every measured size: the medians, made non-decreasing
        in the batch size (a batch never costs less than a smaller one; single noisy
        samples, e.g. the load-time probe's, would otherwise make some k look cheap).

        Pool-adjacent-violators over the medians, weighted by how many samples each holds.
        """
        blocks: list[list[float]] = []  # [mean ms, weight, number of sizes pooled]
        sizes = []
        for b, r in sorted(self._by_size.items()):
            if r.value is None:
                continue
            sizes.append(b)
            blocks.append([r.value, float(len(r)), 1])
            while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
                (v1, w1, n1), (v2, w2, n2) = blocks[-2], blocks.pop()
                blocks[-1] = [(v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, n1 + n2]
        values = [v for v, _, n in blocks for _ in range(n)]
        return dict(zip(sizes, values))

    @property
    def slowdown(self) -> float:
        """How much slower the machine runs now than the table's times (1.0 before any step)."""
        return self.speed.value or 1.0

    def points(self) -> list[tuple[int, float]]:
        """:meth:`measured` as ``(batch size, ms)`` pairs in size order (cached until the next add)."""
        if self._points is None:
            self._points = sorted(self.measured().items())
        return self._points

    def count(self, batch: int) -> int:
        r = self._by_size.get(batch)
        return len(r) if r is not None else 0

    @property
    def clock(self) -> int:
        """Samples kept so far, of any size."""
        return self._added

    def age(self, batch: int) -> int | None:
        """Samples of other sizes kept since ``batch``'s newest one (None: never measured)."""
        last = self._last.get(batch)
        return None if last is None else self._added - last

    def warm(self, batch: int) -> bool:
        """Whether ``batch`` has a warm sample (not only a reply's cold first step's)."""
        return batch in self._by_size and batch not in self._cold

    def at(self, batch: float) -> float | None:
        """Estimated ms for a (possibly fractional, expected) batch size; None before any data."""
        pts = self.points()
        if not pts:
            return None
        chunk = self.chunk
        if chunk is None or batch <= chunk:
            return self._line(self._within(pts), batch)
        lo, hi = int(batch), int(batch) + 1  # an expected size between two whole ones: between their costs
        v_lo, v_hi = self._whole(pts, lo), self._whole(pts, hi)
        return v_lo + (v_hi - v_lo) * (batch - lo)

    def _within(self, pts: list[tuple[int, float]]) -> list[tuple[int, float]]:
        """The points one decode measured (sizes up to :attr:`chunk`). Where only longer,
        chunked batches were measured (a fixed k verified row by row takes no plain step),
        a chunk's cost is their time over their decodes."""
        chunk = self.chunk
        if chunk is None:
            return pts
        single = [p for p in pts if p[0] <= chunk]
        if single:
            return single
        per_chunk = [v / -(-b // chunk) for b, v in pts]  # ceil(b / chunk) decodes each
        return [(chunk, sum(per_chunk) / len(per_chunk))]

    def _whole(self, pts: list[tuple[int, float]], batch: int) -> float:
        """A whole batch size's ms: measured, else one decode's up to :attr:`chunk`, else its chunks'."""
        for b, v in pts:
            if b == batch:
                return v
        chunk = self.chunk or batch
        single = self._within(pts)
        full, rest = divmod(batch, chunk)
        return full * self._line(single, chunk) + (self._line(single, rest) if rest else 0.0)

    def _line(self, pts: list[tuple[int, float]], batch: float) -> float:
        """Linear interpolation through ``pts``, extrapolated as :meth:`at` says."""
        if len(pts) == 1:
            # V(b) = c * (1 + prior_slope * (b - 1)) through the one measured point
            b0, v0 = pts[0]
            c = v0 / (1 + self.prior_slope * (b0 - 1))
            return c * (1 + self.prior_slope * (max(batch, 1.0) - 1))
        for (b0, v0), (b1, v1) in pairwise(pts):
            if b0 <= batch <= b1:
                return v0 + (v1 - v0) * (batch - b0) / (b1 - b0)
        if batch < pts[0][0]:
            (b0, v0), (b1, v1) = pts[0], pts[1]
        else:
            (b0, v0), (b1, v1) = pts[-2], pts[-1]
        slope = max((v1 - v0) / (b1 - b0), 0.0)
        return max(v0 + slope * (batch - b0), 0.5 * min(v0, v1))
