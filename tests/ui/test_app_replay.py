"""The app without models: replaying a transcript, errors, themes, input, palette, CLI."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from textual.color import Color
from textual.command import CommandList, CommandPalette
from textual.widgets import DataTable, Input, Static
from ui_helpers import CHAT_JSON, SAMPLED_JSON, SIZE, replay_app, run, type_text, ui_config, wait_for_screen, wait_until

from skippy_tui.cli import build_parser, main
from skippy_tui.config import Config, ConfigError, config_path
from skippy_tui.engine.events import StepVerified, SyncInfo
from skippy_tui.transcript import Transcript
from skippy_tui.ui.app import SkippyApp
from skippy_tui.ui.screens.error import ErrorScreen
from skippy_tui.ui.screens.inspector import InspectorScreen
from skippy_tui.ui.screens.open import OpenTranscriptScreen
from skippy_tui.ui.screens.system_prompt import SystemPromptScreen
from skippy_tui.ui.themes import UiState, builtin_theme_dir, load_theme_file, load_themes
from skippy_tui.ui.widgets.chat import AssistantMessage, MessageWidget, SystemChange, SystemNote, UserMessage, Welcome
from skippy_tui.ui.widgets.render import visible


async def _inspect(app: SkippyApp, pilot, row: int) -> InspectorScreen:
    table = app.panel.timeline
    table.focus()
    table.move_cursor(row=row)
    await pilot.press("enter")
    return await wait_for_screen(pilot, app, InspectorScreen, 5)


def _topk_rows(screen: InspectorScreen) -> list[list[str]]:
    table = screen.query_one("#topk", DataTable)
    return [[str(cell) for cell in table.get_row_at(r)] for r in range(table.row_count)]


def _expected_topk(st: StepVerified) -> list[list[str]]:
    """Rank, draft token and p, target token and p, at the first rejected position."""
    assert len(st.draft_top) == len(st.target_top) == 5
    return [
        [str(r + 1), visible(d.text), f"{d.prob:.3f}", visible(t.text), f"{t.prob:.3f}"]
        for r, (d, t) in enumerate(zip(st.draft_top, st.target_top))
    ]


def _head(screen: InspectorScreen) -> str:
    return str(screen.query_one("#inspect-head").render())


def test_replay_shows_recorded_steps_without_models() -> None:
    saved = Transcript.load(CHAT_JSON)

    async def body() -> None:
        app = replay_app()
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: len(app.query(AssistantMessage)) == 2, 5, "the replayed replies")
            assert app.speculator is None and not app.loading
            assert not [w for w in app.workers if w.group == "load"]
            assert len(app.query(UserMessage)) == 2 and len(app.query(AssistantMessage)) == 2
            replies = list(app.query(AssistantMessage))
            assert replies[-1].text == saved.entries[3].content
            # the panel shows the last reply's recorded steps
            assert app.panel.timeline.steps == saved.entries[3].steps
            assert app.panel.timeline.row_count == len(saved.entries[3].steps)
            assert "replay chat.json" in str(app.query_one("#status").render())
            # clicking the first reply shows its steps
            await pilot.click(replies[0])
            await wait_until(pilot, lambda: app.panel.timeline.steps == saved.entries[1].steps, 5, "reply 1 steps")
            assert replies[0].has_class("-shown") and not replies[1].has_class("-shown")
            # session stats cover both replies
            s = app.session_stats
            assert s.n_steps == sum(e.finish.n_steps for e in saved.replies())
            # sending needs models: refused with a hint, nothing added
            app.prompt.load_text("hello")
            app.prompt.focus()  # the click above focused the chat
            await pilot.press("enter")
            hint = "No models loaded: press F5 to load them."
            await wait_until(pilot, lambda: any(n.message == hint for n in app._notifications), 5, "the hint")
            assert len(app.transcript.entries) == 4 and app.prompt.text == "hello"

    run(body())


def test_inspector_shows_top_k_at_the_first_rejection() -> None:
    async def body() -> None:
        app = replay_app()
        async with app.run_test(size=SIZE) as pilot:
            steps = app.panel.timeline.steps
            idx = next(i for i, s in enumerate(steps) if s.n_accepted < len(s.proposed))
            table = app.panel.timeline
            table.focus()
            table.move_cursor(row=idx)
            await pilot.press("enter")
            await wait_for_screen(pilot, app, InspectorScreen, 5)
            screen = app.screen
            assert screen.index == idx
            st: StepVerified = steps[idx]
            rows = _topk_rows(screen)
            assert rows == _expected_topk(st)
            # greedy: the draft proposed its top token, the target committed its own
            assert rows[0][1] == visible(st.proposed[st.n_accepted].text) and rows[0][3] == visible(st.committed.text)
            head = str(screen.query_one("#inspect-head").render())
            assert f"{st.n_past_before} → {st.n_past_after}" in head and st.sync.label() in head
            await pilot.press("right")
            assert screen.index == idx + 1
            await pilot.press("escape")
            await wait_until(pilot, lambda: not isinstance(app.screen, InspectorScreen), 5, "close")

    run(body())


def test_inspector_says_where_a_folded_sync_was_decoded() -> None:
    async def body() -> None:
        app = replay_app()
        async with app.run_test(size=SIZE) as pilot:
            steps = list(app.panel.timeline.steps)
            st = steps[1]
            folded = SyncInfo("extend", st.n_past_before - 1, st.n_past_before, folded=True)
            steps[1] = dataclasses.replace(st, sync=folded, sync_ms=0.01)
            app.push_screen(InspectorScreen(steps, 1))
            screen = await wait_for_screen(pilot, app, InspectorScreen, 5)
            head = _head(screen)
            assert f"{folded.label()}  (decoded in the proposal's first draft call)" in head
            await pilot.press("left")  # an unfolded sync shows its own time
            assert f"{steps[0].sync.label()}  ({steps[0].sync_ms:.1f} ms)" in _head(screen)

    run(body())


def test_inspector_shows_both_probabilities_at_the_rejection_and_the_seed() -> None:
    saved = Transcript.load(SAMPLED_JSON)

    async def body() -> None:
        app = replay_app(path=SAMPLED_JSON)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.click(app.query(AssistantMessage).first())
            await wait_until(pilot, lambda: app.panel.timeline.steps == saved.entries[1].steps, 5, "reply 1 steps")
            reply = saved.entries[1]
            idx = next(i for i, s in enumerate(reply.steps) if s.n_accepted < len(s.proposed))
            st = reply.steps[idx]
            assert st.p_target is not None  # recorded by the engine at the first rejection
            head = _head(await _inspect(app, pilot, idx))
            q = st.proposed[st.n_accepted].prob
            assert f"draft p={q:.3f}  target p={st.p_target:.3f}" in head
            assert "as sampled: filters and T applied" in head  # not the raw softmax of the table
            seed = reply.started.sampling["seed"]
            assert reply.finish.seed == seed
            assert f"seed         {seed} (drawn for this reply)" in head
            assert f"reproduce    --seed {seed} --temperature 0.8" in head
            assert "sampling     coupled T=0.8" in head
            await pilot.press("escape")

    run(body())


def test_inspector_and_panel_mark_a_mid_reply_sampling_change() -> None:
    saved = Transcript.load(SAMPLED_JSON)
    reply = saved.entries[3]
    changed = next(i for i, s in enumerate(reply.steps) if s.sampling is not None)

    async def body() -> None:
        app = replay_app(path=SAMPLED_JSON)
        async with app.run_test(size=SIZE) as pilot:
            timeline = app.panel.timeline
            assert timeline.steps == reply.steps
            marks = [str(timeline.get_row_at(i)[0]).startswith("*") for i in range(timeline.row_count)]
            assert marks == [s.sampling is not None for s in reply.steps] and any(marks)
            changes = str(app.query_one("#changes").render())
            assert app.query_one("#changes").display
            assert f"from step {reply.steps[changed].index}: coupled T=0.3, repeat_penalty 1.1" in changes
            # the inspector: the new settings from that step on, the old ones before it
            screen = await _inspect(app, pilot, changed)
            head = _head(screen)
            assert "coupled T=0.3, repeat_penalty 1.1  (changed at this step, F3)" in head
            assert "seed         1234 (fixed)" in head
            assert f"--seed 1234 --temperature 0.8  up to step {reply.steps[changed].index}" in head
            await pilot.press("left")
            assert "sampling     coupled T=0.8\n" in _head(screen)
            await pilot.press("right", "right")
            assert "coupled T=0.3, repeat_penalty 1.1\n" in _head(screen)  # still in effect, not a change
            await pilot.press("escape")
            # a reply without changes hides the line and marks nothing
            await pilot.click(app.query(AssistantMessage).first())
            await wait_until(pilot, lambda: timeline.steps == saved.entries[1].steps, 5, "reply 1 steps")
            assert not app.query_one("#changes").display
            assert not any(str(timeline.get_row_at(i)[0]).startswith("*") for i in range(timeline.row_count))

    run(body())


def test_old_transcript_without_seeds_replays_and_says_what_is_missing() -> None:
    async def body() -> None:
        app = replay_app()
        async with app.run_test(size=SIZE) as pilot:
            steps = app.panel.timeline.steps
            assert all(s.p_target is None and s.sampling is None for s in steps)
            assert not app.query_one("#changes").display
            idx = next(i for i, s in enumerate(steps) if s.n_accepted < len(s.proposed))
            head = _head(await _inspect(app, pilot, idx))
            assert "target p=— (not recorded)" in head
            assert "sampling     greedy" in head
            assert "seed         not recorded" in head and "--seed" not in head

    run(body())


def _near(colours: set[tuple[str, tuple[int, int, int]]], wanted: set[tuple[str, str | None]]) -> bool:
    """The same (origin, colour) pairs, colours within 2 per channel (component styles are blended)."""
    want = {origin: Color.parse(c or "").rgb for origin, c in wanted}
    return len(colours) == len(want) and all(
        max(abs(a - b) for a, b in zip(rgb, want[origin])) <= 2 for origin, rgb in colours
    )


def test_origin_colouring_toggle() -> None:
    async def body() -> None:
        app = replay_app()
        async with app.run_test(size=SIZE) as pilot:
            msg = app.query(AssistantMessage).last()
            view = msg.query_one(".origin-view")
            assert not view.display
            await pilot.press("ctrl+o")
            assert app.chat.has_class("-origin") and view.display
            rendered = view.render()
            assert rendered.plain == msg.entry.content
            # each token in its origin's colour: the theme's $success (draft) and $warning (target)
            spans = [s for s in msg.entry.spans() if s.text]
            assert [rendered.plain[sp.start : sp.end] for sp in rendered.spans] == [s.text for s in spans]
            colours = {(s.origin, sp.style.foreground.rgb) for s, sp in zip(spans, rendered.spans)}
            theme = app.current_theme
            assert _near(colours, {("draft", theme.success), ("target", theme.warning)})
            await pilot.press("ctrl+o")
            assert not view.display

    run(body())


def test_missing_model_opens_an_error_dialog_not_a_traceback(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"

    async def body() -> None:
        app = SkippyApp(ui_config(target={"path": str(missing)}))
        async with app.run_test(size=SIZE) as pilot:
            await wait_for_screen(pilot, app, ErrorScreen, 30)
            screen = app.screen
            message = str(screen.query_one("#error-message").render())
            fix = str(screen.query_one("#error-fix").render())
            assert str(missing) in message and "Traceback" not in message
            assert "--target" in fix and "path" in fix
            await pilot.click("#continue")
            await wait_until(pilot, lambda: not isinstance(app.screen, ErrorScreen), 5, "dismiss")
            assert app.speculator is None and not app.loading
            assert app.check_action("load_models", ()) is True
            await pilot.press("ctrl+q")

    run(body())


def test_continue_without_models_after_a_load_error_clears_the_status_bar(tmp_path: Path) -> None:
    """Issue 57.10: the status bar stayed at "loading models…" after the dialog's Continue."""
    missing = tmp_path / "nope.gguf"

    async def body() -> None:
        app = SkippyApp(ui_config(target={"path": str(missing)}))
        async with app.run_test(size=SIZE) as pilot:
            await wait_for_screen(pilot, app, ErrorScreen, 30)
            await pilot.click("#continue")
            await wait_until(pilot, lambda: not isinstance(app.screen, ErrorScreen), 5, "dismiss")
            status = str(app.query_one("#status").render())
            assert "loading models" not in status and "no models loaded (f5 loads them)" in status

    run(body())


