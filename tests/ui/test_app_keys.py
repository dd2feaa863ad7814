"""The app in a person's hands: keyboard-only use, the help screen, inspector wording,
the F3 dialog's messages and fields, copying, model labels (issue 12, faults 6–10).

Driven on the committed transcript fixtures, no models loaded.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from rich.text import Text
from textual import events
from textual.widgets import Input
from ui_helpers import (
    CHAT_JSON,
    SAMPLED_JSON,
    SIZE,
    one_read,
    replay_app,
    run,
    settle,
    ui_config,
    wait_for_screen,
    wait_until,
)

from skippy_tui.cli import main
from skippy_tui.engine.load.labels import model_label
from skippy_tui.transcript import Transcript
from skippy_tui.ui.app import SkippyApp
from skippy_tui.ui.clipboard import code_blocks
from skippy_tui.ui.screens.inspector import InspectorScreen, rejection_reason
from skippy_tui.ui.screens.tune import TuneScreen
from skippy_tui.ui.widgets.chat import AssistantMessage
from skippy_tui.ui.widgets.render import visible


async def _inspect(app: SkippyApp, pilot, row: int) -> InspectorScreen:
    table = app.panel.timeline
    table.focus()
    table.move_cursor(row=row)
    await pilot.press("enter")
    return await wait_for_screen(pilot, app, InspectorScreen, 5)


def _head(screen: InspectorScreen) -> str:
    return str(screen.query_one("#inspect-head").render())


# -- the inspector's wording ------------------------------------------------------------------


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


# -- names -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "name", "file_type", "width", "label"),
    [
        (
            "/c/SmolLM2-135M-Instruct.F32.gguf",
            "Smollm2 135M 8k Lc100K Mix1 Ep2",
            "F32",
            40,
            "SmolLM2-135M-Instruct F32",
        ),
        ("/c/SmolLM2-135M-Instruct.Q4_1.gguf", "Smollm2 135M 8k Lc100K Mix1 Ep2", "Q4_1", 16, "SmolLM2-13… Q4_1"),
        ("/m/qwen2.5-7b-instruct-q4_k_m-00001-of-00002.gguf", "Qwen", "Q4_K_M", 40, "qwen2.5-7b-instruct Q4_K_M"),
        ("/m/model.gguf", "Some Model", "Q8_0", 40, "model Q8_0"),
        (None, "Smollm2 135M", "F32", 40, "Smollm2 135M F32"),  # an old transcript: no path recorded
    ],
)
def test_model_label_is_the_file_stem_and_quantization(path, name, file_type, width, label) -> None:
    assert model_label(path, name, file_type, width) == label


def test_status_bar_tells_target_and_draft_apart_and_the_tooltip_has_the_full_names() -> None:
    saved = Transcript.load(CHAT_JSON).models

    async def body() -> None:
        app = replay_app()
        async with app.run_test(size=(200, 30)) as pilot:
            await pilot.pause()
            status = str(app.query_one("#status").render())
            assert "target SmolLM2-135M-Instruct F32 │ draft SmolLM2-135M-Instruct Q4_1" in status
            assert "Lc100K" not in status  # the GGUF's general.name, the same for both
            tooltip = str(app.query_one("#status").tooltip)
            for role in ("target", "draft"):
                assert f"'{saved[role]['name']}' · {saved[role]['path']}" in tooltip
        async with replay_app().run_test(size=(100, 30)) as pilot:  # narrow: shortened, still distinct
            await pilot.pause()
            status = str(pilot.app.query_one("#status").render())
            assert "… F32 │ draft SmolLM2" in status and "… Q4_1 │" in status

    run(body())


def test_cli_help_says_no_command_opens_the_app_and_where_keys_are(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines: compare words
    assert "With no COMMAND, skippy-tui opens the app (the chat) on the configured models" in out
    assert "F1 lists every key and explains the panel" in out and "Ctrl+P" in out
    assert "commands (none: open the app)" in out


# -- keyboard only, help ----------------------------------------------------------------------


def _shown(app: SkippyApp) -> list[bool]:
    return [r.has_class("-shown") for r in app.query(AssistantMessage)]


def test_keyboard_picks_the_reply_the_panel_shows() -> None:
    saved = Transcript.load(CHAT_JSON)

    async def body() -> None:
        app = replay_app()
        async with app.run_test(size=SIZE) as pilot:
            assert _shown(app) == [False, True]  # the last reply, as opened
            await pilot.press("alt+up")
            await wait_until(pilot, lambda: app.panel.timeline.steps == saved.entries[1].steps, 5, "reply 1 steps")
            assert _shown(app) == [True, False] and "reply 1 of 2" in str(app.query_one("#panel-title").render())
            await pilot.press("alt+up")  # the first stays
            assert _shown(app) == [True, False]
            await pilot.press("alt+down")
            await wait_until(pilot, lambda: app.panel.timeline.steps == saved.entries[3].steps, 5, "reply 2 steps")
            assert _shown(app) == [False, True]
            # the palette has both, with their keys
            from skippy_tui.ui.commands import SkippyCommands

            titles = {action: title for title, _, action in SkippyCommands(app.screen)._commands()}
            assert titles["show_reply(-1)"] == f"Show previous reply  ({app.key_for('show_reply(-1)')})"
            assert titles["show_reply(1)"] == f"Show next reply  ({app.key_for('show_reply(1)')})"
            assert app.key_for("show_reply(-1)") != app.key_for("show_reply(1)")
            await app.run_action("show_reply(-1)")
            assert _shown(app) == [True, False]

    run(body())


def test_typing_while_the_panel_or_the_chat_has_focus_goes_to_the_input() -> None:
    async def body() -> None:
        app = replay_app()
        async with app.run_test(size=SIZE) as pilot:
            app.panel.timeline.focus()
            await pilot.pause()
            await pilot.press("h", "i", "space")
            assert app.focused is app.prompt and app.prompt.text == "hi "
            app.chat.focus()
            await pilot.pause()
            await pilot.press("y", "o")
            assert app.focused is app.prompt and app.prompt.text == "hi yo"
            # keys the panel uses still work there
            timeline = app.panel.timeline
            timeline.focus()
            timeline.move_cursor(row=0)
            await pilot.press("down")
            assert app.focused is timeline and timeline.cursor_row == 1 and app.prompt.text == "hi yo"

    run(body())


def test_esc_closes_the_keys_panel() -> None:
    async def body() -> None:
        app = replay_app()
        async with app.run_test(size=SIZE) as pilot:
            app.action_show_help_panel()  # the palette's "Keys" command
            await wait_until(pilot, lambda: bool(app.screen.query("HelpPanel")), 5, "the keys panel")
            await pilot.press("escape")
            await wait_until(pilot, lambda: not app.screen.query("HelpPanel"), 5, "the keys panel to close")

    run(body())


def test_f1_help_lists_the_keys_the_panel_columns_badges_and_colours() -> None:
    from skippy_tui.ui.screens.help import HelpScreen
    from skippy_tui.ui.widgets.timeline import COLUMNS

    saved = Transcript.load(CHAT_JSON).models

    async def body() -> None:
        app = replay_app()
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f1")
            screen = await wait_for_screen(pilot, app, HelpScreen, 5)
            text = screen.plain(200)
            lines = text.splitlines()
            keys = {k for line in lines for k in line.strip().split("  ")[0].split(" / ")}  # the key column
            # every app binding, with its keys
            for b in app.BINDINGS:
                for key in b.key.split(","):
                    assert key.replace("escape", "esc").replace("up", "↑").replace("down", "↓") in keys, key
            for key in ("alt+c", "alt+k", "alt+↑", "alt+↓", "ctrl+p", "tab", "shift+tab"):
                assert key in keys, key
            for label, _ in COLUMNS:  # every column of the panel is explained
                assert any(line.strip().startswith(label + " ") for line in lines), label
            for badge in ("synced", "extend a..b", "truncate k→b", "reset 0..b", "plain"):
                assert any(line.strip().startswith(badge) for line in lines), badge
            assert "≈N× plain  " in text and "over plain decoding" in " ".join(text.split())
            for role in ("target", "draft"):  # the full names the status bar shortens
                assert f"'{saved[role]['name']}'" in text and saved[role]["path"] in " ".join(text.split())
            # the legend is drawn in the colours the origin view uses
            reply = app.query(AssistantMessage).first()
            legend = screen.text()
            spans = {}
            for part in legend.renderables:
                inner = getattr(part, "renderable", part)
                if isinstance(inner, Text):
                    for span in inner.spans:
                        spans[inner.plain[span.start : span.end]] = span.style
            assert (
                spans["a draft token the target accepted"].color
                == reply.get_component_rich_style("origin--draft").color
            )
            assert (
                spans["a token the target chose itself"].color == reply.get_component_rich_style("origin--target").color
            )
            await pilot.press("f1")
            await wait_until(pilot, lambda: not isinstance(app.screen, HelpScreen), 5, "f1 to close help")
            await pilot.press("f1")
            await wait_for_screen(pilot, app, HelpScreen, 5)
            await pilot.press("escape")
            await wait_until(pilot, lambda: not isinstance(app.screen, HelpScreen), 5, "esc to close help")

    run(body())


# -- copy ---------------------------------------------------------------------------------------

TWO_BLOCKS = "Two ways:\n\n```python\nprint(1)\n```\n\nor\n\n~~~sh\necho 1\nls\n~~~\n"


def test_code_blocks_are_found_as_the_chat_renders_them() -> None:
    assert code_blocks(TWO_BLOCKS) == [("python", "print(1)\n"), ("sh", "echo 1\nls\n")]
    assert code_blocks("no code, `inline` is not a block") == []
    assert code_blocks("text\n\n    indented = 1\n") == [("", "indented = 1\n")]


def test_copy_the_shown_reply_or_one_of_its_code_blocks() -> None:
    from skippy_tui.ui.clipboard import CodeBlockScreen

    transcript = Transcript.load(CHAT_JSON)
    transcript.entries[3].content = TWO_BLOCKS
    one_block = transcript.entries[1].content + "\n\n```\nx = 1\n```\n"
    transcript.entries[1].content = one_block

    async def body() -> None:
        app = SkippyApp(ui_config(), transcript=transcript, transcript_path=CHAT_JSON, load_models=False)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("alt+c")  # the shown reply: the last
            assert app.clipboard == TWO_BLOCKS
            assert "Copied reply 2" in list(app._notifications)[-1].message
            await pilot.press("alt+k")  # two blocks: pick one
            screen = await wait_for_screen(pilot, app, CodeBlockScreen, 5)
            assert [str(o.prompt) for o in screen.query_one("#blocks").options] == [
                "1. python · print(1) · 1 line",
                "2. sh · echo 1 · 2 lines",
            ]
            await pilot.press("down", "enter")
            await wait_until(pilot, lambda: not isinstance(app.screen, CodeBlockScreen), 5, "the picker to close")
            assert app.clipboard == "echo 1\nls\n"
            await pilot.press("alt+up")  # reply 1 in the panel: its one block is copied at once
            await pilot.press("alt+k")
            assert app.clipboard == "x = 1\n" and not isinstance(app.screen, CodeBlockScreen)
            # from the palette too
            from skippy_tui.ui.commands import SkippyCommands

            titles = {action: title for title, _, action in SkippyCommands(app.screen)._commands()}
            assert titles["copy_reply"] == "Copy reply  (alt+c)"
            assert titles["copy_code"] == "Copy code block  (alt+k)"
            await app.run_action("copy_reply")
            assert app.clipboard == one_block

    run(body())


def test_alt_c_from_a_terminal_copies_and_types_nothing() -> None:
    """A terminal's Alt+C is ESC c, which Textual reads as ``Key("alt+c", character="c")``
    (printable): Pilot's press has no character, so the key is posted as the driver posts it."""
    transcript = Transcript.load(CHAT_JSON)

    async def body() -> None:
        app = SkippyApp(ui_config(), transcript=transcript, transcript_path=CHAT_JSON, load_models=False)
        async with app.run_test(size=SIZE) as pilot:
            for focus in (app.prompt, app.chat):
                focus.focus()
                await pilot.pause()
                app.copy_to_clipboard("")
                key = events.Key("alt+c", "c")
                assert key.is_printable
                app.post_message(key)
                await pilot.pause()
                assert app.clipboard == transcript.entries[-1].content, focus
                assert app.prompt.text == "", (focus, app.prompt.text)

    run(body())


