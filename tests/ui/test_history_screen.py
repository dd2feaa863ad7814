"""The chat history in the app: saved after each reply on the real pair, listed by F9,
opened to continue, renamed, deleted (asked first), filtered; off with --no-history.

Chats for the dialog-only tests are real transcripts (the recorded fixtures and
small ones built here) saved into the isolated user data dir.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from ui_helpers import CHAT_JSON, SAMPLED_JSON, SIZE, run, type_text, ui_config, wait_for_screen, wait_until

from skippy_tui.cli import build_parser
from skippy_tui.cli_common import config_from_args
from skippy_tui.config import data_dir
from skippy_tui.engine.chat import prompt_tokens
from skippy_tui.history import HistoryStore
from skippy_tui.transcript import Entry, Transcript, model_pair
from skippy_tui.ui.app import SkippyApp
from skippy_tui.ui.screens.history import ConfirmDeleteScreen, HistoryScreen, RenameScreen
from skippy_tui.ui.screens.system_prompt import SystemPromptScreen
from skippy_tui.ui.widgets.chat import AssistantMessage, MessageWidget, UserMessage


def _store() -> HistoryStore:
    return HistoryStore(data_dir() / "history")


def _seed() -> dict[str, Path]:
    """Three chats in the history, with fixed times (newest: paris)."""
    store = _store()
    chats = {
        "haiku": (Transcript.load(CHAT_JSON), 1_700_000_000),
        "sampled": (Transcript.load(SAMPLED_JSON), 1_700_100_000),
        "paris": (
            Transcript(entries=[Entry("user", "Tell me about Paris"), Entry("assistant", "The capital of France.")]),
            1_700_200_000,
        ),
    }
    paths = {}
    for name, (transcript, mtime) in chats.items():
        path = store.folder / f"chat-{name}.json"
        store.save(transcript, path)
        os.utime(path, (mtime, mtime))
        paths[name] = path
    return paths


def _idle_app(**ui: object) -> SkippyApp:
    """The app with no models (nothing to load): enough for the dialog."""
    return SkippyApp(ui_config(ui=ui) if ui else ui_config(), load_models=False)


async def _open_history(app: SkippyApp, pilot) -> HistoryScreen:
    await pilot.press("f9")
    return await wait_for_screen(pilot, app, HistoryScreen, 10)


def _titles(screen: HistoryScreen) -> list[str]:
    return [e.title for e in screen.shown]


async def _reply(app: SkippyApp, pilot, text: str) -> None:
    n = len(app.transcript.entries)
    app.prompt.load_text(text)
    await pilot.press("enter")
    await wait_until(pilot, lambda: not app.generating and len(app.transcript.entries) == n + 2, 240, "the reply")


def test_a_reply_is_saved_in_the_history_and_opening_it_continues_it(speculator) -> None:
    """Reply → the chat is in the history (one file for its life); Ctrl+N asks nothing (it is
    kept); F9 → Enter restores the conversation, and the next reply goes into the same file."""

    async def body() -> None:
        app = SkippyApp(ui_config(max_tokens=6), speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            await _reply(app, pilot, "Name a colour.")
            [entry] = _store().list()
            assert entry.title == "Name a colour." and entry.turns == 1
            assert [m.file_type for m in entry.models] == ["F32", "Q4_1"]
            assert app.history_path == entry.path and app.chat_is_kept()
            said = [(e.role, e.content) for e in app.transcript.entries]
            assert Transcript.load(entry.path).entries[-1].content == said[-1][1]

            await pilot.press("ctrl+n")  # kept in the history: cleared at once, no dialog
            await wait_until(pilot, lambda: not app.transcript.entries, 10, "the new chat")
            assert app.history_path is None

            screen = await _open_history(app, pilot)
            assert _titles(screen) == ["Name a colour."]
            await pilot.press("enter")
            await wait_until(pilot, lambda: len(app.transcript.entries) == 2, 10, "the chat to open")
            assert [(e.role, e.content) for e in app.transcript.entries] == said
            assert len(app.query(UserMessage)) == 1 and len(app.query(AssistantMessage)) == 1
            assert app.history_path == entry.path and app.transcript_path is None

            await _reply(app, pilot, "Name another one.")  # continued with the loaded models
            [again] = _store().list()
            assert again.path == entry.path and again.turns == 2
            assert len(list(_store().folder.glob("chat-*.json"))) == 1

    run(body())


def _said(path: Path) -> list[str]:
    return [e.content for e in Transcript.load(path).entries if e.role == "user"]


async def _save_file(app: SkippyApp, pilot) -> str:
    """Ctrl+S; the notice it gave."""
    before = {n.identity for n in app._notifications}

    def new() -> list:
        return [n for n in app._notifications if n.identity not in before]

    await pilot.press("ctrl+s")
    await wait_until(pilot, lambda: bool(new()), 5, "the save's notice")
    return new()[-1].message


def test_ctrl_s_after_continuing_a_transcript_saves_the_new_turns_into_it(speculator) -> None:
    """Issue 57.2: a transcript saved with Ctrl+S, opened again and continued: Ctrl+S said "up to
    date" and left the file as it was (the history save after the reply counted as saving it),
    and the new turns went into a second history entry of the same chat. Now they go on in the
    chat's history file, and Ctrl+S writes them into the transcript."""

    async def body() -> None:
        app = SkippyApp(ui_config(max_tokens=4), speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            await _reply(app, pilot, "Say A.")
            assert "Saved" in await _save_file(app, pilot)
            saved, [kept] = app.transcript_path, _store().list()

        app = SkippyApp(ui_config(max_tokens=4), speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            await app.open_transcript(saved)
            assert app.history_path == kept.path  # the history holds this chat: it goes on there
            await _reply(app, pilot, "Say B.")
            assert [e.path for e in _store().list()] == [kept.path] and _said(kept.path) == ["Say A.", "Say B."]
            assert _said(saved) == ["Say A."]  # the file changes on Ctrl+S only
            assert "Saved" in await _save_file(app, pilot)
            assert _said(saved) == ["Say A.", "Say B."] and app.transcript_path == saved
            assert "is up to date" in await _save_file(app, pilot)

            # F9, the same chat, continued there: Ctrl+S saves a transcript of it, then keeps it up to date
            await pilot.press("ctrl+n")
            await wait_until(pilot, lambda: not app.transcript.entries, 10, "the new chat")
            await _open_history(app, pilot)
            await pilot.press("enter")
            await wait_until(pilot, lambda: app.history_path == kept.path, 10, "the chat to open")
            assert "Saved" in await _save_file(app, pilot)
            copy = app.transcript_path
            await _reply(app, pilot, "Say C.")
            assert "Saved" in await _save_file(app, pilot)
            assert _said(copy) == _said(kept.path) == ["Say A.", "Say B.", "Say C."]
            assert [e.path for e in _store().list()] == [kept.path]

    run(body())


def test_continuing_a_transcript_the_history_does_not_hold_says_it_is_kept_as_a_new_chat(
    speculator, tmp_path: Path
) -> None:
    """A transcript from elsewhere (or one whose chat went on in the history since): continued, the
    history keeps it as a new chat and says so; Ctrl+S saves the new turns into the file."""
    path = tmp_path / "elsewhere.json"
    path.write_bytes(CHAT_JSON.read_bytes())

    async def body() -> None:
        app = SkippyApp(ui_config(max_tokens=4), speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            await app.open_transcript(path)
            assert app.history_path is None
            await _reply(app, pilot, "Thanks.")
            [entry] = _store().list()
            note = next((n for n in app._notifications if n.title == "Continued from a transcript"), None)
            assert note is not None, [(n.title, n.message) for n in app._notifications]
            assert entry.path.name in note.message and "elsewhere.json" in note.message
            assert "Saved" in await _save_file(app, pilot)
            assert _said(path) == _said(entry.path) and _said(path)[-1] == "Thanks."

    run(body())


def test_a_system_prompt_set_mid_chat_applies_from_there_and_the_turns_before_keep_theirs(speculator) -> None:
    """Issue 57.1: new chat, "Say A." answered, then F2 "SYS-X pretend": the JSON, the Markdown and
    the chat opened from F9 showed SYS-X above the turn answered before it existed, and the next
    reply prefilled the whole chat again under it. Now the change is where it was made, the next
    turn is sent after the turns before as they were (the KV cache only extends), and each reply
    records its models and sampling settings."""

    async def body() -> None:
        app = SkippyApp(ui_config(max_tokens=4), speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            await _reply(app, pilot, "Say A.")
            await pilot.press("f2")
            await wait_for_screen(pilot, app, SystemPromptScreen, 5)
            await type_text(pilot, "SYS-X pretend")
            await pilot.press("ctrl+s")
            await wait_until(pilot, lambda: not isinstance(app.screen, SystemPromptScreen), 5, "the dialog")
            [entry] = _store().list()
            saved = Transcript.load(entry.path)
            assert saved.system_prompt == "" and [e.role for e in saved.entries] == ["user", "assistant", "system"]
            assert saved.entries[2].content == "SYS-X pretend"
            md = entry.path.with_suffix(".md").read_text("utf-8")
            assert md.index("Say A.") < md.index("## System (changed)\n\nSYS-X pretend") and md.count("SYS-X") == 1

            sent_before = app.transcript.engine_messages()
            await _reply(app, pilot, "Say B.")
            started = app.transcript.entries[-1].started
            # the KV cache kept the first turn's prompt as it was sent (and its reply): it only extends
            turn_1 = prompt_tokens(speculator.target, speculator.template, sent_before[:1])
            assert started.target_sync.kind == "extend" and started.target_sync.start > len(turn_1)
            asked = [*sent_before, {"role": "user", "content": "Say B."}]
            assert started.n_prompt == len(prompt_tokens(speculator.target, speculator.template, asked))
            pair = model_pair(speculator.target_info.summary(), speculator.draft_info.summary())
            replies = app.transcript.replies()
            assert [r.models for r in replies] == [pair, pair] and all(r.started.sampling for r in replies)

            await pilot.press("ctrl+n")  # the chat as F9 opens it again
            await wait_until(pilot, lambda: not app.transcript.entries, 10, "the new chat")
            await _open_history(app, pilot)
            await pilot.press("enter")
            await wait_until(pilot, lambda: len(app.transcript.entries) == 5, 10, "the chat to open")
            shown = [type(w).__name__ for w in app.chat.query(MessageWidget)]
            assert shown == ["UserMessage", "AssistantMessage", "SystemChange", "UserMessage", "AssistantMessage"]
            assert not app.query("#system-note")  # nothing above the first turn
            assert app.transcript.current_system == "SYS-X pretend"

    run(body())


def test_no_history_flag_writes_nothing(speculator) -> None:
    args = build_parser().parse_args(["--no-history", "--max-tokens", "4"])
    config = config_from_args(args)
    config.set("target", "threads", 1)
    config.set("target", "threads_batch", 1)

    async def body() -> None:
        app = SkippyApp(config, speculator=speculator)
        async with app.run_test(size=SIZE) as pilot:
            await _reply(app, pilot, "Name a colour.")
            assert app.history_path is None and not app.chat_is_kept()
            await pilot.press("f9")  # says it is off instead of opening an empty list
            await wait_until(pilot, lambda: any("history is off" in n.message for n in app._notifications), 5, "")
            assert not isinstance(app.screen, HistoryScreen)

    run(body())
    assert not (data_dir() / "history").exists()


def test_open_from_the_history_restores_the_conversation() -> None:
    paths = _seed()

    async def body() -> None:
        app = _idle_app()
        async with app.run_test(size=SIZE) as pilot:
            screen = await _open_history(app, pilot)
            assert _titles(screen) == [
                "Tell me about Paris",
                "Write a haiku about the sea.",  # the sampled fixture's first message
                "Write a haiku about the sea.",
            ]
            await pilot.press("down", "down", "enter")  # the oldest: the recorded haiku chat
            await wait_until(pilot, lambda: app.history_path == paths["haiku"], 10, "the chat to open")
            assert app.transcript == Transcript.load(CHAT_JSON)
            assert len(app.query(AssistantMessage)) == 2
            assert app.panel.timeline.row_count > 0  # its recorded steps are in the panel

    run(body())


def test_filter_narrows_the_list_and_enter_opens_the_match() -> None:
    paths = _seed()

    async def body() -> None:
        app = _idle_app()
        async with app.run_test(size=SIZE) as pilot:
            screen = await _open_history(app, pilot)
            await type_text(pilot, "capital")  # typed in the list: it goes to the filter
            await wait_until(pilot, lambda: len(screen.shown) == 1, 5, "the filter")
            assert _titles(screen) == ["Tell me about Paris"]  # matched in the reply's text
            assert screen.query_one("#history-count").render().plain == "1 of 3 chats match"
            await pilot.press("ctrl+a", "ctrl+k")
            await type_text(pilot, "2+2")
            await wait_until(pilot, lambda: len(screen.shown) == 1, 5, "the filter")
            assert screen.shown[0].path == paths["haiku"]
            await pilot.press("ctrl+a", "ctrl+k")
            await type_text(pilot, "nothing like this")
            await wait_until(pilot, lambda: not screen.shown, 5, "an empty list")
            await pilot.press("enter")  # nothing to open: the dialog stays
            assert app.screen is screen
            await pilot.press("ctrl+a", "ctrl+k")
            await type_text(pilot, "paris")
            await pilot.press("enter")
            await wait_until(pilot, lambda: app.history_path == paths["paris"], 10, "the chat to open")
            assert app.transcript.entries[0].content == "Tell me about Paris"

    run(body())


def test_a_word_that_starts_with_d_or_r_filters_and_opens_no_dialog() -> None:
    """``d`` and ``r`` were the delete and rename keys: typing "date" or "rust" in the list opened a dialog."""
    _seed()

    async def body() -> None:
        app = _idle_app()
        async with app.run_test(size=SIZE) as pilot:
            screen = await _open_history(app, pilot)
            for word in ("rust", "date"):
                screen.filter_input.value = ""
                screen.table.focus()
                await type_text(pilot, word)
                await wait_until(pilot, lambda w=word: screen.filter_input.value == w, 5, f"{word!r} in the filter")
                assert app.screen is screen

    run(body())


def test_rename_keeps_the_new_title_in_the_file_and_the_list() -> None:
    paths = _seed()

    async def body() -> None:
        app = _idle_app()
        async with app.run_test(size=SIZE) as pilot:
            screen = await _open_history(app, pilot)
            await pilot.press("f2")
            rename = await wait_for_screen(pilot, app, RenameScreen, 5)
            await type_text(pilot, "Paris notes")
            await pilot.press("enter")
            await wait_until(pilot, lambda: app.screen is screen, 5, "the rename dialog to close")
            await wait_until(pilot, lambda: "Paris notes" in _titles(screen), 5, "the new title")
            assert screen.highlighted is not None and screen.highlighted.path == paths["paris"]
            assert rename.is_attached is False
            # Esc in the rename dialog changes nothing
            await pilot.press("ctrl+r")
            await wait_for_screen(pilot, app, RenameScreen, 5)
            await type_text(pilot, " (draft)")
            await pilot.press("escape")
            await wait_until(pilot, lambda: app.screen is screen, 5, "cancel")
        assert Transcript.load(paths["paris"]).title == "Paris notes"
        assert next(e.title for e in _store().list()) == "Paris notes"

    run(body())


def test_a_long_title_is_cut_so_the_other_columns_stay_in_sight() -> None:
    """A 300-character title pushed the date, turns and models columns off the screen."""
    paths = _seed()
    _store().rename(paths["paris"], "Paris " * 50)

    async def body() -> None:
        app = _idle_app()
        async with app.run_test(size=SIZE) as pilot:
            screen = await _open_history(app, pilot)
            table = screen.table
            title_col = next(c for c in table.columns.values() if c.key == "title")
            assert title_col.get_render_width(table) <= SIZE[0] // 2 + 2
            cells = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
            assert any(t.startswith("Paris Paris") and t.endswith("…") for t in cells), cells
            # the date and turns columns in sight, and the models column begins within the table
            widths = {str(c.key.value): c.get_render_width(table) for c in table.columns.values()}
            assert widths["title"] + widths["updated"] + widths["turns"] + 10 <= table.size.width, widths

    run(body())


def test_delete_asks_first_and_removes_both_files() -> None:
    paths = _seed()

    async def body() -> None:
        app = _idle_app()
        async with app.run_test(size=SIZE) as pilot:
            screen = await _open_history(app, pilot)
            await pilot.press("ctrl+d")
            await wait_for_screen(pilot, app, ConfirmDeleteScreen, 5)
            await pilot.press("escape")  # kept
            await wait_until(pilot, lambda: app.screen is screen, 5, "cancel")
            assert paths["paris"].exists() and len(screen.shown) == 3
            await pilot.press("delete")
            confirm = await wait_for_screen(pilot, app, ConfirmDeleteScreen, 5)
            assert "chat-paris.json" in str(confirm.query_one("#delete-message").render())
            await pilot.press("y")
            await wait_until(pilot, lambda: len(screen.shown) == 2, 5, "the row to go")
            assert "Tell me about Paris" not in _titles(screen)
        assert not paths["paris"].exists() and not paths["paris"].with_suffix(".md").exists()
        assert paths["haiku"].exists()

    run(body())


def test_delete_works_while_the_filter_has_text() -> None:
    """Issue 57.9: with text in the filter (typing moves the focus there), Delete and Ctrl+D
    went to the field and did nothing. They delete the highlighted chat; only with text right
    of the field's cursor does Delete delete a character there, as in any field."""
    paths = _seed()

    async def body() -> None:
        app = _idle_app()
        async with app.run_test(size=SIZE) as pilot:
            screen = await _open_history(app, pilot)
            await type_text(pilot, "xparis")
            await wait_until(pilot, lambda: screen.filter_input.value == "xparis", 5, "the filter")
            await pilot.press("home", "delete")  # a character right of the cursor: the field's
            await wait_until(pilot, lambda: screen.filter_input.value == "paris", 5, "the x to go")
            await wait_until(pilot, lambda: len(screen.shown) == 1, 5, "the filter")
            assert app.screen is screen
            await pilot.press("ctrl+d")  # the chat, wherever the field's cursor is
            await wait_for_screen(pilot, app, ConfirmDeleteScreen, 5)
            await pilot.press("escape")
            await wait_until(pilot, lambda: app.screen is screen, 5, "cancel")
            assert screen.filter_input.value == "paris" and paths["paris"].exists()
            await pilot.press("end", "delete")  # nothing right of the cursor: the chat
            await wait_for_screen(pilot, app, ConfirmDeleteScreen, 5)
            await pilot.press("y")
            await wait_until(pilot, lambda: not paths["paris"].exists(), 5, "the chat to go")
            await wait_until(pilot, lambda: not screen.shown, 5, "the row to go")
            assert screen.filter_input.value == "paris" and len(screen.entries) == 2

    run(body())


def test_a_broken_chat_is_listed_with_its_reason_and_not_opened() -> None:
    _seed()
    (_store().folder / "chat-broken.json").write_text('{"format": "skippy-tui-transcript", "messages": [')

    async def body() -> None:
        app = _idle_app()
        async with app.run_test(size=SIZE) as pilot:
            screen = await _open_history(app, pilot)
            broken = screen.shown[0]  # written last: the newest
            assert broken.broken and broken.title == "chat-broken.json"
            assert "broken: not JSON" in str(screen.table.get_cell_at((0, 3)))
            await pilot.press("enter")
            await wait_until(pilot, lambda: any(n.title == "Cannot open this chat" for n in app._notifications), 5, "")
            assert app.screen is screen and app.history_path is None
            await pilot.press("escape")
            await wait_until(pilot, lambda: not isinstance(app.screen, HistoryScreen), 5, "the dialog to close")

    run(body())


def test_a_failing_history_save_is_told_once_and_the_chat_goes_on() -> None:
    blocker = data_dir() / "history"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("a file where the history folder should be")

    async def body() -> None:
        app = SkippyApp(ui_config(), transcript=Transcript.load(CHAT_JSON), load_models=False)
        async with app.run_test(size=SIZE) as pilot:
            app.transcript.system_prompt = "Be brief."  # an edit: saved into the history
            assert app._save_history() is False
            assert app._save_history() is False

            def notes() -> list:
                return [n for n in app._notifications if n.title == "Chat history not saved"]

            await wait_until(pilot, lambda: bool(notes()), 5, "the notice")
            await pilot.pause(0.2)
            assert len(notes()) == 1 and "cannot write transcript" in notes()[0].message
            assert app.is_running and len(app.transcript.entries) == 4

    run(body())


def test_history_screen_snapshot(snap_compare, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    paths = _seed()
    store = _store()
    store.rename(paths["sampled"], "A renamed chat")
    os.utime(paths["sampled"], (1_700_100_000, 1_700_100_000))
    (store.folder / "chat-broken.json").write_text("{}")
    os.utime(store.folder / "chat-broken.json", (1_690_000_000, 1_690_000_000))

    async def run_before(pilot) -> None:
        await _open_history(pilot.app, pilot)
        for field in pilot.app.screen.query("Input"):
            field.cursor_blink = False
        pilot.app.query_one("PromptInput").cursor_blink = False
        await pilot.wait_for_scheduled_animations()
        await pilot.pause()

    try:
        assert snap_compare(_idle_app(), terminal_size=SIZE, run_before=run_before)
    finally:
        monkeypatch.undo()
        time.tzset()