def test_bad_config_opens_an_error_dialog_and_quit_works(tmp_path: Path) -> None:
    cfg_file = tmp_path / "config.toml"
    cfg_file.write_text("[speculation]\nn_draft = -3\n", "utf-8")
    args = build_parser().parse_args(["--config", str(cfg_file)])
    from skippy_tui.cli_common import config_from_args

    config = config_from_args(args)
    with pytest.raises(ConfigError) as err:
        config.engine_spec()

    async def body() -> None:
        app = SkippyApp(config)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for_screen(pilot, app, ErrorScreen, 10)
            message = str(app.screen.query_one("#error-message").render())
            assert str(cfg_file) in message and "n_draft" in message
            assert str(err.value) == message
            assert str(cfg_file) in str(app.screen.query_one("#error-fix").render())
            await pilot.click("#quit")
            await wait_until(pilot, lambda: app.return_code == 1, 5, "exit code 1")

    run(body())


def test_unknown_key_in_config_file_opens_the_dialog(tmp_path: Path) -> None:
    cfg_file = tmp_path / "config.toml"
    cfg_file.write_text('[ui]\nthem = "x"\n', "utf-8")
    from skippy_tui.ui.launch import _config

    config, error = _config(build_parser().parse_args(["--config", str(cfg_file)]))
    assert isinstance(error, ConfigError) and "unknown key [ui] them" in str(error)
    assert config.source == cfg_file  # the dialog's "how to fix" names the file that failed

    async def body() -> None:
        app = SkippyApp(config, config_error=error)
        async with app.run_test(size=SIZE) as pilot:
            await wait_for_screen(pilot, app, ErrorScreen, 10)
            assert not [w for w in app.workers if w.group == "load"]
            assert str(cfg_file) in str(app.screen.query_one("#error-fix").render())

    run(body())


