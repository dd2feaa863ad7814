"""Drafters that pair the n-gram index with a model: ``ngram+model`` and ``auto``.

:class:`CombinedDrafter` (``ngram+model``) proposes from the n-gram index when
the context's suffix has a match, else from the draft model (or the MTP heads);
only the drafter that proposes is synced, so a model left behind catches up in
one batched prefill when it is next used. :class:`AutoDrafter` (``auto``) lets
each step's policy route it (:class:`~..policy.chooser.SourceChooser`).
:func:`build_drafter` turns a ``speculation.source`` into its drafter.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..events import SyncInfo
from ..sampling.verify import DraftRule
from .model import Drafter, ModelDrafter, Proposal
from .ngram import UNLIMITED_ROOM, NgramDrafter

HANDOFF = 4
"""Copy length at which ``auto``'s draft model stops its proposal: its own tokens have begun
a copy of an earlier span, which the n-gram continues next step for almost nothing
(a rewrite's reply starts with no match; the model went on drafting the copy a decode
per token where one token and a lookup would have found it)."""


class CombinedDrafter:
    """``ngram+model``: the n-gram index when it has a match, else the draft model."""

    source = "ngram+model"

    def __init__(self, ngram: NgramDrafter, model: ModelDrafter) -> None:
        self.ngram = ngram
        self.model = model
        self._route = "model"
        self._epoch: object | None = None  # the epoch of the last sync (for a late model sync)

    @property
    def cache(self):  # the model's KV cache, for close()/abort()
        return self.model.cache

    def room(self, context: Sequence[int]) -> int:
        return self.model.room(context)

    def sync(self, context: Sequence[int], epoch: object | None = None) -> SyncInfo:
        """Sync the index; sync the model too only when the index has no match."""
        self._epoch = epoch
        info = self.ngram.sync(context, epoch)
        if self.ngram.has_match(context):
            self._route = "ngram"
            return info
        self._route = "model"
        return self.model.sync(context, epoch)

    def propose(self, context: Sequence[int], k: int, p_min: float, rule: DraftRule | None = None) -> Proposal:
        if self._route == "ngram":
            proposal = self.ngram.propose(context, k, p_min)
            if proposal.tokens:
                return proposal
            self.model.sync(context, self._epoch)
        return self.model.propose(context, k, p_min, rule)

    def reset(self) -> None:
        self.ngram.reset()
        self.model.reset()


class AutoDrafter(CombinedDrafter):
    """``auto``: the n-gram index or the draft model, as each step's policy routes it.

    :meth:`available` tells the policy how long an n-gram proposal could be;
    :attr:`route` (``ngram`` or ``model``) is then set for the step, and only
    that drafter syncs and proposes. Without a draft model every step is an
    n-gram one (or plain). With a fixed k no policy routes: it drafts as
    ``ngram+model``.
    """

    source = "auto"

    def __init__(self, ngram: NgramDrafter, model: ModelDrafter | None) -> None:
        super().__init__(ngram, model)  # type: ignore[arg-type]
        self.route: str | None = None  # None: as ngram+model
        # whether a routed model's proposal may stop for the n-gram, asked once a copy begins
        # (None: always); see propose
        self.handoff: Callable[[], bool] | None = None

    @property
    def cache(self):  # the model's KV cache, for close()/abort()
        return self.model.cache if self.model is not None else None

    def room(self, context: Sequence[int]) -> int:
        return self.model.room(context) if self.model is not None else UNLIMITED_ROOM

    def available(self, context: Sequence[int], k: int, epoch: object | None = None) -> list[int]:
        """What the n-gram match would propose after ``context`` (up to ``k`` tokens;
        empty without a match); indexes the context first."""
        self.ngram.sync(context, epoch)
        return self.ngram.index.continuation(context, k)

    def prefill(self, context: Sequence[int], epoch: object | None = None) -> SyncInfo:
        """Before a reply: index the prompt and fill the model with it, ready for either route."""
        info = self.ngram.sync(context, epoch)
        return self.model.sync(context, epoch) if self.model is not None else info

    def sync(self, context: Sequence[int], epoch: object | None = None) -> SyncInfo:
        self._epoch = epoch
        if self.route == "ngram" or self.model is None:
            self._route = "ngram"
            return self.ngram.sync(context, epoch)
        if self.route == "model":
            self._route = "model"
            return self.model.sync(context, epoch)
        return super().sync(context, epoch)

    def propose(self, context: Sequence[int], k: int, p_min: float, rule: DraftRule | None = None) -> Proposal:
        """The routed drafter's proposal. A routed model's stops once its tokens copy an
        earlier span for :data:`HANDOFF` tokens: the next step's n-gram goes on with it."""
        if self._route == "ngram":
            proposal = self.ngram.propose(context, k, p_min)
            if proposal.tokens or self.model is None or self.route == "ngram":
                return proposal
            self.model.sync(context, self._epoch)
        return self.model.propose(context, k, p_min, rule, self._handoff(context))  # type: ignore[union-attr]

    def _handoff(self, context: Sequence[int]) -> Callable[[Sequence[int]], bool] | None:
        """When a routed model's proposal stops for the n-gram (None: it does not; the
        index must hold ``context``, as :meth:`available` left it)."""
        index = self.ngram.index
        if self.route != "model" or len(index) != len(context):
            return None
        gate, verdict = self.handoff, []  # the gate is asked at most once, when a copy begins

        def stop(tokens: Sequence[int]) -> bool:
            if index.copy_length_with(context, tokens) < HANDOFF:
                return False
            if not verdict:
                verdict.append(gate is None or gate())
            return verdict[0]

        return stop

    def reset(self) -> None:
        self.ngram.reset()
        if self.model is not None:
            self.model.reset()


def build_drafter(
    source: str, model: ModelDrafter | None, ngram: NgramDrafter | None = None, mtp: ModelDrafter | None = None
) -> Drafter | None:
    """The drafter for a ``speculation.source``, from a loaded draft model or MTP head
    (``model``: the one that drafts for ``model``, ``ngram+model`` and ``auto``), or None.

    ``model`` or ``mtp`` without such a drafter gives None (speculation off);
    ``ngram+model`` without one falls back to the n-gram drafter alone; ``auto`` works
    with or without one.
    """
    if source == "mtp":
        return mtp
    if source == "model":
        return model
    ngram = ngram if ngram is not None else NgramDrafter()
    if source == "auto":
        return AutoDrafter(ngram, model)
    if source == "ngram" or model is None:
        return ngram
    return CombinedDrafter(ngram, model)
