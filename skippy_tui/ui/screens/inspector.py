"""The step inspector: one verify step's proposals, verdicts and the target's top-k at each position."""

from __future__ import annotations

from typing import Any, ClassVar

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Static

from ...engine.events import ReplyStarted, StepVerified
from ...transcript import reply_seed, reproduce_flags, reproduce_note, sampling_label, settings_at
from ..widgets.render import fg, rollback_text, source_text, visible


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
        head.append("source       ", style="bold")
        head.append(source_text(st.draft_source, bool(st.proposed)) + "\n")
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
        if st.rollback is not None:  # the target's cache held rows the step did not commit
            head.append("rollback     ", style="bold")
            head.append(rollback_text(st.rollback) + "\n")
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
