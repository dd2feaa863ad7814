"""Modal screens: load/config errors, the step inspector, system prompt, tuning, opening transcripts."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from rich.style import Style
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, DataTable, Input, Label, OptionList, Select, Static, TextArea

from ..engine.errors import BoundsError, IncompatibleModelsError, ModelFileError, SkippyError
from ..engine.events import ReplyStarted, StepVerified
from ..engine.sampling import SAMPLERS, SamplingParams
from ..engine.settings import GenerationSettings, SpeculationSettings
from ..transcript import number, reply_seed, reproduce_flags, reproduce_note, sampling_label, settings_at
from .field_tabs import FIELD_TABS
from .render import fg, visible


def how_to_fix(error: BaseException, config_file: str) -> str:
    """A hint for one error: what to change, and where."""
    from ..config import ConfigError

    if isinstance(error, ConfigError):
        return (
            f"Edit the key named above in {config_file}, or start with --config PATH to use another file "
            "(skippy-tui --print-config-path shows the default location)."
        )
    if isinstance(error, ModelFileError):
        return (
            f"Check [target] path / [draft] path in {config_file}, or pass --target PATH / --draft PATH. "
            "Leave both paths empty to use the built-in default pair."
        )
    if isinstance(error, IncompatibleModelsError):
        return (
            "Pick a draft model of the same family as the target (same tokenizer and special tokens), "
            "or start with --no-draft for plain decoding."
        )
    if isinstance(error, BoundsError):
        return f"Change that setting in {config_file} or on the command line to a value in bounds."
    return f"See the log and {config_file}; start with --no-draft or another --target to narrow it down."


class ErrorScreen(ModalScreen[str]):
    """What went wrong and how to fix it. Dismisses with "quit" or "continue"."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss('continue')", "Continue", show=False),
        Binding("q", "dismiss('quit')", "Quit", show=False),
    ]

    def __init__(self, title: str, message: str, fix: str, *, can_continue: bool = True) -> None:
        super().__init__()
        self.title_text = title
        self.message = message
        self.fix = fix
        self.can_continue = can_continue

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="error-dialog") as v:
            v.border_title = self.title_text
            yield Static(self.message, id="error-message", markup=False)
            yield Label("How to fix it", classes="dialog-heading")
            yield Static(self.fix, id="error-fix", markup=False)
            with Horizontal(classes="buttons"):
                if self.can_continue:
                    yield Button("Continue without models", id="continue", variant="primary")
                yield Button("Quit", id="quit", variant="error")

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id or "continue")


