"""The chat history store on real files in a temporary folder: save, list, search,
rename, delete, broken files, and the index that keeps listing cheap."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from skippy_tui import history as history_mod
from skippy_tui.history import INDEX_NAME, NO_MESSAGE, TITLE_WIDTH, HistoryError, HistoryStore, one_line
from skippy_tui.transcript import Entry, Transcript, TranscriptError

FIXTURE = Path(__file__).parent / "ui" / "fixtures" / "chat.json"  # a recorded chat on the default pair
ROOT = Path(__file__).resolve().parent.parent


def _chat(*messages: str, title: str = "") -> Transcript:
    """A transcript alternating user / assistant messages."""
    entries = [Entry("user" if i % 2 == 0 else "assistant", m) for i, m in enumerate(messages)]
    return Transcript(entries=entries, title=title)


def _saved(store: HistoryStore, transcript: Transcript, name: str, mtime: float | None = None) -> Path:
    path = store.folder / name
    store.save(transcript, path)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


def test_a_saved_chat_is_listed_with_title_models_turns_and_both_files(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path / "history")
    recorded = Transcript.load(FIXTURE)
    entry = store.save(recorded)  # a new chat: a fresh file
    assert entry.path.is_file() and entry.path.with_suffix(".md").is_file()
    assert Transcript.load(entry.path) == recorded  # the history file is a full transcript

    [listed] = store.list()
    assert listed.path == entry.path
    assert listed.title == "Write a haiku about the sea."
    assert listed.turns == 2
    assert listed.created == recorded.created and listed.created
    assert [(m.role, m.file_type) for m in listed.models] == [("target", "F32"), ("draft", "Q4_1")]
    assert not listed.broken and not listed.renamed
    assert (store.folder / INDEX_NAME).is_file()


def test_title_is_the_first_user_message_on_one_line_cut_at_60() -> None:
    long = "Explain,\n  in detail,\tthe difference between " + "speculative " * 10
    title = one_line(long)
    assert "\n" not in title and "  " not in title
    assert len(title) == TITLE_WIDTH and title.endswith("…")
    assert title.startswith("Explain, in detail, the difference between speculative")
    assert one_line("  short  ") == "short"


def test_a_chat_without_a_user_message_is_titled_as_such(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path)
    _saved(store, Transcript(entries=[Entry("assistant", "hello")]), "a.json")
    assert [e.title for e in store.list()] == [NO_MESSAGE]


def test_list_is_newest_first(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path)
    _saved(store, _chat("old one", "r"), "a.json", mtime=1_600_000_000)
    _saved(store, _chat("newest", "r"), "b.json", mtime=1_700_000_000)
    _saved(store, _chat("middle", "r"), "c.json", mtime=1_650_000_000)
    assert [e.title for e in store.list()] == ["newest", "middle", "old one"]


def test_a_second_listing_reads_no_chat_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = HistoryStore(tmp_path)
    for i in range(5):
        _saved(store, _chat(f"question {i}", "answer"), f"chat-{i}.json")
    first = store.list()

    def no_reading(*args: object, **kwargs: object) -> None:
        raise AssertionError("a chat file was parsed although the index is fresh")

    monkeypatch.setattr(history_mod.Transcript, "from_dict", no_reading)
    assert store.list() == first


def test_a_changed_file_is_read_again_and_the_others_come_from_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = HistoryStore(tmp_path)
    for i in range(3):
        _saved(store, _chat(f"question {i}", "answer"), f"chat-{i}.json")
    store.list()
    # another process (a second window) continues chat-1
    _chat("question 1 changed", "answer", "and a follow-up", "reply").save(tmp_path / "chat-1.json")
    parsed: list[str] = []
    real = Transcript.from_dict.__func__  # type: ignore[attr-defined]

    def counting(cls: type, d: dict) -> Transcript:
        parsed.append(d["messages"][0]["content"])
        return real(cls, d)

    monkeypatch.setattr(history_mod.Transcript, "from_dict", classmethod(counting))
    by_name = {e.path.name: e for e in store.list()}
    assert parsed == ["question 1 changed"]
    assert by_name["chat-1.json"].title == "question 1 changed" and by_name["chat-1.json"].turns == 2
    assert by_name["chat-0.json"].title == "question 0"


@pytest.mark.parametrize("damage", ["missing", "not json", "other format", "bad record"])
def test_the_index_is_rebuilt_from_the_files(tmp_path: Path, damage: str) -> None:
    store = HistoryStore(tmp_path)
    _saved(store, _chat("first", "r"), "a.json")
    _saved(store, _chat("second", "r", "more", "r"), "b.json")
    before = store.list()
    index = tmp_path / INDEX_NAME
    if damage == "missing":
        index.unlink()
    elif damage == "not json":
        index.write_text("{half")
    elif damage == "other format":
        index.write_text(json.dumps({"format": "something else", "chats": {}}))
    else:
        data = json.loads(index.read_text())
        data["chats"]["b.json"]["turns"] = "many"
        data["chats"]["a.json"]["models"] = 7
        index.write_text(json.dumps(data))
    assert store.list() == before
    assert json.loads(index.read_text())["chats"]["b.json"]["turns"] == 2  # written back whole


def test_a_chat_deleted_behind_the_index_leaves_the_list(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path)
    a = _saved(store, _chat("first", "r"), "a.json")
    _saved(store, _chat("second", "r"), "b.json")
    store.list()
    a.unlink()
    assert [e.title for e in store.list()] == ["second"]
    assert list(json.loads((tmp_path / INDEX_NAME).read_text())["chats"]) == ["b.json"]


def test_search_matches_every_word_in_title_models_or_messages(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path)
    _saved(store, Transcript.load(FIXTURE), "haiku.json")
    _saved(store, _chat("Tell me about Paris", "Paris is the capital of France."), "paris.json")
    _saved(store, _chat("What is Rust?", "A systems language."), "rust.json")

    def names(q: str) -> set[str]:
        return {e.path.name for e in store.search(q)}

    assert names("") == {"haiku.json", "paris.json", "rust.json"}
    assert names("paris") == {"paris.json"}
    assert names("CAPITAL france") == {"paris.json"}  # in the reply, any case
    assert names("capital rust") == set()  # every word must occur
    assert names("f32") == {"haiku.json"}  # a model's quantization
    assert names("2+2") == {"haiku.json"}  # a later message
    assert names("systems") == {"rust.json"}


def test_rename_wins_over_the_first_message_and_survives_the_next_save(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path)
    chat = _chat("first question", "answer")
    path = _saved(store, chat, "a.json")
    renamed = store.rename(path, "  My\nfavourite chat ")
    assert renamed.title == "My favourite chat" and renamed.renamed
    assert [e.title for e in store.list()] == ["My favourite chat"]
    assert Transcript.load(path).title == "My favourite chat"

    # the app still holds the chat as it was opened (no title) and saves it after the next reply
    chat.entries += [Entry("user", "second question"), Entry("assistant", "answer")]
    store.save(chat, path)
    [entry] = store.list()
    assert entry.title == "My favourite chat" and entry.turns == 2
    assert chat.title == "My favourite chat"

    store.rename(path, "")  # back to the first message
    assert [e.title for e in store.list()] == ["first question"]


def test_rename_reaches_the_file_when_the_index_is_stale(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path)
    chat = _chat("q", "a")
    path = _saved(store, chat, "a.json")
    store.rename(path, "kept")
    (tmp_path / INDEX_NAME).unlink()
    store.save(chat, path)
    assert Transcript.load(path).title == "kept"


def test_delete_removes_both_files_and_the_index_record(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path)
    a = _saved(store, _chat("first", "r"), "a.json")
    _saved(store, _chat("second", "r"), "b.json")
    store.list()
    store.delete(a)
    assert not a.exists() and not a.with_suffix(".md").exists()
    assert [e.title for e in store.list()] == ["second"]
    assert "a.json" not in json.loads((tmp_path / INDEX_NAME).read_text())["chats"]
    store.delete(a)  # already gone: nothing to do


def test_broken_files_are_listed_with_the_reason(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path)
    _saved(store, _chat("good", "r"), "good.json")
    (tmp_path / "half.json").write_text('{"format": "skippy-tui-transcript", "messages": [')
    (tmp_path / "other.json").write_text('{"hello": 1}')
    (tmp_path / "latin1.json").write_bytes(b'{"x": "\xe9"}')
    (tmp_path / "badmsg.json").write_text(
        json.dumps({"format": "skippy-tui-transcript", "messages": [{"role": "robot", "content": "x"}]})
    )
    by_name = {e.path.name: e for e in store.list()}
    assert not by_name["good.json"].broken
    assert by_name["half.json"].error.startswith("not JSON")
    assert "not a skippy-tui transcript" in by_name["other.json"].error
    assert by_name["latin1.json"].error.startswith("not UTF-8")
    assert "robot" in by_name["badmsg.json"].error
    assert by_name["half.json"].title == "half.json" and by_name["half.json"].turns == 0
    with pytest.raises(HistoryError, match=r"cannot rename half\.json"):
        store.rename(tmp_path / "half.json", "x")
    assert {e.path.name for e in store.search("robot")} == {"badmsg.json"}  # the reason is searchable


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_an_unreadable_file_is_broken_until_its_mode_is_fixed(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path)
    path = _saved(store, _chat("secret", "r"), "a.json")
    (tmp_path / INDEX_NAME).unlink()
    path.chmod(0)
    try:
        [entry] = store.list()
        assert entry.error.startswith("cannot read")
    finally:
        path.chmod(0o644)  # no mtime change: the reason must not have been cached
    assert [e.title for e in store.list()] == ["secret"]


def test_a_read_error_is_listed_but_not_indexed(tmp_path: Path) -> None:
    """A reason from reading (not from the content) is not cached: fixing it may change no mtime."""
    store = HistoryStore(tmp_path)
    _saved(store, _chat("good", "r"), "good.json")
    (tmp_path / "folder.json").mkdir()  # reading it fails as an unreadable file does
    by_name = {e.path.name: e for e in store.list()}
    assert by_name["folder.json"].error.startswith("cannot read")
    assert list(json.loads((tmp_path / INDEX_NAME).read_text())["chats"]) == ["good.json"]


def test_a_broken_file_is_replaced_by_the_next_save_of_its_chat(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path)
    path = tmp_path / "a.json"
    path.write_text("garbage")
    store.save(_chat("repaired", "r"), path)
    assert [(e.title, e.broken) for e in store.list()] == [("repaired", False)]


def test_a_save_that_cannot_write_raises_transcript_error(tmp_path: Path) -> None:
    blocker = tmp_path / "history"
    blocker.write_text("a file where the folder should be")
    store = HistoryStore(blocker)
    with pytest.raises(TranscriptError, match="cannot write transcript"):
        store.save(_chat("q", "a"))
    assert store.list() == []  # and listing a folder that is not one is an empty history


def test_title_round_trips_through_the_transcript_json() -> None:
    t = _chat("q", "a", title="named")
    assert Transcript.from_dict(t.to_dict()) == t
    assert "title" not in _chat("q", "a").to_dict()  # files without a rename keep their old shape
    bad = t.to_dict() | {"title": 3}
    with pytest.raises(TranscriptError, match='"title" must be a string'):
        Transcript.from_dict(bad)


# what the child processes share: their imports, and how they wait for the start (at_start): say
# they are ready (imported, set up), read the start time the test sends once all are, sleep until
# just before it and spin the last millisecond
CHILD = """
import sys, time
from pathlib import Path
from skippy_tui.history import HistoryStore
from skippy_tui.transcript import Entry, Transcript