def test_theme_choice_persists_and_config_wins_when_edited() -> None:
    async def first() -> None:
        app = SkippyApp(ui_config(), load_models=False)
        async with app.run_test(size=SIZE) as pilot:
            assert app.theme == "skippy-dark"
            app.theme = "skippy-light"
            await wait_until(pilot, lambda: UiState.load().theme == "skippy-light", 5, "the theme to be saved")

    async def second(config: Config, expected: str) -> None:
        app = SkippyApp(config, load_models=False)
        async with app.run_test(size=SIZE):
            assert app.theme == expected  # set while mounting, before run_test hands over

    run(first())
    run(second(ui_config(), "skippy-light"))
    run(second(ui_config(ui={"theme": "textual-light"}), "textual-light"))


def test_ctrl_t_changes_the_theme_and_it_is_remembered() -> None:
    light = Color.parse(load_theme_file(builtin_theme_dir() / "skippy-light.toml").background)

    async def pick() -> None:
        app = SkippyApp(ui_config(), load_models=False)
        async with app.run_test(size=SIZE) as pilot:
            assert app.theme == "skippy-dark" and app.screen.styles.background != light
            await pilot.press("ctrl+t")
            await wait_until(pilot, lambda: isinstance(app.screen, CommandPalette), 5, "the theme picker")
            await type_text(pilot, "skippy-light")
            results = app.screen.query_one(CommandList)

            def top() -> str:
                return results.get_option_at_index(0).prompt.plain if results.option_count else ""

            await wait_until(pilot, lambda: top() == "skippy-light" and results.highlighted == 0, 10, "the match")
            await pilot.press("enter")
            await wait_until(pilot, lambda: not isinstance(app.screen, CommandPalette), 5, "the picker to close")
            assert app.theme == "skippy-light" and app.screen.styles.background == light
            await wait_until(pilot, lambda: UiState.load().theme == "skippy-light", 5, "the choice to be saved")

    async def reopen() -> None:
        app = SkippyApp(ui_config(), load_models=False)
        async with app.run_test(size=SIZE):
            assert app.theme == "skippy-light"

    run(pick())
    run(reopen())