def test_keys_typed_fast_after_tab_land_in_the_next_field_of_every_dialog(tmp_path: Path) -> None:
    """F3's Tab race (tests/ui/test_tune.py) in the other dialogs where a field takes keys itself (an Input
    or TextArea types them): the history's filter, the open dialog's path, the system
    prompt's text. (A key bound to an action is looked up after it bubbles, along the
    focus as it is by then, so buttons and tables were never affected.)"""
    from skippy_tui.history import HistoryStore
    from skippy_tui.ui.screens.history import HistoryScreen
    from skippy_tui.ui.screens.open import OpenTranscriptScreen
    from skippy_tui.ui.screens.system_prompt import SystemPromptScreen

    (tmp_path / "saved.json").write_text("{}", "utf-8")
    results: list[object] = []

    async def body() -> None:
        app = SkippyApp(ui_config(), load_models=False)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            # history: tab and "d" from the filter: the table has "d" and hands it back to the filter
            # (typed before the tab took effect, it would stay in the filter and the table keep the focus)
            app.push_screen(HistoryScreen(HistoryStore(tmp_path / "history")))
            screen = await wait_for_screen(pilot, app, HistoryScreen, 5)
            screen.filter_input.focus()
            await pilot.pause()
            one_read(app, ("tab", None), ("d", "d"))
            await wait_until(pilot, lambda: screen.filter_input.value == "d", 5, "'d' in the filter")
            for _ in range(3):
                await pilot.pause()
            assert screen.filter_input.has_focus
            await pilot.press("escape")
            # open: from the list of saved files, tab and a path: the path field has it
            app.push_screen(OpenTranscriptScreen(tmp_path), results.append)
            screen = await wait_for_screen(pilot, app, OpenTranscriptScreen, 5)
            assert screen.focused is not None and screen.focused.id == "files"
            one_read(app, ("tab", None), ("x", "x"), ("y", "y"))
            await wait_until(pilot, lambda: screen.query_one("#path", Input).value == "xy", 5, "the path 'xy'")
            await pilot.press("escape")
            # system prompt: tab and enter from the text presses Save (not a new line in the text)
            app.push_screen(SystemPromptScreen("Be brief."), results.append)
            await wait_for_screen(pilot, app, SystemPromptScreen, 5)
            one_read(app, ("tab", None), ("enter", "\r"))
            await wait_until(pilot, lambda: "Be brief." in results, 5, "Save with the text unchanged")
        assert results == [None, "Be brief."]

    run(body())


