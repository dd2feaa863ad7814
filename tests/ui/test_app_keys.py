"""The app in a person's hands: keyboard-only use, the help screen, inspector wording,
the F3 dialog's messages and fields, copying, model labels (issue 12, faults 6–10).

Driven on the committed transcript fixtures, no models loaded.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ui_helpers import CHAT_JSON, SAMPLED_JSON, SIZE, run, ui_config, wait_for_screen, wait_until

from skippy_tui.transcript import Transcript
from skippy_tui.ui.app import SkippyApp
from skippy_tui.ui.chat import AssistantMessage
from skippy_tui.ui.render import visible
from skippy_tui.ui.screens import InspectorScreen, rejection_reason


def replay_app(path: Path = CHAT_JSON) -> SkippyApp:
    return SkippyApp(ui_config(), transcript=Transcript.load(path), transcript_path=path, load_models=False)


async def _inspect(app: SkippyApp, pilot, row: int) -> InspectorScreen:
    table = app.panel.timeline
    table.focus()
    table.move_cursor(row=row)
    await pilot.press("enter")
    return await wait_for_screen(pilot, app, InspectorScreen, 5)


def _head(screen: InspectorScreen) -> str:
    return str(screen.query_one("#inspect-head").render())


# -- fault 7: inspector wording -------------------------------------------------------------


def test_inspector_says_positions_after_the_first_rejection_were_not_checked() -> None:
    async def body() -> None:
        app = replay_app()
        async with app.run_test(size=SIZE) as pilot:
            steps = app.panel.timeline.steps
            # a step with at least two positions after its first rejection
            idx = next(i for i, s in enumerate(steps) if s.n_accepted < len(s.proposed) - 2)
            st = steps[idx]
            head = _head(await _inspect(app, pilot, idx))
            lines = [line for line in head.splitlines() if line.startswith("  d")]
            verdicts = [line.rsplit("  ", 1)[1] for line in lines]
            n_after = len(st.proposed) - st.n_accepted - 1
            assert verdicts == ["accepted"] * st.n_accepted + ["rejected"] + ["not checked"] * n_after
            # greedy: the rule is the target's most likely token
            assert "why          greedy: a proposal is accepted while it is the target's most likely" in head
            foot = str(app.screen.query_one("#inspect-foot").render())
            assert f"the target's most likely token was {visible(st.committed.text)!r}" in foot

    run(body())


def test_inspector_at_temperature_says_the_coupled_rule_not_a_disagreement() -> None:
    saved = Transcript.load(SAMPLED_JSON)

    async def body() -> None:
        app = replay_app(SAMPLED_JSON)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.click(app.query(AssistantMessage).first())
            await wait_until(pilot, lambda: app.panel.timeline.steps == saved.entries[1].steps, 5, "reply 1 steps")
            steps = saved.entries[1].steps
            idx = next(i for i, s in enumerate(steps) if s.n_accepted < len(s.proposed))
            screen = await _inspect(app, pilot, idx)
            head = _head(screen)
            chose = visible(steps[idx].committed.text)
            assert "why          coupled sampling: a proposal is accepted while it equals the target's own draw" in head
            assert f"argmax(log p + g); that draw was {chose!r}" in head
            assert "most likely" not in head
            foot = str(screen.query_one("#inspect-foot").render())
            assert f"the target's draw (same noise) was {chose!r}" in foot

    run(body())


def test_rejection_reason_names_the_rule_that_applied() -> None:
    reply = Transcript.load(SAMPLED_JSON).entries[1]
    st = next(s for s in reply.steps if s.n_accepted < len(s.proposed))
    q, p = st.proposed[st.n_accepted].prob, st.p_target
    chose = repr(visible(st.committed.text))
    rejection = {"temperature": 0.8, "sampler": "rejection"}
    assert rejection_reason(st, rejection) == (
        f"rejection sampling: accepted with probability min(1, p/q) = {min(1.0, p / q):.3f} and the draw fell "
        f"above it; the target then drew {chose} from norm(max(0, p − q))"
    )
    # an n-gram proposal has no q: it is deterministic, q = 1
    ngram = dataclasses.replace(
        st,
        draft_source="ngram",
        proposed=tuple(dataclasses.replace(t, prob=None) for t in st.proposed),
    )
    assert f"min(1, p/q) = {min(1.0, p):.3f}" in rejection_reason(ngram, rejection)
    assert "coupled sampling" in rejection_reason(st, {"temperature": 0.8, "sampler": "coupled"})
    assert rejection_reason(st, {"temperature": 0.0, "sampler": "rejection"}).startswith("greedy:")
    assert rejection_reason(st, {}).startswith("greedy:")  # not recorded: an old, greedy transcript