def at_start():
    print("ready", flush=True)
    start = float(sys.stdin.readline())
    time.sleep(max(0.0, start - time.time() - 0.001))
    while time.time() < start:
        pass
"""

# one app process's saves: at the start, saves 20 new chats and continues each once
WRITER = (
    CHILD
    + """
folder, who = Path(sys.argv[1]), sys.argv[2]
store = HistoryStore(folder)
at_start()
for i in range(20):
    chat = Transcript(entries=[Entry("user", f"{who} {i}"), Entry("assistant", "ok")])
    path = store.save(chat).path
    chat.entries += [Entry("user", "more"), Entry("assistant", "ok")]
    store.save(chat, path)
"""
)


def _start_together(scripts: list[list[str]]) -> float:
    """Run ``python -c script args...`` for each, start them at one instant once all are ready
    (a loaded machine is slow to start Python) and wait for them to end; returns the start."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    pipes = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs = [subprocess.Popen([sys.executable, "-c", *script], env=env, **pipes) for script in scripts]
    for p in procs:
        assert p.stdout.readline() == "ready\n", p.communicate(timeout=60)[1]
    start = time.time() + 0.05
    for p in procs:
        p.stdin.write(f"{start!r}\n")
        p.stdin.close()
    for p in procs:
        err = p.stderr.read()  # until it ends: it writes nothing else
        assert p.wait(timeout=120) == 0, err
    return start


