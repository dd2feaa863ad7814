"""``skippy-tui bench``: end to end on a tiny setting, and the report logic on synthetic runs."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from skippy_tui.bench.core import Progress, RollbackSample, RunResult, first_difference, repeat_seed
from skippy_tui.bench.render import render_identity, render_text
from skippy_tui.bench.run import run_bench, run_greedy_reference, run_identity
from skippy_tui.bench.sampler import resize_row, sampler_cost
from skippy_tui.bench.stats import Cell, IdentityCase, identity_summary, rollback_summary, summarise
from skippy_tui.bench.suite import SUITE, methods_for
from skippy_tui.cli import build_parser, main
from skippy_tui.engine.sampling.params import SamplingParams
from skippy_tui.engine.settings import GenerationSettings


@pytest.mark.models  # loads the default pair (not through a fixture)
def test_bench_json_end_to_end(capsys):
    rc = main(["bench", "--prompts", "rewrite-replace", "--repeats", "1", "--max-tokens", "8", "--k", "2",
               "--json", "--no-progress", "--no-warmup", "--control"])  # fmt: skip
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    names = ["plain", "k=2", "auto", "ngram", "ngram+model", "default", "default again"]
    assert report["meta"]["methods"] == names
    row = report["results"]["rewrite-replace"]
    assert set(row) == set(names)
    for name, r in row.items():
        assert r["tokens_per_second"] > 0 and r["n_tokens"] == 8
        assert r["identical_to_plain"] is True, name
    assert row["plain"]["ratio_to_plain"] == 1.0
    # the draft's first fill with the prompt is prefill, kept out of tokens/s like the target's
    assert row["plain"]["draft_prefill_ms"] == 0.0 and row["k=2"]["draft_prefill_ms"] > 0
    assert row["k=2"]["acceptance_rate"] is not None and len(row["k=2"]["acceptance_by_position"]) <= 2
    costs = report["costs"]
    assert "1" in costs["verify_ms_by_batch"] and costs["draft_ms_per_token"] > 0
    # identical_to_plain is no tautology: k=2 really verified batches of 3 rows
    assert "3" in costs["verify_ms_by_batch"]
    assert set(costs["break_even_acceptance"]) == {"2"}
    assert report["best_fixed_k"]["rewrite-replace"]["k"] == 2
    goals = report["goals"]
    assert goals["identical_met"] is True
    assert set(goals["ngram_rewrite_vs_plain"]) == {"rewrite-replace"}
    assert "rewrite-replace" in goals["adaptive_vs_best"]
    assert goals["default_vs_best"]["rewrite-replace"]["best_other"] in set(names) - {"default", "default again"}
    control = goals["default_vs_control"]["rewrite-replace"]
    assert control["ratio"] > 0 and control["paired_ratio"] > 0
    # each method's steps by kind add up to its reply: plain's are all plain, k=2's all the model's
    for name, r in row.items():
        kinds = r["by_source"]
        assert sum(d["tokens"] for d in kinds.values()) == 8, name
        assert sum(d["time_share"] for d in kinds.values()) == pytest.approx(1.0, abs=0.01), name
    assert set(row["plain"]["by_source"]) == {"plain"} and row["plain"]["by_source"]["plain"]["steps"] == 8
    assert set(row["k=2"]["by_source"]) <= {"model", "plain"} and "model" in row["k=2"]["by_source"]
    assert set(row["ngram"]["by_source"]) <= {"ngram", "plain"}


@pytest.mark.models  # loads the default pair (not through a fixture)
def test_bench_text_with_progress_and_no_draft(capsys):
    rc = main(["bench", "--prompts", "chat", "--repeats", "1", "--max-tokens", "4", "--no-draft"])
    assert rc == 0
    out = capsys.readouterr()
    assert "(ratio to plain)" in out.out and "ngram" in out.out and "k=2" not in out.out
    kinds = out.out.split("default's steps by kind")[1].split("\n")[1]
    # no draft model: a step whose n-gram found nothing to propose is a plain one
    assert kinds.lstrip().startswith("chat") and "plain" in kinds and "model" not in kinds, kinds
    # warm-up + measured, per method: plain, ngram and the default (auto: n-gram or plain)
    assert "1/6 warm-up plain" in out.err and "6/6 chat default" in out.err


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
    assert [m.name for m in methods] == ["plain", "k=2", "auto", "ngram", "ngram+model", "default"]
    same, other = (1, 2, 3), (1, 2, 4)
    cells = {
        "chat": {
            "plain": Cell([_run(10, same), _run(30, same), _run(20, same)]),
            "k=2": Cell([_run(24, same, 4, 3)]),
            "auto": Cell([_run(23, same, 4, 3)]),
            "ngram": Cell([_run(19, same, 4, 1)]),
            "ngram+model": Cell([_run(22, same, 4, 3)]),
            "default": Cell([_run(23.5, same, 4, 3)]),
        },
        "rewrite-typos": {
            "plain": Cell([_run(20, same)]),
            "k=2": Cell([_run(18, same, 4, 3)]),
            "auto": Cell([_run(18, same, 4, 3)]),
            "ngram": Cell([_run(40, other, 4, 4)]),
            "ngram+model": Cell([_run(36, same, 4, 4)]),
            "default": Cell([_run(30, same, 4, 4)]),
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
    # the default against the best of every other method (and plain)
    assert g["default_vs_best"]["chat"] == {
        "ratio": round(23.5 / 24, 3), "best_other": "k=2", "paired_ratio": round(23.5 / 24, 3),
        "ratio_to_plain": round(23.5 / 20, 3), "met": True,
    }  # fmt: skip
    assert g["default_vs_best"]["rewrite-typos"]["best_other"] == "ngram"
    assert g["default_vs_best"]["rewrite-typos"]["met"] is False and g["default_met"] is False
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


# -- sampling (issue 7) ---------------------------------------------------------------


@pytest.mark.models  # loads the default pair (not through a fixture)
def test_bench_sampled_json_end_to_end(capsys):
    """T=0.8 on the default pair: coupled methods equal plain at the same seed; rejection is reported."""
    rc = main(["bench", "--prompts", "chat", "--repeats", "1", "--max-tokens", "8", "--k", "4",
               "--temperature", "0.8", "--seed", "7", "--sampler", "coupled,rejection",
               "--json", "--no-progress", "--no-warmup"])  # fmt: skip
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert report["mode"] == "bench" and report["temperature"] == 0.8
    assert report["sampler"] == "coupled" and report["samplers"] == ["coupled", "rejection"]
    assert report["seed"] == 7 and report["seeds"] == [7]
    row = report["results"]["chat"]
    assert list(row) == [
        "plain", "k=4", "auto", "ngram", "ngram+model", "default", "k=4 rej", "auto rej", "ngram+model rej",
        "default rej",
    ]  # fmt: skip
    for name, r in row.items():
        assert "acceptance_rate" in r and r["n_tokens"] == 8
        if r["sampler"] == "coupled":
            assert r["identical_to_plain"] is True and r["first_difference"] is None, name
        else:
            assert isinstance(r["identical_to_plain"], bool), name  # reported, not expected
    goals = report["goals"]
    assert goals["identical_met"] is True and goals["identical_runs"] == {"identical": 5, "total": 5}
    acc = goals["acceptance_vs_greedy"]
    assert acc["k"] == 4 and acc["greedy"] is not None and acc["rejection"] is not None
    assert goals["acceptance_met"] is acc["met"] and set(goals["best_fixed_vs_plain"]) == {"chat"}
    cost = report["sampler_cost_us"]["vocab"]
    assert cost["49152"]["rows"] == "target" and cost["262144"]["rows"] == "synthetic"
    assert all(v["per_row"] > 0 for v in cost.values())


@pytest.mark.models  # loads the default pair (not through a fixture)
def test_identity_grid_end_to_end(capsys):
    rc = main(["bench", "--identity", "--prompts", "chat,haiku", "--k", "4", "--max-tokens", "12", "--seed", "3",
               "--json", "--no-progress"])  # fmt: skip
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    assert report["mode"] == "identity" and report["temperature"] == 0.8  # the mode's default
    assert report["ks"] == [4, "auto"] and report["sources"] == ["model", "ngram", "auto"]
    assert report["overall"] == {"identical": 24, "total": 24, "share": 1.0}  # 2 prompts x 2 penalties x 3 x 2
    assert report["met"] is True and report["mismatches"] == [] and list(report["by_sampler"]) == ["coupled"]
    assert len(report["grid"]) == 12 and report["penalties"]["on"]["repeat_penalty"] == 1.3


class FakeSpeculator:
    """Records the settings of every reply; each reply is three tokens picked from its seed."""

    def __init__(self) -> None:
        self.settings: dict = {}
        self.calls: list[tuple[dict, SamplingParams]] = []
        self.memory: list[dict] = []  # stands for what the adaptive policies learned: the replies seen
        self.seen: list[tuple[dict, list[dict]]] = []

    def learned(self) -> list[dict]:
        return self.memory

    def restore_learned(self, state: list[dict] | None) -> None:
        self.memory = [] if state is None else state

    def forget(self) -> None:
        pass

    def update(self, **settings) -> None:
        self.settings = settings

    def run(self, messages, gen):
        self.calls.append((self.settings, gen.sampling))
        self.seen.append((self.settings, list(self.memory)))
        self.memory.append(self.settings)
        tokens = (gen.sampling.seed or 0, 1, 2)
        yield SimpleNamespace(type="reply_started", draft_prefill_ms=0.0)
        yield SimpleNamespace(
            type="finish", n_tokens=3, generation_ms=10.0, n_steps=3, n_drafted=0, n_accepted=0,
            token_ids=tokens, reason="max_tokens", error="", seed=gen.sampling.seed,
        )  # fmt: skip


def test_the_control_column_is_the_default_again_and_no_other_method_of_its_goal():
    """``--control``: the default's settings once more, its own column; its ratio to the
    default is reported, and however fast it ran it is not the default's "best other"."""
    methods = methods_for((2,), True, control=True)
    default, control = methods[-2], methods[-1]
    assert (default.name, control.name) == ("default", "default again")
    assert control.settings == default.settings and control.variant == "control"
    prompts = [p for p in SUITE if p.name == "chat"]
    same = (1, 2, 3)
    tps = {"plain": 20, "k=2": 24, "auto": 23, "ngram": 19, "ngram+model": 22, "default": 23.5, "default again": 26}
    cells = {"chat": {m: Cell([_run(v, same, 4, 3)]) for m, v in tps.items()}}
    report = summarise(cells, prompts, methods, (2,), greedy=True)
    g = report["goals"]
    assert g["default_vs_best"]["chat"]["best_other"] == "k=2" and g["default_met"] is True
    assert g["default_vs_control"] == {"chat": {"ratio": round(23.5 / 26, 3), "paired_ratio": round(23.5 / 26, 3)}}
    assert g["identical_runs"]["total"] == 6  # the control's run must equal plain's too
    report["meta"] = {"target": "t.gguf", "draft": "d.gguf", "threads": 2, "greedy": True, "max_tokens": 8,
                      "repeats": 1, "n_draft_max": 8, "methods": [m.name for m in methods]}  # fmt: skip
    text = render_text(report)
    assert "control, the default over a second copy of itself (0.90-0.90" in text
    assert "\n  default again 1:" in text  # its acceptance-by-position row: name, then figures