class InspectorScreen(ModalScreen[None]):
    """One step in full: draft vs target top-k at the first rejected position, context before/after.

    ← and → move to the previous and next step.
    """

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q,enter", "dismiss", "Close"),
        Binding("left", "move(-1)", "Previous step"),
        Binding("right", "move(1)", "Next step"),
    ]

    COMPONENT_CLASSES: ClassVar[set[str]] = {"inspector--accepted", "inspector--rejected", "inspector--chosen"}

    def __init__(self, steps: list[StepVerified], index: int, started: ReplyStarted | None = None) -> None:
        super().__init__()
        self.steps = steps
        self.index = index
        self.started = started  # the reply's start: its sampling settings and seed

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="inspector"):
            yield Static(id="inspect-head")
            yield DataTable(id="topk", cursor_type="none", zebra_stripes=True)
            yield Static(id="inspect-foot")

    def on_mount(self) -> None:
        table = self.query_one("#topk", DataTable)
        for label in ("rank", "draft token", "draft p (raw)", "target token", "target p (raw)"):
            table.add_column(label, key=label)
        self._show()

    def action_move(self, delta: int) -> None:
        new = self.index + delta
        if 0 <= new < len(self.steps):
            self.index = new
            self._show()

    def _show(self) -> None:
        st = self.steps[self.index]
        ok_style = fg(self.get_component_rich_style("inspector--accepted"))
        bad_style = fg(self.get_component_rich_style("inspector--rejected"))
        chosen = fg(self.get_component_rich_style("inspector--chosen"))
        dialog = self.query_one("#dialog")
        dialog.border_title = f"step {st.index}  ({self.index + 1} of {len(self.steps)})"
        dialog.border_subtitle = "← → step · esc close"
        head = Text()
        head.append("sync plan    ", style="bold")
        where = "decoded in the proposal's first draft call" if st.sync.folded else f"{st.sync_ms:.1f} ms"
        head.append(f"{st.sync.label()}  ({where})\n")
        head.append("context      ", style="bold")
        head.append(f"{st.n_past_before} → {st.n_past_after} tokens in the target KV cache\n")
        head.append("proposal     ", style="bold")
        head.append(f"k={st.k}" + (f" ({st.k_reason})" if st.k_reason else "") + f", {len(st.proposed)} drafted, ")
        head.append(f"{st.n_accepted} accepted  (draft {st.draft_ms:.1f} ms, verify {st.verify_ms:.1f} ms)\n")
        for i, tok in enumerate(st.proposed):
            # verification stops at the first rejection: the positions after it were never checked
            verdict = "accepted" if i < st.n_accepted else "rejected" if i == st.n_accepted else "not checked"
            head.append(f"  d{i + 1} ", style="dim")
            style = {"accepted": ok_style, "rejected": bad_style}.get(verdict, "dim")
            head.append(f"{visible(tok.text):<16}", style=style)
            p = f"{tok.prob:.3f}" if tok.prob is not None else "—"
            head.append(f" p={p}  {verdict}\n", style="" if verdict == "rejected" else "dim")
        head.append("committed    ", style="bold")
        c = st.committed
        head.append(f"{visible(c.text) if c else '∅'}", style=chosen)
        head.append(f"  ({st.commit_kind}, id {c.id if c else '—'})\n")
        self._sampling_lines(head, st, bad_style)
        self.query_one("#inspect-head", Static).update(head)

        table = self.query_one("#topk", DataTable)
        table.clear()
        rejected = st.proposed[st.n_accepted] if st.n_accepted < len(st.proposed) else None
        for r in range(max(len(st.draft_top), len(st.target_top))):
            d = st.draft_top[r] if r < len(st.draft_top) else None
            t = st.target_top[r] if r < len(st.target_top) else None
            d_style = bad_style if (d and rejected and d.id == rejected.id) else ""
            t_style = chosen if (t and c and t.id == c.id) else ""
            table.add_row(
                str(r + 1),
                Text(visible(d.text), style=d_style) if d else "",
                f"{d.prob:.3f}" if d and d.prob is not None else "",
                Text(visible(t.text), style=t_style) if t else "",
                f"{t.prob:.3f}" if t and t.prob is not None else "",
            )
        foot = self.query_one("#inspect-foot", Static)
        if rejected is not None:
            chose = {"greedy": "the target's most likely token was", "coupled": "the target's draw (same noise) was"}
            foot.update(
                f"top-{max(len(st.draft_top), len(st.target_top))} at draft position {st.n_accepted + 1}, the first "
                f"rejected one: the draft proposed {visible(rejected.text)!r}, "
                f"{chose.get(rule_of(self._settings()), 'the target drew from norm(max(0, p − q))')} "
                f"{visible(c.text) if c else '∅'!r}."
            )
            table.display = True
        else:
            table.display = False
            foot.update(
                "No rejected position: every proposed token was accepted."
                if st.proposed
                else "A plain step: no proposal (speculation off or no room)."
            )

    def _settings(self) -> dict[str, Any]:
        """The sampling settings in effect at the shown step (empty when not recorded)."""
        return settings_at(self.started, self.steps, self.index)

    def _sampling_lines(self, head: Text, st: StepVerified, bad_style: Style) -> None:
        """The first rejection's probabilities side by side and why it was rejected, the step's
        sampling, the reply's seed."""
        settings = self._settings()
        if st.n_accepted < len(st.proposed):
            rejected = st.proposed[st.n_accepted]
            q, p = rejected.prob, st.p_target
            head.append("rejected     ", style="bold")
            head.append(visible(rejected.text), style=bad_style)
            head.append(f"  draft p={_prob(q, 'n-gram' if st.draft_source == 'ngram' else 'not recorded')}")
            head.append(f"  target p={_prob(p, 'not recorded')}")
            if settings.get("temperature"):
                # the top-k table below is each model's raw softmax, so its numbers differ from these
                head.append("  (as sampled: filters and T applied)", style="dim")
            head.append("\nwhy          ", style="bold")
            head.append(rejection_reason(st, settings) + "\n")
        head.append("sampling     ", style="bold")
        head.append(sampling_label(settings) if settings else "not recorded")
        if st.sampling is not None:
            head.append("  (changed at this step, F3)", style="bold")
        head.append("\nseed         ", style="bold")
        seed = reply_seed(self.started)
        if seed is None:
            head.append("not recorded (this transcript predates per-reply seeds)")
            return
        head.append(f"{seed[0]} ({'fixed' if seed[1] else 'drawn for this reply'})\n")
        head.append("reproduce    ", style="bold")
        note = reproduce_note(self.started, self.steps)
        head.append(reproduce_flags(self.started) + (f"  {note}" if note else ""))


