"""``skippy-tui bench``: end to end on a tiny setting, and the report logic on synthetic runs."""

from __future__ import annotations

import json

from skippy_tui.bench import SUITE, Cell, Method, Progress, RunResult, methods_for, render_text, summarise
from skippy_tui.cli import main


def test_bench_json_end_to_end(capsys):
    rc = main(["bench", "--prompts", "rewrite-replace", "--repeats", "1", "--max-tokens", "8", "--k", "2",
               "--json", "--no-progress", "--no-warmup"])  # fmt: skip
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert report["meta"]["methods"] == ["plain", "k=2", "auto", "ngram"]
    row = report["results"]["rewrite-replace"]
    assert set(row) == {"plain", "k=2", "auto", "ngram"}
    for name, r in row.items():
        assert r["tokens_per_second"] > 0 and r["n_tokens"] == 8
        assert r["identical_to_plain"] is True, name
    assert row["plain"]["ratio_to_plain"] == 1.0
    # the draft's first fill with the prompt is prefill, kept out of tokens/s like the target's
    assert row["plain"]["draft_prefill_ms"] == 0.0 and row["k=2"]["draft_prefill_ms"] > 0
    assert row["k=2"]["acceptance_rate"] is not None and len(row["k=2"]["acceptance_by_position"]) <= 2
    costs = report["costs"]
    assert "1" in costs["verify_ms_by_batch"] and costs["draft_ms_per_token"] > 0
    assert set(costs["break_even_acceptance"]) == {"2"}
    assert report["best_fixed_k"]["rewrite-replace"]["k"] == 2
    goals = report["goals"]
    assert goals["identical_met"] is True
    assert set(goals["ngram_rewrite_vs_plain"]) == {"rewrite-replace"}
    assert "rewrite-replace" in goals["adaptive_vs_best"]


def test_bench_text_with_progress_and_no_draft(capsys):
    rc = main(["bench", "--prompts", "chat", "--repeats", "1", "--max-tokens", "4", "--no-draft"])
    assert rc == 0
    out = capsys.readouterr()
    assert "(ratio to plain)" in out.out and "ngram" in out.out and "k=2" not in out.out
    assert "1/4 warm-up plain" in out.err and "4/4 chat ngram" in out.err  # warm-up + measured, per method


def _run(tps: float, tokens: tuple[int, ...], drafted: int = 0, accepted: int = 0) -> RunResult:
    return RunResult(
        tokens_per_second=tps, n_tokens=len(tokens), n_steps=4, n_drafted=drafted, n_accepted=accepted,
        n_spec_steps=2 if drafted else 0, draft_ms=drafted * 2.0, verify_by_batch={1: [10.0], 3: [12.0]},
        draft_call_ms=[2.0] if drafted else [], sync_ms=[1.0] if drafted else [],
        drafted_at=[2, 2] if drafted else [], accepted_at=[2, 1] if drafted else [],
        ks=[2, 2] if drafted else [0, 0], token_ids=tokens, reason="max_tokens",
    )  # fmt: skip


def test_summary_goals_and_medians():
    prompts = [p for p in SUITE if p.name in ("chat", "rewrite-typos")]
    methods = methods_for((2,), True)
    assert [m.name for m in methods] == ["plain", "k=2", "auto", "ngram"]
    same, other = (1, 2, 3), (1, 2, 4)
    cells = {
        "chat": {
            "plain": Cell([_run(10, same), _run(30, same), _run(20, same)]),
            "k=2": Cell([_run(24, same, 4, 3)]),
            "auto": Cell([_run(23, same, 4, 3)]),
            "ngram": Cell([_run(19, same, 4, 1)]),
        },
        "rewrite-typos": {
            "plain": Cell([_run(20, same)]),
            "k=2": Cell([_run(18, same, 4, 3)]),
            "auto": Cell([_run(18, same, 4, 3)]),
            "ngram": Cell([_run(40, other, 4, 4)]),
        },
    }
    report = summarise(cells, prompts, methods, (2,), greedy=True)
    chat = report["results"]["chat"]
    assert chat["plain"]["tokens_per_second"] == 20  # median of 10, 30, 20
    assert chat["k=2"]["ratio_to_plain"] == 1.2
    assert chat["k=2"]["acceptance_rate"] == 0.75 and chat["k=2"]["mean_accepted_length"] == 1.5
    assert chat["k=2"]["acceptance_by_position"] == [1.0, 0.5]
    g = report["goals"]
    assert g["adaptive_vs_best"]["chat"] == {"ratio": round(23 / 24, 3), "met": True}
    assert g["adaptive_vs_best"]["rewrite-typos"] == {"ratio": 0.9, "met": False}  # plain (20) beat k=2 (18)
    assert g["adaptive_met"] is False
    assert g["ngram_rewrite_vs_plain"] == {"rewrite-typos": {"ratio": 2.0, "met": True}}
    assert report["results"]["rewrite-typos"]["ngram"]["identical_to_plain"] is False
    assert g["identical_met"] is False
    assert report["costs"]["verify_ms_by_batch"] == {1: 10.0, 3: 12.0}
    assert set(report["costs"]["break_even_acceptance"]) == {2}
    report["meta"] = {"target": "t.gguf", "draft": "d.gguf", "threads": 2, "greedy": True, "max_tokens": 8,
                      "repeats": 3, "n_draft_max": 8, "methods": [m.name for m in methods]}  # fmt: skip
    text = render_text(report)
    assert "DIFFERENT: ngram" in text and "NOT met" in text


def test_progress_bar_lines():
    class Stream:
        def __init__(self):
            self.text = ""

        def write(self, s):
            self.text += s

        def flush(self):
            pass

    s = Stream()
    p = Progress(4, s)
    p.update("chat plain")
    p.update("chat k=2")
    assert s.text.count("\n") == 2 and "2/4 chat k=2" in s.text
    assert isinstance(Method("x", {}), Method)