def test_every_method_of_a_repeat_gets_that_repeats_seed():
    fake = FakeSpeculator()
    gen = GenerationSettings(SamplingParams(temperature=0.8), max_tokens=4)
    methods = methods_for((2,), True, ("coupled", "rejection"))
    assert [(m.name, m.sampler, m.variant) for m in methods] == [
        ("plain", "coupled", ""), ("k=2", "coupled", ""), ("auto", "coupled", ""), ("ngram", "coupled", ""),
        ("ngram+model", "coupled", ""), ("default", "coupled", ""), ("k=2 rej", "rejection", "rej"),
        ("auto rej", "rejection", "rej"), ("ngram+model rej", "rejection", "rej"), ("default rej", "rejection", "rej"),
    ]  # fmt: skip
    prompts = SUITE[:2]
    cells = run_bench(fake, gen, prompts, methods, 3, warmup=False, base_seed=100)
    assert len(fake.calls) == 2 * len(methods) * 3
    for row in cells.values():
        for name, cell in row.items():
            assert [r.seed for r in cell.runs] == [100, 101, 102], name
    assert {s.sampler for st, s in fake.calls if st.get("n_draft") == 2 and len(st) == 3} == {"coupled", "rejection"}
    ref = run_greedy_reference(fake, gen, prompts, 4)
    assert set(ref) == {p.name for p in prompts}
    assert fake.calls[-1][0]["n_draft"] == 4 and fake.calls[-1][1].temperature == 0.0
    assert repeat_seed(2**63 - 1, 1) == 0  # wraps within the seed's bounds


