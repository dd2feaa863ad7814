"""The draft finder: compatible drafts from the library, measured on the real models.

The library folder holds the SmolLM2 F32 target, its Q4_1 (a compatible draft),
Gemma 3 270M (another tokenizer: incompatible, with the reason) and a broken file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skippy_tui.bench.drafts import (
    DraftMeasurement,
    DraftResult,
    conditional_acceptance,
    estimated_speedup,
    rank,
    render,
)
from skippy_tui.cli import main
from skippy_tui.engine.policy.cost_model import Costs, break_even_acceptance
from skippy_tui.library import DraftCandidate, LibraryEntry


@pytest.fixture
def library(tmp_path: Path, smollm2_q4_1: Path, smollm2_f32: Path, gemma3_270m: Path) -> Path:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "target-f32.gguf").symlink_to(smollm2_f32)
    (lib / "draft-q4_1.gguf").symlink_to(smollm2_q4_1)
    (lib / "gemma.gguf").symlink_to(gemma3_270m)
    (lib / "broken.gguf").write_text("not a model", "utf-8")
    return lib


def test_drafts_lists_the_compatible_draft_and_says_why_the_others_are_not(
    library: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = library / "target-f32.gguf"
    assert main(["drafts", "--target", str(target), "--dir", str(library), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["target"]["file_type"] == "F32" and doc["measured"] is False
    # the target's own file (reached through the library) is not offered as its draft
    assert [d["path"] for d in doc["drafts"]] == [str(library / "draft-q4_1.gguf")]
    assert doc["drafts"][0]["compatible"] is True and "measurement" not in doc["drafts"][0]
    (gemma,) = doc["incompatible"]
    assert gemma["path"] == str(library / "gemma.gguf")
    assert gemma["why_not"].startswith("vocab type differs: target ") and gemma["why_not"].endswith("is SPM")
    assert doc["broken"] == 1
    assert main(["drafts", "--target", str(target), "--dir", str(library)]) == 0
    out = capsys.readouterr().out
    assert "compatible drafts (--measure ranks them):" in out
    # named as `models` and F8 name it: file stem and quantization (issue 57.15)
    assert f"gemma Q4_K_M ({library / 'gemma.gguf'}): vocab type differs" in out
    assert "1 unreadable file(s) skipped" in out


def test_drafts_measure_runs_the_pair_beside_plain_decoding(
    library: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[target]\nthreads = 2\nn_ctx = 1024\nn_batch = 256\nn_ubatch = 256\n", "utf-8")
    args = ["drafts", "--target", str(library / "target-f32.gguf"), "--dir", str(library), "--config", str(config)]
    assert main([*args, "--measure", "--max-tokens", "16", "--json"]) == 0
    captured = capsys.readouterr()
    assert "measuring draft Q4_1" in captured.err
    (d,) = json.loads(captured.out)["drafts"]
    m = d["measurement"]
    assert (m["k"], m["n_prompts"]) == (4, 3)
    # greedy speculation reproduces plain decoding token for token (exact verification)
    assert m["identical_replies"] == 3
    # the Q4_1 draft agrees with its F32 target on most greedy tokens
    assert 0.6 <= m["acceptance_rate"] <= 1.0
    assert 0 < m["mean_accepted_length"] <= 4
    assert len(m["acceptance_by_position"]) == 4
    assert m["draft_cost"] == pytest.approx(m["draft_ms_per_token"] / m["target_ms_per_token"], rel=1e-3)
    ratio = m["spec_tokens_per_second"] / m["plain_tokens_per_second"]
    assert m["measured_speedup"] == pytest.approx(ratio, rel=1e-2)
    assert m["estimated_speedup"] is not None and 0.2 < m["estimated_speedup"] < 5.0
    # another file than the target: its own flash attention default, said beside the target's
    assert d["draft_settings"].startswith("its own: flash_attn auto (target off), repack off"), d["draft_settings"]


def test_drafts_with_a_bad_target_is_one_line_and_exit_1(library: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["drafts", "--target", str(library / "missing.gguf"), "--dir", str(library)]) == 1
    err = capsys.readouterr().err
    assert err == f"skippy-tui: error: model file not found: {library / 'missing.gguf'}\n"
    assert main(["drafts", "--target", str(library / "broken.gguf"), "--dir", str(library)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a GGUF file" in err


def test_drafts_offers_integrated_mtp_and_mtp_drafter_files(
    tiny_library: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    lib = tiny_library["lib"]
    args = ["drafts", "--target", str(tiny_library["mtp"]), "--dir", str(lib)]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    kinds = [(d["name"], d["source"], d["integrated"], Path(d["path"]).stem) for d in doc["drafts"]]
    assert kinds[0] == ("integrated MTP", "mtp", True, "mtp")  # the target's own heads, first
    assert ("tiny-qwen35-mtp", "mtp", False, "drafter") in kinds and ("tiny-mamba", "model", False, "mamba") in kinds
    assert doc["target"]["memory"] == "hybrid" and doc["target"]["n_nextn"] == 1
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "integrated MTP (1 head)" in out and "in the target's file" in out and "(MTP drafter)" in out
    # a target whose heads llama.cpp cannot run: not offered, and why
    assert main(["drafts", "--target", str(tiny_library["mtp2"]), "--dir", str(lib)]) == 0
    out = capsys.readouterr().out
    assert "integrated MTP (in the target's file): llama.cpp runs one MTP block" in out.split("not compatible:")[1]
    # the drafter file is no target
    assert main(["drafts", "--target", str(tiny_library["drafter"]), "--dir", str(lib)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is an MTP drafter file, not a model" in err


def test_drafts_measure_ranks_mtp_heads_like_any_draft(
    tiny_library: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The integrated heads and the drafter file (the same block) measure alike, with source mtp,
    and reproduce plain decoding; the recurrent draft model drafts as a model."""
    lib = tmp_path / "mtp-lib"
    lib.mkdir()
    for key in ("mtp", "drafter", "mamba"):
        (lib / f"{key}.gguf").symlink_to(tiny_library[key])
    config = tmp_path / "config.toml"
    config.write_text("[target]\nthreads = 1\nn_ctx = 512\nn_batch = 128\nn_ubatch = 128\n", "utf-8")
    args = ["drafts", "--target", str(lib / "mtp.gguf"), "--dir", str(lib), "--config", str(config)]
    assert main([*args, "--measure", "--max-tokens", "16", "--json"]) == 0
    captured = capsys.readouterr()
    assert "measuring integrated MTP (1 head) (the target's own heads) 1/3" in captured.err
    drafts = {Path(d["path"]).stem if not d["integrated"] else "own": d for d in json.loads(captured.out)["drafts"]}
    assert set(drafts) == {"own", "drafter", "mamba"}
    for d in drafts.values():
        assert d["measurement"]["identical_replies"] == 3, d
    own, drafter = drafts["own"]["measurement"], drafts["drafter"]["measurement"]
    assert 0 < own["acceptance_rate"] < 1  # the echo head is right some of the time
    assert drafter["acceptance_rate"] == own["acceptance_rate"]  # the same block, drafting the same tokens