def test_broken_user_theme_is_reported_once_and_skipped() -> None:
    folder = config_path().parent / "themes"
    folder.mkdir(parents=True)
    (folder / "broken.toml").write_text('name = "broken"\nprimary = "not-a-colour"\n', "utf-8")
    (folder / "mine.toml").write_text('name = "mine"\nprimary = "#112233"\ndark = true\n', "utf-8")
    themes, errors = load_themes()
    names = {t.name for t in themes}
    assert {"skippy-dark", "skippy-light", "mine"} <= names and "broken" not in names
    assert len(errors) == 1 and "broken.toml" in errors[0] and "primary" in errors[0]

    async def body() -> None:
        app = SkippyApp(ui_config(), load_models=False)
        async with app.run_test(size=SIZE):
            notes = [n for n in app._notifications if "broken.toml" in n.message]  # notified while mounting
            assert len(notes) == 1
            assert "mine" in app.available_themes

    run(body())


def test_input_enter_sends_ctrl_j_newline_and_history_recall() -> None:
    state = UiState(history=["first message", "second message"])
    state.save()

    async def body() -> None:
        app = SkippyApp(ui_config(), load_models=False)
        async with app.run_test(size=SIZE) as pilot:
            prompt = app.prompt
            assert app.focused is prompt
            await pilot.press("a", "ctrl+j", "b")
            assert prompt.text == "a\nb"
            prompt.clear()
            await pilot.press("up")
            assert prompt.text == "second message"
            await pilot.press("up")
            assert prompt.text == "first message"
            await pilot.press("down", "down")
            assert prompt.text == ""
            assert app.query(Welcome)

    run(body())