def test_each_method_learns_only_from_its_own_replies():
    """auto and the default must not be judged on what fixed-k runs taught the shared policies."""
    fake = FakeSpeculator()
    gen = GenerationSettings(SamplingParams(temperature=0.0), max_tokens=4)
    methods = methods_for((2, 4), False, ("coupled",))
    run_bench(fake, gen, SUITE[:2], methods, 2, warmup=True)
    assert len(fake.seen) == len(methods) * (1 + 2 * 2)
    per_method: dict[str, int] = {}
    for settings, seen in fake.seen:
        key = repr(sorted(settings.items()))
        assert all(s == settings for s in seen), key  # nothing from another method
        assert len(seen) == per_method.get(key, 0), key  # and everything from its own earlier replies
        per_method[key] = len(seen) + 1


def test_fresh_replies_learn_nothing_from_earlier_ones():
    """`bench --fresh`: every reply starts as a new `run` or session's first one does."""
    fake = FakeSpeculator()
    gen = GenerationSettings(SamplingParams(temperature=0.0), max_tokens=4)
    methods = methods_for((2,), False, ("coupled",))
    run_bench(fake, gen, SUITE[:2], methods, 2, warmup=True, fresh=True)
    assert len(fake.seen) == len(methods) * (1 + 2 * 2)
    assert all(seen == [] for _, seen in fake.seen)


def test_identity_grid_runs_every_case_with_the_prompts_seed():
    fake = FakeSpeculator()
    gen = GenerationSettings(SamplingParams(temperature=0.8), max_tokens=4)
    cases = run_identity(fake, gen, SUITE[:2], [1, "auto"], ("model", "ngram"), ("coupled",), base_seed=5)
    assert len(cases) == 2 * 2 * 2 * 2 and all(c.identical for c in cases)
    assert {c.seed for c in cases if c.prompt == SUITE[1].name} == {6}
    pens = {(s.repeat_penalty, s.presence_penalty, s.frequency_penalty) for _, s in fake.calls}
    assert pens == {(1.0, 0.0, 0.0), (1.3, 0.2, 0.2)}
    assert sum(1 for st, _ in fake.calls if st == {"enabled": False}) == 4  # one plain reference per prompt x penalties


