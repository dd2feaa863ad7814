"""The status bar's fields as pure functions of a StatusState (no app, no models)."""

from __future__ import annotations

import dataclasses

from skippy_tui.engine.events import ReplyFinished
from skippy_tui.engine.sampling.params import SamplingParams
from skippy_tui.transcript import Entry
from skippy_tui.ui.status import SEPARATOR, StatusState, last_tps, model_descriptions, sampling_status, status_parts
from skippy_tui.ui.widgets.render import fit_parts

RECORDED = {
    "target": {"path": "/m/SmolLM2-135M-Instruct-f32.gguf", "name": "SmolLM2 135M Instruct", "file_type": "F32"},
    "draft": {"path": "/m/SmolLM2-135M-Instruct-Q4_1.gguf", "name": "SmolLM2 135M Instruct", "file_type": "Q4_1"},
    "backend": "CPU",
}


def _state(**changes: object) -> StatusState:
    base = StatusState(
        speculator=None, backend="", n_past=0, n_ctx=0, tokens_per_second=0.0, sampling=SamplingParams(),
        recorded={}, replay=False, transcript_name="transcript", loading=False, panel_shown=True,
    )  # fmt: skip
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]


def _line(st: StatusState, width: int = 500) -> str:
    return fit_parts(status_parts(st), width, SEPARATOR)


def test_without_models_it_says_how_to_load_them_and_while_loading_that_they_load() -> None:
    assert _line(_state()) == "no models loaded (f5 loads them)"
    assert _line(_state(), 20) == "no models (f5)"
    assert _line(_state(loading=True)) == "loading models…"
    assert _line(_state(panel_shown=False)) == "no models loaded (f5 loads them) │ panel hidden (f6)"


def test_a_replay_names_its_file_the_recorded_models_and_backend_and_narrows_by_rank() -> None:
    st = _state(recorded=RECORDED, replay=True, transcript_name="chat-1.json")
    assert _line(st) == (
        "replay chat-1.json │ target SmolLM2-135M-Instruct F32 │ draft SmolLM2-135M-Instruct Q4_1"
        " │ recorded on CPU │ no models loaded (f5 loads them)"
    )
    # narrower: the backend goes first (rank 1), the names shorten, "no models" shortens, the draft goes, ...
    assert _line(st, 100) == "replay chat-1.json │ target SmolLM2-135… F32 │ draft SmolLM2-135… Q4_1 │ no models (f5)"
    assert _line(st, 80) == "replay chat-1.json │ target SmolLM2-135… F32 │ no models (f5)"
    assert _line(st, 40) == "replay chat-1.json │ no models (f5)"  # what must stay


def test_sampling_status_says_the_sampler_a_fixed_seed_and_penalties() -> None:
    assert sampling_status(SamplingParams()) == "greedy"
    assert sampling_status(SamplingParams(temperature=0.8, seed=7)) == "coupled T=0.8 seed 7"
    assert sampling_status(SamplingParams(temperature=0.5, repeat_penalty=1.1)) == "coupled T=0.5 +penalties"


def _finished(tps: float) -> Entry:
    fin = ReplyFinished(
        reason="eos", token_ids=(), text="", n_tokens=32, n_steps=8, n_drafted=28, n_accepted=21,
        acceptance_rate=0.75, mean_accepted_length=2.625, per_position=(), tokens_per_second=tps,
        generation_ms=1.0, prefill_ms=1.0, n_past=40,
    )  # fmt: skip
    return Entry("assistant", "", events=[fin])


def test_last_tps_is_the_last_finished_replys() -> None:
    assert last_tps([Entry("user", "hi")]) == 0.0
    assert last_tps([_finished(12.5), Entry("user", "hi"), _finished(30.0), Entry("user", "more")]) == 30.0


def test_model_descriptions_of_a_replay_name_each_recorded_file() -> None:
    lines = model_descriptions(None, RECORDED)
    assert [line.split(":")[0] for line in lines] == ["target", "draft"]
    assert lines[0].endswith("· 'SmolLM2 135M Instruct' · /m/SmolLM2-135M-Instruct-f32.gguf")
    assert model_descriptions(None, {"target": {"name": "x"}}) == ["target: x · 'x' · path not recorded"]


def _speculator(arch: str = "llama", source: str = "model", draft: bool = True, heads: bool = False, **kw: object):
    """A loaded speculator as the status bar reads it: infos, drafters, settings."""
    from types import SimpleNamespace

    from skippy_tui.engine.settings import SpeculationSettings

    def info(name: str, ft: str) -> SimpleNamespace:
        return SimpleNamespace(path=f"/m/{name}.gguf", name=name, file_type=ft, architecture=arch)

    mtp = SimpleNamespace(source="mtp", external=False) if heads else None
    model = SimpleNamespace(source="model") if draft else mtp
    drafter = {"model": model, "mtp": mtp}.get(source, SimpleNamespace(source=source))
    fields = {
        "target_info": info("target", "F32"), "draft_info": info("draft", "Q4_1") if draft else None,
        "drafter": drafter, "model_drafter": model, "mtp_drafter": mtp, "n_ctx": 4096, "no_rollback": "",
        "invariance": None, "speculation": SpeculationSettings(enabled=True, n_draft=4, source=source),
        "verdict": lambda: None,
    }  # fmt: skip
    return SimpleNamespace(**{**fields, **kw})


