"""The status bar: its fields, and how they give way on a narrow terminal.

The fields are pure functions of a :class:`StatusState` (read from the app at one
moment), so they are tested without an app or a model; :class:`StatusMixin` reads
that state and puts the fitted line on the :class:`StatusBar`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from textual.widgets import Static

from ..engine.load.arch import rollback_kind
from ..engine.load.labels import model_label
from ..engine.policy.exactness import VerifyPlan, plan_of
from ..engine.sampling.params import SamplingParams
from ..transcript import Entry
from .widgets.render import Part, fit_parts

STATUS_NAME_WIDTHS = (28, 22, 16, 12)  # model name widths the status bar tries, widest first
SEPARATOR = " │ "


class StatusBar(Static):
    """Models, backend, context used, tokens/s, speculation state."""

    def on_resize(self) -> None:
        self.app._update_status()  # type: ignore[attr-defined]


@dataclass(frozen=True)
class StatusState:
    """What the status bar shows, read from the app at one moment.

    ``speculator`` is the loaded ``Speculator`` (its ``target_info``, ``draft_info``,
    ``drafter``, ``model_drafter``, ``mtp_drafter``, ``speculation``, ``no_rollback``,
    ``invariance``, ``n_ctx`` and ``verdict()`` are read) or None; ``backend`` is the ggml backend's name (read only
    with models loaded). ``recorded`` is the transcript's ``models`` record (a replay).
    """

    speculator: Any
    backend: str
    n_past: int
    n_ctx: int  # 0: not known yet (the speculator's own n_ctx is shown)
    tokens_per_second: float
    sampling: SamplingParams
    recorded: Mapping[str, Any]
    replay: bool
    transcript_name: str  # the transcript file's name, or "transcript"
    loading: bool
    panel_shown: bool
    load_stage: str = ""  # what the load is doing, and after a colon why (engine/load/loader.py)


def model_field(role: str, path: Any, name: str, file_type: str, drop: float) -> Part:
    """A model's status field, file stem and quantization (:func:`model_label`): the stem
    shortens (down to 12 cells) before any field goes; the field goes at ``drop``."""
    tail = len(file_type) + 1
    forms = tuple(f"{role} {model_label(path, name, file_type, w + tail)}" for w in STATUS_NAME_WIDTHS)
    return Part((*forms, ""), (0.1, 0.2, 0.3, drop))


def sampling_status(s: SamplingParams) -> str:
    """The sampler and temperature (``coupled T=0.8``, ``greedy``), a fixed seed, penalties."""
    out = s.label()
    if s.seed is not None:
        out += f" seed {s.seed}"
    if s.penalised:
        out += " +penalties"
    return out


def last_tps(entries: Sequence[Entry]) -> float:
    """Tokens/s of the last finished reply in ``entries``; 0.0 when none finished."""
    for e in reversed(entries):
        if e.finish is not None:
            return e.finish.tokens_per_second
    return 0.0


def source_in_force(spec: Any) -> str:
    """The draft source a speculator drafts with: ``model``, ``ngram``, ``mtp``, ``auto``,
    ``ngram+model``; where the model sources draft with MTP heads (no draft model is
    loaded), ``auto (mtp)`` and ``ngram+mtp``. ``""`` without a drafter."""
    if spec.drafter is None:
        return ""
    source = spec.drafter.source
    model = getattr(spec, "model_drafter", None)
    if model is not None and model.source == "mtp":
        return {"auto": "auto (mtp)", "ngram+model": "ngram+mtp"}.get(source, source)
    return source


def draft_field(spec: Any) -> Part:
    """The draft model's name; else what drafts without one (``MTP heads``), or ``no draft model``."""
    d = spec.draft_info
    if d is not None:
        return model_field("draft", d.path, d.name, d.file_type, 5)
    if getattr(spec, "mtp_drafter", None) is not None:
        return Part(("draft: MTP heads", ""), (5,))
    return Part(("no draft model", ""), (5,))


def verify_part(profile: str, plan: VerifyPlan) -> Part:
    """The profile in force and how it verifies (:mod:`~skippy_tui.engine.policy.exactness`):
    ``exact ≤7 rows`` (profile exact: split to stay bit-exact), ``auto: exact ≤7 rows``,
    ``auto: not bit-exact`` (a build that certifies no batch: one batch, and replies can
    differ from plain decoding; it outlasts the other forms), ``profile fast``, or
    ``not exact`` (``exact = false``)."""
    if profile == "fast":  # flash attention + repacking, one verify batch: faster, identity approximate
        return Part(("profile fast", ""), (2,))
    short = plan.short()
    if profile == "exact" or not plan.checked:
        return Part((short, ""), (2,))
    return Part((f"{profile}: {short}", short, ""), (1.5, 2 if plan.exact else 6.5))


def rollback_field(spec: Any) -> Part | None:
    """How a hybrid or recurrent target drops rejected tokens (``rollback: snapshot`` /
    ``restore``, :func:`~skippy_tui.engine.load.arch.rollback_kind`); None for an attention
    target (its KV cache simply drops them) or none known."""
    t = spec.target_info
    kind = rollback_kind(t.architecture) if t is not None else "kv"
    return None if kind == "kv" else Part((f"rollback: {kind}", ""), (3,))


def load_part(stage: str) -> Part:
    """The load's field: its stage, what and why (the probe runs for minutes on a busy
    machine); narrower, only what; narrowest ``loading models…``."""
    if not stage:
        return Part(("loading models…",))
    what = stage.split(": ", 1)[0]
    forms = tuple(dict.fromkeys((stage, what, "loading models…")))
    return Part(forms, (0.5, 0.6)[: len(forms) - 1])


