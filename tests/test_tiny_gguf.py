"""``tools/tiny_gguf.py``: its models load and behave in the pinned llama.cpp as their architecture does.

Checked with llama.cpp's own C API (llama-cpp-python's ctypes functions), not
through the engine: which kind of memory each model gets, that it decodes to
finite logits, native recurrent rollback (qwen35, lfm2) against a fresh
prefill, its refusal on mamba, and the MTP block of qwen35.
"""

from __future__ import annotations

import contextlib
import ctypes
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from helpers import THREADS
from tiny_models import TOOL, generator

from skippy_tui.engine.defaults import smollm2_q4_1_path
from skippy_tui.engine.native_backend import ensure_backend, llama_cpp, recent_log

TOKENS = [1, 504, 3458, 282, 4649, 314, 7080, 30]
NEXT = 42


class Session:
    """Models and contexts opened through the C API, freed (contexts first) on exit."""

    def __init__(self, stack: contextlib.ExitStack) -> None:
        ensure_backend()
        self._stack = stack

    def model(self, path: Path, *, load_mtp: bool = False, vocab_only: bool = False) -> ctypes.c_void_p:
        params = llama_cpp.llama_model_default_params()
        params.load_mtp = load_mtp
        params.vocab_only = vocab_only
        model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
        assert model, f"{path.name} did not load: {recent_log()}"
        self._stack.callback(llama_cpp.llama_model_free, model)
        return model

    def context(self, model: ctypes.c_void_p, *, n_rs_seq: int = 0, **fields: object) -> ctypes.c_void_p:
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = params.n_batch = params.n_ubatch = 64
        params.n_threads = params.n_threads_batch = THREADS
        params.n_rs_seq = n_rs_seq
        for name, value in fields.items():
            setattr(params, name, value)
        ctx = llama_cpp.llama_init_from_model(model, params)
        if ctx:
            self._stack.callback(llama_cpp.llama_free, ctx)
        return ctx


@pytest.fixture
def api() -> Iterator[Session]:
    with contextlib.ExitStack() as stack:
        yield Session(stack)


def decode(ctx: ctypes.c_void_p, tokens: list[int]) -> np.ndarray:
    """Decode ``tokens`` as one batch; a copy of the last token's logits."""
    arr = (llama_cpp.llama_token * len(tokens))(*tokens)
    rc = llama_cpp.llama_decode(ctx, llama_cpp.llama_batch_get_one(arr, len(tokens)))
    assert rc == 0, f"llama_decode returned {rc}: {recent_log()}"
    vocab = llama_cpp.llama_model_get_vocab(llama_cpp.llama_get_model(ctx))
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(n_vocab,)).copy()


@pytest.mark.parametrize(
    ("fixture", "hybrid", "recurrent"),
    [("tiny_qwen35", True, False), ("tiny_lfm2", True, False), ("tiny_mamba", False, True)],
)
def test_loads_as_its_kind_and_decodes(
    api: Session, request: pytest.FixtureRequest, fixture: str, hybrid: bool, recurrent: bool
) -> None:
    path: Path = request.getfixturevalue(fixture)
    model = api.model(path)
    assert llama_cpp.llama_model_is_hybrid(model) is hybrid
    assert llama_cpp.llama_model_is_recurrent(model) is recurrent
    assert llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model)) == 49152
    assert llama_cpp.llama_model_n_layer_nextn(model) == 0
    ctx = api.context(model)
    assert ctx, recent_log()
    logits = decode(ctx, TOKENS[:4])
    assert np.isfinite(logits).all()
    assert logits.std() > 0.1  # random weights, yet not a flat distribution
    assert not np.array_equal(logits, decode(ctx, [NEXT]))  # and they depend on the input


