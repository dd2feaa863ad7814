"""The tune dialog (F3): k, p_min, the draft source, max_tokens and the sampling settings, checked as typed."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static

from ...engine.errors import BoundsError, SkippyError
from ...engine.sampling.params import SAMPLERS, SamplingParams
from ...engine.settings import DRAFT_SOURCES, GenerationSettings, SpeculationSettings
from ...transcript import number
from ..button_row import ButtonRow
from .field_tabs import FIELD_TABS

# (key, help) of each tune field, in order; the help says what the field takes. The draft source
# and the sampler are choices, the rest are typed.
TUNE_FIELDS: tuple[tuple[str, str], ...] = (
    ("n_draft", "tokens per proposal (k): auto, or 1..4096"),
    ("p_min", "stop drafting below this draft probability: 0..1"),
    ("source", "what proposes: draft model, n-gram, MTP heads or auto"),
    ("temperature", "0..100, 0 = greedy"),
    ("sampler", "coupled = plain sampling's reply; rejection = min(1, p/q)"),
    ("top_k", "keep the k most likely tokens: 0 = off, or k ≥ 1"),
    ("top_p", "nucleus: 0..1, 1 = off"),
    ("min_p", "drop tokens below min_p × the top p: 0..1, 0 = off"),
    ("seed", "random (new each reply) or 0..2^63-1 · next reply"),
    ("max_tokens", "reply length cap: 1..1048576 · next reply"),
    ("repeat_penalty", "above 0, up to 100; 1 = off"),
    ("repeat_last_n", "tokens looked back: -1..16777216, 0 = off, -1 = all"),
    ("presence_penalty", "-100..100, 0 = off"),
    ("frequency_penalty", "-100..100, 0 = off"),
)
TUNE_HELP = dict(TUNE_FIELDS)
SUBTITLE = "from the next step (seed: next reply) · enter apply · esc cancel"
DIALOG_WIDTH = 100  # #dialog.tune in app.tcss
LABEL_AND_FIELD = 35  # .field-label (19) + the field (14) + the help's padding (2)
HELP_MIN = 30  # narrower than this beside the field, the help goes under it
_INT_FIELDS = frozenset({"n_draft", "top_k", "repeat_last_n", "max_tokens"})
CHOICE_FIELDS = frozenset({"source", "sampler"})
# what a field's text must look like, for the message when it does not
_KINDS = {"n_draft": '"auto" or a whole number', "seed": '"random" or a whole number'}


def parse_field(key: str, text: str) -> object:
    """One tune field's text as its setting's value: ``auto``/``random`` words, whole
    numbers, numbers. Bounds are checked later, by the settings themselves.

    Raises:
        ValueError: not a value of the field's kind; the message names the field and
            what it allows, e.g. ``n_draft: 'x' is not "auto" or a whole number; allowed: …``.
    """
    if key == "n_draft" and text == "auto":
        return "auto"
    if key == "seed" and text in ("", "random"):
        return None
    whole = key in _INT_FIELDS or key == "seed"
    try:
        return int(text) if whole else float(text)
    except ValueError:
        kind = _KINDS.get(key, "a whole number" if whole else "a number")
        raise ValueError(f"{key}: {text!r} is not {kind}; allowed: {TUNE_HELP[key]}") from None


class TuneScreen(ModalScreen["dict | None"]):
    """Speculation (n_draft, p_min, source) and sampling (temperature, sampler, seed, penalties).

    Each value is checked by the settings it goes into; ``apply`` (when given)
    then applies them and may still refuse (a :class:`SkippyError`, e.g. a k the
    batch cannot hold). Any error shows in the dialog and nothing changes.
    ``sources``: the draft sources offered (those the loaded models can draft with);
    ``source_note``: why one is not offered, shown under the choice.
    ``draft_settings``: which numeric settings the draft model runs with, shown above the buttons.
    Returns ``{"n_draft", "p_min", "source", "max_tokens", "sampling"}`` once applied, or None when cancelled.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Cancel"),
        *FIELD_TABS,
    ]

    def __init__(
        self,
        n_draft: object,
        p_min: float,
        sampling: SamplingParams,
        focus: str = "n_draft",
        apply: Callable[[dict[str, Any]], None] | None = None,
        *,
        max_tokens: int = 512,
        source: str = "auto",
        sources: Sequence[str] = DRAFT_SOURCES,
        source_note: str = "",
        draft_settings: str = "",
    ) -> None:
        super().__init__()
        self.draft_settings = draft_settings  # the numeric settings the draft model runs with, or ""
        self.sampling = sampling
        self.sources = tuple(sources) if source in sources else (source, *sources)  # the one in force stays
        self.source_note = source_note
        self.values = {"n_draft": str(n_draft), "p_min": number(p_min), "max_tokens": str(max_tokens), "source": source}
        for key, _ in TUNE_FIELDS:
            if key not in self.values:  # a sampling field
                value = getattr(sampling, key)
                self.values[key] = "random" if key == "seed" and value is None else number(value)
        self.first = focus
        self.apply = apply

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="tune") as v:
            v.border_title = "Speculation and sampling"
            v.border_subtitle = SUBTITLE
            for key, help_text in TUNE_FIELDS:
                with Horizontal(classes="field"):
                    yield Label(key, classes="field-label")
                    if key in CHOICE_FIELDS:
                        options = [(name, name) for name in (self.sources if key == "source" else SAMPLERS)]
                        yield Select(options, value=self.values[key], allow_blank=False, id=key, compact=True)
                    else:
                        yield Input(self.values[key], id=key, compact=True)
                    yield Label(help_text, classes="field-help")
                if key == "source" and self.source_note:
                    yield Static(self.source_note, id="source-note", markup=False)
            if self.draft_settings:  # a self-pair reads 100 % only with the target's (settings.DRAFT_LOAD)
                yield Static(f"draft model runs with {self.draft_settings}", id="tune-draft", markup=False)
            yield Static("", id="tune-error", markup=False)  # messages quote config sections: [target]
            with ButtonRow():
                yield Button("Apply", id="apply", variant="primary")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one(f"#{self.first}").focus()
        self._fit()

    def on_resize(self) -> None:
        self._fit()

    def _fit(self) -> None:
        """On a narrow terminal each field's help goes under it (it wrapped a word per line
        beside it), and the subtitle keeps only the keys (it is cut at the border)."""
        dialog = self.query_one("#dialog")
        # the dialog's width (app.tcss: 100, at most 95 %) less its border and padding (6)
        inside = min(DIALOG_WIDTH, int(self.size.width * 0.95)) - 6
        dialog.set_class(inside - LABEL_AND_FIELD < HELP_MIN, "-narrow")
        keys = "enter apply · esc cancel"
        dialog.border_subtitle = keys if inside < len(SUBTITLE) + 4 else SUBTITLE

    def _values(self) -> dict[str, Any]:
        """The fields as settings.

        Raises:
            ValueError: a field is not a value of its kind, or out of bounds (BoundsError).
        """
        typed = [key for key, _ in TUNE_FIELDS if key not in CHOICE_FIELDS]
        parsed: dict[str, Any] = {k: parse_field(k, self.query_one(f"#{k}", Input).value.strip()) for k in typed}
        for key in CHOICE_FIELDS:
            parsed[key] = self.query_one(f"#{key}", Select).value
        SpeculationSettings(n_draft=parsed["n_draft"], p_min=parsed["p_min"], source=parsed["source"])
        GenerationSettings(max_tokens=parsed["max_tokens"])
        sampling = {k: v for k, v in parsed.items() if k not in ("n_draft", "p_min", "source", "max_tokens")}
        return {
            "n_draft": parsed["n_draft"],
            "p_min": parsed["p_min"],
            "source": parsed["source"],
            "max_tokens": parsed["max_tokens"],
            "sampling": dataclasses.replace(self.sampling, **sampling),
        }

    @on(Input.Submitted)
    @on(Button.Pressed, "#apply")
    def _apply(self) -> None:
        try:
            values = self._values()
            if self.apply is not None:
                self.apply(values)
        except (ValueError, SkippyError) as e:  # BoundsError is both
            message = str(e)
            if isinstance(e, BoundsError) and e.key in TUNE_HELP:  # the engine's bound, in the dialog's words
                message = f"{e.key} = {e.value!r} is out of bounds; allowed: {TUNE_HELP[e.key]}"
            elif isinstance(e, BoundsError) and e.key.endswith(".n_batch"):  # a k the loaded batch cannot verify
                section = e.key.split(".")[0]
                message = (
                    f"n_draft is at most {int(e.value) - 1} with the models loaded: {e}. "
                    f"Set n_batch under [{section}] in the config file and restart to draft longer."
                )
            error = self.query_one("#tune-error", Static)
            error.update(message)
            self.call_after_refresh(error.scroll_visible, animate=False)  # the dialog may scroll on a short terminal
            return
        self.dismiss(values)

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(None)
