"""Chat history: every conversation saved as it goes, and a list to find it again.

Each chat is one transcript pair (``<data dir>/history/chat-….json`` + ``.md``)
that keeps its file name for its life; a new chat gets a new name. The files
are the record. Listing reads a small index beside them (``.index.json``), one
record per file holding what the list shows (title, dates, models, turns, the
text a filter searches) keyed by the file's size and mtime: a record whose file
changed, or a missing or unreadable index, is rebuilt from the file, so
listing hundreds of chats reads one small file and stats the rest.

Several app processes may share one history. A new chat claims its file name
as it writes it (never over another chat's file), and every change to the
index (and a save's check of a title renamed elsewhere) happens under one
lock on ``.index.lock``, so concurrent writers lose no chat and no record. A
chat that two windows go on with at once is not written over either: a save
that finds its file holding another conversation than the one this store last
wrote or read there keeps that one and saves this as a new chat.

A file that does not load as a transcript is listed as broken, with the
reason. A reason that comes from the content is indexed (the same bytes give
the same reason); one from reading (permissions) is not, since a ``chmod``
changes no mtime and a cached reason would outlive the fix.

No UI imports here: the app's history screen and the tests use this module.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from .engine.errors import SkippyError
from .engine.jsoncache import atomic_write_text
from .transcript import Transcript, TranscriptError, not_json

try:
    import fcntl
except ImportError:  # no flock (Windows): one process per history, as before the lock
    fcntl = None  # type: ignore[assignment]

INDEX_NAME = ".index.json"
LOCK_NAME = ".index.lock"
INDEX_FORMAT = "skippy-tui-history-index"
INDEX_VERSION = 1
TITLE_WIDTH = 60  # characters of a title made from the first message
RENAMED_WIDTH = 120  # characters of a title set by a rename
SEARCH_CHARS = 4000  # message text indexed per chat for the filter
NO_MESSAGE = "(no message yet)"


class HistoryError(SkippyError):
    """A chat in the history cannot be renamed or deleted (the reason says why)."""


@dataclass(frozen=True)
class ModelRef:
    """One model a chat ran on, as recorded in its transcript."""

    role: str  # "target" or "draft"
    path: str
    name: str  # the GGUF's general.name
    file_type: str  # quantization, e.g. "Q4_1"


@dataclass(frozen=True)
class ChatEntry:
    """One chat in the history list.

    ``updated`` is the file's modification time (seconds since the epoch);
    ``created`` the transcript's own ISO 8601 stamp ("" when unknown).
    ``error`` says why a broken file does not load ("" for a good chat); a
    broken chat's title is its file name. ``text`` is the lower-cased start of
    its messages (at most :data:`SEARCH_CHARS`), for :meth:`matches`.
    """

    path: Path
    title: str
    created: str
    updated: float
    models: tuple[ModelRef, ...] = ()
    turns: int = 0  # user messages
    renamed: bool = False  # the title was set by a rename
    error: str = ""
    text: str = ""

    @property
    def broken(self) -> bool:
        return bool(self.error)

    def updated_label(self) -> str:
        """``2025-01-31 14:05``, local time."""
        return datetime.fromtimestamp(self.updated).strftime("%Y-%m-%d %H:%M")

    def matches(self, query: str) -> bool:
        """Whether every word of ``query`` occurs (any case) in the title, the date, the
        models, the file name or the messages. An empty query matches every chat."""
        words = query.lower().split()
        if not words:
            return True
        hay = " ".join(
            [self.title, self.updated_label(), self.created, self.path.name, self.error, self.text]
            + [f"{m.name} {Path(m.path).name} {m.file_type}" for m in self.models]
        ).lower()
        return all(w in hay for w in words)


def one_line(text: str, width: int = TITLE_WIDTH) -> str:
    """``text`` on one line, whitespace collapsed, cut to ``width`` characters with "…"."""
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1].rstrip() + "…"


def chat_title(transcript: Transcript) -> str:
    """The title a rename set, else the first user message on one line, else :data:`NO_MESSAGE`."""
    if transcript.title.strip():
        return one_line(transcript.title, RENAMED_WIDTH)
    first = next((e.content for e in transcript.entries if e.role == "user" and e.content.strip()), "")
    return one_line(first) if first else NO_MESSAGE


def _models(transcript: Transcript) -> tuple[ModelRef, ...]:
    out = []
    for role in ("target", "draft"):
        m = transcript.models.get(role)
        if isinstance(m, dict):
            out.append(ModelRef(role, str(m.get("path", "")), str(m.get("name", "?")), str(m.get("file_type", ""))))
    return tuple(out)


def _summary(path: Path, transcript: Transcript, updated: float) -> ChatEntry:
    text = "\n".join(e.content for e in transcript.entries)[:SEARCH_CHARS].lower()
    return ChatEntry(
        path=path,
        title=chat_title(transcript),
        created=transcript.created,
        updated=updated,
        models=_models(transcript),
        turns=sum(1 for e in transcript.entries if e.role == "user"),
        renamed=bool(transcript.title.strip()),
        text=text,
    )


def _record(entry: ChatEntry, size: int, mtime_ns: int) -> dict[str, Any]:
    """An index record: the entry and the file state it was read from."""
    return {
        "size": size,
        "mtime_ns": mtime_ns,
        "title": entry.title,
        "created": entry.created,
        "models": [[m.role, m.path, m.name, m.file_type] for m in entry.models],
        "turns": entry.turns,
        "renamed": entry.renamed,
        "error": entry.error,
        "text": entry.text,
    }


def _from_record(path: Path, rec: dict[str, Any], updated: float) -> ChatEntry:
    """Raises: KeyError, TypeError, ValueError for a malformed record (then it is rebuilt)."""
    models = tuple(ModelRef(*map(str, m)) for m in rec["models"])
    if not isinstance(rec["title"], str) or not isinstance(rec["turns"], int):
        raise ValueError("malformed index record")
    return ChatEntry(
        path=path,
        title=rec["title"],
        created=str(rec["created"]),
        updated=updated,
        models=models,
        turns=rec["turns"],
        renamed=bool(rec["renamed"]),
        error=str(rec["error"]),
        text=str(rec["text"]),
    )


def _fresh(rec: dict[str, Any] | None, st: os.stat_result) -> bool:
    """Whether an index record was made from the file as it is now (same size and mtime)."""
    return rec is not None and rec.get("size") == st.st_size and rec.get("mtime_ns") == st.st_mtime_ns


class HistoryStore:
    """The chats in one folder (``<data dir>/history``): save, list, search, rename, delete.

    Saves and renames write atomically (see :meth:`Transcript.save`); the index
    is a cache, so a failure to write it is ignored (the next listing rebuilds it).
    """

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self._stamps: dict[str, tuple[int, int]] = {}  # size and mtime of each file as this store left it

    def _remember(self, path: Path) -> None:
        with contextlib.suppress(OSError):
            st = path.stat()
            self._stamps[path.name] = (st.st_size, st.st_mtime_ns)

    def opened(self, path: Path) -> None:
        """The app read the chat at ``path``: a save over it checks it was not changed since."""
        self._remember(self.folder / Path(path).name)

    def _changed_since(self, path: Path, was: Transcript) -> bool:
        """Whether the file at ``path`` holds another conversation than ``was`` (what this store
        last wrote or read there); a rename changes the file, not the conversation."""
        try:
            st = path.stat()
        except OSError:
            return False  # gone (deleted): written again
        if path.name not in self._stamps or self._stamps[path.name] == (st.st_size, st.st_mtime_ns):
            return False
        try:
            return Transcript.load(path).conversation() != was.conversation()
        except TranscriptError:
            return False  # broken: the good copy in memory replaces it

    @property
    def index_path(self) -> Path:
        return self.folder / INDEX_NAME

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the folder's lock (an ``flock`` on :data:`LOCK_NAME`; the system drops it if
        the process dies): the read-modify-write of the index is one process's at a time."""
        fd = None
        if fcntl is not None:
            with contextlib.suppress(OSError):  # a folder that cannot be written: its save fails and says so
                self.folder.mkdir(parents=True, exist_ok=True)
                fd = os.open(self.folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o666)
        try:
            if fd is not None:
                fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            if fd is not None:
                os.close(fd)  # and the lock with it

    # -- index ------------------------------------------------------------------------------

    def _read_index(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.index_path.read_text("utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("format") != INDEX_FORMAT or data.get("version") != INDEX_VERSION:
            return {}
        chats = data.get("chats")
        return {k: v for k, v in chats.items() if isinstance(v, dict)} if isinstance(chats, dict) else {}

    def _write_index(self, chats: dict[str, dict[str, Any]]) -> None:
        text = json.dumps({"format": INDEX_FORMAT, "version": INDEX_VERSION, "chats": chats}, ensure_ascii=False)
        with contextlib.suppress(OSError):  # a cache: the next listing rebuilds it
            atomic_write_text(self.index_path, text + "\n")

    def _read_chat(self, path: Path, st: os.stat_result) -> tuple[ChatEntry, bool]:
        """The entry for one file, read in full, and whether it may be indexed."""
        updated = st.st_mtime
        try:
            raw = path.read_bytes()
        except OSError as e:  # not cached: a chmod fixes it without touching the mtime
            return ChatEntry(path, path.name, "", updated, error=f"cannot read: {e.strerror or e}"), False
        try:
            transcript = Transcript.from_dict(json.loads(raw.decode("utf-8")))
        except UnicodeDecodeError as e:
            error = f"not UTF-8 text ({e.reason})"
        except json.JSONDecodeError as e:
            error = not_json(e)
        except TranscriptError as e:
            error = str(e)
        except RecursionError:
            error = "nested too deeply to read"
        else:
            return _summary(path, transcript, updated), True
        return ChatEntry(path, path.name, "", updated, error=error), True

    # -- reading ----------------------------------------------------------------------------

    def list(self) -> list[ChatEntry]:
        """Every chat, newest first (by modification time); broken files included.

        Reads the index and stats each ``*.json``; only files that changed since
        they were indexed are read. A missing folder is an empty history.
        """
        if not self.folder.is_dir():
            return []
        with self._locked():  # a record another process adds meanwhile must not be written over
            return self._list()

    def _list(self) -> list[ChatEntry]:
        try:
            files = [p for p in self.folder.iterdir() if p.suffix == ".json" and not p.name.startswith(".")]
        except OSError:
            return []
        index = self._read_index()
        fresh: dict[str, dict[str, Any]] = {}
        out: list[ChatEntry] = []
        for path in files:
            try:
                st = path.stat()
            except OSError:  # deleted while we listed
                continue
            rec = index.get(path.name)
            entry = None
            if _fresh(rec, st):
                try:
                    entry = _from_record(path, rec, st.st_mtime)
                    fresh[path.name] = rec
                except (KeyError, TypeError, ValueError):
                    entry = None
            if entry is None:
                entry, cacheable = self._read_chat(path, st)
                if cacheable:
                    fresh[path.name] = _record(entry, st.st_size, st.st_mtime_ns)
            out.append(entry)
        if fresh != index:
            self._write_index(fresh)
        out.sort(key=lambda e: (-e.updated, e.path.name))
        return out

    def search(self, query: str) -> list[ChatEntry]:
        """The chats of :meth:`list` that match ``query`` (see :meth:`ChatEntry.matches`)."""
        return [e for e in self.list() if e.matches(query)]

    def entry(self, path: Path) -> ChatEntry | None:
        """The listed entry of one file, or None when it is not in the history."""
        path = Path(path)
        return next((e for e in self.list() if e.path.name == path.name), None)

    def holding(self, transcript: Transcript) -> Path | None:
        """The chat in the history that holds ``transcript`` as it stands (the same creation
        stamp and conversation: the chat a transcript file was saved from with Ctrl+S), or None
        (not there, or the history's copy went on, or back, since)."""
        if not transcript.created:
            return None
        wanted = transcript.conversation()
        for entry in self.list():
            if entry.broken or entry.created != transcript.created:
                continue
            try:
                if Transcript.load(entry.path).conversation() == wanted:
                    return entry.path
            except TranscriptError:
                continue
        return None

    # -- writing ----------------------------------------------------------------------------

    def _index_one(self, path: Path, transcript: Transcript) -> ChatEntry:
        """Record ``path`` in the index (the caller holds the lock)."""
        st = path.stat()
        entry = _summary(path, transcript, st.st_mtime)
        index = self._read_index()
        index[path.name] = _record(entry, st.st_size, st.st_mtime_ns)
        self._write_index(index)
        return entry

    def _title_on_disk(self, path: Path) -> str | None:
        """The renamed title of the chat at ``path`` ("" when never renamed), from the index
        when it is fresh, else from the file; None when there is no readable chat there."""
        try:
            st = path.stat()
        except OSError:
            return None
        rec = self._read_index().get(path.name)
        if _fresh(rec, st) and not rec.get("error") and isinstance(rec.get("title"), str):
            return rec["title"] if rec.get("renamed") else ""
        try:
            return Transcript.load(path).title
        except TranscriptError:
            return None  # broken: overwritten by the good copy in memory

    def save(self, transcript: Transcript, path: Path | None = None, *, was: Transcript | None = None) -> ChatEntry:
        """Write ``transcript`` to its file ``path`` in the history (atomically) and index it;
        with no ``path``, a new chat: a fresh file that no other chat has. The entry's
        ``path`` says which file.

        The title on disk wins over the one in memory: a rename made in the
        history screen while this chat is open survives the next save. ``was``: the chat
        as this store last wrote or read it at ``path``; when another window went on with
        it since, this is saved as a new chat rather than over theirs.

        Raises:
            TranscriptError: the folder or file cannot be written.
        """
        with self._locked():
            if path is not None:
                path = self.folder / Path(path).name
                if was is not None and self._changed_since(path, was):
                    path = None
            if path is None:
                json_path, _ = transcript.save_new(self.folder)
            else:
                title = self._title_on_disk(path)
                if title is not None:
                    transcript.title = title
                json_path, _ = transcript.save(path)
            self._remember(json_path)
            try:
                return self._index_one(json_path, transcript)
            except OSError:  # gone already (deleted by another window): the save itself worked
                return _summary(json_path, transcript, 0.0)

    def rename(self, path: Path, title: str) -> ChatEntry:
        """Give a chat ``title`` (one line; "" goes back to its first message).

        Raises:
            HistoryError: the chat does not load, or cannot be written.
        """
        path = self.folder / Path(path).name
        try:
            with self._locked():
                transcript = Transcript.load(path)
                transcript.title = one_line(title, RENAMED_WIDTH)
                transcript.save(path)
                return self._index_one(path, transcript)
        except (TranscriptError, OSError) as e:
            raise HistoryError(f"cannot rename {path.name}: {e}") from e

    def delete(self, path: Path) -> None:
        """Remove a chat's ``.json`` and ``.md`` (either may be missing already).

        Raises:
            HistoryError: a file exists and cannot be removed.
        """
        path = self.folder / Path(path).name
        with self._locked():
            for p in (path, path.with_suffix(".md")):
                try:
                    p.unlink(missing_ok=True)
                except OSError as e:
                    raise HistoryError(f"cannot delete {p}: {e.strerror or e}") from e
            index = self._read_index()
            if index.pop(path.name, None) is not None:
                self._write_index(index)