def test_two_processes_saving_at_once_lose_no_chat_and_no_index_record(tmp_path: Path) -> None:
    """Issue 57.3: two app processes that each saved 20 new chats, started within a millisecond
    of each other, picked the same file names (one chat overwrote another) and wrote the index
    over each other's records. Both start here at the same instant, as two real processes."""
    folder = tmp_path / "history"
    start = _start_together([[WRITER, str(folder), who] for who in ("a", "b")])
    assert time.time() > start, "a writer ended before the start it waited for"
    wanted = {f"{who} {i}" for who in "ab" for i in range(20)}
    files = sorted(folder.glob("chat-*.json"))
    assert {Transcript.load(f).entries[0].content for f in files} == wanted and len(files) == 40
    assert all(len(Transcript.load(f).entries) == 4 for f in files)  # each continued in its own file
    index = json.loads((folder / INDEX_NAME).read_text())["chats"]  # as written, before a listing repairs it
    assert {index[f.name]["title"] for f in files} == wanted and index[files[0].name]["turns"] == 2
    assert {e.title for e in HistoryStore(folder).list()} == wanted
    assert not list(folder.glob(".*.tmp"))  # no temp file left behind


def test_holding_finds_the_chat_a_transcript_was_saved_from_as_it_stands(tmp_path: Path) -> None:
    """Issue 57.2: a transcript saved with Ctrl+S from a chat in the history is that chat: continued,
    it goes on in the history file. Not when either went on without the other (a fork)."""
    store = HistoryStore(tmp_path / "history")
    chat = _chat("first question", "answer")
    path = store.save(chat).path
    chat.save(tmp_path / "saved.json")  # Ctrl+S: the same chat, in a transcript file
    copy = Transcript.load(tmp_path / "saved.json")
    assert store.holding(copy) == path
    store.rename(path, "renamed")  # a title is not what was said
    assert store.holding(copy) == path
    copy.entries.append(Entry("user", "more"))  # the file went on: the history chat did not
    assert store.holding(copy) is None
    other = _chat("first question", "answer")  # the same words, another chat (its own creation stamp)
    other.created = "2000-01-01T00:00:00+00:00"
    assert store.holding(other) is None


