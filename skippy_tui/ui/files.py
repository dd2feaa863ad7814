"""The conversation on disk: save and open transcripts, the chat history, and asking
before a chat that is not kept anywhere is dropped (new chat, open, quit)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..config import data_dir
from ..history import HistoryStore
from ..transcript import Transcript, TranscriptError, versions
from .screens.confirm import DISCARD, SAVE, ConfirmDiscardScreen
from .screens.history import HistoryScreen
from .screens.open import OpenTranscriptScreen


class Saved:
    """The conversation as one file holds it: the entries (by identity: an edit or a regenerate
    replaces them) and the system prompt."""

    def __init__(self, transcript: Transcript) -> None:
        self.entries = list(transcript.entries)
        self.system = transcript.system_prompt

    def holds(self, transcript: Transcript) -> bool:
        entries = transcript.entries
        same = len(entries) == len(self.entries) and all(a is b for a, b in zip(entries, self.entries))
        return same and transcript.system_prompt == self.system

    def transcript(self) -> Transcript:
        return Transcript(list(self.entries), self.system)


class FilesMixin:
    """Saving, opening and keeping the conversation for the app.

    Owns ``history_path`` (this chat's file in the history, once saved there),
    ``_history_failed``, and what each of the chat's two files holds: ``_in_file`` (the
    transcript file, ``transcript_path``, as opened or last saved with Ctrl+S) and
    ``_in_history`` (``history_path``), behind :attr:`unsaved`. Relies on the app's ``config``,
    ``transcript``, ``transcript_path``, ``speculator``, ``session_stats``, ``chat``,
    ``panel``, ``prompt``, ``generating`` / ``_busy`` / ``_end_edit`` / ``_forget_next``
    (GenerationMixin), ``_show_transcript`` (ReplyViewMixin) and ``_n_past`` /
    ``_update_status`` (StatusMixin).
    """

    def _init_files(self) -> None:
        self._history: HistoryStore | None = None
        self._history_failed = False  # a failed history save was told (once, until one works)
        self.history_path: Path | None = None  # this chat's file in the history, once saved there
        self._in_history: Saved | None = None
        self._in_file: Saved | None = Saved(self.transcript)  # a transcript opened from a file holds it
        if self.transcript_path is not None:
            self._find_in_history()

    # -- unsaved conversations -----------------------------------------------------------------

    @property
    def unsaved(self) -> bool:
        """The conversation has messages that neither its transcript file nor its history
        file holds as they stand."""
        if not self.transcript.entries:
            return False
        return not any(
            saved is not None and saved.holds(self.transcript) for saved in (self._in_file, self._in_history)
        )

    async def _unless_kept(self, action: str, proceed: Callable[[], Any]) -> None:
        """Run ``proceed`` (which drops the conversation) once the conversation is safe.

        Saved or empty: at once. With ``[ui] autosave`` on: after saving it. Otherwise a
        dialog asks: Enter/y goes on without saving, s saves first, Esc/n keeps the chat.
        A failed save (its error is shown) goes nowhere.
        """

        async def go() -> None:
            result = proceed()
            if asyncio.iscoroutine(result):
                await result

        if not self.unsaved:
            await go()
            return
        if self._save_history():  # history on: the chat is kept there
            await go()
            return
        if self.config.get("ui", "autosave") and self.action_save(quiet=True):
            await go()
            return

        async def chosen(choice: str | None) -> None:
            if choice == DISCARD or (choice == SAVE and self.action_save()):
                await go()

        n = len(self.transcript.entries)
        what = f"This conversation ({n} message{'s' if n != 1 else ''})"
        self.push_screen(ConfirmDiscardScreen(action, what), chosen)

    async def action_new_chat(self) -> None:
        if self._busy():
            return
        await self._unless_kept("Start a new chat", self._new_chat_now)

    async def _new_chat_now(self) -> None:
        if self._busy():  # a reply may have started while the dialog asked
            return
        self.transcript = Transcript(system_prompt=self.transcript.current_system)  # the one set last
        self.transcript_path = None
        self.history_path = None  # a new chat gets a new file in the history
        self._in_file = self._in_history = None
        self._forget_next = True
        self._end_edit()
        session = self.session_stats
        await self._show_transcript()
        self.session_stats = session  # the session spans chats
        self.panel.set_session(session)
        self._n_past = 0
        self._update_status()
        self.prompt.focus()

    # -- transcripts ---------------------------------------------------------------------------

    def transcript_dir(self) -> Path:
        configured = self.config.get("ui", "transcript_dir")
        return Path(configured).expanduser() if configured else data_dir() / "transcripts"

    def _snapshot_metadata(self) -> None:
        t = self.transcript
        spec = self.speculator
        if spec is not None:
            from ..engine.native.rpc import devices_label

            t.models = {
                "target": spec.target_info.summary() if spec.target_info else None,
                "draft": spec.draft_info.summary() if spec.draft_info else None,
                "backend": devices_label(spec),
                "n_ctx": spec.n_ctx,
            }
        t.config = {s: dict(v) for s, v in self.config.values.items()}
        t.versions = versions()

    def action_save(self, quiet: bool = False) -> bool:
        """Save the transcript (Markdown + JSON); True once it is on disk."""
        if not self.transcript.entries:
            if not quiet:
                self.notify("Nothing to save yet.")
            return False
        path = self.transcript_path
        held = self._in_file is not None and self._in_file.holds(self.transcript)
        if held and path is not None and path.suffix == ".json" and path.is_file():
            # the file holds the chat as it stands: rewriting would replace its record of the
            # models, config and versions that made it with this session's
            if not quiet:
                self.notify(f"{path} is up to date: nothing changed since it was saved or opened.", timeout=5)
            return True
        self._snapshot_metadata()
        try:
            if path is None or path.suffix != ".json":  # a fresh name, claimed as it is written
                json_path, md_path = self.transcript.save_new(self.transcript_dir())
            else:
                json_path, md_path = self.transcript.save(path)
        except TranscriptError as e:
            self.notify(str(e), title="Save failed", severity="error", timeout=10)
            return False
        self.transcript_path = json_path
        self._in_file = Saved(self.transcript)
        if not quiet:
            extra = " (the reply in flight is not included)" if self.generating else ""
            self.notify(f"Saved {json_path}\nand {md_path.name}{extra}", title="Transcript saved", timeout=5)
        return True

    def action_open_transcript(self) -> None:
        if self._busy():
            return

        async def done(path: Path | None) -> None:
            if path is None:
                return
            await self._unless_kept("Open", lambda: self.open_transcript(path))

        self.push_screen(OpenTranscriptScreen(self.transcript_dir()), done)

    async def open_transcript(self, path: Path) -> None:
        """Open a transcript file to read or continue: Ctrl+S saves the chat as it then stands
        into it. Continued, the chat goes on in its history file when the history holds this
        same chat (the file was saved from it), else the history keeps it as a new chat; a file
        in the history folder is opened as F9 opens it."""
        path = Path(path)
        if path.parent.resolve() == self.history_store().folder.resolve():
            await self.open_history(path)
            return
        if not await self._open(path):
            return
        self.transcript_path = path
        self._in_file, self._in_history, self.history_path = Saved(self.transcript), None, None
        self._find_in_history()
        self._update_status()
        if self.speculator is not None:
            self.notify("Transcript opened: type a message to continue it.", timeout=4)

    async def _open(self, path: Path) -> bool:
        """Show the transcript in ``path`` in place of the conversation; False (with the error
        told, the conversation as it was) when it cannot be read or shown."""
        try:
            transcript = Transcript.load(path, repair_markdown=True)
        except TranscriptError as e:
            self.notify(str(e), title="Cannot open transcript", severity="error", timeout=10)
            return False
        previous = self.transcript
        self.transcript = transcript
        self._end_edit()
        try:
            await self._show_transcript()
        except Exception as e:  # parsed, but a field holds what no reply can have: keep the chat
            self.transcript = previous
            await self._show_transcript()
            self.notify(f"{path}: {type(e).__name__}: {e}", title="Cannot open transcript", severity="error")
            return False
        return True

    def _find_in_history(self) -> None:
        """Continue the chat in the history file that holds it as it stands, if there is one."""
        if self.history_enabled():
            self.history_path = self.history_store().holding(self.transcript)
            self._in_history = Saved(self.transcript) if self.history_path is not None else None
            if self.history_path is not None:
                self.history_store().opened(self.history_path)

    # -- chat history --------------------------------------------------------------------------

    def history_enabled(self) -> bool:
        """``[ui] history`` (``--no-history`` sets it false): whether chats are kept."""
        return bool(self.config.get("ui", "history"))

    def history_store(self) -> HistoryStore:
        """The chats in ``<user data dir>/history`` (one store for the app's life: it knows
        which files it wrote, to tell when another window wrote one since)."""
        if self._history is None:
            self._history = HistoryStore(data_dir() / "history")
        return self._history

    def _save_history(self) -> bool:
        """Save the conversation into its history file (after each reply and each edit).

        Returns True once it is on disk. Does nothing with history off or an empty
        chat. A failure is told once (until a save works again), never raised: the
        chat goes on and the next reply tries again.
        """
        if not self.history_enabled() or not self.transcript.entries:
            return False
        self._snapshot_metadata()
        new = self.history_path is None
        was = self._in_history.transcript() if self._in_history is not None else None
        try:
            entry = self.history_store().save(self.transcript, self.history_path, was=was)  # None: a new chat
        except TranscriptError as e:
            if not self._history_failed:
                self.notify(
                    f"{e}\nThe chat goes on; the next reply tries again.",
                    title="Chat history not saved",
                    severity="error",
                    timeout=10,
                )
            self._history_failed = True
            return False
        self._history_failed = False
        if not new and entry.path != self.history_path:  # not over what another window saved there
            self.notify(
                f"Another window went on with this chat: it is kept, and this one is saved as a new chat "
                f"({entry.path.name}).",
                title="Chat history",
                severity="warning",
                timeout=10,
            )
        self.history_path = entry.path
        self._in_history = Saved(self.transcript)
        if new and self.transcript_path is not None:  # continuing a transcript file: say where it goes
            self.notify(
                f"The chat history keeps it as a new chat ({entry.path.name}); "
                f"ctrl+s saves it into {self.transcript_path.name}.",
                title="Continued from a transcript",
                timeout=8,
            )
        return True

    def chat_is_kept(self) -> bool:
        """Whether the conversation as it stands is on disk (in the history, or saved with
        Ctrl+S, or opened unchanged), so clearing or quitting loses nothing."""
        return not self.unsaved

    def action_history(self) -> None:
        if not self.history_enabled():
            self.notify("Chat history is off ([ui] history = false, or --no-history).", severity="warning")
            return
        if self._busy():
            return

        async def done(path: Path | None) -> None:
            if self.history_path is not None and not self.history_path.exists():
                self.history_path = None  # deleted there: continuing it saves it as a new chat
            if path is None:
                return
            if self.history_path is not None and path.name == self.history_path.name:
                self.notify("That chat is the one open.", timeout=3)
                return
            await self._unless_kept("Open", lambda: self.open_history(path))

        self.push_screen(HistoryScreen(self.history_store(), self.history_path), done)

    async def open_history(self, path: Path) -> None:
        """Open a chat from the history to continue it with the loaded models; its next
        replies are saved into the same file (Ctrl+S still saves a copy as a transcript)."""
        path = Path(path)
        if not await self._open(path):
            return
        self.transcript_path, self._in_file = None, None
        self.history_path, self._in_history = path, Saved(self.transcript)
        self.history_store().opened(path)
        self._update_status()
        if self.speculator is not None:
            self.notify("Chat opened: type a message to continue it.", timeout=4)
