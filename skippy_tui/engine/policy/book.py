"""The adaptive policies a speculator keeps, and which of them choose k now.

Acceptance differs by draft source and by how tokens are chosen (greedy, coupled or
rejection sampling), so there is one :class:`~.adaptive.AdaptiveK` per (source, mode),
all sharing one :class:`~.measurements.VerifyCosts` (the target's verify costs do not
depend on who drafted). ``source = "auto"`` adds a :class:`~.chooser.SourceChooser` per
mode over the n-gram's and the model's policies; its exploring schedule outlives a
settings change as the policies' probe schedules do.

The :attr:`PolicyBook.estimator` measures every step, even with a fixed k (the status
bar's verdict); :attr:`PolicyBook.k_policy` chooses k: the estimator with
``n_draft = "auto"``, the chooser with ``source = "auto"`` too, else
:class:`~.adaptive.FixedK`.
"""

from __future__ import annotations

from .adaptive import AdaptiveK, FixedK, KPolicy
from .chooser import SourceChooser
from .cost_model import best_k
from .measurements import VerifyCosts

Learned = tuple[VerifyCosts, dict[tuple[str, str], AdaptiveK], dict[tuple[str, bool], SourceChooser]]
"""What :meth:`PolicyBook.learned` hands out: verify costs, policies, choosers."""


class PolicyBook:
    """Every adaptive policy of one speculator, by (draft source, sampling mode)."""

    def __init__(self, ngram_lookup_ms: float) -> None:
        self._ngram_lookup_ms = ngram_lookup_ms  # an n-gram proposal's cost, before any is measured
        self.verify_costs = VerifyCosts()
        self._seed_timings: dict[int, float] = {}
        self._policies: dict[tuple[str, str], AdaptiveK] = {}
        self._choosers: dict[tuple[str, bool], SourceChooser] = {}
        self.mode = "greedy"
        self.estimator: AdaptiveK
        self.k_policy: KPolicy | SourceChooser
        self._installed: tuple[str, str | None, bool] = ("none", None, False)
        self.install("none", None, False)

    def install(self, source: str, model_source: str | None, auto: bool) -> None:
        """Set the estimator and the k policy for drafting from ``source`` (``"none"``
        without a drafter; ``model_source``: what drafts for the model sources, ``model``
        or ``mtp``, None without either), ``auto`` being ``n_draft = "auto"``."""
        self._installed = (source, model_source, auto)
        if source == "auto":
            ngram = self.policy("ngram")
            model = self.policy(model_source) if model_source is not None else None
            self.estimator = model or ngram
            self.k_policy = self._chooser(model, ngram) if auto else FixedK()
            return
        self.estimator = self.policy(source)
        self.k_policy = self.estimator if auto else FixedK()

    @property
    def chooser(self) -> SourceChooser | None:
        """``source = "auto"``'s chooser when it chooses k (and the source) now."""
        return self.k_policy if isinstance(self.k_policy, SourceChooser) else None

    def policy(self, source: str) -> AdaptiveK:
        """The policy of ``source`` in the current mode, made on first use."""
        key = (source, self.mode)
        if key not in self._policies:
            # an n-gram proposal is a copy: right for a run, then wrong (a run-length model)
            ngram = source == "ngram"
            self._policies[key] = AdaptiveK(
                self.verify_costs, runs=ngram, draft_prior_ms=self._ngram_lookup_ms if ngram else None
            )
        return self._policies[key]

    def _chooser(self, model: AdaptiveK | None, ngram: AdaptiveK) -> SourceChooser:
        key = (self.mode, model is not None)
        if key not in self._choosers:
            # the n-gram's offer is judged on every step, except under rejection sampling
            self._choosers[key] = SourceChooser(model, ngram, shadowed=self.mode != "rejection")
        return self._choosers[key]

    def follow(self, mode: str) -> None:
        """Switch to ``mode``'s policies (``greedy``, ``coupled`` or ``rejection``), as installed."""
        if mode != self.mode:
            self.mode = mode
            self.install(*self._installed)

    def new_reply(self) -> None:
        """New text: copies under way end, and a plain verdict probes the synced draft again."""
        for policy in self._policies.values():
            policy.new_reply()
        if (chooser := self.chooser) is not None:
            chooser.new_reply()

    def seed(self, timings_ms: dict[int, float], chunk: int | None) -> None:
        """First estimates of the verify cost by batch size (ms); a batch longer than
        ``chunk`` rows is priced as its chunks until measured."""
        self.verify_costs.chunk = chunk
        self._seed_timings = dict(timings_ms)
        for batch, ms in timings_ms.items():
            self.verify_costs.add(batch, ms)

    def reset(self) -> None:
        """Forget what was measured during replies; the seeded verify timings stay."""
        self.verify_costs = VerifyCosts(self.verify_costs.prior_slope, self.verify_costs.chunk)
        for batch, ms in self._seed_timings.items():
            self.verify_costs.add(batch, ms)
        # new dicts, not cleared ones: a state handed out by learned() holds the old ones
        self._policies, self._choosers = {}, {}
        self.install(*self._installed)

    def learned(self) -> Learned:
        """What has been measured so far, opaque, for :meth:`restore`."""
        return (self.verify_costs, self._policies, self._choosers)

    def restore(self, state: Learned | None) -> None:
        """Put back a state from :meth:`learned` (``None``: start afresh, as :meth:`reset`)."""
        if state is None:
            self.reset()
            return
        self.verify_costs, self._policies, self._choosers = state
        self.install(*self._installed)

    def verdict(self, k_max: int, auto: bool) -> float | None:
        """Estimated tokens/s of drafting as installed over plain decoding's (e.g. 1.3):
        the chooser's best going rate, or the estimator's rate at the k in force; ``None``
        until enough is measured."""
        if (chooser := self.chooser) is not None:
            plain = self.estimator.rates(0)
            best = max((r for _, r in chooser.last.values()), default=None)
            return best / plain[0] if best and plain and plain[0] > 0 else None
        rates = self.estimator.rates(k_max)
        if not rates or rates[0] <= 0:
            return None
        k = best_k(rates) if auto else k_max
        return rates[k] / rates[0]