def test_ctrl_s_on_an_unchanged_replay_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    """Saving rewrote the replayed file with this session's config, models and versions in
    place of the record of the ones that made it; unchanged, Ctrl+S now says so and writes
    nothing. A change (here the system prompt) is saved to the same file."""
    path = tmp_path / "chat.json"
    path.write_bytes(CHAT_JSON.read_bytes())
    before = path.read_bytes()
    notes: list[str] = []

    async def body() -> None:
        app = replay_app(path=path)
        async with app.run_test(size=SIZE) as pilot:
            app.notify = lambda message, **kw: notes.append(str(message))  # type: ignore[method-assign]
            await pilot.press("ctrl+s")
            await wait_until(pilot, lambda: bool(notes), 5, "a notification")
            assert "is up to date" in notes[-1] and path.read_bytes() == before
            assert not (tmp_path / "chat.md").exists()
            app.transcript.system_prompt = "Be brief."
            await pilot.press("ctrl+s")
            await wait_until(pilot, lambda: len(notes) == 2, 5, "the save")
            assert app.transcript_path == path and Transcript.load(path).system_prompt == "Be brief."
            assert (tmp_path / "chat.md").is_file()

    run(body())


def test_system_prompt_dialog_ctrl_s_saves_the_prompt_not_the_transcript() -> None:
    async def body() -> None:
        app = replay_app()
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f2")
            await wait_for_screen(pilot, app, SystemPromptScreen, 5)
            await type_text(pilot, "Be brief.")
            await pilot.press("ctrl+s")
            await wait_until(pilot, lambda: not isinstance(app.screen, SystemPromptScreen), 5, "the dialog to close")
            assert app.transcript.current_system == "Be brief."
            assert app.transcript_path == CHAT_JSON  # ctrl+s did not save a transcript
            # set after the recorded turns: it applies from the next one, the recorded keep theirs
            assert app.transcript.engine_messages()[-1] == {"role": "system", "content": "Be brief."}
            assert app.transcript.system_prompt == "" and not app.query(SystemNote)
            assert "Be brief." in str(app.query_one(SystemChange).query_one(Static).render())

    run(body())


def test_system_prompt_dialog_keeps_its_buttons_on_a_short_terminal() -> None:
    """At 40x15 the ten-row text area pushed Save and Cancel out of the dialog; it shrinks
    now (and grows back when the terminal does)."""

    async def body() -> None:
        app = replay_app()
        async with app.run_test(size=(40, 15)) as pilot:
            await pilot.press("f2")
            screen = await wait_for_screen(pilot, app, SystemPromptScreen, 5)
            dialog = screen.query_one("#dialog").region
            for button in ("#save", "#cancel"):
                region = screen.query_one(button).region
                assert region.height == 3 and dialog.contains_region(region), (button, region, dialog)
            assert screen.query_one("#system-text").size.height >= 3
            assert screen.query_one("#dialog").border_subtitle == "ctrl+s save · esc cancel"
            await pilot.resize_terminal(120, 40)
            await pilot.pause()
            assert screen.query_one("#system-text").outer_size.height == 10
            await pilot.click("#save")
            await wait_until(pilot, lambda: not isinstance(app.screen, SystemPromptScreen), 5, "the dialog to close")

    run(body())


def test_palette_lists_actions_with_their_keys() -> None:
    async def body() -> None:
        app = SkippyApp(ui_config(), load_models=False)
        async with app.run_test(size=SIZE):
            from skippy_tui.ui.commands import SkippyCommands

            provider = SkippyCommands(app.screen)
            titles = [t for t, _, _ in provider._commands()]
            for expected in ("Stop generation  (esc)", "New chat  (^n)", "Save transcript  (^s)", "Load models  (f5)"):
                assert expected in titles
            assert any(t.startswith("Set temperature") for t in titles)

    run(body())


