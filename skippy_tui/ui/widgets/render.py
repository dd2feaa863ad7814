"""Pure formatting: tokens with visible whitespace, proposal cells, bars, stats lines.

Styles come in as arguments (resolved from the TCSS component classes by the
widgets), so everything here is testable without an app.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text

from ...engine.events import ReplyFinished, Rollback, StepVerified, SyncInfo, TextSpan, TokenInfo
from ...engine.stats import AcceptanceStats
from ...transcript import count

_VISIBLE = str.maketrans({" ": "·", "\n": "↵", "\t": "→", "\r": "␍"})


def fg(style: Style) -> Style:
    """A TCSS component style without its background, for text drawn on any row.

    Use it on the full (non-partial) component style: that one has colours with
    alpha (``$text-muted``) already blended against the theme's background.
    """
    return Style(
        color=style.color, bold=style.bold, dim=style.dim, italic=style.italic,
        underline=style.underline, strike=style.strike, reverse=style.reverse,
    )  # fmt: skip


def visible(text: str) -> str:
    """Token text with whitespace made visible: space ·, newline ↵, tab →; empty as ∅."""
    return text.translate(_VISIBLE) if text else "∅"


def token_text(tok: TokenInfo | None, style: Style | str = "") -> Text:
    return Text(visible(tok.text) if tok else "∅", style=style)


def proposal_cell(step: StepVerified, accepted: Style | str, rejected: Style | str, sep: Style | str = "") -> Text:
    """The draft's tokens of one step, accepted then rejected, separated by thin spaces."""
    out = Text()
    for i, tok in enumerate(step.proposed):
        if i:
            out.append(" ", style=sep)
        out.append(visible(tok.text), style=accepted if i < step.n_accepted else rejected)
    if not step.proposed:
        out.append("—", style=sep)
    return out


SOURCE_NAMES = {"model": "the draft model", "ngram": "n-gram lookup", "mtp": "the MTP heads"}
"""What each step's ``draft_source`` drafted with, in words."""


def source_text(source: str, proposed: bool = True) -> str:
    """``mtp (the MTP heads)``; ``none (a plain step)`` for a step without a proposal (``proposed``
    False), ``not recorded`` for one a transcript kept no source of."""
    if not source:
        return "not recorded" if proposed else "none (a plain step)"
    return f"{source} ({SOURCE_NAMES[source]})" if source in SOURCE_NAMES else source


def rollback_text(rb: Rollback) -> str:
    """How the target dropped a step's uncommitted rows, in words, with the time it took."""
    rows = f"{rb.dropped} row{'s' if rb.dropped != 1 else ''}"
    how = {
        "kv": f"the KV cache dropped {rows}",
        "snapshot": f"the recurrent state went back {rows} to a snapshot",
        "restore": f"the recurrent state saved before the verify was restored ({rows} dropped) and "
        f"{rb.redecoded} accepted token{'s' if rb.redecoded != 1 else ''} decoded again",
        "reset": f"nothing could drop them: the cache was emptied and {rb.redecoded} tokens decoded again",
    }.get(rb.via, f"{rb.via}: {rows}")
    return f"{rb.label()}  ({how}, {rb.ms:.1f} ms)"


SYNC_LEGEND = "sync: = synced · e extend · t truncate · r reset · p plain"


def sync_short(sync: SyncInfo) -> str:
    """The sync badge in a few cells, for a narrow timeline (:data:`SYNC_LEGEND` explains it):
    ``=``, ``e41..44``, ``t38→44``, ``r0..44``, ``p`` (plain: no draft sync)."""
    if sync.kind == "none":
        return "p"
    if sync.kind == "synced":
        return "="
    if sync.kind == "truncate":
        return f"t{sync.start}→{sync.end}"
    return f"{sync.kind[0]}{sync.start}..{sync.end}"


def commit_cell(step: StepVerified, bonus: Style | str, correction: Style | str, plain: Style | str = "") -> Text:
    """``+tok`` for the target's token, styled by kind (bonus/correction/plain)."""
    style = {"bonus": bonus, "correction": correction}.get(step.commit_kind, plain)
    if step.committed is None:
        return Text("(reply ended)", style="dim")
    return Text("+", style=style) + token_text(step.committed, style)


def bar(fraction: float, width: int = 10) -> str:
    """A horizontal bar of ``width`` cells with eighth-block resolution."""
    fraction = min(max(fraction, 0.0), 1.0)
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    s = "█" * full + (" ▏▎▍▌▋▊▉"[part] if part else "")
    return s.ljust(width, " ")


_EIGHTHS = " ▁▂▃▄▅▆▇█"


def step_bars(values: Sequence[int | None], scale: int, width: int, full: Style | str, zero: Style | str) -> Text:
    """Accepted tokens per step, one column per step (the latest ``width``), two rows tall.

    Absolute scale: a full column is ``scale`` accepted tokens (the largest k
    seen), so a reply where every proposal was accepted shows full columns
    rather than a flat line. A proposal with nothing accepted shows ``·``; a
    plain step (no proposal, value ``None``) shows nothing.
    """
    values = list(values)[-width:] if width > 0 else []
    levels = 16
    heights = [round(min(v or 0, scale) / scale * levels) if scale else 0 for v in values]
    rows = []
    for row in (1, 0):
        line = Text()
        for v, h in zip(values, heights):
            if v is None:
                line.append(" ")
            elif row == 0 and v == 0:
                line.append("·", style=zero)
            else:
                line.append(_EIGHTHS[max(0, min(8, h - row * 8))], style=full)
        rows.append(line)
    return Text("\n").join(rows)