def test_first_difference():
    assert first_difference((1, 2, 3), (1, 2, 3)) is None
    assert first_difference((1, 2, 3), (1, 5, 3)) == 1
    assert first_difference((1, 2, 3), (1, 2)) == 2


def test_sampled_summary_goals():
    """Same seed per repeat: coupled runs must equal plain's run of their repeat; rejection may differ."""
    prompts = [p for p in SUITE if p.name == "chat"]
    methods = methods_for((2, 4), True, ("coupled", "rejection"))
    a, b = (1, 2, 3), (4, 5, 6)  # repeat 0 and repeat 1 (different seeds)
    cells = {"chat": {
        "plain": Cell([_run(20, a), _run(20, b)]),
        "k=2": Cell([_run(22, a, 4, 3), _run(22, b, 4, 3)]),
        "k=4": Cell([_run(24, a, 8, 6), _run(24, b, 8, 6)]),
        "auto": Cell([_run(23, a, 8, 6), _run(23, b, 8, 6)]),
        "ngram": Cell([_run(19, a), _run(19, b)]),
        "ngram+model": Cell([_run(22, a, 8, 6), _run(22, b, 8, 6)]),
        "default": Cell([_run(23, a, 8, 6), _run(23, b, 8, 6)]),
        "k=2 rej": Cell([_run(21, a, 4, 2), _run(21, (4, 9, 9), 4, 2)]),
        "k=4 rej": Cell([_run(21, a, 8, 4), _run(21, b, 8, 4)]),
        "auto rej": Cell([_run(21, a, 8, 4), _run(21, b, 8, 4)]),
        "ngram+model rej": Cell([_run(21, a, 8, 4), _run(21, b, 8, 4)]),
        "default rej": Cell([_run(21, a, 8, 4), _run(21, b, 8, 4)]),
    }}  # fmt: skip
    greedy_ref = {"chat": Cell([_run(30, (7, 7, 7), 8, 8)])}
    report = summarise(cells, prompts, methods, (2, 4), greedy=False, greedy_ref=greedy_ref)
    chat = report["results"]["chat"]
    assert chat["k=4"]["identical_to_plain"] is True and chat["k=4"]["sampler"] == "coupled"
    assert chat["k=2 rej"]["identical_to_plain"] is False and chat["k=2 rej"]["first_difference"] == 1
    g = report["goals"]
    assert set(g) == {
        "adaptive_vs_best", "adaptive_met", "ngram_rewrite_vs_plain", "ngram_met", "identical_met", "identical_runs",
        "best_fixed_vs_plain", "best_fixed_met", "acceptance_vs_greedy", "acceptance_met", "default_vs_best",
        "default_met", "default_vs_control", "mtp_adaptive_vs_best", "mtp_adaptive_met", "rollback_vs_verify",
        "rollback_met",
    }  # fmt: skip
    assert g["identical_met"] is True and g["identical_runs"] == {"identical": 12, "total": 12}  # rejection not counted
    assert g["ngram_rewrite_vs_plain"] == {} and g["default_vs_best"]["chat"]["ratio"] == round(23 / 24, 3)
    assert g["best_fixed_vs_plain"] == {"chat": {"k": 4, "method": "k=4", "ratio": 1.2, "met": True}}
    assert g["best_fixed_met"] is True
    assert g["mtp_adaptive_vs_best"] == {} and g["rollback_vs_verify"] is None  # no heads, no rollback measured
    acc = g["acceptance_vs_greedy"]
    assert (acc["k"], acc["coupled"], acc["greedy"], acc["rejection"], acc["ratio"]) == (4, 0.75, 1.0, 0.5, 0.75)
    assert acc["met"] is False and g["acceptance_met"] is False  # 0.75 < 0.85
    # costs come from the main columns only
    assert report["costs"]["verify_samples_by_batch"] == {1: 14, 3: 14}  # 7 main columns x 2 runs
    report |= {
        "temperature": 0.8,
        "samplers": ["coupled", "rejection"],
        "sampling": {"top_k": 40, "top_p": 0.95, "min_p": 0.05},
    }
    report["meta"] = {"target": "t.gguf", "draft": "d.gguf", "threads": 2, "greedy": False, "max_tokens": 8,
                      "repeats": 2, "n_draft_max": 8, "methods": [m.name for m in methods]}  # fmt: skip
    text = render_text(report)
    assert "T=0.8 top-k 40" in text and "(+ rejection as 'rej')" in text
    assert "all coupled methods; rejection differs as it may: k=2 rej" in text
    assert "coupled acceptance at k=4 >= 0.85 x greedy: NOT met  75% vs 100% = 0.75  (rejection 50%)" in text


def test_greedy_summary_keeps_the_sampled_goals_empty():
    prompts = [p for p in SUITE if p.name == "chat"]
    methods = methods_for((2,), True)
    cells = {"chat": {m.name: Cell([_run(20, (1, 2))]) for m in methods}}
    g = summarise(cells, prompts, methods, (2,), greedy=True)["goals"]
    assert g["best_fixed_vs_plain"] == {} and g["best_fixed_met"] is None
    assert g["acceptance_vs_greedy"] is None and g["acceptance_met"] is None
    assert g["identical_met"] is True and g["identical_runs"] == {"identical": 5, "total": 5}