def rule_of(settings: dict[str, Any]) -> str:
    """The acceptance rule a step ran under: ``greedy``, ``coupled`` or ``rejection``.

    Greedy when the temperature is 0 or not recorded (transcripts from before
    sampling was recorded were greedy).
    """
    if not settings.get("temperature"):
        return "greedy"
    return "rejection" if settings.get("sampler") == "rejection" else "coupled"


def rejection_reason(st: StepVerified, settings: dict[str, Any]) -> str:
    """Why the step's first rejected proposal was rejected, by the rule that applied.

    At T > 0 a rejection is not the target disagreeing on its most likely
    token: under ``coupled`` the target's draw with the shared Gumbel noise
    differed; under ``rejection`` a uniform draw fell above ``min(1, p/q)``.
    """
    c = st.committed
    chose = repr(visible(c.text)) if c is not None else "∅"
    rule = rule_of(settings)
    if rule == "greedy":
        return f"greedy: a proposal is accepted while it is the target's most likely token; that was {chose}"
    if rule == "coupled":
        return (
            "coupled sampling: a proposal is accepted while it equals the target's own draw with the same "
            f"noise, argmax(log p + g); that draw was {chose}"
        )
    q = st.proposed[st.n_accepted].prob if st.n_accepted < len(st.proposed) else None
    if q is None and st.draft_source == "ngram":
        q = 1.0  # a deterministic proposal: q is one-hot on it
    p = st.p_target
    odds = f" = {min(1.0, p / q):.3f}" if p is not None and q else " (p or q not recorded)"
    return (
        f"rejection sampling: accepted with probability min(1, p/q){odds} and the draw fell above it; "
        f"the target then drew {chose} from norm(max(0, p − q))"
    )


def _prob(p: float | None, missing: str) -> str:
    return f"{p:.3f}" if p is not None else f"— ({missing})"