def test_copy_with_no_reply_says_so() -> None:
    async def body() -> None:
        app = SkippyApp(ui_config(), load_models=False)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("alt+c")
            await pilot.press("alt+k")
            assert app.clipboard == ""
            assert [n.message for n in app._notifications][-2:] == ["No reply to copy yet."] * 2

    run(body())


def test_tab_moves_the_focus_in_the_order_f1_gives() -> None:
    """F1 said "input, chat, panel" while Tab went input → panel → chat."""
    from skippy_tui.ui.screens.help import CONTEXT_KEYS

    line = next(text for keys, text in CONTEXT_KEYS if keys.startswith("tab"))
    order = {"input": "prompt", "panel": "panel", "chat": "chat"}
    said = [order[w] for w in line.split(": ", 1)[1].split(" (")[0].split(" → ")]

    async def body() -> None:
        app = replay_app()
        async with app.run_test(size=SIZE) as pilot:
            app.prompt.focus()
            await pilot.pause()
            seen = []
            for _ in said:
                node = app.focused
                while node is not None and node.id not in order.values():
                    node = node.parent
                seen.append(node.id if node is not None else None)
                await pilot.press("tab")
            assert seen == said

    run(body())


def test_the_footer_ends_with_the_palette_key_and_no_stray_letter() -> None:
    """The compact footer's right margin on the docked palette key left the last column to the
    binding scrolled beneath it: `^p palettew`, `palette3`, `palettef` by width."""
    import html
    import re

    def last_row(svg: str) -> str:
        cells: dict[float, list[tuple[float, str]]] = {}
        for m in re.finditer(r'<text class="[^"]*" x="([\d.]+)" y="([\d.]+)"[^>]*>(.*?)</text>', svg):
            cells.setdefault(float(m[2]), []).append((float(m[1]), html.unescape(m[3])))
        return "".join(t for _, t in sorted(cells[max(cells)])).replace("\xa0", " ")

    async def body() -> None:
        for width in (40, 80, 100, 120):
            app = replay_app()
            async with app.run_test(size=(width, 20)) as pilot:
                await settle(pilot)
                assert last_row(app.export_screenshot()).rstrip().endswith("^p palette"), width

    run(body())


