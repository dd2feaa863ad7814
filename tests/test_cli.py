"""The headless CLI, run as a user would (a subprocess), on the real default pair."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def cli(
    *args: str, stdin: str | None = None, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "skippy_tui", *args],
        capture_output=True,
        text=True,
        input=stdin,
        timeout=timeout,
        env={**os.environ, "PYTHONIOENCODING": "utf-8", **(env or {})},
    )


@pytest.fixture(scope="module", autouse=True)
def _default_pair_ready(smollm2_f32: Path) -> None:
    """Derive the F32 default target before the CLI runs need it."""


def test_run_streams_the_reply_and_traces_steps() -> None:
    r = cli("run", "What is the capital of France?", "--trace", "--stats", "--max-tokens", "24", "--n-draft", "4")
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout
    steps = [ln for ln in r.stderr.splitlines() if ln.startswith("step ")]
    assert steps and "synced" in steps[0]  # the draft was filled with the prompt before step 0
    assert any("✓" in ln for ln in steps)
    assert any("+bonus" in ln or "+correction" in ln for ln in steps)
    assert "acceptance" in r.stderr and "Traceback" not in r.stderr
    # the exactness claim is printed, and it is a batched one on the build under test
    verify = [ln for ln in r.stderr.splitlines() if ln.startswith("verify: ")]
    assert len(verify) == 1 and verify[0].startswith("verify: exact"), r.stderr
    assert "row by row" not in verify[0]


def test_json_lines_carry_every_event() -> None:
    r = cli("run", "Name a colour.", "--json", "--max-tokens", "16", "--n-draft", "3")
    assert r.returncode == 0, r.stderr
    events = [json.loads(ln) for ln in r.stdout.splitlines()]
    types = [e["type"] for e in events]
    assert types[0] == "reply_started" and types[-1] == "finish" and "step" in types
    fin = events[-1]
    for key in ("token_ids", "text", "reason", "acceptance_rate", "mean_accepted_length", "tokens_per_second"):
        assert key in fin
    step = next(e for e in events if e["type"] == "step")
    assert {"sync", "proposed", "n_accepted", "committed", "draft_ms", "verify_ms"} <= step.keys()
    assert step["k"] <= 3
    # per_position: acceptance by draft position, recomputed from the steps
    steps = [e for e in events if e["type"] == "step" and e["proposed"]]
    expected = []
    for i in range(max(len(e["proposed"]) for e in steps)):
        offered = [e for e in steps if len(e["proposed"]) > i]
        expected.append(sum(e["n_accepted"] > i for e in offered) / len(offered))
    assert fin["per_position"] == pytest.approx(expected) and len(fin["per_position"]) <= 3


def test_plain_and_speculative_cli_agree() -> None:
    a = cli("run", "List three fruits that are red.", "--no-draft", "--json", "--max-tokens", "20")
    b = cli("run", "List three fruits that are red.", "--json", "--max-tokens", "20", "--n-draft", "8")
    fa, fb = json.loads(a.stdout.splitlines()[-1]), json.loads(b.stdout.splitlines()[-1])
    assert fa["token_ids"] == fb["token_ids"]
    assert fa["n_drafted"] == 0 and fb["n_drafted"] > 0
    # not plain against plain: verify batches of several rows, not split into single rows
    rows = [len(json.loads(ln)["proposed"]) + 1 for ln in b.stdout.splitlines()[1:-1]]
    assert max(rows) >= 5 and "row by row" not in b.stderr


def test_a_probe_that_certifies_nothing_makes_auto_verify_in_one_batch_and_run_says_so(
    smollm2_f32: Path, smollm2_q4_1: Path, tmp_path: Path
) -> None:
    """Issue 56 on the real pair: a probe verdict of 1 row, forced through its disk cache (as a
    build whose batched rows differ would give it), under the default profile: ``run`` says in
    words that replies are not bit-exact, every reply records it, and verification is one
    batch of k + 1 rows; ``--profile exact`` goes row by row instead."""
    from skippy_tui.engine.policy.exactness import NOT_BIT_EXACT

    env_cache = {"SKIPPY_TUI_CACHE_DIR": str(tmp_path)}
    pair = ("--target", str(smollm2_f32), "--draft", str(smollm2_q4_1), "--max-tokens", "24", "--n-draft", "4")
    prompt = "List three fruits that are red."
    first = cli("run", prompt, *pair, env=env_cache)  # probes, and caches the verdict
    assert first.returncode == 0 and "verify:" not in first.stderr, first.stderr  # certified here: nothing to say
    entries = list((tmp_path / "invariance").glob("*.json"))
    assert entries, "the probe left no cache entry"
    for entry in entries:
        data = json.loads(entry.read_text())
        entry.write_text(json.dumps({**data, "rows": 1, "max_diff": 0.25}))
    r = cli("run", prompt, *pair, "--json", env=env_cache)
    assert r.returncode == 0, r.stderr
    verify = [ln for ln in r.stderr.splitlines() if ln.startswith("verify: ")]
    assert verify == [
        f"verify: one batch: {NOT_BIT_EXACT} (a batch of 2 rows differs from single rows by up to 0.25 in a logit)"
    ], r.stderr
    events = [json.loads(ln) for ln in r.stdout.splitlines()]
    assert events[0]["verify"] == "not bit-exact"
    assert max(len(e["proposed"]) + 1 for e in events if e["type"] == "step") == 5
    exact = cli("run", prompt, *pair, "--json", "--profile", "exact", "--trace", env=env_cache)
    assert exact.returncode == 0, exact.stderr
    assert "verify: exact in chunks of 1" in exact.stderr
    assert json.loads(exact.stdout.splitlines()[0])["verify"] == "exact ≤1 row"
    # this build is batch-invariant in truth, so both replies are plain decoding's
    assert json.loads(r.stdout.splitlines()[-1])["token_ids"] == json.loads(exact.stdout.splitlines()[-1])["token_ids"]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("run", "hi", "--target", "/no/such/model.gguf"), 1, "model file not found: /no/such/model.gguf"),
        (("run", "hi", "--n-draft", "0"), 2, 'n_draft = 0 is out of bounds: must be in 1..4096 or "auto"'),
        (("run", "hi", "--p-min", "nan"), 2, "error: --p-min: p_min = nan is out of bounds"),
        (("run", "hi", "--n-ctx", "-5"), 2, "error: --n-ctx: target.n_ctx = -5 is out of bounds"),
        (("run", "hi", "--config", "/no/such.toml"), 2, "config file not found"),
        (("run", "hi", "--target", ""), 2, "argument --target: an empty path (leave the flag out for the default)"),
        (("run", "hi", "--n-draft", "abc"), 2, "argument --n-draft: expected an integer or 'auto', got 'abc'"),
        (("run", "hi", "--seed", "foo"), 2, "argument --seed: expected an integer or 'random', got 'foo'"),
        (
            ("run", "hi", "--no-draft", "--draft-source", "model"),
            2,
            "error: --draft-source model needs a draft model (--no-draft turns it off); ngram drafts without one",
        ),
    ],
)
def test_errors_are_one_line_and_a_nonzero_exit(args: tuple[str, ...], code: int, message: str) -> None:
    r = cli(*args)
    assert r.returncode == code
    assert message in r.stderr
    assert "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith(("skippy-tui:", "skippy-tui run:"))  # ours or argparse's


def test_an_incompatible_pair_is_refused_with_what_differs(gemma3_270m: Path, smollm2_q4_1: Path) -> None:
    r = cli("run", "hi", "--target", str(smollm2_q4_1), "--draft", str(gemma3_270m))
    assert r.returncode == 1
    assert "vocab type differs: target" in r.stderr and "BPE" in r.stderr and "SPM" in r.stderr
    assert "Traceback" not in r.stderr


def test_a_batch_too_small_for_the_verify_batch_is_a_config_error(tmp_path: Path) -> None:
    """Found once the headers are read, it is still a bad config value: exit 2, and the bound
    says what it is for when n_draft is "auto" (its longest proposal, n_draft_max = 8)."""
    config = tmp_path / "c.toml"
    config.write_text("[target]\nn_batch = 1\n")
    r = cli("run", "hi", "--config", str(config))
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines()[-1] == (
        "skippy-tui: error: target.n_batch = 1 is out of bounds: must be >= 9 (the longest proposal, 8 tokens, + 1)"
    )


def test_a_corrupt_config_file_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "c.toml"
    bad.write_text("[speculation]\nn_draft = -1\n")
    r = cli("run", "hi", "--config", str(bad))
    assert r.returncode == 2
    assert str(bad) in r.stderr and "n_draft = -1" in r.stderr


def test_print_config_path() -> None:
    r = cli("--print-config-path")
    assert r.returncode == 0 and r.stdout.strip().endswith("config.toml")


def test_prompt_from_stdin_and_stop_string() -> None:
    r = cli("run", "-", "--stop", "Paris", "--max-tokens", "24", stdin="What is the capital of France?")
    assert r.returncode == 0, r.stderr
    assert "Paris" not in r.stdout and "capital" in r.stdout


def test_bad_prompts_are_clear_errors_or_repaired(tmp_path: Path) -> None:
    empty = cli("run", "   ")
    assert empty.returncode == 2 and "the prompt is empty" in empty.stderr
    # bytes that are not UTF-8 become U+FFFD instead of a UnicodeEncodeError traceback
    bad = subprocess.run(
        [sys.executable, "-m", "skippy_tui", "run", "-", "--max-tokens", "3", "--no-draft"],
        input=b"Hi \xff", capture_output=True, timeout=300,
    )  # fmt: skip
    assert bad.returncode == 0 and b"Traceback" not in bad.stderr
    long = cli("run", "Tell me about the history of the world. " * 60, "--n-ctx", "64", "--no-draft")
    assert long.returncode == 1 and "context window holds 256" in long.stderr and "Traceback" not in long.stderr
    assert "llama.cpp rounded n_ctx 64 to 256 tokens" in long.stderr  # said, not silent


def test_a_chat_template_that_is_no_template_is_refused_at_load(tmp_path: Path) -> None:
    for value, says in (("nosuchtemplate", "neither a built-in name"), ("{{ nope", "chat template failed")):
        cfg = tmp_path / "c.toml"
        cfg.write_text(f'[target]\nchat_template = "{value}"\n', "utf-8")
        r = cli("run", "Hi", "--config", str(cfg), "--no-draft")
        assert r.returncode == 1 and says in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_bench_save_into_a_missing_folder_fails_before_benchmarking(tmp_path: Path) -> None:
    r = cli("bench", "--save", str(tmp_path / "no" / "x.json"), "--repeats", "1")
    assert r.returncode == 2 and "no writable folder" in r.stderr
    assert "loading" not in r.stderr  # refused before any model was loaded


def test_ctrl_c_mid_reply_exits_130_without_a_traceback() -> None:
    import signal

    p = subprocess.Popen(
        [sys.executable, "-m", "skippy_tui", "run", "Write a long essay about dogs.", "--max-tokens", "2000"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),  # a shell's background job ignores it
    )  # fmt: skip
    assert p.stdout is not None
    p.stdout.read(1)  # the reply has started
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert b"Traceback" not in err and b"Exception ignored" not in err


def test_trace_lines_start_on_their_own_line_when_stdout_and_stderr_share_a_terminal(smollm2_q4_1: Path) -> None:
    """In a terminal the reply streams without line ends; a trace line on stderr must not
    be glued to it (``Instep 0 plain``)."""
    import pty
    import select

    master, slave = pty.openpty()
    p = subprocess.Popen(
        [sys.executable, "-m", "skippy_tui", "run", "Name three colours.", "--trace", "--max-tokens", "12",
         "--target", str(smollm2_q4_1), "--no-draft", "--temperature", "0"],
        stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env={**os.environ, "PYTHONIOENCODING": "utf-8"},
    )  # fmt: skip
    os.close(slave)
    data = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 120)
            if not ready:
                break
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            data += chunk
    finally:
        os.close(master)
        p.wait(timeout=60)
    assert p.returncode == 0, data
    # the load progress is redrawn in place (\r); what stays on screen is after the last \r of a line
    lines = [ln.rsplit("\r", 1)[-1] for ln in data.decode("utf-8", "replace").replace("\r\n", "\n").split("\n")]
    traced = [ln for ln in lines if "step " in ln]
    assert len(traced) >= 2, lines
    assert all(ln.startswith("step ") for ln in traced), traced
    reply = "".join(ln for ln in lines if ln and not ln.startswith(("step ", "[")))
    assert len(reply) > 5, lines  # the reply text is there, between the trace lines