def test_identity_summary_and_text():
    def case(sampler, k, pen, diff=None):
        return IdentityCase("chat", sampler, "model", k, pen, 9, diff, 12)

    cases = [case("coupled", 1, "off"), case("coupled", 1, "on"), case("coupled", "auto", "on", 5)]
    s = identity_summary(cases, greedy=False)
    assert s["overall"] == {"identical": 2, "total": 3, "share": 0.6667} and s["met"] is False
    assert s["by_sampler"] == {"coupled": s["overall"]}
    assert s["mismatches"] == [
        {"prompt": "chat", "sampler": "coupled", "source": "model", "k": "auto", "penalties": "on", "seed": 9,
         "first_difference": 5, "n_tokens": 12, "error": ""}
    ]  # fmt: skip
    both = identity_summary([*cases, case("rejection", 1, "off", 0)], greedy=False)
    assert both["overall"] == s["overall"] and both["by_sampler"]["rejection"]["share"] == 0.0  # reported only
    assert identity_summary([case("rejection", 1, "off", 0)], greedy=False)["met"] is None
    assert identity_summary([case("rejection", 1, "off")], greedy=True)["met"] is True  # greedy: any sampler
    meta = {"target": "t.gguf", "draft": None, "max_tokens": 12, "prompts": {"chat": {}}, "verify": "exact"}
    sampling = {"top_k": 40, "top_p": 0.95, "min_p": 0.05}
    report = {"seed": 9, "temperature": 0.8, "samplers": ["coupled"], "sampling": sampling,
              "penalties": {"off": {}, "on": {"repeat_penalty": 1.3}}, **s, "meta": meta}  # fmt: skip
    text = render_identity(report)
    assert "coupled: 2/3 identical (66.7%) — NOT met" in text
    assert "chat  model k=auto coupled, penalties on, seed 9: differs at token 5" in text
    assert "1/1 100%" in text and "0/1 0%" in text


def test_sampler_cost_real_and_synthetic_rows():
    rng = np.random.default_rng(1)
    rows = [rng.normal(0, 3, 1000).astype(np.float32) for _ in range(3)]
    cost = sampler_cost(rows, [[1, 2, 3]] * 3, SamplingParams(temperature=0.0, repeat_penalty=1.3))
    assert cost["temperature"] == 0.8 and cost["penalised"] is True  # greedy is measured as sampled
    assert list(cost["vocab"]) == [1000, 49_152, 262_144]
    assert [v["rows"] for v in cost["vocab"].values()] == ["target", "synthetic", "synthetic"]
    assert all(v["per_row"] > 0 for v in cost["vocab"].values())


def test_resized_rows_keep_the_head_and_the_spread():
    rng = np.random.default_rng(2)
    row = rng.normal(0, 2, 5000).astype(np.float32)
    for size in (3000, 20000):
        out = resize_row(row, size, rng, head=50)
        assert out.shape == (size,) and out.dtype == np.float32
        assert np.array_equal(np.sort(out)[-50:], np.sort(row)[-50:])  # the head once, not duplicated
        assert np.isin(out, row).all()


def test_sampler_flag_takes_a_list():
    p = build_parser()
    assert p.parse_args(["bench", "--sampler", "coupled,rejection"]).sampler == ("coupled", "rejection")
    assert p.parse_args(["--sampler", "rejection", "bench"]).sampler == "rejection"  # the top-level flag still works
    with pytest.raises(SystemExit):
        p.parse_args(["bench", "--sampler", "coupled,coupled"])


def test_a_k_the_batch_cannot_hold_is_a_usage_error_before_any_load(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["bench", "--k", "5000"])
    assert e.value.code == 2
    assert "1..4096" in capsys.readouterr().err
    assert main(["bench", "--k", "600", "--repeats", "1"]) == 2
    err = capsys.readouterr().err
    assert "--k 600" in err and "n_batch = 512" in err and "601" in err
    assert "loading" not in err  # refused before any weights were read


@pytest.mark.models  # loads the default pair (not through a fixture)
def test_a_step_without_a_proposal_is_a_plain_one(capsys):
    """The n-gram alone finds nothing to copy in a chat reply's first tokens: its steps,
    though k > 0, proposed nothing and are plain ones, not the (absent) model's."""
    rc = main(["bench", "--prompts", "chat", "--repeats", "1", "--max-tokens", "4", "--k", "2",
               "--json", "--no-progress", "--no-warmup"])  # fmt: skip
    assert rc == 0
    row = json.loads(capsys.readouterr().out)["results"]["chat"]
    assert row["ngram"]["mean_k"] > 0 and set(row["ngram"]["by_source"]) == {"plain"}
    assert row["k=2"]["by_source"]["model"]["tokens"] >= 2
    assert sum(d["tokens"] for d in row["k=2"]["by_source"].values()) == 4


