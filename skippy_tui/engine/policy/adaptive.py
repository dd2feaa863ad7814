"""Adaptive draft length: pick each step's k to maximise expected tokens per second.

The policy measures, online, what a step costs and what it yields, and each step
chooses the ``k`` in ``0..k_max`` with the highest expected rate — ``k = 0``
(plain decoding) included, so speculation that cannot pay is switched off.

Cost model: :mod:`.cost_model` (``E(k)``, ``T(k)``); the policy measures each of its
terms, in ms, as the median of its most recent measurements:

* ``o``: per-step overhead outside sync/draft/verify (commit loop, events);
* ``r``: what a rejection adds to its step (removing the rejected positions
  from the target's KV cache, the panel's top-k lists) — not charged to plain
  steps, which never roll back;
* ``s``: the draft's steady sync, of a step that follows one it drafted: after a
  rejection a truncate, after a proposal taken whole a one-token extend, kept apart
  (``s`` and ``w``, charged through ``A(k)``: :mod:`~.cost_model`; a drafter that folds
  that token into its next first call pays ``w`` there, so its first calls are kept
  apart the same way, one row or two), plus ``C(b) / H``:
* ``C(b)``: the catch-up, what syncing a draft ``b`` tokens behind costs more
  than ``s`` (``b`` grows with every step it did not draft: plain steps, or
  the other source's). Measured by prefill length like ``V`` (a catch-up short
  enough to fold into the first draft call is timed there, and kept out of the
  steady first call's median); before that,
  ``s`` scaled by the target's relative cost per extra row. Spread over ``H``
  steps, how many the source recently drafted in a row after a catch-up
  (``catchup_horizon`` until measured): a model kept for long after a switch
  pays it once, one used for a step or two between n-gram copies pays it each
  time; a probe's one step is charged all of it (see below);
* ``c_1``, ``c_d``: timed call by call when the source times them (a model's
  first decode after a sync runs colder; ``c_1 = c_d`` otherwise, ~0 for n-gram);
* ``V(b)``: measured per ``b`` and interpolated piecewise-linearly between
  measured sizes (:class:`~.measurements.VerifyCosts`, shared by the sources);
* all of them rescaled by the machine's current *slowdown* (this step's
  verify time over the table's), so a load spike or its end on a shared
  machine does not leave the draft's costs stale; the draft's own speed need
  not follow the target's, so a plain streak re-measures it once the slowdown
  has moved :data:`REMEASURE_SPEED` from where it was last measured;
* ``q_j``, ``a_j``: from decayed counts by position, so they follow the current
  text; an unmeasured position borrows the estimate of the one before it. A draft
  model's ``a_j`` are then calibrated by its whole proposals' rejections: each
  ``1 - a_j`` is scaled by the rejections seen over those the counts expected
  (:attr:`AdaptiveK.calibration`), so a cluster of rejections (a reply's first
  tokens, an edit) weighs on the estimates for fewer steps than the counts hold it.

The chosen k maximises ``E(k) / T(k)`` (:class:`~.chooser.SourceChooser` then weighs the
sources' steps and plain decoding against the reply's going rate: :func:`~.cost_model.net_gains`).
Every ``probe_every`` steps (the gap
doubling up to ``probe_max`` while the verdict — speculate or not — holds and
the alternative is expected to be clearly worse, < ``CLOSE`` of the best) one
step probes an alternative instead: the best speculative k when plain decoding wins (so the
policy notices when speculation starts to pay), otherwise alternately plain
decoding and ``best + 1``; and while speculation wins, a plain step whenever the one-row
verify (plain decoding's price) was last timed :data:`PLAIN_STALE` samples ago. After a
plain streak a probe first pays the draft's catch-up, which grows with the streak: it is
judged "close" with all of it charged, and it waits until its expected extra cost fits
:data:`PROBE_BUDGET` of the streak's time, so near break-even, where it would cost more
than it can find, it stops (a new reply starts with the draft synced and, where plain decoding is
the verdict, probes at once: :meth:`AdaptiveK.new_reply`). A probe whose own step beat
plain decoding's expected rate (its catch-up aside) leaves the draft synced: the next step
probes again, twice as long when it was taken whole. The warm-up's two steps count as
such probes, so a draft that is right from the start is not left to the prior-heavy counts
of two steps and a probe a streak later.
Where speculation wins, :data:`CLIMB_AFTER` proposals taken whole in a row let the next
step draft one token more than the last (and the next, while they are taken whole and the
longer k is estimated close to the best): the positions past the chosen k are otherwise
judged by an earlier text's counts.

The policy is pure Python (no model, no clock): feed it :meth:`AdaptiveK.observe`
and ask :meth:`AdaptiveK.choose`, which makes it table-testable with synthetic
costs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Protocol

from .acceptance_counts import (
    RUN_BUCKETS,
    RUN_PRIOR_WEIGHT,
    PositionCounts,
    geometric,
    run_bucket,
    run_lengths,
    smoothed,
)
from .cost_model import Costs, best_k, expected_rates, expected_step_ms, expected_steps, expected_tokens
from .measurements import Recent, VerifyCosts

CLOSE = 0.9
"""A probed alternative expected within this fraction of the best keeps probes frequent."""

PROBE_BUDGET = 0.02
"""What a probe that must first catch the draft up may cost: at most this fraction of the
time the tokens since the draft last drafted took (its extra ms over the best option's
for the same tokens). The catch-up grows with those tokens, so near break-even, where
every probe pays it, probes wait (or stop) instead of costing more than they can find."""

EVIDENCE = 8
"""Drafted steps before the verdict is trusted: until then a policy's probes neither wait
for :data:`PROBE_BUDGET` nor back off, and the chooser's explores may spend 4 x it (one
unlucky warm-up step must not switch a good draft off for the rest of the reply)."""

CLIMB_AFTER = 2
"""Proposals taken whole in a row at the chosen k (or above) after which the next step drafts
one token more than the last. Positions past the chosen k get no new evidence, so their
estimates are an earlier text's for dozens of steps (the counts decay 0.98 a step): a reply
the draft suits, after one it suited less, would stay at the earlier text's k. A climb is a
step of one more draft call, taken only while its k is estimated within :data:`CLOSE` of the
best; where the text is as the counts say it stops at the first rejection."""

REMEASURE_SPEED = 1.15
"""How far the slowdown (the target's speed) may move from its value when the draft was last
measured before a plain streak measures the draft again. Scaling the draft's costs by the
target's slowdown assumes both move together; on a 2-core AMD VM they moved apart: between
phases the target's plain step went from 19.5 to 15.8 ms while the draft's k=8 step went from
about 118 to 140 ms (plain 49-52 tokens/s against the draft model's 67-69 in one phase, 61
against 56-58 in the other). At 2x (the first threshold) a policy that had turned to plain
steps in the fast phase kept the draft's costs scaled by the target's slowdown once it ended,
so the draft looked 1.23x dearer just when it had got cheaper, and only rare probes could
move its median costs back. Plain steps alone vary ~5 % step to step."""


CALIBRATION_RANGE = (0.25, 4.0)
"""Bounds of :attr:`AdaptiveK.calibration`, the factor on a draft model's rejection rates.

Per-position counts decayed 0.98 a drafted step expected 1.6-1.9x the rejections the
draft model's whole proposals met on greedy code (six traced bench sequences, 14-53
steps each): its rejections come in clusters, at each reply's first tokens and at a few
hard spots, and the counts hold a cluster's weight for ~50 drafted steps after it. Its
expected tokens a step ran 3-9 % under the realised (calibrated: within 4 %), which near
break-even chose plain decoding where k = 8 made 1.16x plain. On a steady source the
ratio stays at 1 (simulated, i.i.d. acceptance 0.6-0.99: E(8) within 0.5 % of the true
value, the raw counts up to 1.6 % under it); after a change of text it follows in about
half the steps the counts take."""


PLAIN_STALE = 32
"""Verify samples of other sizes after which, while speculation wins, a plain step measures
plain decoding again. Plain decoding is priced by the one-row verify's median; a policy that
drafts takes plain steps only as probes, backed off while plain is clearly worse, so in a
whole bench run (warm-up and three replies of 128 tokens) the default's one-row entry held
three or four samples, each scaled by a slowdown that the nine-row verifies set: plain was
priced dearer than its own steps took, and the reply drafted where plain decoding won. One
plain step in 32 costs little of a step's time even where the draft wins."""


