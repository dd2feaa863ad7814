"""Settings changed in the app: the system prompt (F2), speculation on/off (F4), and
speculation and sampling settings (F3), each from the next step or the next reply."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..config import ConfigError
from ..engine.load.arch import mtp_heads_usable
from ..engine.sampling.params import SamplingParams
from ..engine.settings import DRAFT_SOURCES
from ..saved import overridden, save_defaults
from ..transcript import sampling_label
from .screens.system_prompt import SystemPromptScreen
from .screens.tune import TuneScreen

KEEP_HINT = " Ctrl+P, Save settings as defaults keeps it for the next start."


def offered_sources(spec: Any) -> tuple[tuple[str, ...], str]:
    """The draft sources F3 offers with ``spec`` loaded (every one with none loaded: they go
    to the config), and why ``mtp`` is not among them (``""`` when it is, or none is loaded).

    The model sources need what drafts for them (a draft model, else MTP heads); ``mtp``
    needs MTP heads loaded (``Speculator.mtp_drafter``)."""
    if spec is None:
        return DRAFT_SOURCES, ""
    model = getattr(spec, "model_drafter", None) is not None
    mtp = getattr(spec, "mtp_drafter", None) is not None
    needs = {"model": model, "ngram+model": model, "mtp": mtp}
    offered = tuple(s for s in DRAFT_SOURCES if needs.get(s, True))
    return offered, "" if mtp else "no mtp: " + no_heads_reason(spec.target_info)


def no_heads_reason(info: Any) -> str:
    """Why a loaded target drafts with no MTP heads: its file has none (or none llama.cpp can
    run), or they were not loaded (drafts are off: ``--no-draft``, ``[draft] enabled = false``)."""
    if info is None:
        return "no MTP heads are loaded"
    why = mtp_heads_usable(info.architecture, info.n_nextn)
    if why:
        return f"the target cannot draft with MTP heads ({why})"
    return 'the target\'s MTP heads are not loaded (drafts are off): choose "integrated MTP" in F8'


def tune_notice(values: dict[str, Any], before: SamplingParams, max_tokens: int | None = None, source: str = "") -> str:
    """What F3 set, and from when: everything from the next step, a new seed from the next reply;
    the draft source when it changed from ``source``."""
    s: SamplingParams = values["sampling"]
    text = f"n_draft={values['n_draft']} p_min={values['p_min']:g}"
    if values.get("source", source) != source:
        text += f" source={values['source']}"
    text += f" · {sampling_label(dataclasses.asdict(s))}"
    text += " from the next step."
    if s.seed != before.seed:
        text += f" Seed {'random' if s.seed is None else s.seed} from the next reply."
    if values.get("max_tokens") not in (None, max_tokens):
        text += f" max_tokens={values['max_tokens']} from the next reply."
    return text


class TuningMixin:
    """F2, F3 and F4 for the app, and saving F2's, F3's and F8's choices as defaults.

    Relies on the app's ``config`` (the settings when no models are loaded), ``speculator``
    (``update()`` takes n_draft, p_min and enabled), ``sampling`` and ``generation`` (read
    when a step or a reply starts: LiveGeneration), ``transcript``, ``chat``,
    ``_place_system_notes`` (ReplyViewMixin), ``_save_history`` (FilesMixin) and
    ``_update_status`` (StatusMixin).
    """

    def action_system_prompt(self) -> None:
        async def done(text: str | None) -> None:
            if text is None or text == self.transcript.current_system:
                return
            sent = any(e.role != "system" for e in self.transcript.entries)
            self.transcript.set_system(text)  # after a message: a change where it is made
            await self._place_system_notes()
            self.chat.scroll_end(animate=False)
            kept = " The turns before keep the one they were sent with." if sent else ""
            self.notify(f"System prompt set: it applies from the next reply.{kept}{KEEP_HINT}", timeout=6)
            self._save_history()

        self.push_screen(SystemPromptScreen(self.transcript.current_system), done)

    def action_toggle_speculation(self) -> None:
        spec = self.speculator
        if spec is None:
            enabled = not self.config.get("speculation", "enabled")
            self.config.set("speculation", "enabled", enabled)
            self.notify(f"Speculation {'on' if enabled else 'off'} when the models load.")
            return
        if spec.drafter is None:
            self.notify("No draft model or MTP heads are loaded, so speculation stays off.", severity="warning")
            return
        if spec.no_rollback:
            self.notify(spec.no_rollback.capitalize() + ".", severity="warning")
            return
        spec.update(enabled=not spec.speculation.enabled)
        self.notify(f"Speculation {'on' if spec.speculation.enabled else 'off'} from the next step.", timeout=2)
        self._update_status()

    def action_tune(self, focus: str = "n_draft") -> None:
        spec = self.speculator
        n_draft = spec.speculation.n_draft if spec is not None else self.config.get("speculation", "n_draft")
        p_min = spec.speculation.p_min if spec is not None else self.config.get("speculation", "p_min")
        source = spec.speculation.source if spec is not None else self.config.get("speculation", "source")
        sources, note = offered_sources(spec)
        before = self.sampling

        def apply(values: dict[str, Any]) -> None:
            # raises SkippyError (shown in the dialog) before anything changes
            if spec is not None:
                spec.update(n_draft=values["n_draft"], p_min=values["p_min"], source=values["source"])
            else:
                for key in ("n_draft", "p_min", "source"):
                    self.config.set("speculation", key, values[key])
            self.sampling = values["sampling"]
            # read when a reply starts (LiveGeneration), so it applies from the next reply
            self.generation = dataclasses.replace(self.generation, max_tokens=values["max_tokens"])

        def done(values: dict[str, Any] | None) -> None:
            if values:
                notice = tune_notice(values, before, max_tokens, source)
                if values["source"] != source and spec is not None and not spec.speculation.enabled:
                    notice += " Speculation is off: F4 turns it on."
                self.notify(notice + KEEP_HINT, timeout=6)
                self._update_status()

        max_tokens = self.generation.max_tokens
        draft_settings = getattr(spec, "draft_settings", "") if spec is not None else ""
        screen = TuneScreen(n_draft, p_min, self.sampling, focus, apply, max_tokens=max_tokens, source=source,
                            sources=sources, source_note=note, draft_settings=draft_settings)  # fmt: skip
        self.push_screen(screen, done)

    def current_defaults(self) -> dict[str, dict[str, Any]]:
        """The settings "Save settings as defaults" keeps: F3's (n_draft, p_min, sampling,
        max_tokens), F2's system prompt and the pair F8 chose (paths, draft on/off, source)."""
        spec, cfg, s = self.speculator, self.config, self.sampling
        speculation = spec.speculation if spec is not None else None
        return {
            "target": {"path": cfg.get("target", "path")},
            "draft": {"path": cfg.get("draft", "path"), "enabled": cfg.get("draft", "enabled")},
            "speculation": {
                "n_draft": speculation.n_draft if speculation else cfg.get("speculation", "n_draft"),
                "p_min": float(speculation.p_min if speculation else cfg.get("speculation", "p_min")),
                "source": speculation.source if speculation else cfg.get("speculation", "source"),
            },
            "sampling": {
                **{k: v for k, v in dataclasses.asdict(s).items() if k != "seed"},
                "seed": "random" if s.seed is None else s.seed,
            },
            "generation": {"max_tokens": self.generation.max_tokens, "system_prompt": self.transcript.current_system},
        }

    def action_save_defaults(self) -> None:
        """Write :meth:`current_defaults` to the saved settings (skippy_tui/saved.py): the next
        start opens with them. Keys the config file sets otherwise are named: the file wins."""
        values = self.current_defaults()
        try:
            path = save_defaults(values)
        except ConfigError as e:
            self.notify(str(e), title="Settings not saved", severity="error", timeout=10)
            return
        shadowed = overridden(self.config, values)
        if shadowed:
            where = self.config.source.name if self.config.source else "the config file"
            self.notify(
                f"Saved to {path}, but {where} sets " + ", ".join(shadowed) + ", which wins at the next "
                "start: remove it there to use the saved value.",
                title="Settings saved",
                severity="warning",
                timeout=12,
            )
            return
        self.notify(
            f"F3's settings, the system prompt and the models open like this at the next start ({path}).",
            title="Settings saved as defaults",
            timeout=6,
        )
