"""``source = "auto"``: per step, plain decoding, the n-gram proposal or the draft model's.

:class:`SourceChooser` keeps one :class:`~.adaptive.AdaptiveK` per source (their
costs and acceptance; the target's verify costs shared) and weighs plain decoding
and each source's best step against the reply's going rate (:func:`~.cost_model.net_gains`).
Pure Python, table-testable like the policies it drives.
"""

from __future__ import annotations

from collections.abc import Sequence

from .adaptive import CLOSE, AdaptiveK
from .cost_model import best_k, net_gains

GOING_DECAY = 0.9
"""Per-step decay of the going rate's sums (about the last ten steps)."""

GOING_EVIDENCE = 2.0
"""Decayed steps before the going rate is used (until then: the best expected rate)."""

NGRAM_RECENT = 8
"""Steps after the n-gram's last match in a copy during which its expected rate still
bounds the going rate (a copy paused at an edit resumes within a few tokens)."""

COPY_RUN = 4
"""Tokens the n-gram must have predicted right in a row (or the context's end repeat) for
its match to be a copy in progress. At T = 0.8 a chance 2-token match in free text (66
tok/s on offer for one step) held the going rate above the draft model's rate, and the
reply took six plain steps at 39 tok/s while the model made 52."""

PAUSE_BREAKS = 2
"""Judged n-gram offers not taken whole after which a paused copy is taken not to resume:
the first is the edit that paused it. A sampled rewrite that turned into a paraphrase
still matched its source now and then, each match broke at once, and the reply waited on
plain steps for a copy that never came back (seven in a row, at 39 tok/s while the draft
model made 54)."""

HANDOFF_HIT = 2
"""Tokens the n-gram's next judged offer must get right for a copy begun in a model
proposal to count as one that went on (a hand-off that paid)."""

HANDOFF_PRIOR = (1, 2)
"""Prior (copies that went on, copies begun) of a reply's hand-off record."""

HANDOFF_MIN_RATE = 0.4
"""Share of a reply's copies begun in model proposals that must have gone on for the
model to keep stopping for the n-gram. On code, a 4-token suffix match is common and
rarely goes on: of 8 hand-offs in three greedy replies, 2 were followed by an n-gram
step accepting 2 or more, and each cut proposal was one more ~22 ms step (the default
made 128 tokens in 21-25 steps where k = 8 made 15)."""

DEBT_SPAN = 8
"""Tokens over which the draft model's catch-up cost per token is measured (its slope), and
the most the n-gram's steps may have left it behind for plain steps to be charged for it."""


def _with_debt(rate: float, debt: float) -> float:
    """``rate`` (tokens/s) of a step that also adds ``debt`` ms per token it commits."""
    return 1000.0 / (1000.0 / rate + debt) if rate > 0 else rate


def _debt_note(debt: float) -> str:
    return f"; a plain step +{debt:.1f} ms of the model's catch-up" if debt else ""


def _charged(steps: tuple[list[float], list[float]], debt: float) -> tuple[list[float], list[float]]:
    """``(E(k), T(k))`` with ``debt`` ms added to plain decoding's step (k = 0: one token the
    draft model does not see)."""
    tokens, ms = steps
    return (tokens, [ms[0] + debt, *ms[1:]]) if debt else steps