def test_steps_by_kind_are_pooled_over_the_runs():
    """Tokens/s per step kind is pooled (tokens over ms of all runs), not a mean of the
    runs' rates: a long run's steps weigh as much as they took."""
    a, b = _run(50.0, (1, 2, 3)), _run(60.0, (1, 2, 3))
    a.by_source = {"model": [2, 10, 200.0], "plain": [4, 4, 100.0]}
    b.by_source = {"model": [1, 2, 100.0], "ngram": [3, 12, 100.0]}
    kinds = Cell(runs=[a, b]).by_source()
    assert kinds["model"] == {"steps": 3, "tokens": 12, "ms": 300.0, "tokens_per_second": 40.0, "time_share": 0.6}
    assert kinds["plain"]["tokens_per_second"] == 40.0 and kinds["ngram"]["tokens_per_second"] == 120.0
    assert kinds["ngram"]["time_share"] == 0.2


def test_the_paired_ratio_compares_methods_on_the_same_replies():
    """Sampled replies to a rewrite: one follows its source (fast), the others paraphrase
    it. Each method's median lands on its middle reply; the paired ratio is the median of
    the per-repeat ratios (same seed, same reply)."""
    same = (1, 2, 3)
    mine = Cell([_run(150, same), _run(60, same), _run(50, same)])
    other = Cell([_run(160, same), _run(66, same), _run(40, same)])
    assert mine.tokens_per_second / other.tokens_per_second == pytest.approx(60 / 66)
    assert mine.paired_ratio(other) == pytest.approx(150 / 160)
    assert Cell([]).paired_ratio(other) is None


# -- hybrid and recurrent targets, MTP heads (issue 54) ---------------------------------


def _bench_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    rc = main(["bench", "--repeats", "1", "--json", "--no-progress", "--no-warmup", *args])
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)


def test_mtp_columns_and_snapshot_rollbacks_on_a_hybrid_target(capsys, tiny_qwen35_mtp_echo, tiny_models):
    """A qwen35 target with an MTP head and a draft model that rejects almost everything
    (another seed): the model and the mtp columns side by side, all token-identical to
    plain, and the target's snapshot rollbacks beside the same steps' verify."""
    rejecting = tiny_models("qwen35", seed=1)
    report = _bench_json(capsys, "--target", str(tiny_qwen35_mtp_echo), "--draft", str(rejecting),
                         "--prompts", "rewrite-replace", "--max-tokens", "12", "--k", "2")  # fmt: skip
    meta = report["meta"]
    assert (meta["target_memory"], meta["target_rollback"]) == ("hybrid", "snapshot")
    assert meta["draft"] == rejecting.name and meta["mtp"] == tiny_qwen35_mtp_echo.name and not meta["mtp_external"]
    names = ["plain", "k=2", "auto", "mtp k=2", "mtp auto", "ngram", "ngram+model", "default"]
    assert meta["methods"] == names
    row = report["results"]["rewrite-replace"]
    for name in names:
        assert row[name]["identical_to_plain"] is True and row[name]["n_tokens"] == 12, name
    assert set(row["mtp k=2"]["by_source"]) <= {"mtp", "plain"} and "mtp" in row["mtp k=2"]["by_source"]
    assert set(row["k=2"]["by_source"]) <= {"model", "plain"}
    assert report["goals"]["identical_met"] is True
    costs = report["costs"]
    assert costs["draft_ms_per_token"] > 0 and costs["mtp_ms_per_token"] > 0
    assert set(costs["break_even_acceptance_mtp"]) == {"2"} and "rewrite-replace" in report["best_fixed_k_mtp"]
    assert "rewrite-replace" in report["goals"]["mtp_adaptive_vs_best"]
    # the rejecting draft's steps rolled the target back by its snapshots: no row decoded again
    snap = costs["rollback"]["snapshot"]
    assert snap["steps"] > 0 and snap["dropped"] > 0 and snap["redecoded"] == 0
    assert snap["verify_ms"] > 0 and snap["verify_rows"] > 1 and snap["share_of_verify"] is not None
    k2 = row["k=2"]["rollback"]["snapshot"]  # k=2 verifies 3 rows at most, and dropped 1 or 2 of them
    assert k2["steps"] > 0 and 1 <= k2["dropped"] <= 2 and 2 <= k2["verify_rows"] <= 3
    assert costs["rollback_by_method"]["k=2"] == {"snapshot": k2}  # one prompt: the method's pooled figures
    goal = report["goals"]["rollback_vs_verify"]
    assert goal["kind"] == "snapshot" and goal["share"] == snap["share_of_verify"]
    assert report["goals"]["rollback_met"] is goal["met"]


def test_restore_rollbacks_on_a_recurrent_target(capsys, tiny_mamba_echo, tiny_models):
    """A mamba target restores the state saved before the verify and decodes the kept rows
    again: the report says so, and there is no snapshot goal to meet."""
    report = _bench_json(capsys, "--target", str(tiny_mamba_echo), "--draft", str(tiny_models("mamba", seed=1)),
                         "--prompts", "chat", "--max-tokens", "10", "--k", "2")  # fmt: skip
    meta = report["meta"]
    assert (meta["target_memory"], meta["target_rollback"], meta["mtp"]) == ("recurrent", "restore", None)
    assert meta["methods"] == ["plain", "k=2", "auto", "ngram", "ngram+model", "default"]
    assert report["goals"]["identical_met"] is True
    restore = report["costs"]["rollback"]["restore"]
    assert restore["steps"] > 0 and restore["dropped"] >= 1 and restore["redecoded"] >= 1 and restore["ms"] > 0
    assert report["goals"]["rollback_vs_verify"] is None and report["goals"]["rollback_met"] is None