def test_the_status_names_the_source_in_force_and_how_a_hybrid_target_rolls_back() -> None:
    def line(**kw: object) -> str:
        return _line(_state(speculator=_speculator(**kw), backend="CPU"))

    plain = line()
    # the draft model drafts: the draft field names it, the speculation field needs not
    assert "draft draft Q4_1" in plain and "spec on k=4 │" in plain and "rollback" not in plain
    assert "spec on ngram k=4" in line(source="ngram") and "spec on k=4" in line(source="auto")
    # the target's own heads, no draft model: mtp, and the model sources draft with them too
    heads = line(arch="qwen35", source="mtp", draft=False, heads=True)
    assert "draft: MTP heads" in heads and "spec on mtp k=4" in heads and "rollback: snapshot" in heads
    assert "spec on auto (mtp) k=4" in line(arch="qwen35", source="auto", draft=False, heads=True)
    assert "spec on ngram+mtp k=4" in line(arch="qwen35", source="ngram+model", draft=False, heads=True)
    assert "rollback: restore" in line(arch="mamba")
    assert "no draft model" in line(source="ngram", draft=False)
    # narrow: the rollback field goes before the speculation state shortens
    narrow = _line(_state(speculator=_speculator(arch="qwen35"), backend="CPU"), 100)
    assert "rollback" not in narrow and "spec on k=4" in narrow
    # speculation kept off by a recurrent state too large to save (the only remaining reason)
    off = _speculator(arch="mamba", no_rollback="the target's rejected tokens could only leave by a saved state")
    off.speculation = dataclasses.replace(off.speculation, enabled=False)
    text = _line(_state(speculator=off, backend="CPU"))
    assert "spec off (state too large to roll back)" in text and "recurrent model" not in text


def test_while_loading_it_says_the_stage_and_why_and_narrows_to_what() -> None:
    from skippy_tui.engine.load.loader import PROBE_STAGE

    st = _state(loading=True, load_stage=PROBE_STAGE)
    assert _line(st) == PROBE_STAGE and "exact" in PROBE_STAGE  # what is measured, and why
    assert _line(st, 60) == "measuring batch invariance"
    assert _line(st, 20) == "loading models…"
    assert _line(_state(loading=True, load_stage="loading target SmolLM2 Q4_1")) == "loading target SmolLM2 Q4_1"


def test_the_status_shows_the_profile_in_force_and_whether_replies_are_bit_exact() -> None:
    """Issue 56: auto (the default) says when this build certifies no verify batch: one batch,
    not bit-exact; that field outlasts the backend and the model names on a narrow bar."""
    from skippy_tui.engine.native.invariance import Invariance
    from skippy_tui.engine.settings import SpeculationSettings

    def line(profile: str, inv: Invariance | None, exact: bool = True, width: int = 500) -> str:
        spec = SpeculationSettings(enabled=True, n_draft=4, source="model", profile=profile, exact=exact)
        return _line(_state(speculator=_speculator(invariance=inv, speculation=spec), backend="CPU"), width)

    chunks, none = Invariance(7, 17, 1.1), Invariance(1, 17, 0.03)
    assert line("auto", chunks).endswith("│ auto: exact ≤7 rows")
    assert line("exact", chunks).endswith("│ exact ≤7 rows")
    assert line("auto", none).endswith("│ auto: not bit-exact")
    assert line("exact", none).endswith("│ exact ≤1 row")
    assert line("fast", None, exact=False).endswith("│ profile fast")
    assert line("auto", None, exact=False).endswith("│ not exact")
    assert "exact" not in line("auto", None)  # the probe has not run yet: nothing to say
    # narrow: "auto:" goes first; "not bit-exact" stays after the backend and the verdict's rank
    narrow = line("auto", none, width=90)
    assert narrow.endswith("│ not bit-exact") and "CPU" not in narrow, narrow
    assert "exact" not in line("auto", chunks, width=90)


def test_the_status_says_where_each_model_runs() -> None:
    """The backend field is the models' placement: one name when both run there, else per model."""
    from types import SimpleNamespace

    from skippy_tui.engine.native.rpc import devices_label

    def spec(target: str, draft: str | None) -> SimpleNamespace:
        t = SimpleNamespace(placement=target)
        cache = SimpleNamespace(ctx=SimpleNamespace(model=SimpleNamespace(placement=draft))) if draft else None
        return SimpleNamespace(target=t, draft_cache=cache)

    assert devices_label(spec("CUDA0", "CUDA0")) == "CUDA0"
    assert devices_label(spec("CUDA0", "CPU")) == "target CUDA0 · draft CPU"
    assert devices_label(spec("RPC0@10.0.0.2:50052+CPU", None)) == "RPC0@10.0.0.2:50052+CPU"
    # an engine process says it from its load
    child = SimpleNamespace(separate_process=True, placements=(("target", "CUDA0"), ("draft", "CUDA1")))
    assert devices_label(child) == "target CUDA0 · draft CUDA1"
    text = _line(_state(speculator=_speculator(), backend=devices_label(spec("CUDA0", "CPU"))))
    assert "│ target CUDA0 · draft CPU │" in text


def test_placement_names_the_devices_and_the_cpu_where_layers_stay() -> None:
    from skippy_tui.engine.native.devices import placement

    assert placement([], -1, 30) == "CPU"  # a CPU build: no accelerator
    assert placement(["CUDA0"], -1, 30) == "CUDA0"
    assert placement(["CUDA0"], 31, 30) == "CUDA0"  # 30 layers and the output layer
    assert placement(["CUDA0"], 20, 30) == "CUDA0+CPU"
    assert placement(["CUDA0"], 0, 30) == "CPU"
    assert placement(["CUDA0", "CUDA1"], -1, 30) == "CUDA0+CUDA1"
    assert placement(["CPU"], -1, 30) == "CPU"  # device = "CPU"
    assert placement(["RPC0@h:1"], -1, 30) == "RPC0@h:1"
