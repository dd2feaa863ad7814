"""Transcripts: JSON round trip, Markdown, atomic UTF-8 writes, clear errors (no models needed)."""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from pathlib import Path

import pytest

from skippy_tui.engine.events import ReplyFinished, ReplyStarted, Rollback, StepVerified, SyncInfo, TokenInfo
from skippy_tui.transcript import (
    Entry,
    Transcript,
    TranscriptError,
    atomic_write_text,
    new_transcript_path,
    reply_stats,
    reproduce_flags,
    reproduce_note,
    sampling_label,
    steps_summary,
)

CHAT_JSON = Path(__file__).parent / "ui" / "fixtures" / "chat.json"
SAMPLED_JSON = CHAT_JSON.with_name("chat_sampled.json")  # with seeds, p_target and a mid-reply change


def test_fixture_loads_with_every_event_typed() -> None:
    t = Transcript.load(CHAT_JSON)
    assert [e.role for e in t.entries] == ["user", "assistant", "user", "assistant"]
    reply = t.entries[1]
    assert isinstance(reply.finish, ReplyFinished) and reply.started is not None
    assert all(isinstance(s, StepVerified) for s in reply.steps) and reply.steps
    assert "".join(s.text for s in reply.spans()) == reply.finish.text == reply.content
    assert t.models["target"]["file_type"] == "F32" and t.models["draft"]["file_type"] == "Q4_1"
    assert t.versions["textual"] and t.config["generation"]["max_tokens"] == 32


def test_round_trip_is_equal(tmp_path: Path) -> None:
    t = Transcript.load(CHAT_JSON)
    t.entries.append(Entry("user", "Ünïcödé ✓ — 日本語 \U0001f600"))
    json_path, md_path = t.save(tmp_path / "deep" / "chat.json")
    again = Transcript.load(json_path)
    assert again == t
    assert again.to_dict() == t.to_dict()
    raw = json_path.read_bytes().decode("utf-8")
    assert "日本語" in raw  # UTF-8, not \\u escapes
    assert md_path.read_text("utf-8").count("## You") == 3


def test_engine_messages_include_the_system_prompt() -> None:
    t = Transcript([Entry("user", "hi"), Entry("assistant", "hello")], system_prompt="Be brief.")
    assert t.engine_messages() == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]
    assert Transcript([Entry("user", "hi")]).engine_messages() == [{"role": "user", "content": "hi"}]


def test_markdown_has_models_and_per_reply_stats() -> None:
    md = Transcript.load(CHAT_JSON).to_markdown()
    assert "**target**: " in md and "(F32)" in md and "(Q4_1)" in md
    assert md.count("> 32 tokens · 8 steps · acceptance") == 2
    assert "finished: max_tokens" in md


def test_markdown_says_each_replys_sampler_seed_and_changes() -> None:
    t = Transcript.load(SAMPLED_JSON)
    assert Transcript.from_dict(json.loads(json.dumps(t.to_dict()))) == t  # the new fields round-trip
    md = t.to_markdown()
    seed = t.entries[1].finish.seed
    assert isinstance(seed, int) and seed == t.entries[1].started.sampling["seed"]
    expected = f"> sampling: coupled T=0.8 · seed {seed} (drawn for this reply; `--seed {seed} --temperature 0.8`"
    assert expected + " reproduces it)" in md
    changed = next(s.index for s in t.entries[3].steps if s.sampling is not None)
    assert (
        "> sampling: coupled T=0.8 · seed 1234 (fixed; `--seed 1234 --temperature 0.8` reproduces it "
        f"up to step {changed}, where the settings changed) · from step {changed}: coupled T=0.3, repeat_penalty 1.1"
    ) in md
    assert SAMPLED_JSON.with_suffix(".md").read_text("utf-8") == md  # the Markdown saved beside it
    # an old transcript: the sampling it recorded, no seed claimed
    old = Transcript.load(CHAT_JSON).to_markdown()
    assert old.count("> sampling: greedy\n") == 2 and "seed" not in old