def test_without_a_draft_model_the_heads_get_mtp_columns_only(capsys, tiny_qwen35_mtp_echo):
    """No draft model: source "model" would draft with the heads again, so there are no
    model columns; the heads' columns run under both samplers, the coupled ones identical
    to plain, and the acceptance goal compares the heads' sampled and greedy acceptance."""
    report = _bench_json(capsys, "--target", str(tiny_qwen35_mtp_echo), "--prompts", "chat", "--max-tokens", "8",
                         "--k", "2", "--temperature", "0.8", "--seed", "3",
                         "--sampler", "coupled,rejection")  # fmt: skip
    names = ["plain", "mtp k=2", "mtp auto", "ngram", "ngram+mtp", "default",
             "mtp k=2 rej", "mtp auto rej", "ngram+mtp rej", "default rej"]  # fmt: skip
    assert report["meta"]["methods"] == names and report["meta"]["draft"] is None
    row = report["results"]["chat"]
    for name in names:
        if row[name]["sampler"] == "coupled":
            assert row[name]["identical_to_plain"] is True, name
    acc = report["goals"]["acceptance_vs_greedy"]
    assert acc["source"] == "mtp" and acc["k"] == 2 and acc["greedy"] is not None
    assert report["best_fixed_k"] == {} and report["costs"]["draft_ms_per_token"] is None
    text = render_text(report)
    assert "MTP heads in the target" in text and "mtp auto" in text and "(hybrid, rollback snapshot)" in text


def test_the_identity_grid_covers_the_mtp_source(capsys, tiny_qwen35_mtp_echo):
    report = _bench_json(capsys, "--identity", "--target", str(tiny_qwen35_mtp_echo), "--prompts", "haiku",
                         "--k", "2", "--max-tokens", "8", "--seed", "5")  # fmt: skip
    assert report["sources"] == ["mtp", "ngram", "auto"]  # no draft model: "model" would be the heads again
    assert report["met"] is True and report["overall"] == {"identical": 12, "total": 12, "share": 1.0}
    assert {r["source"] for r in report["grid"]} == {"mtp", "ngram", "auto"}
    assert "MTP heads in the target" in render_identity(report)


def test_methods_name_the_drafter_that_drafts():
    names = lambda **kw: [m.name for m in methods_for((2,), **kw)]  # noqa: E731
    assert names(has_model=True, has_mtp=True) == [
        "plain", "k=2", "auto", "mtp k=2", "mtp auto", "ngram", "ngram+model", "default"]  # fmt: skip
    assert names(has_model=False, has_mtp=True) == ["plain", "mtp k=2", "mtp auto", "ngram", "ngram+mtp", "default"]
    assert names(has_model=False, has_mtp=False) == ["plain", "ngram", "default"]
    mtp = {m.name: m for m in methods_for((2,), False, has_mtp=True)}
    assert mtp["mtp k=2"].settings["source"] == "mtp" and mtp["ngram+mtp"].settings["source"] == "ngram+model"
    assert mtp["default"].settings == {"enabled": True, "source": "auto", "n_draft": "auto"}


def test_identity_sources_leave_out_a_second_name_for_the_heads():
    from skippy_tui.bench.command import identity_sources

    heads, model = object(), object()

    def sources(drafter: object, mtp: object) -> tuple[str, ...]:
        return identity_sources(SimpleNamespace(model_drafter=drafter, mtp_drafter=mtp))

    assert sources(model, heads) == ("model", "mtp", "ngram", "auto")
    assert sources(heads, heads) == ("mtp", "ngram", "auto")  # no draft model: "model" drafts with the heads
    assert sources(model, None) == ("model", "ngram", "auto")
    assert sources(None, None) == ("ngram", "auto")