def test_cli_replay_subcommand(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["replay", str(CHAT_JSON), "--continue", "--max-tokens", "5"])
    assert args.file == CHAT_JSON and args.continue_ and args.max_tokens == 5
    assert main(["replay", str(tmp_path / "missing.json")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("skippy-tui: error: transcript not found") and err.count("\n") == 1


async def _open_typed(app: SkippyApp, pilot, path: Path) -> None:
    """The open-transcript dialog: type a path into it and press Enter."""
    app.action_open_transcript()
    screen = await wait_for_screen(pilot, app, OpenTranscriptScreen, 5)
    field = screen.query_one("#path", Input)
    assert app.focused is field  # typing goes straight into the path field
    # a key per character costs Pilot a frame each: the path's head goes in at once, its last
    # character and Enter are typed
    field.insert_text_at_cursor(str(path)[:-1])
    await pilot.press(str(path)[-1], "enter")
    await wait_until(pilot, lambda: not isinstance(app.screen, OpenTranscriptScreen), 5, "the dialog to close")


def test_open_transcript_dialog_types_a_path_and_survives_a_malformed_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "skippy-tui-transcript", "models": "abc"}', "utf-8")
    saved = Transcript.load(CHAT_JSON)

    async def body() -> None:
        app = replay_app(path=SAMPLED_JSON)  # another conversation is open first
        async with app.run_test(size=SIZE) as pilot:
            before = app.transcript
            # the malformed file is refused and replaces nothing
            await _open_typed(app, pilot, bad)
            await wait_until(
                pilot, lambda: any(n.title == "Cannot open transcript" for n in app._notifications), 5, "the refusal"
            )
            assert app.is_running and app.transcript is before and app.transcript_path == SAMPLED_JSON
            # the good one opens: its messages in the chat, its last reply's steps in the panel
            await _open_typed(app, pilot, CHAT_JSON)
            await wait_until(pilot, lambda: app.transcript_path == CHAT_JSON, 5, "the good file to open")
            assert app.transcript == saved
            shown = [(type(w), w.entry.content) for w in app.chat.query(MessageWidget)]
            kinds = {"user": UserMessage, "assistant": AssistantMessage}
            assert shown == [(kinds[e.role], e.content) for e in saved.entries]
            assert app.query(AssistantMessage).last().text == saved.entries[3].content
            assert app.panel.timeline.steps == saved.entries[3].steps
            assert app.session_stats.n_steps == sum(e.finish.n_steps for e in saved.replies())
            assert "replay chat.json" in str(app.query_one("#status").render())

    run(body())


def test_quit_during_a_load_stops_the_load_without_an_error_dialog(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl+Q while models load: the loader is told to stop (else the exit waits for the whole load).

    The loader's own stop on real models is tested in test_models; this is the app's wiring.
    """
    import threading
    import time

    from skippy_tui.engine.errors import CancelledError
    from skippy_tui.engine.load import loader

    started, stopped = threading.Event(), threading.Event()

    def slow_load(spec, progress, cancelled):  # stands in for a large model's weights being read
        started.set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if cancelled():
                stopped.set()
                raise CancelledError("model load cancelled")
            progress("loading target", 0.1)
            time.sleep(0.05)

    monkeypatch.setattr(loader, "load_speculator", slow_load)
    app = replay_app(config=ui_config(ui={"engine": "thread"}))  # the engine process's own: test_app_process
    errors: list[str] = []
    monkeypatch.setattr(app, "_show_error", lambda title, error: errors.append(title))

    async def body() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f5")
            await wait_until(pilot, started.is_set, 10, "the load to start")
            assert app.loading
            await pilot.press("ctrl+q")

    t0 = time.monotonic()
    run(body())
    assert stopped.is_set() and time.monotonic() - t0 < 10 and errors == []


def test_transcript_opened_with_origin_colouring_on_shows_its_text() -> None:
    """Issue 12.2: replies mounted while Ctrl+O is on rendered their origin view before it
    could (the widget was not yet mounted) and showed empty boxes until toggled twice."""
    saved = Transcript.load(CHAT_JSON)

    async def body() -> None:
        app = SkippyApp(ui_config(), load_models=False)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("ctrl+o")
            assert app.chat.has_class("-origin")
            await _open_typed(app, pilot, CHAT_JSON)
            await wait_until(pilot, lambda: len(app.query(AssistantMessage)) == 2, 5, "the opened replies")
            views = [m.query_one(".origin-view") for m in app.query(AssistantMessage)]
            assert [str(v.render()) for v in views] == [e.content for e in saved.replies()]
            # laid out with their text (the bug left empty boxes that stayed empty)
            await wait_until(pilot, lambda: all(v.display and v.size.height > 1 for v in views), 5, "laid out")

    run(body())


def test_f5_rereads_the_config_after_it_was_fixed(tmp_path: Path) -> None:
    """Issue 12.3: F5 loaded the defaults the app fell back to, not the fixed file; a file that is
    still wrong says so. The fixed file names a missing target, so loading stops at its check."""
    from skippy_tui.ui.launch import _config, _reload

    cfg_file = tmp_path / "config.toml"
    cfg_file.write_text("[speculation]\nn_drafts = 3\n", "utf-8")
    args = build_parser().parse_args(["--config", str(cfg_file), "--max-tokens", "7"])
    config, error = _config(args)
    assert error is not None and config.get("speculation", "n_draft") == "auto"  # fell back to the defaults

    async def body() -> None:
        app = SkippyApp(config, config_error=error, reload_config=lambda: _reload(args))
        async with app.run_test(size=SIZE) as pilot:
            await wait_for_screen(pilot, app, ErrorScreen, 10)
            await pilot.click("#continue")
            await wait_until(pilot, lambda: not isinstance(app.screen, ErrorScreen), 5, "dismiss")
            # still wrong: F5 says so, naming the key, and changes nothing
            await pilot.press("f5")
            screen = await wait_for_screen(pilot, app, ErrorScreen, 10)
            assert screen.title_text == "The config still has a problem"
            assert "n_drafts" in str(screen.query_one("#error-message").render())
            await pilot.click("#continue")
            await wait_until(pilot, lambda: not isinstance(app.screen, ErrorScreen), 5, "dismiss")
            assert app.config.get("speculation", "n_draft") == "auto" and not app.loading
            await pilot.press("f4")  # a change made in this session stays on top of the file
            assert app.config.get("speculation", "enabled") is False
            # fixed: F5 loads with the file's values (and the flag still on top)
            missing = tmp_path / "target.gguf"
            cfg_file.write_text(
                f'[speculation]\nn_draft = 3\n[sampling]\ntemperature = 0.5\n[target]\npath = "{missing}"\n', "utf-8"
            )
            await pilot.press("f5")
            screen = await wait_for_screen(pilot, app, ErrorScreen, 30)
            assert screen.title_text == "Could not load the models"
            assert str(missing) in str(screen.query_one("#error-message").render())
            assert app.config.get("speculation", "n_draft") == 3
            assert app.sampling.temperature == 0.5 and app.generation.max_tokens == 7
            assert app.config.get("speculation", "enabled") is False

    run(body())


def _copy(tmp_path: Path, src: Path = CHAT_JSON) -> Path:
    """A copy of a fixture, so that a save in the test never rewrites the committed one."""
    dest = tmp_path / src.name
    dest.write_bytes(src.read_bytes())
    return dest


def test_new_chat_and_open_ask_first_only_when_the_chat_is_unsaved(tmp_path: Path) -> None:
    """Issue 12.1: Ctrl+N dropped the conversation at once. Saved (here: just opened) it still
    does; changed, a dialog asks: n/Esc keep it, Enter/y clear it."""
    from skippy_tui.ui.screens.confirm import ConfirmDiscardScreen

    path = _copy(tmp_path)

    async def body() -> None:
        app = replay_app(config=ui_config(ui={"history": False}), path=path)  # on, the history keeps the chat
        async with app.run_test(size=SIZE) as pilot:
            assert not app.unsaved
            await pilot.press("ctrl+n")
            await wait_until(pilot, lambda: not app.transcript.entries, 5, "the saved chat to clear at once")
            assert not isinstance(app.screen, ConfirmDiscardScreen)
            await app.open_transcript(path)
            await pilot.press("f2")
            await wait_for_screen(pilot, app, SystemPromptScreen, 5)
            await type_text(pilot, "Be brief.")
            await pilot.press("ctrl+s")
            await wait_until(pilot, lambda: app.unsaved, 5, "the system prompt change")
            for key in ("n", "escape"):
                await pilot.press("ctrl+n")
                await wait_for_screen(pilot, app, ConfirmDiscardScreen, 5)
                await pilot.press(key)
                await wait_until(pilot, lambda: not isinstance(app.screen, ConfirmDiscardScreen), 5, "cancel")
                # four messages and the system prompt change after them
                assert len(app.transcript.entries) == 5 and len(app.query(MessageWidget)) == 5, key
            # opening another transcript asks too
            await _open_typed(app, pilot, SAMPLED_JSON)
            await wait_for_screen(pilot, app, ConfirmDiscardScreen, 5)
            await pilot.press("escape")
            await wait_until(pilot, lambda: not isinstance(app.screen, ConfirmDiscardScreen), 5, "cancel")
            assert app.transcript_path == path
            await pilot.press("ctrl+n")
            await wait_for_screen(pilot, app, ConfirmDiscardScreen, 5)
            await pilot.press("enter")
            await wait_until(pilot, lambda: not app.transcript.entries, 5, "the chat to clear")
            assert not app.query(MessageWidget) and app.query(Welcome)
            assert Transcript.load(path) == Transcript.load(CHAT_JSON)  # nothing was written

    run(body())


def test_quit_with_an_unsaved_chat_asks_and_can_save_first(tmp_path: Path) -> None:
    from skippy_tui.ui.screens.confirm import ConfirmDiscardScreen

    path = _copy(tmp_path)

    async def body() -> None:
        app = replay_app(config=ui_config(ui={"history": False}), path=path)  # on, the history keeps the chat
        async with app.run_test(size=SIZE) as pilot:
            app.transcript.system_prompt = "Be brief."  # a change since it was opened
            await pilot.press("ctrl+q")
            await wait_for_screen(pilot, app, ConfirmDiscardScreen, 5)
            await pilot.press("escape")
            await wait_until(pilot, lambda: not isinstance(app.screen, ConfirmDiscardScreen), 5, "cancel")
            assert app.is_running and app.return_code is None
            await pilot.press("ctrl+q")
            await wait_for_screen(pilot, app, ConfirmDiscardScreen, 5)
            await pilot.press("s")
            await wait_until(pilot, lambda: app.return_code == 0, 5, "quit after saving")
        assert Transcript.load(path).system_prompt == "Be brief."

    run(body())


def test_the_error_dialogs_quit_asks_about_an_unsaved_chat_too(tmp_path: Path) -> None:
    """A failed load's dialog has a Quit button; with a chat kept nowhere it asks first, like Ctrl+Q."""
    from skippy_tui.engine.errors import ModelFileError
    from skippy_tui.ui.screens.confirm import ConfirmDiscardScreen

    path = _copy(tmp_path)

    async def body() -> None:
        app = replay_app(config=ui_config(ui={"history": False}), path=path)  # on, the history keeps the chat
        async with app.run_test(size=SIZE) as pilot:
            app.transcript.system_prompt = "Be brief."
            for keep in (True, False):
                app._show_error("Could not load the models", ModelFileError("no such file: /nope.gguf"))
                await wait_for_screen(pilot, app, ErrorScreen, 5)
                await pilot.click("#quit")
                await wait_for_screen(pilot, app, ConfirmDiscardScreen, 5)
                await pilot.press("escape" if keep else "enter")
                if keep:
                    await wait_until(pilot, lambda: not isinstance(app.screen, ConfirmDiscardScreen), 5, "cancel")
                    assert app.is_running and app.return_code is None
            await wait_until(pilot, lambda: app.return_code == 1, 5, "exit 1 once the chat may go")
        assert Transcript.load(path).system_prompt == ""  # discarded, as chosen

    run(body())


def test_quit_twice_quits_without_saving_and_autosave_saves_instead_of_asking(tmp_path: Path) -> None:
    from skippy_tui.ui.screens.confirm import ConfirmDiscardScreen

    path = _copy(tmp_path)

    async def twice() -> None:
        app = replay_app(config=ui_config(ui={"history": False}), path=path)  # on, the history keeps the chat
        async with app.run_test(size=SIZE) as pilot:
            app.transcript.system_prompt = "Be brief."
            await pilot.press("ctrl+q")
            await wait_for_screen(pilot, app, ConfirmDiscardScreen, 5)
            await pilot.press("ctrl+q")
            await wait_until(pilot, lambda: app.return_code == 0, 5, "quit")
        assert Transcript.load(path).system_prompt == ""

    async def autosave() -> None:
        app = replay_app(config=ui_config(ui={"autosave": True, "history": False}), path=path)
        async with app.run_test(size=SIZE) as pilot:
            app.transcript.system_prompt = "Be terse."
            await pilot.press("ctrl+q")
            await wait_until(pilot, lambda: app.return_code == 0, 5, "quit")
            assert not isinstance(app.screen, ConfirmDiscardScreen)
        assert Transcript.load(path).system_prompt == "Be terse."

    run(twice())
    run(autosave())


def test_the_launcher_gives_the_app_a_config_reader_with_the_flags_on_top(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from skippy_tui.ui import launch

    cfg = tmp_path / "config.toml"
    cfg.write_text("[speculation]\nn_draft = 3\n", "utf-8")
    built: list[SkippyApp] = []
    monkeypatch.setattr(launch, "_run", lambda make_app: built.append(make_app()) or 0)
    early: list[object] = []  # the app's engine process starts before the UI; no app runs here: none starts
    monkeypatch.setattr(launch, "early_engine", lambda config: early.append(config))
    for argv in (["--config", str(cfg), "--max-tokens", "9"], ["replay", str(CHAT_JSON), "--config", str(cfg)]):
        assert main(argv) == 0
    assert len(early) == 1 and early[0].get("generation", "max_tokens") == 9  # the app's launch, not replay's
    cfg.write_text("[speculation]\nn_draft = 5\n[generation]\nmax_tokens = 50\n", "utf-8")
    fresh = [app._reload_config() for app in built]  # what F5 reads
    assert [c.get("speculation", "n_draft") for c in fresh] == [5, 5]
    assert [c.get("generation", "max_tokens") for c in fresh] == [9, 50]  # the flag stays on top