@pytest.mark.parametrize("fixture", ["tiny_qwen35", "tiny_lfm2"])
def test_native_rollback_equals_fresh_prefill(api: Session, request: pytest.FixtureRequest, fixture: str) -> None:
    model = api.model(request.getfixturevalue(fixture))
    ctx = api.context(model, n_rs_seq=4)
    assert llama_cpp.llama_n_rs_seq(ctx) == 4
    decode(ctx, TOKENS[:5])
    decode(ctx, TOKENS[5:8])
    # Positions 6 and 7 go: the recurrent state steps back 2 tokens to the 6 kept ones.
    assert llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(ctx), 0, 6, -1)
    rolled_back = decode(ctx, [NEXT])

    fresh = api.context(model, n_rs_seq=4)
    decode(fresh, TOKENS[:6])
    assert np.array_equal(rolled_back, decode(fresh, [NEXT]))  # bit for bit

    without = api.context(model)  # no snapshots asked for: the same seq_rm is refused
    decode(without, TOKENS)
    assert not llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(without), 0, 6, -1)


def test_mamba_refuses_a_partial_seq_rm(api: Session, tiny_mamba: Path) -> None:
    model = api.model(tiny_mamba)
    ctx = api.context(model, n_rs_seq=4)
    assert llama_cpp.llama_n_rs_seq(ctx) == 0  # no native rollback: llama.cpp clamps the request
    decode(ctx, TOKENS[:5])
    decode(ctx, TOKENS[5:8])
    assert not llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(ctx), 0, 6, -1)


def test_qwen35_mtp_block_and_context(api: Session, tiny_qwen35: Path, tiny_qwen35_mtp: Path) -> None:
    model = api.model(tiny_qwen35_mtp, load_mtp=True)
    assert llama_cpp.llama_model_is_hybrid(model)
    assert llama_cpp.llama_model_n_layer_nextn(model) == 1
    assert llama_cpp.llama_model_n_layer(model) == 4  # the trunk; the MTP block is extra
    target = api.context(model)
    assert target, recent_log()
    mtp = api.context(model, ctx_type=llama_cpp.LLAMA_CONTEXT_TYPE_MTP, ctx_other=target)
    assert mtp, recent_log()

    # The trunk is tiny_qwen35's, tensor for tensor (weights are seeded by name).
    plain = api.context(api.model(tiny_qwen35))
    assert np.array_equal(decode(target, TOKENS), decode(plain, TOKENS))


def test_several_mtp_blocks_load(api: Session, tiny_models) -> None:
    # llama.cpp loads any number; its MTP graph runs only one (so no MTP context here).
    model = api.model(tiny_models("qwen35", mtp=2), load_mtp=True)
    assert llama_cpp.llama_model_n_layer_nextn(model) == 2


def _tokenizer_metadata(model: ctypes.c_void_p) -> dict[str, str]:
    """The model's ``tokenizer.*`` scalar metadata as llama.cpp read it (arrays are not listed)."""
    buf = ctypes.create_string_buffer(1 << 16)
    out = {}
    for i in range(llama_cpp.llama_model_meta_count(model)):
        llama_cpp.llama_model_meta_key_by_index(model, i, buf, len(buf))
        key = buf.value.decode()
        if key.startswith("tokenizer."):
            llama_cpp.llama_model_meta_val_str_by_index(model, i, buf, len(buf))
            out[key] = buf.value.decode()
    return out


def _tokenize(model: ctypes.c_void_p, text: str) -> list[int]:
    vocab = llama_cpp.llama_model_get_vocab(model)
    raw = text.encode()
    tokens = (llama_cpp.llama_token * (len(raw) + 8))()
    n = llama_cpp.llama_tokenize(vocab, raw, len(raw), tokens, len(tokens), True, True)
    assert n > 0
    return tokens[:n]