def test_a_chat_two_windows_go_on_with_is_not_written_over(tmp_path: Path) -> None:
    """Issue 57.3: two windows with the same chat open each save their next turn into its file;
    the second would write over the first's. It finds the file holding another conversation
    than the one it last wrote or read, keeps it, and saves its own as a new chat."""
    folder = tmp_path / "history"
    first = HistoryStore(folder).save(_chat("q", "a")).path
    windows = {name: HistoryStore(folder) for name in ("one", "two")}
    chats = {name: Transcript.load(first) for name in windows}
    for store in windows.values():
        store.opened(first)
    for name, store in windows.items():
        was = Transcript(list(chats[name].entries))
        chats[name].entries += [Entry("user", f"from {name}"), Entry("assistant", "ok")]
        saved = store.save(chats[name], first, was=was)
        assert (saved.path == first) is (name == "one")
    assert {e.turns for e in HistoryStore(folder).list()} == {2}
    assert sorted(Transcript.load(e.path).entries[2].content for e in HistoryStore(folder).list()) == [
        "from one",
        "from two",
    ]
    # a rename in another window changes the file, not the conversation: saved over, the title kept
    windows["two"].rename(first, "named")
    was = Transcript(list(chats["one"].entries))
    chats["one"].entries += [Entry("user", "more"), Entry("assistant", "ok")]
    assert windows["one"].save(chats["one"], first, was=was).path == first
    assert Transcript.load(first).title == "named" and len(Transcript.load(first).entries) == 6


# one window's saves of a chat it goes on with: at the start, adds 10 turns
CONTINUER = (
    CHILD
    + """
folder, path, who = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
store = HistoryStore(folder)
chat = Transcript.load(path)
store.opened(path)
at_start()
for i in range(10):
    was = Transcript(list(chat.entries))
    chat.entries += [Entry("user", f"{who} {i}"), Entry("assistant", "ok")]
    path = store.save(chat, path, was=was).path
"""
)


def test_two_processes_going_on_with_one_chat_lose_no_turn(tmp_path: Path) -> None:
    """Two real processes add turns to the same chat at once: every turn is in some chat file."""
    folder = tmp_path / "history"
    first = HistoryStore(folder).save(_chat("q", "a")).path
    _start_together([[CONTINUER, str(folder), str(first), who] for who in ("a", "b")])
    said = {e.content for f in folder.glob("chat-*.json") for e in Transcript.load(f).entries}
    assert {f"{who} {i}" for who in "ab" for i in range(10)} <= said
    assert len(HistoryStore(folder).list()) == len(list(folder.glob("chat-*.json")))