def test_reproduce_flags_name_every_non_default_setting() -> None:
    def started(n_draft: int | str = 4, **sampling: object) -> ReplyStarted:
        base = {"temperature": 0.8, "sampler": "coupled", "seed": 7, "seed_fixed": False, "repeat_last_n": 64}
        return ReplyStarted(1, 10, 4096, SyncInfo("reset", 0, 9), 1.0, True, "model", n_draft, base | sampling)

    assert reproduce_flags(started()) == "--seed 7 --temperature 0.8"
    assert reproduce_flags(started(top_k=20, repeat_penalty=1.1, repeat_last_n=-1)) == (
        "--seed 7 --temperature 0.8 --top-k 20 --repeat-penalty 1.1 --repeat-last-n -1"
    )
    # the rejection sampler's draws follow each step's k: a fixed k is part of the recipe, auto cannot be
    assert reproduce_flags(started(sampler="rejection")) == "--seed 7 --temperature 0.8 --sampler rejection --n-draft 4"
    assert "only roughly" in reproduce_note(started("auto", sampler="rejection"), [])
    assert reproduce_note(started(), []) == ""
    legacy = dataclasses.replace(started(), sampling={"temperature": 0.8, "seed": 0})  # no seed_fixed: pre-seeds
    assert reproduce_flags(legacy) == reproduce_flags(None) == ""
    assert sampling_label({"temperature": 0.0, "sampler": "rejection"}) == "greedy"
    assert sampling_label({"temperature": 0.7}) == "T=0.7"  # recorded before samplers were


def test_markdown_says_when_replies_stop_and_start_being_bit_exact() -> None:
    """Issue 56: a reply verified in one batch on a build that certifies none says so in words;
    exact replies say nothing until a reply was not, and old files (no ``verify``) nothing."""
    from skippy_tui.engine.policy.exactness import NOT_BIT_EXACT

    t = Transcript.load(CHAT_JSON)
    replies = [i for i, e in enumerate(t.entries) if e.role == "assistant"]
    assert len(replies) == 2 and "verify:" not in t.to_markdown()
    for i, verify in zip(replies, ("not bit-exact", "exact ≤7 rows")):
        entry = t.entries[i]
        events = [dataclasses.replace(e, verify=verify) if isinstance(e, ReplyStarted) else e for e in entry.events]
        t.entries[i] = dataclasses.replace(entry, events=events)
    md = t.to_markdown()
    assert f"> verify: one batch: {NOT_BIT_EXACT}\n" in md
    assert "> verify: exact ≤7 rows: replies equal plain decoding token for token\n" in md
    assert md.index(NOT_BIT_EXACT) < md.index("exact ≤7 rows")
    assert Transcript.from_dict(json.loads(json.dumps(t.to_dict()))) == t  # the field round-trips


def test_reply_stats_match_the_recorded_totals() -> None:
    reply = Transcript.load(CHAT_JSON).entries[1]
    stats = reply_stats(reply.events)
    fin = reply.finish
    assert stats.n_steps == fin.n_steps and stats.n_drafted == fin.n_drafted
    assert stats.n_accepted == fin.n_accepted and stats.n_tokens == fin.n_tokens
    assert stats.acceptance_rate == pytest.approx(fin.acceptance_rate)
    assert stats.per_position == pytest.approx(fin.per_position)
    assert stats.tokens_per_second == pytest.approx(fin.tokens_per_second, rel=1e-6)


def test_atomic_write_replaces_whole_file_with_normal_permissions(tmp_path: Path) -> None:
    path = tmp_path / "f.md"
    path.write_text("old", "utf-8")
    atomic_write_text(path, "new ✓")
    assert path.read_text("utf-8") == "new ✓"
    assert [p.name for p in tmp_path.iterdir()] == ["f.md"]  # no temporary file left
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask


def test_atomic_write_leaves_no_temp_file_on_failure(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        atomic_write_text(tmp_path / "missing-dir" / "f.json", "x")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "transcript not found"),
        ("{not json", "not JSON"),
        ('{"a": "cut off', "not JSON (Unterminated string starting at: line 1 column 7)"),  # no "at at"
        ('{"format": "something-else"}', "not a skippy-tui transcript"),
        ('{"format": "skippy-tui-transcript", "format_version": 99}', "newer than this skippy-tui reads"),
        ('{"format": "skippy-tui-transcript", "messages": [{"role": "user"}]}', "malformed message"),
        (
            '{"format": "skippy-tui-transcript", "messages": [{"role": "assistant", "content": "", '
            '"events": [{"type": "nope"}]}]}',
            "unknown event type",
        ),
    ],
)
def test_load_errors_are_one_line(tmp_path: Path, content: str | None, message: str) -> None:
    path = tmp_path / "t.json"
    if content is not None:
        path.write_text(content, "utf-8")
    with pytest.raises(TranscriptError) as e:
        Transcript.load(path)
    assert message in str(e.value) and "\n" not in str(e.value) and str(path) in str(e.value)


def test_new_names_never_collide(tmp_path: Path) -> None:
    first = new_transcript_path(tmp_path)
    first.write_text("{}", "utf-8")
    second = new_transcript_path(tmp_path)
    assert second != first and second.suffix == ".json"


@pytest.mark.parametrize("hard_links", [True, False])
def test_save_new_never_writes_over_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hard_links: bool) -> None:
    """Each new save claims a name no other file has, with hard links or (where a file system
    has none) by creating the name exclusively first."""
    if not hard_links:

        def no_link(*args: object) -> None:
            raise PermissionError(1, "Operation not permitted")

        monkeypatch.setattr("os.link", no_link)
    taken = new_transcript_path(tmp_path)
    taken.write_text("someone else's", "utf-8")
    saved = [Transcript(entries=[Entry("user", str(i))]).save_new(tmp_path)[0] for i in range(3)]
    assert len({taken, *saved}) == 4 and taken.read_text("utf-8") == "someone else's"
    assert [Transcript.load(p).entries[0].content for p in saved] == ["0", "1", "2"]
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_saved_file_is_plain_json_with_event_types(tmp_path: Path) -> None:
    t = Transcript.load(CHAT_JSON)
    path, _ = t.save(tmp_path / "c.json")
    data = json.loads(path.read_text("utf-8"))
    types = [ev["type"] for ev in data["messages"][1]["events"]]
    assert types[0] == "reply_started" and types[-1] == "finish" and set(types[1:-1]) == {"step"}


def test_transcript_and_cli_import_no_ui() -> None:
    """The headless paths (CLI run/bench, transcripts) never pull in Textual or Rich."""
    import subprocess
    import sys

    code = (
        "import sys, skippy_tui.transcript, skippy_tui.cli; "
        "bad = [m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"models": "abc"}, '"models" must be a JSON object'),
        ({"format_version": "x"}, '"format_version" must be a whole number'),
        ({"messages": "x"}, '"messages" must be a JSON list'),
        ({"messages": [{"role": "user", "content": "x", "events": [1]}]}, "malformed message"),
    ],
)
def test_a_malformed_transcript_is_one_clear_error(tmp_path: Path, body: dict, says: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"format": "skippy-tui-transcript", **body}), "utf-8")
    with pytest.raises(TranscriptError, match=says):
        Transcript.load(path)


def test_counts_are_singular_for_one() -> None:
    from skippy_tui.transcript import count

    assert [count(n, "step") for n in (0, 1, 2)] == ["0 steps", "1 step", "2 steps"]


def test_a_save_removes_temp_files_a_killed_save_left(tmp_path) -> None:
    """A process killed while saving leaves ``.NAME.<pid>.<hex>.tmp``; the next save removes
    those of dead processes and keeps a live one's (it may be writing right now)."""
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    stale = tmp_path / f".chat.json.{dead_pid}.deadbeef.tmp"
    stale.write_text("half a transcript")
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        busy = tmp_path / f".other.json.{live.pid}.cafebabe.tmp"
        busy.write_text("being written")
        other = tmp_path / "notes.tmp"  # not ours: left alone
        other.write_text("x")
        t = Transcript()
        t.entries.append(Entry("user", "hi"))
        t.save(tmp_path / "chat.json")
        assert not stale.exists()
        assert busy.exists() and other.exists()
        assert (tmp_path / "chat.json").exists() and (tmp_path / "chat.md").exists()
    finally:
        live.kill()