def stats_lines(stats: AcceptanceStats) -> list[tuple[str, str]]:
    """(label, value) pairs for one accumulator."""
    if stats.n_steps == 0:
        return [("steps", "—")]
    out = [
        ("acceptance", f"{stats.acceptance_rate:.1%}" if stats.n_drafted else "—"),
        ("mean accepted length", f"{stats.mean_accepted_length:.2f}" if stats.n_spec_steps else "—"),
        ("tokens/s", f"{stats.tokens_per_second:.1f}"),
        ("steps", f"{stats.n_steps} ({stats.n_tokens} tokens)"),
    ]
    return out


def stats_table(
    reply: AcceptanceStats, session: AcceptanceStats, label: Style | str, value: Style | str, positions: bool = True
) -> Text:
    """Reply and session stats side by side, then (with ``positions``) acceptance by draft position as bars."""
    rl = dict(stats_lines(reply))
    sl = dict(stats_lines(session))
    keys = ["acceptance", "mean accepted length", "tokens/s", "steps"]
    out = Text()
    out.append(f"{'':<21}{'reply':>16}{'session':>18}\n", style=label)
    for k in keys:
        out.append(f"{k:<21}", style=label)
        out.append(f"{rl.get(k, '—'):>16}{sl.get(k, '—'):>18}\n", style=value)
    n = max(len(reply.per_position), len(session.per_position)) if positions else 0
    if n:
        out.append("\nacceptance by draft position\n", style=label)
        out.append(f"{'':6}{'reply':<18}{'session'}\n", style=label)
        for i in range(n):
            r = reply.per_position[i] if i < len(reply.per_position) else None
            s = session.per_position[i] if i < len(session.per_position) else None
            out.append(f"  d{i + 1:<3}", style=label)
            out.append(f"{bar(r, 12)} {r:>4.0%}" if r is not None else " " * 17, style=value)
            out.append(f" {bar(s, 12)} {s:>4.0%}\n" if s is not None else "\n", style=value)
    return out


def origin_text(spans: Sequence[TextSpan], draft: Style | str, target: Style | str) -> Text:
    """A reply's text coloured by where each token came from."""
    out = Text()
    for s in spans:
        out.append(s.text, style=draft if s.origin == "draft" else target)
    return out


# -- fitting a line of fields into a width ----------------------------------------------------


@dataclass(frozen=True)
class Part:
    """One field of a one-line summary: its forms, widest first, and when each next one applies.

    ``forms[k + 1]`` replaces ``forms[k]`` at rank ``ranks[k]``: lower ranks give way
    first. An empty form drops the field. A part with one form is never shortened.
    """

    forms: tuple[str, ...]
    ranks: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if len(self.ranks) != len(self.forms) - 1:
            raise ValueError(f"{len(self.forms)} forms need {len(self.forms) - 1} ranks, got {len(self.ranks)}")


def fit_parts(parts: Sequence[Part], width: int, sep: str = " · ") -> str:
    """The parts joined by ``sep``, shortened rank by rank until the line fits ``width`` cells.

    What cannot be shortened stays, so the result may still be wider than ``width``
    when the parts that must stay are (the widget then cuts its end).
    """
    level = [0] * len(parts)
    moves = sorted((rank, i, k + 1) for i, p in enumerate(parts) for k, rank in enumerate(p.ranks))

    def line() -> str:
        return sep.join(p.forms[lv] for p, lv in zip(parts, level) if p.forms[lv])

    text = line()
    for _, i, lv in moves:
        if cell_len(text) <= width:
            break
        level[i] = max(level[i], lv)
        text = line()
    return text


# the reasons a reply ends on its own, said only when there is room
_ORDINARY_END = frozenset({"eos"})


def reply_footer(fin: ReplyFinished, width: int) -> str:
    """A reply's stats for its box's bottom border, at most ``width`` cells when it can be.

    How it ended comes first unless it was the ordinary end (eos): "cancelled" or
    "max_tokens" is never cut. Then tokens/s and tokens; the acceptance figures shorten
    (``acc 75%``, ``3.43 acc/step``) before they go, and the step count goes first. The
    widget's tooltip carries :func:`skippy_tui.transcript.reply_summary` in full, the legend.
    """
    parts: list[Part] = []
    if fin.reason not in _ORDINARY_END:
        said = fin.reason + (f": {fin.error}" if fin.error else "")
        parts.append(Part((said, fin.reason), (9,)) if fin.error else Part((said,)))
    parts.append(Part((count(fin.n_tokens, "token"), f"{fin.n_tokens} tok"), (3,)))
    parts.append(Part((f"{fin.tokens_per_second:.1f} tok/s",)))
    if fin.n_drafted:
        parts.append(Part((f"acceptance {fin.acceptance_rate:.1%}", f"acc {fin.acceptance_rate:.0%}", ""), (2, 7)))
        mal = f"{fin.mean_accepted_length:.2f}"
        parts.append(Part((f"mean accepted length {mal}", f"{mal} acc/step", ""), (1, 5)))
    parts.append(Part((count(fin.n_steps, "step"), ""), (0,)))
    if fin.reason in _ORDINARY_END:
        parts.append(Part((f"finished: {fin.reason}", ""), (0.5,)))
    return fit_parts(parts, width)