def test_the_footer_remounts_its_keys_only_when_they_change() -> None:
    """Textual's footer remounted every key on each focus change (half the app's start-up CPU);
    the keys shown still follow the focus."""

    async def body() -> None:
        app = replay_app()
        async with app.run_test(size=SIZE) as pilot:
            await settle(pilot)
            footer = app.query_one("KeyFooter")
            keys = list(footer.query("FooterKey"))
            app.prompt.blur()
            app.prompt.focus()
            await settle(pilot)
            assert list(footer.query("FooterKey")) == keys  # the same keys: the same widgets
            await pilot.press("tab")  # the panel's timeline: its own keys
            await wait_until(pilot, lambda: list(footer.query("FooterKey")) != keys, 5, "the panel's keys")
            assert "Inspect step" in {k.description for k in footer.query("FooterKey")}

    run(body())


def test_help_screen_snapshot(snap_compare) -> None:
    from skippy_tui.ui.screens.help import HelpScreen

    async def run_before(pilot) -> None:
        pilot.app.query_one("PromptInput").cursor_blink = False
        await pilot.press("f1")
        await wait_for_screen(pilot, pilot.app, HelpScreen, 10)
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()

    assert snap_compare(replay_app(), terminal_size=SIZE, run_before=run_before)


# -- on the real models ----------------------------------------------------------------------