def _saved(tmp_path, **changes):
    t = Transcript(system_prompt="be brief")
    t.entries.append(Entry("user", "hi"))
    d = t.to_dict()
    d.update(changes)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(d), "utf-8")
    return path


def test_a_loaded_lone_surrogate_never_makes_a_save_crash(tmp_path) -> None:
    path = tmp_path / "t.json"
    path.write_text(
        '{"format": "skippy-tui-transcript", "format_version": 1, "system_prompt": "",'
        ' "messages": [{"role": "user", "content": "half a pair: \\ud83c!"}]}',
        "utf-8",
    )
    t = Transcript.load(path)
    assert t.entries[0].content == "half a pair: \ufffd!"
    t.entries.append(Entry("user", "pasted \udce9"))  # made in the app, not loaded
    json_path, md_path = t.save(tmp_path / "again.json")
    assert "\ufffd" in json_path.read_text("utf-8") and "pasted \ufffd" in md_path.read_text("utf-8")


def test_null_and_wrongly_typed_fields_are_refused_or_read_as_meant(tmp_path) -> None:
    assert Transcript.load(_saved(tmp_path, system_prompt=None)).system_prompt == ""
    with pytest.raises(TranscriptError, match="system_prompt"):
        Transcript.load(_saved(tmp_path, system_prompt=3))
    with pytest.raises(TranscriptError, match="content"):
        Transcript.load(_saved(tmp_path, messages=[{"role": "user", "content": None}]))
    with pytest.raises(TranscriptError, match="role"):
        Transcript.load(_saved(tmp_path, messages=[{"role": 7, "content": "x"}]))
    finish = {
        "type": "finish", "reason": "eos", "token_ids": [1, 2], "text": "ok", "n_tokens": 2, "n_steps": 1,
        "n_drafted": 0, "n_accepted": 0, "acceptance_rate": 0.0, "mean_accepted_length": 0.0,
        "per_position": [], "tokens_per_second": 10.0, "generation_ms": 5.0, "prefill_ms": 1.0, "n_past": 9,
    }  # fmt: skip
    good = [{"role": "assistant", "content": "ok", "events": [finish]}]
    assert Transcript.load(_saved(tmp_path, messages=good)).entries[0].finish.n_tokens == 2
    for field, bad in (("n_tokens", "2"), ("reason", "bored"), ("token_ids", [1, "x"]), ("text", None)):
        broken = [{"role": "assistant", "content": "ok", "events": [finish | {field: bad}]}]
        with pytest.raises(TranscriptError, match=field):
            Transcript.load(_saved(tmp_path, messages=broken))


def test_a_crash_between_the_two_writes_is_repaired_from_the_json_on_open(tmp_path: Path) -> None:
    t = Transcript.load(CHAT_JSON)
    json_path, md_path = t.save(tmp_path / "chat.json")
    old_md = md_path.read_text("utf-8")
    t.entries.append(Entry("user", "one more question"))
    # the .json write of the next save landed, the process died before the .md one
    atomic_write_text(json_path, json.dumps(t.to_dict(), ensure_ascii=False))
    assert Transcript.load(json_path) == t and md_path.read_text("utf-8") == old_md  # a plain load writes nothing
    opened = Transcript.load(json_path, repair_markdown=True)
    assert md_path.read_text("utf-8") == opened.to_markdown() != old_md
    assert "one more question" in md_path.read_text("utf-8")
    md_path.unlink()  # a missing .md is rebuilt too; an up-to-date one is left alone
    assert opened.repair_markdown(json_path) and not opened.repair_markdown(json_path)
    assert md_path.read_text("utf-8") == opened.to_markdown()