class SourceChooser:
    """``source = "auto"`` with ``n_draft = "auto"``: per step, plain decoding, the
    n-gram proposal or the draft model's, and how many tokens of it.

    Each source keeps its own :class:`AdaptiveK` (costs and acceptance by
    position; verify costs shared, they are the target's), which picks that
    source's k by its best expected tokens/s. An n-gram proposal is on offer only
    when the context has a match, and no longer than the match continues (its
    tokens cost almost nothing, so a reliable one runs long).

    The step then goes to plain decoding or to the source whose step's expected
    tokens most exceed what the reply's going rate (:meth:`record`) makes in the
    step's time (:func:`~.cost_model.net_gains`; the best expected tokens/s until the
    going rate is known), and that source's policy picks k, probing as it does alone.
    With no n-gram match, a plain step is charged the token of catch-up it adds to a draft
    model worth coming back to (:meth:`debt_ms`).

    A source not measured yet is measured first (the n-gram under ``shadowed`` only
    until :meth:`shadow` has judged its offer). Every ``explore_every`` steps the
    other source gets a step (never a shadowed n-gram: its offer is judged anyway;
    backing off to ``explore_max`` while it is clearly worse, and for the model only
    within :data:`~.adaptive.PROBE_BUDGET` of its catch-up over the n-gram's copies),
    so a source that became good is noticed.
    The n-gram proposal is also judged on steps it did not make (:meth:`shadow`):
    its tokens are compared with the committed ones, which under greedy decoding
    and the coupled sampler are exactly what verification would have accepted.
    Pure Python, table-testable like :class:`AdaptiveK`.
    """

    def __init__(
        self,
        model: AdaptiveK | None,
        ngram: AdaptiveK,
        explore_every: int = 16,
        explore_max: int = 128,
        shadowed: bool = False,
    ) -> None:
        self.model = model
        self.ngram = ngram
        # the n-gram's offer is judged on every step (shadow): it needs no steps to be measured
        self.shadowed = shadowed
        self.explore_every = explore_every
        self.explore_max = explore_max
        self._interval = explore_every
        self._since = 0
        self.last: dict[str, tuple[int, float]] = {}  # source -> (best k, its expected tok/s)
        self._tokens = self._ms = self._steps = 0.0  # decayed sums over recent steps of any source
        self._ngram_rate, self._ngram_age = 0.0, NGRAM_RECENT + 1  # its best expected rate at its last match
        self._breaks = 0  # offers of the n-gram not taken whole since then
        self._plain_skipped = 0  # tokens plain steps committed since the draft model last drafted
        self._new_handoffs()

    def _new_handoffs(self) -> None:
        self._copies_on = self._copies_begun = 0  # the reply's hand-off record (the prior aside)
        # a copy began in this step's model proposal; the previous one's, judged in this step
        self._copy_begun = self._judging_copy = self._copy_offered = False
        # the most tokens an n-gram offer got right in the step being judged (None: none judged)
        self._copy_right: int | None = None
        self.drafted_through = ""  # why this step's model proposal did not stop where a copy began

    def new_reply(self) -> None:
        """A reply starts: the going rate is measured afresh (a copy's rate says nothing of
        the free text that may follow it). The speculator ends every policy's run itself."""
        self._tokens = self._ms = self._steps = 0.0
        self._ngram_age = NGRAM_RECENT + 1
        self._breaks = 0
        self._plain_skipped = 0  # the prompt's prefill synced the draft model
        self._new_handoffs()

    def record(self, tokens: int, ms: float) -> None:
        """One finished step of any source (or plain): ``tokens`` committed in ``ms``."""
        f = GOING_DECAY
        self._tokens, self._ms, self._steps = self._tokens * f + tokens, self._ms * f + ms, self._steps * f + 1

    @property
    def going(self) -> float | None:
        """The reply's going rate: tokens/s over the recent steps (decayed), None before
        :data:`GOING_EVIDENCE` steps."""
        if self._steps < GOING_EVIDENCE or self._ms <= 0:
            return None
        return 1000.0 * self._tokens / self._ms

    def policy(self, source: str) -> AdaptiveK:
        """The policy that measures steps of ``source`` (``model`` or ``ngram``)."""
        return self.ngram if source == "ngram" or self.model is None else self.model

    def choose(self, k_max_model: int, ngram_available: int, model_behind: int = 0) -> tuple[str, int, str]:
        """``(source, k, reason)`` for this step.

        Args:
            k_max_model: the longest model proposal allowed now (0: no model).
            ngram_available: tokens the n-gram match can propose now (0: no match).
            model_behind: tokens the draft model's cache lacks now (its catch-up
                prefill if it drafts: it grows over n-gram and plain steps).

        ``k = 0`` is a plain step; ``source`` then names the policy that chose it.
        """
        self._settle_copy(ngram_available > 0)
        source, k, why = self._choose(k_max_model, ngram_available, model_behind)
        if k == 0:
            self._plain_skipped += 1
        elif source == "model":
            self._plain_skipped = 0
        return source, k, why

    def _choose(self, k_max_model: int, ngram_available: int, model_behind: int) -> tuple[str, int, str]:
        options: dict[str, int] = {}
        if ngram_available > 0:
            options["ngram"] = ngram_available
        else:
            self.ngram.run_broken()
        if self.model is not None and k_max_model > 0:
            options["model"] = k_max_model
        if not options:
            source = "model" if self.model is not None else "ngram"
            return source, 0, f"auto: {source} plain (no n-gram match{'' if self.model else ', no draft model'})"
        behind = {"model": model_behind, "ngram": 0}
        debt, charged_behind = 0.0, dict(behind)
        if "ngram" not in options and self.model is not None:
            # the model against plain steps alone: a copy paused at an edit is still the one to
            # come back to, for a few steps (see _going_against)
            rival = self._ngram_rate if self._ngram_age <= NGRAM_RECENT else 0.0
            # the part of the model's catch-up the n-gram's steps made; a few tokens at most
            # where the model is the source in use (more: a copy, which the n-gram comes back to)
            own = max(model_behind - self._plain_skipped, 0)
            debt = self.debt_ms(k_max_model, model_behind, rival) if own <= DEBT_SPAN else 0.0
            if debt:
                # the plain steps' part is theirs (charged to them, below), the rest the model's
                charged_behind["model"] = own
        raw: dict[str, tuple[list[float], list[float]]] = {}
        for source, k_max in options.items():
            policy = self.policy(source)
            st = policy.steps(k_max, charged_behind[source])
            if st is None or not self._known(source):
                k, why = policy.choose(k_max, behind[source])  # measure it first
                return source, k, f"auto: {source} {why.removeprefix('auto: ')}"
            raw[source] = st
        steps = {s: _charged(st, debt) for s, st in raw.items()}
        rates = {s: [1000.0 * t / m for t, m in zip(*st)] for s, st in steps.items()}
        best = {s: (best_k(r), max(r)) for s, r in rates.items()}  # each source's k: its best tokens/s
        self.last = best
        if "ngram" in best and self.ngram.run >= COPY_RUN:
            # a copy's rate bounds the going rate for a few steps after its last match (an edit
            # pauses it); a match in free text is no copy that will resume
            self._ngram_rate, self._ngram_age, self._breaks = best["ngram"][1], 0, 0
        else:
            self._ngram_age += 1
        chosen = max(best, key=lambda s: best[s][1])
        going = self._going_against(rates)
        if going is not None:
            # plain and each source's step, by the tokens they add over the going rate
            gains = {s: net_gains(*steps[s], going) for s in best}
            chosen = max(best, key=lambda s: gains[s][best[s][0]])
            k = best[chosen][0]
            if k > 0 and gains[chosen][0] > gains[chosen][k]:
                why = (
                    f"going {going:.1f} tok/s: plain adds {gains[chosen][0]:.2f}, {chosen} k={k} {gains[chosen][k]:.2f}"
                )
                return chosen, 0, f"auto: {chosen} plain ({why}){_debt_note(debt)}"
        other = next((s for s in best if s != chosen), None)
        self._since += 1
        if (
            other is not None
            and not self._judged_free(other)
            and self._since >= self._interval
            and self._explore_pays(other, rates[other], options, behind, best)
        ):
            # explore: the other source proposes this step, often while it is close
            self._since = 0
            offered = rates[other]
            k = best_k(offered[1:]) + 1 if len(offered) > 1 else 0
            # one exploring step pays the whole catch-up (not spread over a run of steps)
            judged = self.policy(other).rates(options[other], behind[other], 1.0) or [0.0]
            close = judged[k] >= CLOSE * best[chosen][1]
            self._interval = self.explore_every if close else min(self._interval * 2, self.explore_max)
            note = f"; {chosen} k={best[chosen][0]} est {best[chosen][1]:.1f}"
            return other, k, f"auto: {other} explore k={k} est {offered[k]:.1f} tok/s{note}"
        k, why = self.policy(chosen).choose(options[chosen], behind[chosen], rates[chosen])
        note = f"; {other} k={best[other][0]} est {best[other][1]:.1f}" if other is not None else ""
        return chosen, k, f"auto: {chosen} {why.removeprefix('auto: ')}{note}{_debt_note(debt)}"

    def debt_ms(self, k_max_model: int, model_behind: int, rival: float = 0.0) -> float:
        """What a plain step adds to the draft model's catch-up (ms at the current slowdown:
        the prefill of one more token) while the model, synced, beats plain decoding and the
        n-gram's paused copy (``rival`` tokens/s, charged that much too); else 0.

        Used only where the n-gram has no match: the step is the model's or plain. A plain step
        leaves the model a token further behind and its next step prefills it first (4-5 ms for
        the default draft on 2 cores, a quarter of a plain step). Where the model is the source
        to come back to, that cost is the plain step's, and the model's step is charged only the
        rest of its catch-up (what the n-gram's steps left it). Charged to the model's next step
        (spread over its recent streaks: one or two steps between the n-gram's matches on code),
        the plain steps' part made the model look worse the longer they went on: at T = 0.8 on
        code a reply ran 25 plain steps in a row at 55 tok/s, the model 40 behind and never back,
        where it made 61 synced. The n-gram's part stays the model's, and once it is more than
        :data:`DEBT_SPAN` tokens (a copy, which the n-gram comes back to) plain steps are not
        charged at all: forgiven, a model that caught up on a rewrite's copy at each pause
        drafted at 35 tok/s; with plain steps charged, at 49 (code-edit: 0.81 of the n-gram)."""
        model = self.model
        if model is None or k_max_model <= 0 or not model.measured:
            return 0.0
        synced = model.rates(k_max_model)
        if synced is None:
            return 0.0
        b = max(model_behind, 1)
        debt = (model.catchup_ms(b + DEBT_SPAN) - model.catchup_ms(b)) / DEBT_SPAN * model.slowdown
        if max(synced[1:], default=0.0) <= max(synced[0], _with_debt(rival, debt)):
            return 0.0
        return debt

    def handoff_pays(self, k_max_ngram: int, run: int) -> bool:
        """Whether a model step should stop for the n-gram once its tokens begin a copy
        (:data:`~..drafting.combined.HANDOFF`): only while at least :data:`HANDOFF_MIN_RATE` of the
        reply's copies begun so went on (the next step's n-gram offer, its own or judged by
        :meth:`shadow`, got :data:`HANDOFF_HIT` tokens right; judged whether or not the model
        stopped, so a reply whose copies start going on hands off again), and only if the
        n-gram, ``run`` tokens into a copy, is expected to beat the model's best step (or is
        unmeasured, so that it gets measured). At T = 0.8 a chat reply's short quotes rarely
        go on as copied: cut to one token, the model's proposal was followed by another model
        step, not an n-gram one. Asked at most once a step."""
        self._copy_begun = True
        on, begun = self._copies_on, self._copies_begun
        if on + HANDOFF_PRIOR[0] < HANDOFF_MIN_RATE * (begun + HANDOFF_PRIOR[1]):
            self.drafted_through = f" (a copy began; drafted through: {on} of the reply's {begun} went on)"
            return False
        model = self.last.get("model")
        if model is None or not self._known("ngram"):
            return True
        rates = self.ngram.rates(k_max_ngram, run=max(self.ngram.run, run))
        return rates is not None and max(rates[1:], default=0.0) > model[1]

    def _known(self, source: str) -> bool:
        """Whether ``source``'s estimates can be used: measured by its own steps, or judged free."""
        return self.policy(source).measured or self._judged_free(source)

    def _judged_free(self, source: str) -> bool:
        """Whether ``source``'s estimates need no steps of its own: the n-gram's, while
        :meth:`shadow` judges its offer on every step (its draft costs nothing, the verify
        costs are the target's) and has judged some. Its measuring and exploring steps
        only repeated what the shadow had counted: at T = 0.8 on chat, where copies
        rarely go on, each was a 1-token step at a 4-token price."""
        return source == "ngram" and self.shadowed and self.ngram.judged

    def _going_against(self, rates: dict[str, list[float]]) -> float | None:
        """The going rate the steps on offer (``rates``: each source's expected tokens/s by
        k) are weighed against, or None while too few steps are in.

        Never below plain decoding's rate (plain is always on offer) nor above the best
        rate on offer, or the n-gram's at its last match within :data:`NGRAM_RECENT`
        steps: a reply going faster than any source now promises (its estimates run a
        little low) would otherwise leave every step to plain, the cheapest.
        """
        going = self.going
        if going is None:
            return None
        cap = max(max(r) for r in rates.values())
        if self._ngram_age <= NGRAM_RECENT:
            cap = max(cap, self._ngram_rate)
        return min(max(going, *(r[0] for r in rates.values())), cap)

    def _explore_pays(
        self,
        other: str,
        rates: list[float],
        options: dict[str, int],
        behind: dict[str, int],
        best: dict[str, tuple[int, float]],
    ) -> bool:
        """Whether exploring ``other`` (``rates``: its expected tokens/s by k) now fits
        :data:`~.adaptive.PROBE_BUDGET` (a model far behind the n-gram's copies first
        prefills all of them)."""
        policy = self.policy(other)
        k = best_k(rates[1:]) + 1 if len(rates) > 1 else 0
        return policy.affordable(options[other], k, behind[other], max(r for _, r in best.values()))

    def copy_judged(self, n_offered: int, n_accepted: int) -> None:
        """An n-gram offer was judged (its own step's, or :meth:`shadow`): ``n_accepted`` of
        ``n_offered`` tokens were right. The second one not taken whole since a copy's last
        match (:data:`PAUSE_BREAKS`) ends that copy's bound on the going rate. In the step
        after a copy began in a model proposal, it judges whether that copy went on
        (:meth:`handoff_pays`)."""
        if self._judging_copy:
            self._copy_right = max(self._copy_right or 0, n_accepted)
        if n_accepted < n_offered and self._ngram_age <= NGRAM_RECENT:
            self._breaks += 1
            if self._breaks >= PAUSE_BREAKS:
                self._ngram_age = NGRAM_RECENT + 1

    def _settle_copy(self, offered: bool) -> None:
        """At a step's start (``offered``: the n-gram has a match now): count the copy judged
        in the step just done (one whose step had no n-gram match did not go on; one whose
        offer went unjudged, a model step with no shadow, is not counted), and judge the
        one begun in it in this step."""
        if self._judging_copy and (self._copy_right is not None or not self._copy_offered):
            self._copies_begun += 1
            self._copies_on += (self._copy_right or 0) >= HANDOFF_HIT
        self._judging_copy, self._copy_offered = self._copy_begun, offered
        self._copy_begun, self._copy_right = False, None
        self.drafted_through = ""

    def shadow(self, source: str, proposal: Sequence[int], committed: Sequence[int]) -> None:
        """After a step of ``source``: judge the n-gram ``proposal`` it did not make
        against the tokens the step ``committed``."""
        m = min(len(proposal), len(committed))
        if source != "ngram" and m > 0:
            n = 0
            while n < m and proposal[n] == committed[n]:
                n += 1
            self.ngram.observe_acceptance(m, n)
            self.copy_judged(m, n)
