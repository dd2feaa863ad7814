"""Tables in the docs are generated from saved bench reports, and kept in step with them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skippy_tui.bench.tables import KINDS, main, render, stale

ROOT = Path(__file__).resolve().parents[2]

REPORT = {
    "temperature": 0.0,
    "results": {
        "chat": {
            "plain": {"tokens_per_second": 50.0, "ratio_to_plain": 1.0, "acceptance_rate": None},
            "k=4": {"tokens_per_second": 70.0, "ratio_to_plain": 1.4, "acceptance_rate": 0.8,
                    "identical_to_plain": True},
        },
        "code": {
            "plain": {"tokens_per_second": 40.0, "ratio_to_plain": 1.0, "acceptance_rate": None},
            "k=4": {"tokens_per_second": 20.0, "ratio_to_plain": 0.5, "acceptance_rate": 0.2,
                    "identical_to_plain": False},
        },
    },
    "geomean_ratio_to_plain": {"k=4": 0.84},
    "costs": {"rollback": {"snapshot": {"steps": 3, "ms": 0.4, "dropped": 2.0, "redecoded": 0.0,
                                        "verify_ms": 10.0, "share_of_verify": 0.05}}},
    "goals": {"identical_met": False, "rollback_met": True, "rollback_vs_verify": 0.05},
    "meta": {"target": "t.gguf", "target_memory": "hybrid", "target_rollback": "snapshot", "repeats": 5,
             "max_tokens": 64, "threads": 2, "verify": "exact", "methods": ["plain", "k=4"],
             "machine": {"cpu": "CPU X", "cpus": 2, "llama_cpp_python": "0.3.36", "skippy_tui": "0.1.0 (abc)",
                         "date": "2026-12-06 12:00 UTC"}},
}  # fmt: skip


def test_each_kind_renders_the_reports_figures() -> None:
    assert "| chat | 50.0 tok/s | 1.40× |" in KINDS["speed"](REPORT)
    assert "| code | 40.0 tok/s | 0.50× ≠ |" in KINDS["speed"](REPORT)  # not token-identical to plain
    assert "| **geomean** | 1.00× | 0.84× |" in KINDS["speed"](REPORT)
    assert "| chat | 80% |" in KINDS["acceptance"](REPORT)
    assert "| snapshot | 3 | 0.400 ms | 2.0 | 0.0 | 10.00 ms | 5.00% |" in KINDS["rollback"](REPORT)
    assert "| identical | **not met** |" in KINDS["goals"](REPORT) and "| rollback | met |" in KINDS["goals"](REPORT)
    about = KINDS["about"](REPORT)
    assert "target `t.gguf` (hybrid, rollback by snapshot)" in about and "CPU X" in about and "2026-12-06" in about


def test_a_marked_block_is_regenerated_and_a_stale_one_is_named(tmp_path: Path) -> None:
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "r.json").write_text(json.dumps(REPORT), "utf-8")
    doc = tmp_path / "perf.md"
    doc.write_text("# Perf\n\n<!-- results: results/r.json speed -->\nold\n<!-- /results -->\n\ntext after\n")
    assert stale(doc) == ["results/r.json speed"]
    assert main([str(doc)]) == 0
    text = doc.read_text("utf-8")
    assert "old" not in text and "| chat | 50.0 tok/s | 1.40× |" in text and text.endswith("text after\n")
    assert stale(doc) == []
    doc.write_text("<!-- results: results/missing.json speed -->\n<!-- /results -->\n")
    assert main([str(doc)]) == 1  # a missing report: an error, the file untouched
    doc.write_text("<!-- results: results/r.json nosuch -->\n<!-- /results -->\n")
    with pytest.raises(ValueError, match="unknown table kind 'nosuch'"):
        render(doc.read_text(), tmp_path)


@pytest.mark.parametrize("doc", sorted((ROOT / "docs").rglob("*.md")), ids=lambda p: p.name)
def test_the_docs_tables_match_their_saved_reports(doc: Path) -> None:
    assert stale(doc) == [], f"run: python -m skippy_tui.bench.tables {doc.relative_to(ROOT)}"