def test_opening_where_the_markdown_cannot_be_written_still_loads(tmp_path: Path) -> None:
    json_path, md_path = Transcript.load(CHAT_JSON).save(tmp_path / "chat.json")
    md_path.unlink()
    md_path.mkdir()  # unwritable even for root, unlike a read-only folder
    opened = Transcript.load(json_path, repair_markdown=True)
    assert opened == Transcript.load(CHAT_JSON) and md_path.is_dir()
    assert not opened.repair_markdown(json_path)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_the_fixtures_markdown_is_what_their_json_derives() -> None:
    for path in (CHAT_JSON, SAMPLED_JSON):
        assert path.with_suffix(".md").read_text("utf-8") == Transcript.load(path).to_markdown(), path


# -- issue 57.1: the system prompt, the model pair and the sampling settings per turn --------------

PAIR_A = {"target": {"path": "/m/A.F32.gguf", "name": "A", "file_type": "F32"}, "draft": None}
PAIR_B = {
    "target": {"path": "/m/B.Q8_0.gguf", "name": "B", "file_type": "Q8_0"},
    "draft": {"path": "/m/b.Q4_1.gguf", "name": "b", "file_type": "Q4_1"},
}


def _turns(*texts: str, system: str = "") -> Transcript:
    entries = [Entry("user" if i % 2 == 0 else "assistant", text) for i, text in enumerate(texts)]
    return Transcript(entries, system_prompt=system)


def test_a_system_prompt_set_mid_chat_is_kept_where_it_was_made() -> None:
    """Before the first message it is the chat's own; after one, a system message there: the turns
    before keep the one they were sent with, and are sent again as they were."""
    t = Transcript()
    t.set_system("Be brief.")
    assert t.system_prompt == "Be brief." and not t.entries
    t.entries += [Entry("user", "Say A."), Entry("assistant", "A.")]
    t.set_system("SYS-X pretend")
    assert t.system_prompt == "Be brief." and t.current_system == "SYS-X pretend"
    assert [(e.role, e.content) for e in t.entries][-1] == ("system", "SYS-X pretend")
    t.set_system("SYS-Y")  # changed again before the next message: one change
    assert [e.role for e in t.entries] == ["user", "assistant", "system"] and t.current_system == "SYS-Y"
    t.set_system("Be brief.")  # back to the one in force: no change at all
    assert [e.role for e in t.entries] == ["user", "assistant"]
    t.set_system("SYS-X pretend")
    t.entries += [Entry("user", "Say B.")]
    assert t.engine_messages() == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Say A."},
        {"role": "assistant", "content": "A."},
        {"role": "system", "content": "SYS-X pretend"},
        {"role": "user", "content": "Say B."},
    ]
    assert [t.system_at(i) for i in range(len(t.entries))] == ["Be brief."] * 3 + ["SYS-X pretend"]


def test_a_cleared_system_prompt_is_recorded_and_sends_nothing() -> None:
    t = _turns("Say A.", "A.", system="Be brief.")
    t.set_system("")
    t.entries.append(Entry("user", "Say B."))
    assert t.entries[2] == Entry("system", "") and t.current_system == ""
    assert [m["role"] for m in t.engine_messages()] == ["system", "user", "assistant", "user"]
    assert "## System (changed)\n\n_(cleared)_" in t.to_markdown()


def test_an_edit_or_regenerate_keeps_a_system_prompt_set_after_the_turn_for_the_turn_sent_again() -> None:
    t = _turns("Say A.", "A.", "Say B.", "B.")
    t.set_system("SYS-X")
    dropped = t.cut(2)  # "Say B." is sent again (edited, or its reply regenerated)
    assert [e.content for e in dropped] == ["Say B.", "B.", "SYS-X"]
    assert [(e.role, e.content) for e in t.entries] == [("user", "Say A."), ("assistant", "A."), ("system", "SYS-X")]
    t.cut(0)  # the first message sent again: the chat starts with it
    assert t.entries == [] and t.system_prompt == "SYS-X"


