"""Settings changed in the app: the system prompt (F2), speculation on/off (F4), and
speculation and sampling settings (F3), each from the next step or the next reply."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..engine.sampling import SamplingParams
from ..transcript import sampling_label
from .chat import SystemNote
from .system_prompt_screen import SystemPromptScreen
from .tune_screen import TuneScreen


def tune_notice(values: dict[str, Any], before: SamplingParams, max_tokens: int | None = None) -> str:
    """What F3 set, and from when: everything from the next step, a new seed from the next reply."""
    s: SamplingParams = values["sampling"]
    text = f"n_draft={values['n_draft']} p_min={values['p_min']:g} · {sampling_label(dataclasses.asdict(s))}"
    text += " from the next step."
    if s.seed != before.seed:
        text += f" Seed {'random' if s.seed is None else s.seed} from the next reply."
    if values.get("max_tokens") not in (None, max_tokens):
        text += f" max_tokens={values['max_tokens']} from the next reply."
    return text


class TuningMixin:
    """F2, F3 and F4 for the app.

    Relies on the app's ``config`` (the settings when no models are loaded), ``speculator``
    (``update()`` takes n_draft, p_min and enabled), ``sampling`` and ``generation`` (read
    when a step or a reply starts: LiveGeneration), ``transcript``, ``chat``,
    ``_save_history`` (FilesMixin) and ``_update_status`` (StatusMixin).
    """

    def action_system_prompt(self) -> None:
        async def done(text: str | None) -> None:
            if text is None or text == self.transcript.system_prompt:
                return
            self.transcript.system_prompt = text
            for note in self.chat.query(SystemNote):
                await note.remove()
            if text:
                children = self.chat.children
                note = SystemNote(f"system: {text}", markup=False)
                await self.chat.mount(note, before=children[0] if children else None)
            self.notify("System prompt set: it applies from the next reply.", timeout=3)
            self._save_history()

        self.push_screen(SystemPromptScreen(self.transcript.system_prompt), done)

    def action_toggle_speculation(self) -> None:
        spec = self.speculator
        if spec is None:
            enabled = not self.config.get("speculation", "enabled")
            self.config.set("speculation", "enabled", enabled)
            self.notify(f"Speculation {'on' if enabled else 'off'} when the models load.")
            return
        if spec.drafter is None:
            self.notify("No draft model is loaded, so speculation stays off.", severity="warning")
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
        before = self.sampling

        def apply(values: dict[str, Any]) -> None:
            # raises SkippyError (shown in the dialog) before anything changes
            if spec is not None:
                spec.update(n_draft=values["n_draft"], p_min=values["p_min"])
            else:
                self.config.set("speculation", "n_draft", values["n_draft"])
                self.config.set("speculation", "p_min", values["p_min"])
            self.sampling = values["sampling"]
            # read when a reply starts (LiveGeneration), so it applies from the next reply
            self.generation = dataclasses.replace(self.generation, max_tokens=values["max_tokens"])

        def done(values: dict[str, Any] | None) -> None:
            if values:
                self.notify(tune_notice(values, before, max_tokens), timeout=4)
                self._update_status()

        max_tokens = self.generation.max_tokens
        draft_settings = getattr(spec, "draft_settings", "") if spec is not None else ""
        screen = TuneScreen(
            n_draft, p_min, self.sampling, focus, apply, max_tokens=max_tokens, draft_settings=draft_settings
        )
        self.push_screen(screen, done)