class SystemPromptScreen(ModalScreen["str | None"]):
    """Edit the system prompt. Returns the new text, or None when cancelled."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Cancel"),
        Binding("ctrl+s", "save", "Save"),
        *FIELD_TABS,
    ]

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog") as v:
            v.border_title = "System prompt"  # the subtitle fits the width (_fit)
            yield TextArea(self.text, id="system-text", soft_wrap=True, tab_behavior="focus")
            with Horizontal(classes="buttons"):
                yield Button("Save", id="save", variant="primary")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        area = self.query_one("#system-text", TextArea)
        area.focus()
        area.move_cursor(area.document.end)
        self._fit()

    def on_resize(self) -> None:
        self._fit()

    def _fit(self) -> None:
        """The text area's ten rows shrink (to three) on a short terminal, so that Save and
        Cancel stay in the dialog's 90 % of the screen below its border and padding (4 rows)
        and the buttons (3); on a narrow one the buttons narrow."""
        room = int(self.size.height * 0.9) - 7
        self.query_one("#system-text", TextArea).styles.height = max(3, min(10, room))
        # two 16-column buttons need 36 of a 40-column terminal's 34 inside the dialog
        narrow = self.size.width < 50
        for button in self.query(Button):
            button.styles.min_width = 10 if narrow else None
        keys = "ctrl+s save · esc cancel"  # the subtitle is cut at the border: the keys first when narrow
        self.query_one("#dialog").border_subtitle = (
            keys if self.size.width < 70 else f"applies from the next reply · {keys}"
        )

    def action_save(self) -> None:
        self.dismiss(self.query_one("#system-text", TextArea).text.strip())

    @on(Button.Pressed, "#save")
    def _save(self) -> None:
        self.action_save()

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(None)


# (key, help) of each tune field, in order; the help says what the field takes. The sampler is a
# choice, the rest are typed.
TUNE_FIELDS: tuple[tuple[str, str], ...] = (
    ("n_draft", "tokens per proposal (k): auto, or 1..4096"),
    ("p_min", "stop drafting below this draft probability: 0..1"),
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
_INT_FIELDS = frozenset({"n_draft", "top_k", "repeat_last_n", "max_tokens"})
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
    """Speculation (n_draft, p_min) and sampling (temperature, sampler, seed, penalties).

    Each value is checked by the settings it goes into; ``apply`` (when given)
    then applies them and may still refuse (a :class:`SkippyError`, e.g. a k the
    batch cannot hold). Any error shows in the dialog and nothing changes.
    Returns ``{"n_draft", "p_min", "max_tokens", "sampling"}`` once applied, or None when cancelled.
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
    ) -> None:
        super().__init__()
        self.sampling = sampling
        self.values = {"n_draft": str(n_draft), "p_min": number(p_min), "max_tokens": str(max_tokens)}
        for key, _ in TUNE_FIELDS:
            if key not in self.values:  # a sampling field
                value = getattr(sampling, key)
                self.values[key] = "random" if key == "seed" and value is None else number(value)
        self.first = focus
        self.apply = apply

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog", classes="tune") as v:
            v.border_title = "Speculation and sampling"
            v.border_subtitle = "from the next step (seed: next reply) · enter apply · esc cancel"
            for key, help_text in TUNE_FIELDS:
                with Horizontal(classes="field"):
                    yield Label(key, classes="field-label")
                    if key == "sampler":
                        options = [(name, name) for name in SAMPLERS]
                        yield Select(options, value=self.values[key], allow_blank=False, id=key, compact=True)
                    else:
                        yield Input(self.values[key], id=key, compact=True)
                    yield Label(help_text, classes="field-help")
            yield Static("", id="tune-error")
            with Horizontal(classes="buttons"):
                yield Button("Apply", id="apply", variant="primary")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one(f"#{self.first}").focus()

    def _values(self) -> dict[str, Any]:
        """The fields as settings.

        Raises:
            ValueError: a field is not a value of its kind, or out of bounds (BoundsError).
        """
        raw = {key: self.query_one(f"#{key}", Input).value.strip() for key, _ in TUNE_FIELDS if key != "sampler"}
        parsed: dict[str, Any] = {key: parse_field(key, text) for key, text in raw.items()}
        parsed["sampler"] = self.query_one("#sampler", Select).value
        SpeculationSettings(n_draft=parsed["n_draft"], p_min=parsed["p_min"])
        GenerationSettings(max_tokens=parsed["max_tokens"])
        sampling = {k: v for k, v in parsed.items() if k not in ("n_draft", "p_min", "max_tokens")}
        return {
            "n_draft": parsed["n_draft"],
            "p_min": parsed["p_min"],
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
            self.query_one("#tune-error", Static).update(message)
            return
        self.dismiss(values)

    @on(Button.Pressed, "#cancel")
    def _cancel(self) -> None:
        self.dismiss(None)


class OpenTranscriptScreen(ModalScreen["Path | None"]):
    """Pick a saved transcript (newest first) or type a path."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "dismiss(None)", "Cancel"), *FIELD_TABS]

    def __init__(self, folder: Path) -> None:
        super().__init__()
        self.folder = folder
        found = folder.glob("*.json") if folder.is_dir() else []
        self.files = sorted(found, key=lambda p: p.stat().st_mtime, reverse=True)
        # focus the list (or the path field), not the scroll area around the list
        self.AUTO_FOCUS = "#files" if self.files else "#path"

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog") as v:
            v.border_title = "Open transcript"
            v.border_subtitle = "enter open · esc cancel"
            yield Label(f"Saved in {self.folder}:" if self.files else f"No transcripts in {self.folder} yet.")
            if self.files:
                with VerticalScroll(id="transcript-list"):
                    yield OptionList(*[p.name for p in self.files], id="files")
            yield Input(placeholder="or a path to a .json transcript", id="path")

    @on(OptionList.OptionSelected)
    def _picked(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(self.files[event.option_index])

    @on(Input.Submitted)
    def _typed(self, event: Input.Submitted) -> None:
        if event.value.strip():
            self.dismiss(Path(event.value.strip()).expanduser())
