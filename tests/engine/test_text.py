"""UTF-8 assembly, stop strings across chunk boundaries, origin spans, events JSON."""

from __future__ import annotations

import json

import pytest

from skippy_tui.engine.events import ReplyFinished, StepVerified, SyncInfo, TextSpan, TokenInfo, event_from_dict
from skippy_tui.engine.text import SpanQueue, StopStringMatcher, Utf8Assembler


def test_utf8_never_emits_half_a_character() -> None:
    data = "a🎉日本".encode()
    asm = Utf8Assembler()
    out = [asm.feed(data[i : i + 1]) for i in range(len(data))]
    assert "".join(out) == "a🎉日本"
    assert all("\ufffd" not in s for s in out)
    # the emoji's 4 bytes come out only once complete
    assert out[1:4] == ["", "", ""] and out[4] == "🎉"


def test_utf8_flush_drops_a_truncated_character_and_counts_it() -> None:
    asm = Utf8Assembler()
    assert asm.feed(b"a" + "🎉".encode()[:2]) == "a"
    assert asm.flush() == ""
    assert asm.dropped == 2
    # bytes that are invalid inside the stream are the model's: they stay visible as U+FFFD
    asm = Utf8Assembler()
    assert asm.feed(b"x\xffy") == "x\ufffdy"
    assert asm.flush() == "" and asm.dropped == 0


def test_a_reply_cut_inside_a_character_never_ends_in_a_replacement(smollm2_q4_1, cache_dir) -> None:
    """On the real model: cut an emoji-rich reply at every length; no U+FFFD appears, and the
    cuts that fell inside a character say how many bytes they dropped."""
    from helpers import Run, load, user

    from skippy_tui.engine.sampling.params import SamplingParams
    from skippy_tui.engine.settings import GenerationSettings

    spec = load(smollm2_q4_1, None, cache_dir)
    try:
        prompt = user("Reply with three emoji and the Japanese word for cat.")
        full = Run(spec.run(prompt, GenerationSettings(SamplingParams(temperature=0.0), max_tokens=40))).finish
        dropped = []
        for n in range(1, full.n_tokens + 1):
            fin = Run(spec.run(prompt, GenerationSettings(SamplingParams(temperature=0.0), max_tokens=n))).finish
            assert "\ufffd" not in fin.text, (n, fin.text)
            assert full.text.startswith(fin.text)
            dropped.append(fin.dropped_bytes)
            if fin.dropped_bytes and len(fin.text) < len(full.text):
                # what was dropped is the start of the next character of the full reply
                assert len(full.text[len(fin.text)].encode()) > fin.dropped_bytes
        assert any(dropped), "no cut fell inside a multi-byte character: the prompt no longer tests this"
    finally:
        spec.close()


@pytest.mark.parametrize(
    ("chunks", "stops", "released", "hit"),
    [
        (["Hello ", "wor", "ld! STOP", " more"], ["STOP"], "Hello world! ", True),
        (["ab", "c"], ["abc"], "", True),
        (["The answer: ", "4", "2.\nUs", "er: hi"], ["\nUser:"], "The answer: 42.", True),
        (["no stop", " here"], ["xyz"], "no stop here", False),
        (["ends with x", "y"], ["xyz"], "ends with ", False),  # "xy" held until flush
    ],
)
def test_stop_strings_match_across_chunks(chunks, stops, released, hit) -> None:
    m = StopStringMatcher(stops)
    out, got_hit = [], False
    for c in chunks:
        r, h = m.push(c)
        out.append(r)
        got_hit = got_hit or h
        if h:
            break
    assert "".join(out) == released
    assert got_hit is hit
    if not hit:
        assert "".join(out) + m.flush() == "".join(chunks)


def test_held_back_text_never_leaks_a_stop_prefix() -> None:
    m = StopStringMatcher(["<END>"])
    assert m.push("value <E") == ("value ", False)
    assert m.push("N") == ("", False)
    assert m.push("D> tail") == ("", True)


def test_earliest_stop_wins() -> None:
    m = StopStringMatcher(["bb", "a"])
    assert m.push("xxbba") == ("xx", True)
    assert m.matched == "bb"


def test_span_queue_keeps_origins_in_order() -> None:
    q = SpanQueue()
    q.push("The", "draft")
    q.push(" cat", "draft")
    q.push(" sat", "target")
    assert q.take(5) == [("The c", "draft")]
    assert q.take(10) == [("at", "draft"), (" sat", "target")]
    assert q.take(3) == []


def _step() -> StepVerified:
    return StepVerified(
        index=3,
        n_past_before=40,
        n_past_after=43,
        k=4,
        sync=SyncInfo("extend", 41, 44),
        proposed=(TokenInfo(1, "a", 0.9), TokenInfo(2, " b", 0.5)),
        n_accepted=1,
        committed=TokenInfo(7, " c"),
        commit_kind="correction",
        target_top=(TokenInfo(7, " c", 0.8),),
        draft_top=(TokenInfo(2, " b", 0.5),),
        sync_ms=0.1,
        draft_ms=2.0,
        verify_ms=5.0,
        delta=(TextSpan("a", "draft"), TextSpan(" c", "target")),
    )


def test_events_round_trip_through_json() -> None:
    ev = _step()
    data = json.loads(json.dumps(ev.to_dict()))
    assert data["type"] == "step"
    assert event_from_dict(data) == ev
    assert ev.text == "a c" and ev.n_committed == 2
    fin = ReplyFinished(
        reason="eos", token_ids=(1, 2), text="a c", n_tokens=2, n_steps=1, n_drafted=2, n_accepted=1,
        acceptance_rate=0.5, mean_accepted_length=1.0, per_position=(1.0, 0.0), tokens_per_second=10.0,
        generation_ms=200.0, prefill_ms=5.0, n_past=43,
    )  # fmt: skip
    assert event_from_dict(json.loads(json.dumps(fin.to_dict()))) == fin
    with pytest.raises(ValueError, match="unknown event type"):
        event_from_dict({"type": "nope"})


def test_sync_labels() -> None:
    assert SyncInfo("synced").label() == "synced"
    assert SyncInfo("extend", 41, 44).label() == "extend 41..44"
    assert SyncInfo("truncate", 38, 44).label() == "truncate 38→44"
    assert SyncInfo("reset", 0, 44).label() == "reset 0..44"