class KPolicy(Protocol):
    """How one draft source's steps choose their proposal length k.

    Satisfied by :class:`FixedK` (``n_draft = K``) and :class:`AdaptiveK`
    (``n_draft = "auto"``). :class:`~.chooser.SourceChooser` (``source = "auto"``) also
    chooses the source, so it has its own signature.
    """

    def choose(self, k_max: int, behind: int = 0) -> tuple[int, str]:
        """This step's ``k`` in ``0..k_max`` (``k_max >= 1``: what fits) and why, for the panel.

        ``behind``: tokens the draft's cache lacks now (its catch-up prefill if it drafts).
        """
        ...


class FixedK:
    """``n_draft = K``: every step asks for the longest proposal that fits (``k_max``,
    which the speculator already clamps to K, the context window and ``max_tokens``)."""

    __slots__ = ()

    def choose(self, k_max: int, behind: int = 0) -> tuple[int, str]:
        return k_max, "fixed"


class AdaptiveK:
    """A :class:`KPolicy` for ``n_draft = "auto"``, and the per-source estimator of
    :class:`~skippy_tui.engine.speculator.Speculator` (the status bar's verdict).

    ``choose(k_max) -> (k, reason)`` and ``observe(...)`` after every step.
    """

    def __init__(
        self,
        verify: VerifyCosts | None = None,
        probe_every: int = 16,
        probe_max: int = 128,
        decay: float = 0.98,
        warmup_k: int = 4,
        catchup_horizon: float = 4.0,
        runs: bool = False,
        draft_prior_ms: float | None = None,
        climb_after: int = CLIMB_AFTER,
    ) -> None:
        self.verify = verify if verify is not None else VerifyCosts()
        self.probe_every = probe_every
        self.probe_max = probe_max
        self.decay = decay
        self.warmup_k = warmup_k
        self.catchup_horizon = catchup_horizon
        # the source copies spans (n-gram): acceptance by position is a run-length model
        self.runs = runs
        # ms a draft call is taken to cost until measured (an n-gram lookup: ~0); None: unknown
        self.draft_prior_ms = draft_prior_ms
        self.climb_after = climb_after
        self.streaks = Recent()  # drafted steps in a row after a catch-up, the last ones ended
        self._streak = 0
        self.draft_call = Recent()  # ms per call, the step's draft time over its calls
        self.draft_first = Recent()  # ms of a proposal's first call, when timed one by one
        self.draft_first_fold = Recent()  # ... of those that also decoded a folded token (a whole proposal's last)
        self.draft_next = Recent()  # ms of each later call (the mean over a step's)
        self.prefill = VerifyCosts()  # the draft's sync ms by tokens prefilled
        self.sync = Recent()  # every steady sync (none behind, or the one token a whole proposal left)
        self.sync_none = Recent()  # ... of them, those that decoded nothing (after a rejection: a truncate)
        self.sync_one = Recent()  # ... and those that decoded one token (after a proposal taken whole)
        self.overhead = Recent()
        self.rollback = Recent()
        self._forget_acceptance()
        self._interval = probe_every
        self._since_probe = 0
        self._probe_toggle = False
        # plain's expected tokens/s when this policy last probed the draft against a plain
        # verdict, and whether that probe's own step beat it (see choose: probes in a row)
        self._probe_plain: float | None = None
        self._probe_won = False
        self._probe_min_k = 0  # ... and the next such probe's least k: twice one taken whole
        # verify.clock when this policy last re-measured plain (samples before it existed, the
        # load-time probe's seeds among them, are no staleness it saw)
        self._plain_asked = self.verify.clock
        self._last_best: int | None = None
        self._prev_k = 0
        self._whole = 0  # drafted steps in a row whose proposal, k tokens long, was taken whole
        self._spec_steps = 0  # drafted steps judged: the acceptance's evidence (trust)
        self._cost_steps = 0  # drafted steps since the draft's costs were last forgotten
        self.last_rates: list[float] = []
        # the slowdown at each of the draft's recorded cost samples: its median is the speed
        # they describe (one probe after a speed change leaves the median where it was)
        self._draft_speeds = Recent()

    # -- what it has measured ---------------------------------------------------------

    def reset_draft(self) -> None:
        """Forget draft-side measurements (another draft source); verify costs stay."""
        self._forget_draft_costs()
        self._forget_acceptance()
        self._spec_steps, self._cost_steps, self._interval, self._since_probe = 0, 0, self.probe_every, 0
        self._whole = 0

    def _forget_acceptance(self) -> None:
        self.counts = PositionCounts()
        # whole proposals' rejections (decayed like the counts, one pseudo-step each):
        # [seen, expected by the counts before each step] (see calibration)
        self._rejections = [1.0, 1.0]
        self._forget_runs()

    def _forget_runs(self) -> None:
        self.by_run = [PositionCounts() for _ in range(len(RUN_BUCKETS) + 1)]  # runs only: counts by run bucket
        self.run = 0  # tokens this source predicted right in a row, up to now

    def _forget_draft_costs(self) -> None:
        self.draft_call, self.draft_first, self.draft_next, self.sync = Recent(), Recent(), Recent(), Recent()
        self.draft_first_fold = Recent()
        self.sync_none, self.sync_one = Recent(), Recent()
        self._draft_speeds = Recent()
        self.prefill = VerifyCosts()

    def observe(
        self,
        *,
        k: int,
        n_proposed: int,
        n_accepted: int,
        sync_ms: float = 0.0,
        draft_ms: float = 0.0,
        verify_ms: float = 0.0,
        step_ms: float | None = None,
        rollback_ms: float = 0.0,
        sync_tokens: int | None = None,
        folded_tokens: int = 0,
        draft_calls_ms: Sequence[float] = (),
        cold: bool = False,
        expected: Sequence[float | None] = (),
        **_: object,
    ) -> None:
        """Record one finished step (``k`` asked for, ``n_proposed`` offered, ``n_accepted`` kept).

        Times in ms; ``step_ms`` is the whole step, ``rollback_ms`` the part of it a
        rejection added (0 for a step that rejected nothing). ``sync_tokens``: what
        the draft's sync prefilled (None: unknown; then only a sync right after a
        drafted step counts as steady). ``folded_tokens``: what the sync left to the
        first draft call instead (more than one: a catch-up). ``draft_calls_ms``: each
        draft decode's ms, when the source times them (the first call is modelled
        apart). ``cold``: the reply's first step, which runs after the prompt's prefill
        (10-20 % slower than the steps after it): its times are kept only for what was
        never measured.
        ``expected``: each judged position's probability of acceptance, when the
        sampler knows it (:attr:`~..sampling.verify.Verdict.expected`), counted instead of the outcome.
        """
        ms = step_ms if step_ms is not None else sync_ms + draft_ms + verify_ms + rollback_ms
        plain, self._probe_plain = self._probe_plain, None
        folded = folded_tokens > 1  # a catch-up decoded in the first draft call
        catch_up = folded or (sync_tokens is not None and sync_tokens > 1)  # after steps this source did not draft
        fold_ms = self._folded_ms(draft_calls_ms) if folded else 0.0  # the catch-up's part of the first call
        # a probe is judged without its catch-up: that was the plain streak's debt, and the
        # probe that follows a won one starts synced and does not pay it again
        judged = ms - (fold_ms if folded else sync_ms) if catch_up else ms
        self._probe_won = k > 0 and plain is not None and judged > 0 and 1000.0 * (n_accepted + 1) / judged > plain
        self._probe_min_k = 2 * k if self._probe_won and n_accepted >= k else 0
        batch = n_proposed + 1
        # only a size measured before says how fast the machine runs now: an interpolated or
        # extrapolated one is off by the table's shape (the prior slope), and that error,
        # taken for a slowdown, would rescale every cost, plain steps' included, for good
        table_ms = self.verify.at(batch) if self.verify.count(batch) else None
        if cold and table_ms and (k == 0 or self.draft_call.value is not None):
            # when drafting wins, a reply's plain steps are mostly its first (probes wait for
            # a synced draft): cold samples would make plain decoding look dearer than it is
            self._count_step(k, n_proposed, n_accepted, expected)
            return
        # nor does a cold stand-in (the warm sample that replaces it would be stored on its scale)
        if table_ms and self.verify.warm(batch):
            self.verify.speed.add(min(max(verify_ms / table_ms, 1e-3), 1e3))
        f = self.slowdown
        self.verify.add(batch, verify_ms / f, cold=cold)
        if step_ms is not None:
            self.overhead.add(max(step_ms - sync_ms - draft_ms - verify_ms - rollback_ms, 0.0) / f)
        if n_accepted < n_proposed:
            self.rollback.add(rollback_ms / f)
        if k > 0:
            self._draft_speeds.add(f)
            sample = (draft_ms - fold_ms) / max(1, min(k, n_proposed + 1)) / f
            if (est := self.draft_call.value) is not None and sample < 0.5 * est:
                # the draft runs at under half its recorded cost: whatever slowed the earlier
                # samples (a load spike, first-touch paging) is over, and a median of them would
                # keep auto on plain steps for many probes; its sync is a draft decode too
                self._forget_draft_costs()
            self.draft_call.add(sample)
            if draft_calls_ms and not folded:  # a folded catch-up's first call is no steady one
                # two rows after a proposal taken whole, one after a rejection: kept apart (w)
                (self.draft_first_fold if folded_tokens else self.draft_first).add(draft_calls_ms[0] / f)
                if len(draft_calls_ms) > 1:
                    self.draft_next.add(sum(draft_calls_ms[1:]) / (len(draft_calls_ms) - 1) / f)
            if sync_tokens:
                self.prefill.add(sync_tokens, sync_ms / f)
            if catch_up:  # the last streak ended
                if self._streak:
                    self.streaks.add(self._streak)
                self._streak = 0
            self._streak += 1
            # the steady sync: a catch-up after steps this source did not draft is C(b), not s
            if not catch_up and (sync_tokens is not None or self._prev_k > 0):
                self.sync.add(sync_ms / f)
                if sync_tokens is not None:
                    (self.sync_one if sync_tokens else self.sync_none).add(sync_ms / f)
        self._count_step(k, n_proposed, n_accepted, expected)

    def _folded_ms(self, draft_calls_ms: Sequence[float]) -> float:
        """What a folded catch-up added to the first draft call (ms): that call over a
        steady first call (0 before one is measured)."""
        if not draft_calls_ms:
            return 0.0
        steady = self.draft_first_fold.value
        if steady is None:
            steady = self.draft_first.value
        return max(draft_calls_ms[0] - steady * self.slowdown, 0.0) if steady is not None else 0.0

    def _count_step(self, k: int, n_proposed: int, n_accepted: int, expected: Sequence[float | None] = ()) -> None:
        """What every observed step adds, its times aside: a drafted step's acceptance."""
        if k > 0:
            self._spec_steps += 1
            self._cost_steps += 1
            if not self.runs and n_proposed == k:  # a proposal cut short says less of position k
                p = 1.0 - math.prod(self.counted(k))  # what the counts expected of it, before they count it
                seen, expected_rejections = self._rejections
                self._rejections = [seen * self.decay + (n_accepted < k), expected_rejections * self.decay + p]
            self._count(k, n_proposed, n_accepted, expected)
        self._whole = self._whole + 1 if 0 < k <= n_accepted else 0  # taken whole, as a won probe's
        self._prev_k = k

    def _count(self, k: int, n_proposed: int, n_accepted: int, expected: Sequence[float | None] = ()) -> None:
        """Add one judged proposal to the decayed acceptance counts (and, for a source that
        copies spans, to its run bucket's, then extend or end the run)."""
        self.counts.decay(self.decay)
        self.counts.add(k, n_proposed, n_accepted, expected)
        if not self.runs:
            return
        for c in self.by_run:
            c.decay(self.decay)
        self.by_run[run_bucket(self.run)].add(k, n_proposed, n_accepted, expected)
        # a step that found no match (``source = "ngram"`` with nothing to copy) ends the run too
        self.run = self.run + n_accepted if 0 < n_proposed <= n_accepted else 0

    def new_reply(self) -> None:
        """A reply starts: its text is new, the counts are the last text's. The run of right
        tokens ends, and where plain decoding is the verdict a probe is due at once: the
        prompt's prefill synced the draft, so this probe pays no catch-up (later in the
        reply one waits on it, see :data:`PROBE_BUDGET`)."""
        self.run_broken()
        if self._last_best == 0:
            self._since_probe = max(self._since_probe, self._interval)

    def run_broken(self) -> None:
        """The source's run of right tokens ends: it has nothing to propose here (no match),
        or a new reply starts (its context is no longer the one the run was copying)."""
        self.run = 0

    def copying(self, run: int) -> None:
        """The context's end already copies an earlier span: ``run`` tokens in a row that
        this source would have predicted right, whoever drafted them (a copy the draft
        model or plain steps began is a copy all the same). The run is at least that."""
        self.run = max(self.run, run)

    def observe_acceptance(self, n_offered: int, n_accepted: int) -> None:
        """Acceptance seen without a step of this source: ``n_offered`` tokens it would
        have proposed were checked against the committed ones, the first ``n_accepted``
        matched (an n-gram proposal costs nothing to compute, so it is judged every step)."""
        if n_offered > 0:
            self._count(n_offered, n_offered, n_accepted)

    @property
    def trusted(self) -> bool:
        """Whether :data:`EVIDENCE` drafted steps back the verdict (before that it is mostly prior)."""
        return self._spec_steps >= EVIDENCE

    @property
    def judged(self) -> bool:
        """Whether any proposal of this source has been judged (its steps', or offers
        judged on other steps: :meth:`observe_acceptance`)."""
        return sum(self.counts.reached) > 0

    @property
    def measured(self) -> bool:
        """True once the draft's cost has been measured (past the warm-up steps)."""
        return self._cost_steps >= 2

    def acceptance(self, n: int, run: int | None = None) -> list[float]:
        """Estimated conditional acceptance ``a_1..a_n``: a run-length model for a source that
        copies spans (:func:`~.acceptance_counts.run_lengths`; ``run``: judged that far into a copy instead of
        the current :attr:`run`), else the counts by position (:meth:`counted`) with each
        ``1 - a_j`` scaled by :attr:`calibration`."""
        c = self.counts
        if not self.runs:
            rho = self.calibration
            return [min(max(1.0 - rho * (1.0 - a), 0.0), 1.0) for a in self.counted(n)]
        # pooled rates are bucket 0's prior, each bucket's rates the next one's: a bucket
        # not seen yet is judged like the shorter runs before it, not like all matches
        first, later = run_lengths(c.accepted, c.reached, 2, 0.5, 1.0)
        for b in self.by_run[: run_bucket(self.run if run is None else run) + 1]:
            first, later = run_lengths(b.accepted, b.reached, 2, first, RUN_PRIOR_WEIGHT, later_prior=later)
        return geometric(first, later, n)

    def counted(self, n: int) -> list[float]:
        """``a_1..a_n`` as the decayed counts by position say, before :attr:`calibration`
        (a prior of one count at 0.5 for position 1, each later one at the one before it)."""
        c = self.counts
        return smoothed(c.accepted, c.reached, n, 0.5, 1.0)

    @property
    def calibration(self) -> float:
        """The factor on each ``1 - a_j`` of a draft model (not a copying source): whole
        proposals' rejections seen over those the counts expected before each step, both
        decayed like the counts, from one pseudo-step each; within :data:`CALIBRATION_RANGE`.

        A copying source (n-gram) has its offers judged on every step, whoever drafted it
        (:meth:`observe_acceptance`), so its counts follow the text without it."""
        seen, expected = self._rejections
        lo, hi = CALIBRATION_RANGE
        return min(max(seen / expected, lo), hi)

    def offer(self, n: int) -> list[float]:
        """Estimated ``q_1..q_n``: the draft offers position ``j`` once it offered ``j - 1``."""
        c = self.counts
        return smoothed(c.offered, c.asked, n, 1.0, 1.0)

    @property
    def slowdown(self) -> float:
        """How much slower the machine runs now than when the costs were measured.

        Every cost is stored divided by the slowdown at the time it was measured
        and multiplied by the current one when used. The target's verify runs
        every step, so a load spike on a shared machine (or its end) rescales the
        draft's costs too, which are otherwise measured only while speculating.
        It is the shared verify table's (:attr:`VerifyCosts.slowdown`), as the policies
        of every draft source store their samples in that table.
        """
        return self.verify.slowdown

    @property
    def _draft_slowdown(self) -> float:
        """The slowdown the draft's recorded costs were measured at (1.0 before any)."""
        return self._draft_speeds.value or 1.0

    def _row_slope(self) -> float:
        """The target's extra cost per verify row relative to one row (prior for the draft's prefill)."""
        pts = self.verify.points()
        if len(pts) < 2 or pts[0][1] <= 0:
            return self.verify.prior_slope
        (b0, v0), (b1, v1) = pts[0], pts[-1]
        return min(max((v1 - v0) / ((b1 - b0) * v0), 0.02), 1.0)

    @property
    def horizon(self) -> float:
        """Drafted steps a catch-up is spread over: how many in a row followed the recent
        catch-ups (a model between n-gram copies drafts one or two), ``catchup_horizon``
        before any streak ended."""
        h = self.streaks.value
        return min(max(h, 1.0), 4 * self.catchup_horizon) if h is not None else self.catchup_horizon

    def catchup_ms(self, behind: int) -> float:
        """``C(b)``: ms (at slowdown 1) a sync of ``behind`` tokens costs over a steady one-token sync."""
        if behind <= 1:
            return 0.0
        self.prefill.prior_slope = self._row_slope()
        one = self.prefill.at(1)
        if one is not None:
            return max((self.prefill.at(behind) or 0.0) - one, 0.0)
        base = self.sync.value or self.draft_first.value or self.draft_call.value
        return base * self.prefill.prior_slope * (behind - 1) if base else 0.0

    def costs(self, k_max: int, behind: int = 0, horizon: float | None = None) -> Costs | None:
        """The current cost estimates (ms at the current slowdown), or None while something is unmeasured.

        ``behind``: tokens the draft must catch up on before it drafts; its
        catch-up is spread over ``horizon`` steps (default :attr:`horizon`).
        """
        d = self.draft_call.value if self.draft_call.value is not None else self.draft_prior_ms
        if d is None or self.verify.at(1) is None:
            return None
        f = self.slowdown
        # the two first-call medians, each read once (costs() runs several times a step)
        one_row, two_rows = self.draft_first.value, self.draft_first_fold.value
        first, per_call = (one_row if one_row is not None else two_rows), d
        if first is not None:
            per_call = self.draft_next.value if self.draft_next.value is not None else first
        s = self.sync.value if self.sync.value is not None else (first or d)
        whole = 0.0
        if self.sync_none.value is not None and self.sync_one.value is not None:
            # steady syncs come in two kinds, and their median is whichever kind the recent
            # steps' k made the more common: ~0 ms after a rejection, a draft decode after a
            # proposal taken whole. Each step is charged its own mix (Costs.sync_whole).
            s, whole = self.sync_none.value, max(self.sync_one.value - self.sync_none.value, 0.0)
        elif one_row is not None and two_rows is not None:
            # a drafter that folds that token into the next first call: w is that call's second row
            whole = max(two_rows - one_row, 0.0)
        s += self.catchup_ms(behind) / max(horizon or self.horizon, 1.0)
        return dataclasses.replace(
            self._target_costs(k_max),
            draft_per_call=per_call * f,
            sync=s * f,
            draft_first=first * f if first is not None else None,
            sync_whole=whole * f,
        )

    def _target_costs(self, k_max: int) -> Costs:
        """The target's side of :meth:`costs` (verify by batch size up to ``k_max + 1``, the
        step's overhead, the rollback) at the current slowdown, no draft: enough for T(0)."""
        f = self.slowdown
        verify = [(self.verify.at(b) or 0.0) * f for b in range(1, k_max + 2)]
        return Costs(verify, 0.0, overhead=(self.overhead.value or 0.0) * f, rollback=(self.rollback.value or 0.0) * f)

    def rates(
        self, k_max: int, behind: int = 0, horizon: float | None = None, run: int | None = None
    ) -> list[float] | None:
        """Expected tokens/s for k = 0..k_max, or None before warm-up data exists (``behind``,
        ``horizon``: see :meth:`costs`; ``run``: see :meth:`acceptance`)."""
        costs = self.costs(k_max, behind, horizon)
        if costs is None:
            return None
        return expected_rates(k_max, self.acceptance(k_max, run), costs, self.offer(k_max))

    def steps(self, k_max: int, behind: int = 0) -> tuple[list[float], list[float]] | None:
        """``(E(k), T(k))`` for k = 0..k_max (tokens, ms), or None before warm-up data exists."""
        costs = self.costs(k_max, behind)
        if costs is None:
            return None
        return expected_steps(k_max, self.acceptance(k_max), costs, self.offer(k_max))

    def speedup(self, k: int, k_max: int) -> float | None:
        """Expected rate at ``k`` relative to plain decoding (the status bar's verdict)."""
        r = self.rates(max(k, k_max, 1))
        return r[k] / r[0] if r and r[0] > 0 else None

    # -- choosing -------------------------------------------------------------------

    def choose(self, k_max: int, behind: int = 0, rates: list[float] | None = None) -> tuple[int, str]:
        """This step's k in ``0..k_max`` and why (expected tokens/s of the alternatives).

        ``behind``: tokens the draft's cache lacks now (see :meth:`costs`); ``rates``:
        :meth:`rates` for the same arguments when the caller has them already.
        """
        if self.verify.count(1) == 0:
            return 0, "auto: measuring plain step"
        if self._cost_steps < 2:
            # the warm-up's steps are probes against the plain step just measured: one that
            # wins starts a chain of probes (below) before the counts, mostly prior after
            # two steps, can say a draft pays
            self._probe_plain = 1000.0 / expected_step_ms(0, self._target_costs(0))
            return min(self.warmup_k, k_max), "auto: measuring draft"
        rates = rates if rates is not None else self.rates(k_max, behind)
        assert rates is not None
        if self._prev_k == 0 and self._remeasure_due(k_max, behind, rates[0]):
            # the machine's speed changed since the draft was measured (a load spike began
            # or ended): its cost relative to the target may have too, so measure it again
            speed = self._draft_slowdown / self.slowdown
            # only the costs: the acceptance counts, and the trust they earned, stay (an
            # untrusted policy probes every probe_every steps whatever the catch-up costs)
            self._forget_draft_costs()
            self._cost_steps = 0
            self._interval, self._since_probe = self.probe_every, 0
            return min(self.warmup_k, k_max), f"auto: re-measuring draft (target speed x{speed:.2f} since)"
        self.last_rates = rates
        best = best_k(rates)
        if self._last_best is None or (best == 0) != (self._last_best == 0):
            # the verdict flipped (speculate or not): probe often again until it settles
            self._interval, self._since_probe = self.probe_every, 0
        self._last_best = best
        self._since_probe += 1
        if (
            best > 0
            and (age := self.verify.age(1) or 0) >= PLAIN_STALE
            and self.verify.clock - self._plain_asked >= PLAIN_STALE
        ):
            # the next scheduled probe is best + 1: this step already measures plain decoding
            # (asked once per PLAIN_STALE samples: a reply's cold first step adds none)
            self._probe_toggle, self._plain_asked = True, self.verify.clock
            return 0, (
                f"auto: k=0 re-measures plain (timed {age} verifies ago; "
                f"est plain {rates[0]:.1f} tok/s, k={best} {rates[best]:.1f})"
            )
        if best == 0 and self._probe_won and behind <= 1 and k_max >= 1 and self._since_probe < self._interval:
            # the last probe's own step beat plain decoding's expected rate and left the draft
            # synced: the next probe pays no catch-up, and a run of them learns a text the
            # draft suits (a new reply's, see new_reply) where the counts are the last text's.
            # A probe taken whole says nothing of the positions past it, where a draft that
            # costs over half a plain step must be right to pay (k = 1 or 2 cannot win there
            # at any acceptance): the next one doubles its k, to learn them.
            probe = max(best_k(rates[1:]) + 1, min(k_max, self._probe_min_k))
            self._since_probe, self._probe_plain = 0, rates[0]
            return probe, f"auto: probe k={probe} est {rates[probe]:.1f} tok/s (best k=0 {rates[0]:.1f}; the last won)"
        if self._since_probe >= self._interval and k_max >= 1:
            if best == 0:
                probe = best_k(rates[1:]) + 1
                # until EVIDENCE drafted steps back the verdict it is mostly prior and one
                # unlucky rejection (a sampled reply's first warm-up step) would end the
                # probes for the rest of the reply: they go on, catch-up and all
                if self.trusted and not self.affordable(k_max, probe, behind, rates[0]):
                    return 0, f"auto: k=0 est {rates[0]:.1f} tok/s (probe waits: draft {behind} behind)"
            else:
                self._probe_toggle = not self._probe_toggle
                probe = 0 if self._probe_toggle or best == k_max else best + 1
            self._since_probe = 0
            self._probe_plain = rates[0] if best == 0 and probe > 0 else None
            # back off only from clearly worse alternatives: near break-even the
            # estimates are noisy and a wrong verdict costs more than a probe step, but
            # a probe after a plain streak pays the whole catch-up, so it is judged with it
            judged = self.rates(k_max, behind, 1.0) if probe > 0 and behind > 1 else rates
            # while little is drafted the acceptance is mostly prior: "close" is wider then
            near = CLOSE if self.trusted else 0.5
            close = judged is not None and judged[probe] >= near * rates[best]
            # nor back off before the verdict is trusted (see above)
            self._interval = self.probe_every if close or not self.trusted else min(self._interval * 2, self.probe_max)
            return probe, f"auto: probe k={probe} est {rates[probe]:.1f} tok/s (best k={best} {rates[best]:.1f})"
        k = self._prev_k + 1
        if 0 < best < k <= k_max and self._whole >= self.climb_after and rates[k] >= CLOSE * rates[best]:
            # the last proposals were taken whole: learn the positions past them (CLIMB_AFTER)
            return k, f"auto: k={k} climbs (the last {self._whole} taken whole; est k={best} {rates[best]:.1f} tok/s)"
        return best, f"auto: k={best} est {rates[best]:.1f} tok/s (" + _alternatives(rates, best) + ")"

    def _remeasure_due(self, k_max: int, behind: int, plain_rate: float) -> bool:
        """Whether a plain streak (``plain_rate`` tok/s) should measure the draft again: the
        slowdown has moved :data:`REMEASURE_SPEED` either way since the draft was last
        measured, and the measuring step's catch-up fits :data:`PROBE_BUDGET`. Never for a
        source with a known draft cost (``draft_prior_ms``: an n-gram lookup costs ~0.01 ms
        at any speed; its measuring steps would only cut its proposals to ``warmup_k``)."""
        if self.draft_prior_ms is not None:
            return False
        moved = self.slowdown / self._draft_slowdown
        if 1.0 / REMEASURE_SPEED <= moved <= REMEASURE_SPEED:
            return False
        return self.affordable(k_max, min(self.warmup_k, k_max), behind, plain_rate)

    def affordable(self, k_max: int, k: int, behind: int, best_rate: float) -> bool:
        """Whether a step at ``k`` (a probe or an exploring step), which first catches the
        draft up on ``behind`` tokens, fits :data:`PROBE_BUDGET` against ``best_rate`` tok/s."""
        if k <= 0 or behind <= 1 or best_rate <= 0:
            return True
        one_off = self.rates(k_max, behind, 1.0)
        if one_off is None or one_off[k] <= 0:
            return True
        tokens = expected_tokens(k, self.acceptance(k), self.offer(k))
        extra_ms = 1000.0 * tokens * (1.0 / one_off[k] - 1.0 / best_rate)
        budget = PROBE_BUDGET * (1 if self.trusted else 4)
        return extra_ms <= budget * behind * 1000.0 / best_rate


def _alternatives(rates: Sequence[float], best: int) -> str:
    shown = sorted({0, max(best - 1, 0), min(best + 1, len(rates) - 1)} - {best})
    return ", ".join(("plain" if k == 0 else f"k={k}") + f" {rates[k]:.1f}" for k in shown)