def test_markdown_and_json_show_each_change_where_it_was_made() -> None:
    t = _turns("Say A.", "A.")
    t.entries[1].models = PAIR_A
    t.models = PAIR_B  # the pair at the last save: switched since the first reply
    t.set_system("SYS-X pretend")
    t.entries += [Entry("user", "Say B."), Entry("assistant", "B.", models=PAIR_B), Entry("user", "Say C.")]
    t.entries.append(Entry("assistant", "C.", models=PAIR_B))
    md = t.to_markdown()
    assert "## System\n" not in md  # none at the start: the change is not above the turns before it
    assert md.index("## You\n\nSay A.") < md.index("## System (changed)\n\nSYS-X pretend") < md.index("Say B.")
    # reply 1 came from another pair than the one the header names; reply 2 from the new one on
    assert md.count("> models: ") == 2
    assert md.index("> models: target A F32 · no draft") < md.index("> models: target B Q8_0 · draft b Q4_1")
    assert md.index("\n\nB.\n") < md.index("> models: target B Q8_0") < md.index("Say C.")  # reply 2's footer
    data = t.to_dict()
    assert data["system_prompt"] == "" and data["messages"][2] == {"role": "system", "content": "SYS-X pretend"}
    assert data["messages"][1]["models"] == PAIR_A
    assert Transcript.from_dict(json.loads(json.dumps(data))) == t


def test_an_old_transcript_without_per_turn_records_loads_as_before(tmp_path: Path) -> None:
    """Files from before: one system prompt at the top, no models per reply. They open, read
    as chats whose system prompt never changed, and save back with nothing added."""
    data = json.loads(CHAT_JSON.read_text("utf-8"))
    data["system_prompt"] = "Be brief."
    path = tmp_path / "old.json"
    path.write_text(json.dumps(data), "utf-8")
    t = Transcript.load(path)
    assert t.system_prompt == t.current_system == "Be brief." and all(e.models is None for e in t.entries)
    assert t.engine_messages()[0] == {"role": "system", "content": "Be brief."} and len(t.engine_messages()) == 5
    assert "(changed)" not in t.to_markdown() and "> models:" not in t.to_markdown()
    t.save(path)
    saved = json.loads(path.read_text("utf-8"))
    assert saved["system_prompt"] == "Be brief." and [m["role"] for m in saved["messages"]] == ["user", "assistant"] * 2
    assert not any("models" in m for m in saved["messages"])
    bad = data | {"messages": [{"role": "assistant", "content": "x", "models": "B"}]}
    path.write_text(json.dumps(bad), "utf-8")
    with pytest.raises(TranscriptError, match='"models" must be a JSON object'):
        Transcript.load(path)


def test_markdown_says_what_drafted_each_reply_and_how_the_target_rolled_back() -> None:
    def step(i: int, source: str, rollback: Rollback | None = None) -> StepVerified:
        proposed = (TokenInfo(1, "a"),) if source else ()
        return StepVerified(
            i, 10, 11, len(proposed), SyncInfo("synced"), proposed, 0, TokenInfo(2, "b"), "correction", (), (),
            0.0, 1.0, 1.0, (), draft_source=source, rollback=rollback,
        )  # fmt: skip

    steps = [
        step(0, "mtp", Rollback("snapshot", 3, 0, 0.25)), step(1, "mtp"), step(2, ""),
        step(3, "ngram", Rollback("restore", 2, 1, 1.0)), step(4, "mtp", Rollback("snapshot", 1, 0, 0.5)),
    ]  # fmt: skip
    assert steps_summary(steps) == (
        "steps by source: 3 mtp, 1 plain, 1 ngram · target rollbacks: 2 rollback (4 rows), "
        "1 restore (2 rows, 1 decoded again); 1.8 ms"
    )
    assert steps_summary([]) == ""
    # an old transcript: its sources, no rollbacks (none were recorded), and it still opens
    raw = json.loads(CHAT_JSON.read_text("utf-8"))
    recorded = [ev for m in raw["messages"] for ev in m.get("events") or [] if ev["type"] == "step"]
    assert recorded and not any("rollback" in ev for ev in recorded)
    t = Transcript.load(CHAT_JSON)
    assert all(st.rollback is None for e in t.replies() for st in e.steps)
    md = t.to_markdown()
    assert "> steps by source: 8 model\n" in md and "> steps by source: 7 model, 1 plain\n" in md