# -- the figures, from synthetic counts (pure logic) -------------------------------------


@pytest.mark.parametrize(
    ("drafted_at", "accepted_at", "expected"),
    [
        ([10, 10, 10, 10], [10, 10, 10, 10], [1.0, 1.0, 1.0, 1.0]),
        ([10, 10, 10, 10], [8, 6, 3, 3], [0.8, 0.75, 0.5, 1.0]),
        ([10, 10, 10, 10], [5, 0, 0, 0], [0.5, 0.0, 0.0, 0.0]),
        ([4, 4], [2, 1], [0.5, 0.5, 0.5, 0.5]),  # unmeasured positions repeat the last
        ([], [], [0.0, 0.0, 0.0, 0.0]),
    ],
)
def test_conditional_acceptance(drafted_at: list[int], accepted_at: list[int], expected: list[float]) -> None:
    assert conditional_acceptance(drafted_at, accepted_at, 4) == pytest.approx(expected)


def test_estimated_speedup_is_the_cost_model() -> None:
    flat = {1: 10.0, 2: 10.0, 5: 10.0}
    # a free draft that is always right: 5 tokens per step at the cost of one plain step
    assert estimated_speedup([1.0] * 4, flat, 0.0, 0.0, 4) == pytest.approx(5.0)
    # one that is always wrong still costs its 4 calls: 1 token per 10 + 4 * 2 ms
    assert estimated_speedup([0.0] * 4, flat, 2.0, 0.0, 4) == pytest.approx(10.0 / 18.0)
    # at the break-even acceptance of the same costs, speculation ties plain
    verify = {1: 10.0, 2: 12.0, 3: 14.0, 4: 16.0, 5: 18.0}
    a = break_even_acceptance(4, Costs(list(verify.values()), 3.0, 1.0))
    assert a is not None and 0 < a < 1
    assert estimated_speedup([a] * 4, verify, 3.0, 1.0, 4) == pytest.approx(1.0, abs=1e-6)
    assert estimated_speedup([1.0] * 4, {2: 10.0}, 1.0, 0.0, 4) is None  # no plain step measured


def _measured(est: float | None) -> DraftMeasurement:
    return DraftMeasurement(4, 3, 48, 0.9, 3.0, (0.9,) * 4, 1.0, 2.0, 0.5, est, 50.0, 60.0, 1.2, 3)


def test_rank_puts_the_best_estimate_first_and_failures_last() -> None:
    def cand(name: str) -> DraftCandidate:
        return DraftCandidate(LibraryEntry(Path(f"/m/{name}.gguf"), (Path(f"/m/{name}.gguf"),), name), None)

    results = [
        DraftResult(cand("failed"), error="could not load"),
        DraftResult(cand("slow"), _measured(0.9)),
        DraftResult(cand("fast"), _measured(1.6), settings="its own: flash_attn auto (target off)"),
        DraftResult(cand("unknown"), _measured(None)),
    ]
    ranked = rank(results)
    assert [r.candidate.entry.name for r in ranked] == ["fast", "slow", "unknown", "failed"]
    target = type("T", (), {"name": "big", "file_type": "F16", "n_params": 7_000_000_000, "path": "/m/big.gguf"})()
    lines = render(target, ranked, [], 0).splitlines()
    assert lines[0] == "target: big F16 (7.0B) /m/big.gguf"
    assert lines[2] == "compatible drafts, ranked by estimated speedup (greedy, k=4, 3 prompts):"
    assert lines[3].split()[:9] == [
        "#", "DRAFT", "QUANT", "ACCEPT", "MEAN_ACC", "DRAFT_COST", "EST_SPEEDUP", "MEASURED", "PLAIN_TOK/S",
    ]  # fmt: skip
    assert lines[4].split() == ["1", "fast", "90%", "3.00", "0.50", "1.60x", "1.20x", "50.0", "/m/fast.gguf"]
    assert lines[7].split()[:3] == ["4", "failed", "failed"]
    assert "  failed: failed: could not load" in lines
    assert "  fast runs with its own: flash_attn auto (target off)" in lines  # the settings it was measured with