def test_tokenizer_and_chat_template_are_smollm2s(api: Session, tiny_lfm2: Path) -> None:
    ours, theirs = api.model(tiny_lfm2, vocab_only=True), api.model(smollm2_q4_1_path(), vocab_only=True)
    meta = _tokenizer_metadata(theirs)
    assert "tokenizer.chat_template" in meta and "tokenizer.ggml.pre" in meta
    assert _tokenizer_metadata(ours) == meta
    assert llama_cpp.llama_model_chat_template(ours, None) == llama_cpp.llama_model_chat_template(theirs, None)
    v_ours, v_theirs = llama_cpp.llama_model_get_vocab(ours), llama_cpp.llama_model_get_vocab(theirs)
    assert llama_cpp.llama_vocab_n_tokens(v_ours) == llama_cpp.llama_vocab_n_tokens(v_theirs) == 49152
    for i in range(49152):  # the token list and types
        assert llama_cpp.llama_vocab_get_text(v_ours, i) == llama_cpp.llama_vocab_get_text(v_theirs, i), i
        assert llama_cpp.llama_vocab_get_attr(v_ours, i) == llama_cpp.llama_vocab_get_attr(v_theirs, i), i
    text = "<|im_start|>user\nWhat's 17 × 23? Déjà vu, naïve café.<|im_end|>\n"
    assert _tokenize(ours, text) == _tokenize(theirs, text)  # the merges


@pytest.mark.parametrize("ftype", ["f16", "q8_0", "q4_0"])
def test_llama_at_each_type(api: Session, tiny_models, ftype: str) -> None:
    path = tiny_models("llama", ftype=ftype)
    _, tensors = generator().read_gguf_header(path)
    assert tensors["blk.0.ffn_down.weight"] == (GGMLQuantizationType[ftype.upper()], (128, 64))
    assert tensors["token_embd.weight"] == (GGMLQuantizationType[ftype.upper()], (64, 49152))
    assert tensors["blk.0.attn_norm.weight"] == (GGMLQuantizationType.F32, (64,))
    model = api.model(path)
    assert not llama_cpp.llama_model_is_hybrid(model) and not llama_cpp.llama_model_is_recurrent(model)
    assert llama_cpp.llama_model_n_embd(model) == 64
    assert np.isfinite(decode(api.context(model), TOKENS[:4])).all()


def test_same_seed_same_file_atomically(tmp_path: Path) -> None:
    write = generator().write_tiny_gguf
    a = write(tmp_path / "a.gguf", "mamba", layers=1, seed=7)
    b = write(tmp_path / "b.gguf", "mamba", layers=1, seed=7)
    c = write(tmp_path / "c.gguf", "mamba", layers=1, seed=8)
    assert a.read_bytes() == b.read_bytes() != c.read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.gguf", "b.gguf", "c.gguf"]  # no temp file left


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--arch", "gpt2"], "invalid choice: 'gpt2'"),
        (["--arch", "llama", "--type", "q4_k"], "invalid choice: 'q4_k'"),
        (["--arch", "llama", "--layers", "two"], "invalid int value: 'two'"),
        (["--arch", "lfm2", "--mtp", "1"], "--mtp is supported only for qwen35"),
        (["--arch", "qwen35", "--mtp", "-1"], "--mtp must be >= 0"),
        (["--arch", "mamba", "--heads", "4"], "--heads does not apply to mamba"),
        (["--arch", "llama", "--embd", "100", "--heads", "3"], "--heads must be >= 1 and divide --embd (100)"),
        (["--arch", "llama", "--heads", "4", "--kv-heads", "3"], "--kv-heads must be >= 1 and divide --heads (4)"),
        (["--arch", "qwen35", "--layers", "1"], "--layers must be between 2 and 256"),
        (["--arch", "llama", "--embd", "0"], "--embd must be between 8 and 16384"),
        (["--arch", "llama", "--ff", "100", "--type", "q4_0"], "--ff must be a multiple of 32 for --type q4_0"),
        (["--arch", "llama", "--seed", "-3"], "--seed must be >= 0"),
    ],
)
def test_cli_rejects_bad_input(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    out = tmp_path / "m.gguf"
    assert generator().main([*args, str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("usage:") and "error: " in err and message in err
    assert "Traceback" not in err
    assert not list(tmp_path.iterdir())


def test_cli_rejects_a_missing_directory_without_a_traceback(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, str(TOOL), "--arch", "llama", str(tmp_path / "no" / "m.gguf")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 2
    assert "error: the output directory does not exist" in run.stderr
    assert "Traceback" not in run.stderr