def test_rollbacks_are_summarised_by_kind_beside_their_verify():
    """Medians of the rollback and of the same steps' verify; the share is per step."""
    samples = [
        RollbackSample("snapshot", 3, 0, 0.2, 10.0, 4),
        RollbackSample("snapshot", 1, 0, 0.6, 12.0, 2),
        RollbackSample("snapshot", 2, 0, 0.4, 2.0, 3),
        RollbackSample("restore", 4, 1, 5.0, 10.0, 5),
    ]
    s = rollback_summary(samples)
    assert list(s) == ["restore", "snapshot"]
    assert s["snapshot"] == {"steps": 3, "dropped": 2.0, "redecoded": 0.0, "ms": 0.4, "verify_ms": 10.0,
                             "verify_rows": 3.0, "share_of_verify": 0.05}  # fmt: skip
    assert s["restore"]["share_of_verify"] == 0.5 and s["restore"]["redecoded"] == 1.0
    prompts = [p for p in SUITE if p.name == "chat"]
    methods = methods_for((2,), True)
    cells = {"chat": {m.name: Cell([_run(20, (1, 2, 3), 4, 3)]) for m in methods}}
    cells["chat"]["k=2"].runs[0].rollbacks = samples[:3]
    report = summarise(cells, prompts, methods, (2,), greedy=True)
    assert report["results"]["chat"]["k=2"]["rollback"] == {"snapshot": s["snapshot"]}
    assert report["costs"]["rollback_by_method"] == {"k=2": {"snapshot": s["snapshot"]}}
    assert report["goals"]["rollback_vs_verify"] == {"kind": "snapshot", "steps": 3, "share": 0.05, "met": True}
    report["meta"] = {"target": "t.gguf", "target_memory": "hybrid", "target_rollback": "snapshot", "draft": "d.gguf",
                      "threads": 2, "greedy": True, "max_tokens": 8, "repeats": 1, "n_draft_max": 8,
                      "methods": [m.name for m in methods]}  # fmt: skip
    text = render_text(report)
    assert "target t.gguf (hybrid, rollback snapshot), draft d.gguf" in text
    line = "    k=2  snapshot     3 steps  0.400 ms  dropped 2.0 redecoded 0.0  verify 10.00 ms of 3.0 rows  = 5.00%"
    assert line in text
    assert "a snapshot rollback <= 10% of its step's verify: met  5.00% (median over 3 steps)" in text


@pytest.mark.models  # loads the default pair (not through a fixture)
def test_profiles_on_a_build_without_certified_batches_report_each_prompts_differences(capsys, monkeypatch):
    """Issue 56 item 2: with a build that certifies no verify batch (system_info says LLAMAFILE),
    auto verifies in one batch, exact row by row, and the report gives, per profile and prompt,
    how many replies differed from plain and the top-2 logit margin at each first difference."""
    import skippy_tui.engine.native.invariance as inv_mod
    from skippy_tui.engine.native.devices import system_info

    monkeypatch.setattr(inv_mod, "system_info", lambda: system_info() + " LLAMAFILE = 1 |")
    rc = main(["bench", "--profiles", "--prompts", "chat,rewrite-replace", "--repeats", "1", "--max-tokens", "12",
               "--json", "--no-progress", "--no-warmup"])  # fmt: skip
    assert rc == 0
    report = json.loads(capsys.readouterr().out)
    prof, meta = report["profiles"], report["meta"]
    assert {"exact", "auto", "fast"} <= set(prof) and meta["not_run"] == {}
    assert "row by row" in meta["verify"]["exact"] and "not bit-exact on this build" in meta["verify"]["auto"]
    for name in ("exact", "auto", "fast"):
        per_prompt = prof[name]["per_prompt"]
        assert set(per_prompt) == {"chat", "rewrite-replace"}, name
        for cell in per_prompt.values():
            assert cell["replies"] == 1 and cell["differing_from_plain"] == len(cell["top2_logit_margins"])
        assert sum(c["differing_from_plain"] for c in per_prompt.values()) == prof[name]["differing_from_plain"]
    assert prof["exact"]["differing_from_plain"] == 0  # row by row is plain decoding
    assert "auto_over_exact" in prof and "fast_over_exact" in prof


def test_profiles_text_lists_differences_per_prompt_and_a_profile_not_run():
    from skippy_tui.bench.profiles import render_profiles

    def cell(per_prompt: dict) -> dict:
        diffs = [
            {"prompt": p, "seed": 1, "index": 3, "top2_logit_margin": m}
            for p, c in per_prompt.items()
            for m in c["top2_logit_margins"]
        ]
        return {
            "plain_tokens_per_second": 40.0, "speculative_tokens_per_second": 50.0, "speedup": 1.25,
            "replies": sum(c["replies"] for c in per_prompt.values()), "differing_from_plain": len(diffs),
            "differences": diffs, "per_prompt": per_prompt,
        }  # fmt: skip

    same = {"replies": 2, "differing_from_plain": 0, "top2_logit_margins": []}
    report = {
        "seed": 1,
        "profiles": {
            "exact": cell({"chat": same, "code": same}),
            "fast": cell(
                {"chat": {"replies": 2, "differing_from_plain": 1, "top2_logit_margins": [0.0123]}, "code": same}
            ),
        },
        "meta": {
            "target": "t.gguf",
            "draft": None,
            "speculation": {"n_draft": "auto", "source": "auto"},
            "sampling_label": "greedy",
            "repeats": 2,
            "prompts": ["chat", "code"],
            "seconds": 1.0,
            "loadavg_1min": [1.0, 1.0],
            "verify": {"exact": "exact in chunks of 7", "fast": "one batch"},
            "not_run": {"auto": "this build certifies verify batches, so it verifies as exact does (exact ≤7 rows)"},
        },
    }
    text = render_profiles(report)
    assert "auto     not run apart: this build certifies verify batches" in text
    lines = text.splitlines()
    chat = next(ln for ln in lines if ln.startswith("chat "))
    assert chat.split() == ["chat", "0/2", "1/2", "(0.0123)"]
    assert next(ln for ln in lines if ln.startswith("code ")).split() == ["code", "0/2", "0/2"]
    assert "verify, exact: exact in chunks of 7" in text
