"""Every setting is declared once (engine/options.py), and everything that has one reads it."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from skippy_tui.cli_common import FLAGGED, add_model_flags, config_from_args
from skippy_tui.config import SCHEMA
from skippy_tui.engine import options
from skippy_tui.engine.native import model as native
from skippy_tui.engine.native.model import LoadParams
from skippy_tui.engine.sampling.params import SamplingParams
from skippy_tui.engine.settings import GenerationSettings, SpeculationSettings


def test_the_engine_settings_default_to_the_table() -> None:
    assert [f.name for f in dataclasses.fields(LoadParams)] == [o.key for o in options.MODEL_OPTIONS]
    as_config = {"device": lambda v: v or "", "rpc": list, "tensor_split": list}
    for f in dataclasses.fields(LoadParams):
        value = as_config.get(f.name, lambda v: v)(getattr(LoadParams(), f.name))
        assert value == options.default(f"target.{f.name}"), f.name
    spec = SpeculationSettings()
    for f in dataclasses.fields(SpeculationSettings):
        assert getattr(spec, f.name) == options.default(f"speculation.{f.name}"), f.name
    sampling = SamplingParams()
    for f in dataclasses.fields(SamplingParams):
        expected = options.default(f"sampling.{f.name}")
        assert getattr(sampling, f.name) == (None if expected == "random" else expected), f.name
    assert GenerationSettings().max_tokens == options.default("generation.max_tokens")


def test_the_native_choices_are_the_tables_words() -> None:
    assert tuple(native.KV_CACHE_TYPES) == options.KV_CACHE_TYPES
    assert tuple(native.SPLIT_MODES) == options.SPLIT_MODES
    assert tuple(native.FLASH_ATTN) == options.FLASH_ATTN


def test_the_config_schema_is_the_table() -> None:
    assert options.schema() == SCHEMA
    assert all(options.option(f"draft.{o.key}").default is None for o in options.MODEL_OPTIONS)  # the target's


@pytest.mark.parametrize("opt", FLAGGED, ids=lambda o: o.flag)
def test_every_flag_sets_its_config_key(opt: options.Option) -> None:
    parser = argparse.ArgumentParser()
    add_model_flags(parser)
    sample = {
        "int": "3", "float": "0.5", "path": "x.gguf", "str": "text", "int|word": "7",
        "word": opt.words[-1] if opt.words else "", "list[str]": "a:1",
    }  # fmt: skip
    argv = [opt.flag] if opt.action == "store_false" else [opt.flag, sample[opt.kind]]
    cfg = config_from_args(parser.parse_args(argv))  # type: ignore[arg-type]
    got = cfg.get(opt.section, opt.key)
    if opt.action == "store_false":
        want: object = False
    elif opt.action == "append":
        want = [sample[opt.kind]]
    else:
        want = {"int": 3, "float": 0.5, "int|word": 7}.get(opt.kind, sample[opt.kind])
    assert got == want and cfg.origins[opt.name] == opt.flag


def test_bounds_come_from_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    from skippy_tui.engine.errors import BoundsError

    with pytest.raises(BoundsError, match=r"n_draft_max = 4097 is out of bounds: must be in 1\.\.4096"):
        SpeculationSettings(n_draft_max=4097)
    with pytest.raises(BoundsError, match=r"max_tokens = 0 .* in 1\.\.1048576"):
        GenerationSettings(max_tokens=0)
    with pytest.raises(BoundsError, match=r"repeat_penalty = 0\.0 .* finite and in \(0, 100\]"):
        SamplingParams(repeat_penalty=0.0)
