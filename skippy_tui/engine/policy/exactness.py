"""How a verify batch is decoded, and whether a reply then equals plain decoding.

The profile (``[speculation] profile``) and the probe's verdict (:mod:`..native.invariance`)
decide it together:

* ``exact``: verify in the chunks the probe certifies, down to row by row, so a
  greedy reply is plain decoding's token for token, whatever it costs.
* ``auto`` (the default): the same where the probe certifies chunks of at least
  :data:`MIN_CHUNK` rows. Where it certifies fewer (a default CPU build with
  llamafile's sgemm, most GPU builds), row by row costs k + 1 target decodes a
  step, which no draft repays, so exactness there means never speculating:
  ``auto`` verifies in one batch instead and says that replies are not bit-exact.
* ``fast`` (or ``exact = false``): one batch, never probed.

Pure: the speculator, the CLI, the app and the bench read the same plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # a verdict's shape only: policy reads it, never runs a probe
    from ..native.invariance import Invariance


MIN_CHUNK = 2
"""The fewest rows per verify decode ``auto`` keeps exact: at one row a step costs k + 1 decodes."""

NOT_BIT_EXACT = "not bit-exact on this build: replies can differ from plain decoding where two tokens nearly tie"
"""What a user is told when verification is one unchecked batch because the build certifies none."""


@dataclass(frozen=True, slots=True)
class VerifyPlan:
    """How the target decodes a verify batch.

    ``rows``: rows per decode (a longer batch is split into chunks of that size), or
    ``None``: the whole batch in one decode. ``exact``: every row is bit-identical to a
    single-row decode, so a greedy reply equals plain decoding. ``checked``: the probe
    ran (or the build is known), so ``why`` says what it found; unchecked one-batch
    verification is the ``fast`` profile's or ``exact = false``'s choice.
    ``every_size``: every probed size was exact (no limit known; batches are still
    split at the largest size probed).
    """

    rows: int | None
    exact: bool
    checked: bool
    why: str = ""  # not exact: why, in a user's words
    every_size: bool = False  # exact at every size probed (rows is then the largest probed)

    def label(self, inv: Invariance | None) -> str:
        """One line for ``run``, ``--trace`` and the bench: how it verifies and why."""
        if self.exact and inv is not None:
            return inv.label()
        if self.checked:
            return f"one batch: {NOT_BIT_EXACT} ({self.why})"
        return (
            f"one batch, not checked for exactness ({self.why}): "
            "replies match plain decoding with the same seed only approximately"
        )

    def short(self) -> str:
        """A few words for the status bar: ``exact ≤7 rows``, ``exact``, ``not bit-exact``, ``not exact``."""
        if self.exact:
            return "exact" if self.every_size else "exact ≤1 row" if self.rows == 1 else f"exact ≤{self.rows} rows"
        return "not bit-exact" if self.checked else "not exact"


def why_uncertified(inv: Invariance) -> str:
    """Why the probe certified no batch: the build's known reason (its first clause: the
    rest of a :func:`~..native.invariance.variant_build` note tells how to rebuild), or what differed."""
    if inv.note:
        return inv.note.split("; ", 1)[0]
    return f"a batch of 2 rows differs from single rows by up to {inv.max_diff:.3g} in a logit"


def verify_plan(profile: str, exact: bool, inv: Invariance | None) -> VerifyPlan | None:
    """The plan for a target with ``profile`` and ``exact`` settings and the probe's ``inv``.

    ``None`` while it is not known yet: exactness is asked for and the probe has not run
    (it runs before the first speculative reply).
    """
    if not exact or profile == "fast":
        return VerifyPlan(None, False, False, "profile fast: flash attention and repacking on" if profile == "fast"
                          else "exact = false")  # fmt: skip
    if inv is None:
        return None
    if profile == "auto" and inv.chunk < MIN_CHUNK:
        return VerifyPlan(None, False, True, why_uncertified(inv))
    return VerifyPlan(inv.chunk, True, True, every_size=inv.rows is None)


def plan_of(speculator: Any) -> VerifyPlan | None:
    """:func:`verify_plan` of a loaded speculator (or the app's stand-in for one in the engine
    process): reads its ``speculation`` and ``invariance``."""
    s = speculator.speculation
    return verify_plan(s.profile, s.exact, speculator.invariance)


def verify_label(speculator: Any) -> str:
    """:meth:`VerifyPlan.label` of a loaded speculator, or why there is none yet."""
    plan = plan_of(speculator)
    if plan is None:
        return "not probed yet: nothing has speculated"
    return plan.label(speculator.invariance)