def status_parts(st: StatusState) -> list[Part]:
    """The status bar's fields in order; the ranks say which give way first (see fit_parts)."""
    parts: list[Part] = []
    spec = st.speculator
    if spec is not None:
        t = spec.target_info
        parts.append(model_field("target", t.path, t.name, t.file_type, 7) if t else Part(("target ?", ""), (7,)))
        parts.append(draft_field(spec))
        # "CPU" alone says little and goes first; a GPU or an RPC server is worth a draft's name
        parts.append(Part((st.backend, ""), (1 if st.backend == "CPU" else 6.5,)))
        parts.append(Part((f"ctx {st.n_past}/{st.n_ctx or spec.n_ctx}", ""), (8,)))
        parts.append(Part((f"{st.tokens_per_second:.1f} tok/s",)))
        s = spec.speculation
        on_ = s.enabled and spec.drafter is not None
        if on_:
            # the draft model drafting (alone, or as auto's choice beside n-gram lookup) is the
            # common case, and the draft field names it already
            source = source_in_force(spec)
            state = "spec on" + (f" {source}" if source not in ("model", "auto") else "")
            if s.p_min:  # 0 (the default) is no cut-off: nothing to say
                parts.append(Part((f"{state} k={s.n_draft} p_min={s.p_min:g}", f"{state} k={s.n_draft}"), (9,)))
            else:
                parts.append(Part((f"{state} k={s.n_draft}",)))
            if (rollback := rollback_field(spec)) is not None:
                parts.append(rollback)
        else:
            # no_rollback: a recurrent state too large to save, the one thing that keeps it off
            parts.append(Part(("spec off" + (" (state too large to roll back)" if spec.no_rollback else ""),)))
        full, short = sampling_status(st.sampling), st.sampling.label()
        parts.append(Part((full, short), (10,)) if full != short else Part((full,)))
        verdict = spec.verdict() if on_ else None
        if verdict is not None:
            parts.append(Part((f"≈{verdict:.2f}× plain", ""), (6,)))
        plan = plan_of(spec) if on_ else None
        if plan is not None:
            parts.append(verify_part(s.profile, plan))
    else:
        models = st.recorded
        if st.replay or models:
            parts.append(Part((f"replay {st.transcript_name}",)))
            for role, drop in (("target", 7), ("draft", 5)):
                m = models.get(role)
                if m:
                    parts.append(model_field(role, m.get("path"), m.get("name", "?"), m.get("file_type", ""), drop))
            if models.get("backend"):
                parts.append(Part((f"recorded on {models['backend']}", ""), (1,)))
        if st.loading:
            parts.append(load_part(st.load_stage))
        else:
            parts.append(Part(("no models loaded (f5 loads them)", "no models (f5)"), (4,)))
    if not st.panel_shown:
        parts.append(Part(("panel hidden (f6)", ""), (7.5,)))  # after the model names
    return parts


def model_descriptions(speculator: Any, recorded: Mapping[str, Any] | None) -> list[str]:
    """One line per model in use (or ``recorded``, in a replay): role, short label, GGUF name, file."""
    if speculator is not None:
        infos = [("target", speculator.target_info), ("draft", speculator.draft_info)]
        models = [(role, i.path, i.name, i.file_type) for role, i in infos if i is not None]
    else:
        recorded = recorded or {}
        models = [
            (role, m.get("path"), m.get("name", "?"), m.get("file_type", ""))
            for role in ("target", "draft")
            if isinstance(m := recorded.get(role), dict)
        ]
    return [
        f"{role}: {model_label(path, name, ft, 80)} · {name!r} · {path or 'path not recorded'}"
        for role, path, name, ft in models
    ]


class StatusMixin:
    """The app's status bar: reads the app's state into a :class:`StatusState` and shows it fitted.

    Relies on the app's ``speculator``, ``transcript``, ``transcript_path``, ``replay``,
    ``loading``, ``load_stage``, ``generating``, ``sampling``, ``_n_past``, ``_n_ctx`` and ``_live_stats``
    (the reply in flight), and its ``panel``.
    """

    def _status_state(self) -> StatusState:
        spec = self.speculator
        backend = ""
        if spec is not None:
            from ..engine.native.rpc import devices_label

            backend = devices_label(spec)  # CPU + RPC0@host:port
        tps = self._live_stats.tokens_per_second if self.generating else last_tps(self.transcript.entries)
        return StatusState(
            speculator=spec,
            backend=backend,
            n_past=self._n_past,
            n_ctx=self._n_ctx,
            tokens_per_second=tps,
            sampling=self.sampling,
            recorded=self.transcript.models or {},
            replay=self.replay,
            transcript_name=self.transcript_path.name if self.transcript_path else "transcript",
            loading=self.loading,
            panel_shown=bool(self.panel.display),
            load_stage=self.load_stage,
        )

    def _update_status(self) -> None:
        bar = self.query_one(StatusBar)
        width = bar.content_region.width or self.size.width - 2
        # one line: the least useful fields shorten or go first; tok/s, speculation and sampling stay
        bar.update(fit_parts(status_parts(self._status_state()), width, SEPARATOR))
        bar.tooltip = "\n".join(self.model_descriptions()) or None

    def model_descriptions(self) -> list[str]:
        """One line per model in use (or recorded, in a replay): role, short label, GGUF name, file.

        The status bar shows only the short label; this says which file it is.
        """
        return model_descriptions(self.speculator, self.transcript.models)
