"""What crosses the pipe between the app and its engine process (engine/process/proxy.py,
engine/process/child.py).

Messages are tuples ``(kind, *payload)``, pickled by :mod:`multiprocessing`.
Parent to child: ``run``, ``sampling``, ``cancel``, ``abort``, ``update``,
``count``, ``forget``, ``cancel_load``, ``close``. Child to parent: ``progress``,
``loaded``, ``load_error``, ``event``, ``cancel_heard``, ``state``, ``updated``,
``counted``, ``closed``.
Events are the engine's own immutable dataclasses; the speculator's attributes
travel as a :class:`Static` (after load) and a :class:`State` snapshot, and an
exception as its type, message and attributes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import SkippyError
from ..load.gguf_info import ModelInfo
from ..native.invariance import Invariance
from ..settings import SpeculationSettings

# -- errors across the pipe ------------------------------------------------------------


def error_payload(e: BaseException) -> tuple[type[BaseException], str, dict[str, Any]]:
    """An exception as (type, message, attributes): BoundsError's __init__ takes three
    arguments, so pickling the exception itself would fail to rebuild it."""
    attrs = {k: v for k, v in vars(e).items() if not k.startswith("_")}
    return (type(e) if isinstance(e, SkippyError) else SkippyError), str(e), attrs


def rebuild_error(payload: tuple[type[BaseException], str, dict[str, Any]]) -> BaseException:
    """The exception :func:`error_payload` described: same type, message and attributes."""
    cls, message, attrs = payload
    e = cls.__new__(cls)
    Exception.__init__(e, message)
    e.__dict__.update(attrs)
    return e


def exit_message(exitcode: int | None) -> str:
    """One line for a child that ended: ``the engine process exited (signal 9)``."""
    if exitcode is None:
        return "the engine process stopped answering"
    if exitcode < 0:
        return f"the engine process exited (signal {-exitcode})"
    return f"the engine process exited (code {exitcode})"


# -- what the child tells the parent about its speculator --------------------------------


@dataclass(frozen=True)
class DrafterView:
    """What the app reads of a drafter: ``source`` (model, ngram, ngram+model, auto, mtp);
    ``external``: MTP heads of a drafter file (not the target's own)."""

    source: str
    external: bool = False

    @classmethod
    def of(cls, drafter: Any) -> DrafterView | None:
        return cls(drafter.source, bool(getattr(drafter, "external", False))) if drafter is not None else None


@dataclass(frozen=True)
class Static:
    """What does not change after load."""

    target_info: ModelInfo | None
    draft_info: ModelInfo | None
    n_ctx: int
    no_rollback: str
    load_note: str
    backend: str
    draft_settings: str = ""  # the numeric settings the draft runs with (Speculator.draft_settings)
    # what the model sources draft with (a draft model, else MTP heads) and the MTP heads, or None:
    # the app offers the sources these make possible (F3)
    model_drafter: DrafterView | None = None
    mtp_drafter: DrafterView | None = None
    placements: tuple[tuple[str, str], ...] = ()  # (role, where its layers run): rpc.placements


@dataclass(frozen=True)
class State:
    """What a command or a step may change."""

    n_past: int
    speculation: SpeculationSettings
    drafter: DrafterView | None
    invariance: Invariance | None
    verdict: float | None
    remote: str  # the RPC devices in use (``RPC0@host:port``…), or ""
    lost: str  # why an RPC server the models use is lost, or ""


def static_of(spec: Any) -> Static:
    from ..native.devices import backend_name
    from ..native.rpc import placements

    drafters = DrafterView.of(spec.model_drafter), DrafterView.of(spec.mtp_drafter)
    return Static(
        spec.target_info, spec.draft_info, spec.n_ctx, spec.no_rollback, spec.load_note, backend_name(),
        spec.draft_settings, *drafters, tuple(placements(spec)),
    )  # fmt: skip


def state_of(spec: Any) -> State:
    from ..native.rpc import remote_label, speculator_lost

    remote, lost = remote_label(spec), speculator_lost(spec)
    drafter = DrafterView.of(spec.drafter)
    return State(spec.n_past, spec.speculation, drafter, spec.invariance, spec.verdict(), remote, lost)