def test_max_tokens_from_f3_caps_the_next_reply_and_alt_arrows_work_mid_reply(
    speculator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """F3's max_tokens applies to the next reply; switching the panel away from a reply in flight and back
    shows each of its steps once."""
    from test_app_live import Paced, _reply, _send

    import skippy_tui.ui.generation as generation_module

    # timeline rows every 5 s: the steps queued for the panel while reply 1 is shown are still queued
    # when the reply in flight is shown again
    monkeypatch.setattr(generation_module, "PANEL_HZ", 0.2)
    speculator.update(n_draft=4, source="model")

    async def body() -> None:
        app = SkippyApp(ui_config(max_tokens=16), speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f3")
            screen = await wait_for_screen(pilot, app, TuneScreen, 5)
            screen.query_one("#max_tokens").value = "3"
            await pilot.click("#apply")
            await wait_until(pilot, lambda: not isinstance(app.screen, TuneScreen), 5, "apply")
            fin = await _reply(app, pilot, "Describe the sea in three long sentences.")
            assert (fin.reason, fin.n_tokens) == ("max_tokens", 3)
            await pilot.press("f3")  # back to a longer reply, for several steps below
            screen = await wait_for_screen(pilot, app, TuneScreen, 5)
            assert screen.query_one("#max_tokens").value == "3"
            screen.query_one("#max_tokens").value = "24"
            await pilot.click("#apply")
            await wait_until(pilot, lambda: not isinstance(app.screen, TuneScreen), 5, "apply")
            paced = Paced(speculator)
            app.speculator = paced
            try:
                app.prompt.focus()
                await _send(app, pilot, "Write a haiku about the sea.")
                entry = app._current_entry
                await wait_until(pilot, lambda: len(entry.steps) >= 1, 120, "the first step")
                await pilot.press("alt+up")
                await wait_until(pilot, lambda: _shown(app) == [True, False], 5, "reply 1 in the panel")
                paced.go.release()  # a step while reply 1 is shown: it must not land in reply 1's panel
                await wait_until(pilot, lambda: len(entry.steps) >= 2 or not app.generating, 120, "the second step")
                assert app.panel.timeline.steps == app.transcript.entries[1].steps
                await pilot.press("alt+down")
                await wait_until(pilot, lambda: _shown(app) == [False, True], 5, "the reply in flight in the panel")
                assert app.panel.timeline.steps == entry.steps  # every step so far
                paced.go.release()  # one more step; the engine then waits, so the reply is still in flight
                timeline = app.panel.timeline
                await wait_until(pilot, lambda: timeline.row_count > 2 or not app.generating, 30, "the next row")
                assert app.generating and len(entry.steps) == 3
                assert timeline.steps == entry.steps  # each step once
            finally:
                paced.free()
            await wait_until(pilot, lambda: not app.generating, 240, "the reply to finish")
            assert app.panel.timeline.steps == entry.steps

    run(body())


@contextlib.asynccontextmanager
async def _loading(monkeypatch: pytest.MonkeyPatch, stage: str, size: tuple[int, int]) -> AsyncIterator[Any]:
    """The app and its pilot while a load reports ``stage`` and stays in it (until the block
    ends; the error that then ends it is not shown)."""
    release = threading.Event()

    def load(spec: object, progress, cancelled) -> None:
        progress(stage, 0.4)
        release.wait(30)
        raise RuntimeError("stopped by the test")

    app = SkippyApp(ui_config(), load_models=False)
    monkeypatch.setattr(app, "_loader", lambda: load)
    async with app.run_test(size=size) as pilot:
        app.action_load_models()
        app._load_cancel.set()
        try:
            yield app, pilot
        finally:
            release.set()
        await wait_until(pilot, lambda: not app.loading, 10, "the load to end")


@pytest.mark.parametrize("size", [(60, 20), (120, 30)], ids=["stacked", "beside"])
def test_the_loading_row_shows_the_stage_on_one_line(monkeypatch: pytest.MonkeyPatch, size: tuple[int, int]) -> None:
    """The stage wrapped in the loading row and showed its first word or two ("deriving the")."""
    from skippy_tui.engine.load.loader import DERIVE_STAGE

    async def body() -> None:
        async with _loading(monkeypatch, DERIVE_STAGE, size) as (app, pilot):
            label = app.query_one("#loading-label")
            await wait_until(pilot, lambda: str(label.render()) == DERIVE_STAGE, 10, "the stage")
            await settle(pilot)
            line = label.render_line(0).text
            assert line.startswith("deriving the F32 default target") and label.region.height == 1, line

    run(body())


def test_while_models_load_the_status_bar_says_what_is_measured_and_why(monkeypatch: pytest.MonkeyPatch) -> None:
    """The exactness probe can take minutes on a busy machine: the status bar names it and why."""
    from skippy_tui.engine.load.loader import PROBE_STAGE

    async def body() -> None:
        async with _loading(monkeypatch, PROBE_STAGE, (200, 30)) as (app, pilot):
            status = lambda: str(app.query_one("#status").render())  # noqa: E731
            await wait_until(pilot, lambda: "measuring batch invariance" in status(), 10, "the probe's stage")
            assert "bit for bit" in status() and "exact" in status(), status()

    run(body())
