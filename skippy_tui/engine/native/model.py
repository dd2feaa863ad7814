"""The thin layer over llama.cpp's C API: a model and its contexts.

Everything that touches a model's or a context's native pointer lives here:
their lifetimes, one reusable batch per context, decode with logits at chosen
rows, KV-cache removal, tokenizing and token pieces. The binding, its
initialisation and log sink are in :mod:`.backend`, devices in
:mod:`.devices`, Ctrl+C handling in :mod:`.sigint`.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import numpy as np

from ..errors import ContextFullError, DecodeError, ModelFileError, SkippyError, StateError
from ..load.arch import RollbackKind
from ..options import default
from . import hugepages, rpc
from .backend import clear_log, ensure_backend, recent_log
from .backend import llama_cpp as _L
from .devices import accelerator_names, device_handle, local_accelerators, placement
from .sigint import deferred_sigint


@functools.cache
def _native_abort_callback() -> object | None:
    """libc's ``strlen`` as llama.cpp's abort callback, or None where there is no libc.

    ggml calls the abort callback after every graph node. A Python callback
    must take the GIL each time, and while the Textual UI thread renders that
    wait made decoding three to four times slower. ``strlen`` on the context's
    two-byte ``[flag, NUL]`` buffer returns 1 when the flag is set and 0 when
    not, which is exactly the ``bool`` the callback must return, with no Python.
    """
    try:
        address = ctypes.cast(ctypes.CDLL(None).strlen, ctypes.c_void_p).value
    except (OSError, AttributeError, TypeError):  # pragma: no cover - e.g. Windows
        return None
    return _L.ggml_abort_callback(address) if address else None


@functools.cache
def _logits_reader() -> Callable[[int], object]:
    """``llama_get_logits``, called *without* releasing the GIL where possible.

    A ctypes call through a ``CDLL`` releases the GIL and takes it back after.
    Taking it back waits while another thread runs Python — in the app, the UI
    rendering, up to one switch interval per call — and reading a pointer needs
    no release. Through a ``PyDLL`` handle of the same library the call keeps
    the GIL: one wait per decode instead of one per decode and per logits row.
    """
    lib = getattr(getattr(_L, "llama_cpp", None), "_lib", None)
    path = getattr(lib, "_name", None)
    try:
        fn = ctypes.PyDLL(path).llama_get_logits
    except (OSError, AttributeError, TypeError):  # pragma: no cover - an unusual llama-cpp-python layout
        return _L.llama_get_logits  # the binding's own: the same rows, with a GIL release
    fn.argtypes = [ctypes.c_void_p]
    fn.restype = ctypes.c_void_p
    return fn


# -- model -----------------------------------------------------------------------------

KV_CACHE_TYPES = {
    "f32": _L.GGML_TYPE_F32,
    "f16": _L.GGML_TYPE_F16,
    "bf16": getattr(_L, "GGML_TYPE_BF16", 30),
    "q8_0": _L.GGML_TYPE_Q8_0,
    "q4_0": _L.GGML_TYPE_Q4_0,
    "q4_1": _L.GGML_TYPE_Q4_1,
    "iq4_nl": _L.GGML_TYPE_IQ4_NL,
    "q5_0": _L.GGML_TYPE_Q5_0,
    "q5_1": _L.GGML_TYPE_Q5_1,
}
SPLIT_MODES = {"none": _L.LLAMA_SPLIT_MODE_NONE, "layer": _L.LLAMA_SPLIT_MODE_LAYER, "row": _L.LLAMA_SPLIT_MODE_ROW}
FLASH_ATTN = {
    "auto": _L.LLAMA_FLASH_ATTN_TYPE_AUTO,
    "on": _L.LLAMA_FLASH_ATTN_TYPE_ENABLED,
    "off": _L.LLAMA_FLASH_ATTN_TYPE_DISABLED,
}


@dataclass(frozen=True, slots=True)
class LoadParams:
    """Native settings of one model and its context (already validated).

    ``n_gpu_layers`` -1 means all; ``device`` ``None`` lets llama.cpp choose;
    ``threads`` 0 means one per usable CPU. ``flash_attn`` off and ``repack``
    (CPU weight repacking) off are the batch-invariant choice on CPU: a row's
    logits then do not depend on the batch size, so greedy verification
    reproduces plain decoding exactly (see README, "Exactness"). Turn them on
    for speed where exactness matters less.

    ``rpc``: ``host:port`` of llama.cpp RPC servers whose devices the model
    may use (see :mod:`.rpc`); with ``device`` unset its layers go there
    first, as llama.cpp's ``--rpc`` does. ``tensor_split``: the share of the
    layers (``split_mode = "layer"``) or rows (``"row"``) per device, in the
    model's device order (remote devices first); empty = by free memory.
    ``hugepages``: the weights in transparent huge pages (:mod:`.hugepages`;
    mapped ones move into them after the load): ``True``, ``False`` or ``"auto"``
    (when they stay in host RAM and the file fits in half the available memory).
    """

    n_ctx: int = default("target.n_ctx")
    n_batch: int = default("target.n_batch")
    n_ubatch: int = default("target.n_ubatch")
    threads: int = default("target.threads")
    threads_batch: int = default("target.threads_batch")
    n_gpu_layers: int = default("target.n_gpu_layers")
    main_gpu: int = default("target.main_gpu")
    split_mode: str = default("target.split_mode")
    device: str | None = default("target.device") or None  # the config's "": llama.cpp chooses
    flash_attn: str = default("target.flash_attn")
    mmap: bool = default("target.mmap")
    mlock: bool = default("target.mlock")
    cache_type_k: str = default("target.cache_type_k")
    cache_type_v: str = default("target.cache_type_v")
    swa_full: bool = default("target.swa_full")
    repack: bool = default("target.repack")
    rpc: tuple[str, ...] = tuple(default("target.rpc"))
    tensor_split: tuple[float, ...] = tuple(default("target.tensor_split"))
    hugepages: bool | str = default("target.hugepages")


ProgressFn = Callable[[float], bool]


class Model:
    """A loaded llama.cpp model with its vocabulary. Call :meth:`close` (or use ``with``).

    ``load_mtp``: also load the file's multi-token-prediction (NextN) blocks, for an
    MTP draft context (:class:`MtpContext`); llama.cpp skips them otherwise.
    """

    def __init__(
        self, path: Path, params: LoadParams, progress: ProgressFn | None = None, load_mtp: bool = False
    ) -> None:
        ensure_backend()
        self.path = path
        self.huge_pages = hugepages.ModelPages(path, _huge_pages_wanted(path, params), params.mmap, params.mlock)
        mp = _L.llama_model_default_params()
        # llama.cpp folded use_mmap/use_mlock into one load_mode enum
        _set(
            mp,
            n_gpu_layers=params.n_gpu_layers if params.n_gpu_layers >= 0 else 0x7FFFFFFF,
            main_gpu=params.main_gpu,
            split_mode=SPLIT_MODES[params.split_mode],
            load_mode=_LOAD_MODES[params.mmap, params.mlock],
            use_extra_bufts=params.repack,
        )
        if load_mtp:
            _set(mp, load_mtp=True)
        handles, self.remote_devices = _model_devices(params)
        # (endpoint, connection) of each server this model's buffers live on: every native
        # call that may reach them goes through rpc.call, so a lost server is an error, not an abort
        self.rpc_servers: tuple[tuple[str, int], ...] = tuple(
            dict.fromkeys((d.endpoint, d.generation) for d in self.remote_devices)
        )
        devices = split = None
        if handles is not None:
            devices = (ctypes.c_void_p * (len(handles) + 1))(*handles, None)
            mp.devices = ctypes.cast(devices, ctypes.c_void_p)
        if params.tensor_split:
            n_max = max_devices()
            split = (ctypes.c_float * n_max)(*params.tensor_split[:n_max])
            mp.tensor_split = ctypes.cast(split, ctypes.POINTER(ctypes.c_float))

        cb_ref = None
        interrupted: list[bool] = []
        if progress is not None or self.huge_pages.advice is not None:

            @_L.llama_progress_callback
            def _cb(frac: float, _u: ctypes.c_void_p) -> bool:  # pragma: no cover - native callback
                if interrupted:
                    return False  # Ctrl+C: stop loading; raised once the load returns
                try:
                    self.huge_pages.on_progress()
                    return bool(progress(float(frac))) if progress is not None else True
                except Exception:
                    return True

            cb_ref = _cb
            mp.progress_callback = cb_ref
        clear_log()
        try:
            with deferred_sigint(lambda: interrupted.append(True)):
                ptr = rpc.call(self.rpc_servers, _L.llama_model_load_from_file, str(path).encode(), mp)
                if interrupted and ptr:
                    rpc.call(self.rpc_servers, _L.llama_model_free, ptr)
        finally:
            del cb_ref, devices, split
        if not ptr:
            raise ModelFileError(f"llama.cpp could not load {path}: {recent_log() or 'no details'}")
        self.ptr = ptr
        self.huge_pages.loaded()
        self.vocab = _L.llama_model_get_vocab(ptr)
        self.n_vocab: int = _L.llama_vocab_n_tokens(self.vocab)
        self.bos: int = _L.llama_vocab_bos(self.vocab)
        self.eos: int = _L.llama_vocab_eos(self.vocab)
        self.add_bos: bool = bool(_L.llama_vocab_get_add_bos(self.vocab))
        self.n_layer: int = _L.llama_model_n_layer(ptr)
        self.n_swa: int = _L.llama_model_n_swa(ptr) if hasattr(_L, "llama_model_n_swa") else 0
        self.is_recurrent: bool = bool(_L.llama_model_is_recurrent(ptr))
        self.is_hybrid: bool = bool(_L.llama_model_is_hybrid(ptr))
        # the KV cache alone cannot drop a tail: rejected tokens leave by a snapshot or a restore
        self.recurrent_or_hybrid: bool = self.is_recurrent or self.is_hybrid
        self.arch: str = self.meta("general.architecture") or ""
        self.n_embd: int = _L.llama_model_n_embd(ptr)
        self.mtp_loaded = load_mtp
        self.n_nextn: int = int(_L.llama_model_n_layer_nextn(ptr)) if load_mtp else 0
        buf = ctypes.create_string_buffer(256)
        _L.llama_model_desc(ptr, buf, 256)
        self.desc: str = buf.value.decode("utf-8", "replace")
        self.size_bytes: int = _L.llama_model_size(ptr)
        self.n_params: int = _L.llama_model_n_params(ptr)
        # where its layers run (CPU, CUDA0, RPC0@host:port, …+CPU): the status bar says it per model
        self.placement: str = placement(_device_names(params, self.remote_devices), params.n_gpu_layers, self.n_layer)
        self._piece_cache: dict[tuple[int, bool], bytes] = {}
        self._control: dict[int, bool] = {}

    def close(self) -> None:
        with self.huge_pages.stopped():  # a move of the weights must not outlive their mapping
            self._free()

    def _free(self) -> None:
        if getattr(self, "ptr", None):
            ptr, self.ptr = self.ptr, None
            if rpc.lost_reason(self.rpc_servers):
                return  # its buffers are on a lost server: freeing them would wait on it forever
            try:
                rpc.call(self.rpc_servers, _L.llama_model_free, ptr)
            except rpc.RpcLostError:
                pass

    def __enter__(self) -> Model:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens (EOS, EOT, and the like)."""
        return bool(_L.llama_vocab_is_eog(self.vocab, token))

    def tokenize(self, text: str, add_special: bool, parse_special: bool = True) -> list[int]:
        """Tokenize UTF-8 text; ``parse_special`` turns ``<|im_start|>``-style text into its token."""
        data = text.encode("utf-8")
        cap = len(data) + 8
        arr = (_L.llama_token * cap)()
        n = _L.llama_tokenize(self.vocab, data, len(data), arr, cap, add_special, parse_special)
        if n < 0:
            cap = -n
            arr = (_L.llama_token * cap)()
            n = _L.llama_tokenize(self.vocab, data, len(data), arr, cap, add_special, parse_special)
        if n < 0:
            raise SkippyError(f"tokenization failed ({n})")
        return list(arr[:n])

    def is_control(self, token: int) -> bool:
        """True for a token that only ``parse_special`` text becomes (``<|im_start|>``, ``<bos>``):
        llama.cpp's control and unknown tokens. Text tokenized without it never yields one."""
        got = self._control.get(token)
        if got is None:
            special = _L.LLAMA_TOKEN_ATTR_CONTROL | _L.LLAMA_TOKEN_ATTR_UNKNOWN
            got = self._control[token] = bool(_L.llama_vocab_get_attr(self.vocab, token) & special)
        return got

    def strips(self, token: int) -> tuple[bool, bool]:
        """Whether llama.cpp drops the whitespace before (lstrip) and after (rstrip) ``token``'s text."""
        attr = _L.llama_vocab_get_attr(self.vocab, token)
        return bool(attr & _L.LLAMA_TOKEN_ATTR_LSTRIP), bool(attr & _L.LLAMA_TOKEN_ATTR_RSTRIP)

    def piece(self, token: int, special: bool = False) -> bytes:
        """The raw bytes of one token (possibly part of a UTF-8 character)."""
        key = (token, special)
        got = self._piece_cache.get(key)
        if got is not None:
            return got
        buf = ctypes.create_string_buffer(64)
        n = _L.llama_token_to_piece(self.vocab, token, buf, 64, 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = _L.llama_token_to_piece(self.vocab, token, buf, -n, 0, special)
        out = buf.raw[: max(n, 0)]
        self._piece_cache[key] = out
        return out

    def token_text(self, token: int) -> str:
        """Display text of one token, special tokens rendered (``<|im_end|>``)."""
        return self.piece(token, special=True).decode("utf-8", "replace")

    def detokenize(self, tokens: Sequence[int]) -> str:
        """llama.cpp's one-shot detokenizer (special tokens not rendered)."""
        if not tokens:
            return ""
        arr = (_L.llama_token * len(tokens))(*tokens)
        cap = len(tokens) * 16 + 16
        buf = ctypes.create_string_buffer(cap)
        n = _L.llama_detokenize(self.vocab, arr, len(tokens), buf, cap, False, False)
        if n < 0:
            cap = -n
            buf = ctypes.create_string_buffer(cap)
            n = _L.llama_detokenize(self.vocab, arr, len(tokens), buf, cap, False, False)
        return buf.raw[:n].decode("utf-8", "replace")

    def meta(self, key: str) -> str | None:
        """A metadata value of the file as text (``general.architecture``), or None."""
        buf = ctypes.create_string_buffer(256)
        n = _L.llama_model_meta_val_str(self.ptr, key.encode(), buf, 256)
        return buf.value.decode("utf-8", "replace") if n >= 0 else None

    def builtin_chat_template(self) -> str | None:
        """The chat template llama.cpp reads from the model, if any."""
        raw = _L.llama_model_chat_template(self.ptr, None)
        return raw.decode("utf-8", "replace") if raw else None


def _huge_pages_wanted(path: Path, params: LoadParams) -> bool:
    """Whether this load reads the weights into huge pages (:func:`.hugepages.wanted`)."""
    if params.hugepages is False:
        return False
    on_host = not params.rpc and (
        (params.device or "").upper() == "CPU"
        or (params.device is None and (params.n_gpu_layers == 0 or not local_accelerators()))
    )
    try:
        size = path.stat().st_size
    except OSError:
        return False  # llama.cpp reports the missing file
    facts = hugepages.HostFacts(hugepages.thp_mode(), hugepages.mem_available(), on_host)
    return hugepages.wanted(params.hugepages, size, facts)


def max_devices() -> int:
    """How many devices one model may use at most (``tensor_split`` entries)."""
    return int(_L.llama_max_devices())


def _model_devices(params: LoadParams) -> tuple[list[int] | None, tuple[rpc.RemoteDevice, ...]]:
    """The model's device list (None: llama.cpp's default) and the remote devices in it.

    ``device`` selects one device by name (``RPC0`` or a server's ``host:port``
    too). Otherwise a model with ``rpc`` servers gets their devices first, then
    the local accelerators, as llama.cpp's default list puts them. Once any
    remote device is registered in this process a model lists its devices
    explicitly, so that it never lands on another model's server (or a lost one).

    Raises:
        RpcError: a server is unreachable or of another version.
        ModelFileError: no device of that name.
    """
    remote = rpc.connect(params.rpc) if params.rpc else ()
    if params.device:
        named = rpc.device_named(params.device)
        if named is not None:
            return [named.handle], (named,)
        return [device_handle(params.device)], ()
    if remote or rpc.registered():
        return [d.handle for d in remote] + local_accelerators(), remote
    return None, ()


def _device_names(params: LoadParams, remote: tuple[rpc.RemoteDevice, ...]) -> list[str]:
    """The names of the devices :func:`_model_devices` gives the model (remote ones as
    ``RPC0@host:port``), in its order; llama.cpp's default list is the local accelerators."""
    if params.device:  # one device: a server's (then the only remote one) or a local one
        return [remote[0].label if remote else params.device]
    return [d.label for d in remote] + accelerator_names()


# -- context ---------------------------------------------------------------------------


# (mmap, mlock) -> llama_load_mode
_LOAD_MODES = {(False, False): 0, (True, False): 1, (False, True): 2, (True, True): 3}


def _set(struct: ctypes.Structure, **fields: object) -> None:
    """Set fields of a llama.cpp params struct; a name the binding lacks is an error.

    ctypes would silently add a Python attribute instead, so a renamed field
    upstream must fail loudly here.

    Raises:
        AttributeError: ``struct`` has no field of that name.
    """
    known = {f[0] for f in type(struct)._fields_}
    for name, value in fields.items():
        if name not in known:
            raise AttributeError(f"{type(struct).__name__} has no field {name!r} in this llama-cpp-python")
        setattr(struct, name, value)


def default_threads() -> int:
    """Threads used when a model sets ``threads = 0``: the CPUs this process may use."""
    import os

    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


MAX_STATE_BYTES = 64 << 20
"""The largest sequence state the engine saves to roll back (the bounds contract's 64 MiB)."""


@dataclass(frozen=True, slots=True)
class SeqState:
    """A sequence's state from :meth:`Context.capture`: it held ``n_tokens`` tokens."""

    n_tokens: int
    data: ctypes.Array = field(repr=False)
    size: int
    flags: int


@functools.cache
def staging() -> ModuleType:
    """llama-cpp-python's module of llama.cpp's staging APIs (the MTP head's), imported once."""
    from llama_cpp import llama_cpp_ext

    return llama_cpp_ext


class Context:
    """One llama.cpp context (one sequence) over a :class:`Model`, with a reusable batch.

    Positions are token indices in the sequence; the engine keeps its own list of
    the tokens the KV cache holds (see :mod:`skippy_tui.engine.drafting.sync`).

    ``n_rs_seq``: recurrent-state snapshots to keep per sequence (a recurrent or hybrid
    model whose architecture llama.cpp rolls back itself; elsewhere llama.cpp grants 0).
    ``hidden``: the target also outputs every row's hidden state before its output norm
    (what an MTP head drafts from), handed to :attr:`observer` after each decode.
    """

    def __init__(self, model: Model, params: LoadParams, *, n_rs_seq: int = 0, hidden: bool = False) -> None:
        self.model = model
        self.params = params  # as asked; n_ctx, n_batch and n_ubatch below are what llama.cpp gave
        cp = _L.llama_context_default_params()
        # llama.cpp's own default is 4 threads, which oversubscribes small machines
        threads = params.threads if params.threads > 0 else default_threads()
        _set(
            cp,
            n_ctx=params.n_ctx,
            n_batch=params.n_batch,
            n_ubatch=min(params.n_ubatch, params.n_batch),
            n_seq_max=1,
            n_threads=threads,
            n_threads_batch=params.threads_batch if params.threads_batch > 0 else threads,
            flash_attn_type=FLASH_ATTN[params.flash_attn],
            type_k=KV_CACHE_TYPES[params.cache_type_k],
            type_v=KV_CACHE_TYPES[params.cache_type_v],
            swa_full=params.swa_full,
            no_perf=True,
        )
        if n_rs_seq and model.recurrent_or_hybrid:
            _set(cp, n_rs_seq=n_rs_seq)
        self._configure(cp)
        clear_log()
        self._rpc = model.rpc_servers
        ptr = rpc.call(self._rpc, _L.llama_init_from_model, model.ptr, cp)
        if not ptr:
            raise ModelFileError(
                f"llama.cpp could not create a context for {model.path.name} "
                f"(n_ctx={params.n_ctx}, cache {params.cache_type_k}/{params.cache_type_v}): "
                f"{recent_log() or 'no details'}"
            )
        self.ptr = ptr
        self.mem = _L.llama_get_memory(ptr)
        self.n_ctx: int = _L.llama_n_ctx(ptr)
        self.n_batch: int = _L.llama_n_batch(ptr)
        self.n_ubatch: int = _L.llama_n_ubatch(ptr)
        # what llama.cpp granted: 0 where the architecture cannot roll its state back itself
        self.n_rs_seq: int = int(_L.llama_n_rs_seq(ptr)) if model.recurrent_or_hybrid else 0
        self.rollback: RollbackKind = (
            "kv" if not model.recurrent_or_hybrid else "snapshot" if self.n_rs_seq > 0 else "restore"
        )
        # trailing tokens whose snapshots the last decode left valid (recurrent memory: the
        # last micro-batch's, and only until the next decode or rollback)
        self._room = 0
        self.hidden = hidden
        self.n_embd_hidden = 0
        # called after each decode with (tokens, pos0, hidden rows) when ``hidden``
        self.observer: Callable[[Sequence[int], int, np.ndarray], None] | None = None
        if hidden:
            self.n_embd_hidden = int(_L.llama_model_n_embd_out(model.ptr)) or model.n_embd
            staging().llama_set_embeddings_nextn(ptr, True, False)
        self._make_batch()
        self._abort = False
        self._sigint = False  # Ctrl+C during this decode (see deferred_sigint)
        # [abort flag, NUL], read by the abort callback that ggml calls after every graph node
        self._flag = ctypes.create_string_buffer(2)
        native_cb = _native_abort_callback()
        if native_cb is not None:
            self._abort_cb = native_cb
        else:  # pragma: no cover - no C library to borrow strlen from

            @_L.ggml_abort_callback
            def _abort_cb(_data: ctypes.c_void_p) -> bool:
                return self._flag.raw[0] != 0

            self._abort_cb = _abort_cb
        _L.llama_set_abort_callback(ptr, self._abort_cb, ctypes.cast(self._flag, ctypes.c_void_p))

    @property
    def extras(self) -> dict[str, object]:
        """The keyword arguments this context was made with (a larger window makes its like)."""
        return {"n_rs_seq": self.n_rs_seq, "hidden": self.hidden}

    def _configure(self, cp: object) -> None:
        """Context parameters a subclass adds (an MTP context's type)."""

    def _make_batch(self) -> None:
        self._batch = _L.llama_batch_init(self.n_batch, 0, 1)
        self._tok = np.ctypeslib.as_array(self._batch.token, shape=(self.n_batch,))
        self._wire_batch()

    def _wire_batch(self) -> None:
        """Views of the batch's positions and logits flags; every row in sequence 0."""
        b = self._batch
        self._pos = np.ctypeslib.as_array(b.pos, shape=(self.n_batch,))
        self._logits_flag = np.ctypeslib.as_array(b.logits, shape=(self.n_batch,))
        np.ctypeslib.as_array(b.n_seq_id, shape=(self.n_batch,))[:] = 1
        for i in range(self.n_batch):
            b.seq_id[i][0] = 0

    def _free_batch(self) -> None:
        _L.llama_batch_free(self._batch)

    def _fill_rows(self, pos0: int, n: int) -> None:
        """Batch inputs beside the token ids a subclass adds (an MTP head's hidden states)."""

    def close(self) -> None:
        if getattr(self, "ptr", None):
            ptr, self.ptr = self.ptr, None
            if rpc.lost_reason(self._rpc):
                return  # as Model.close: leave what lives on a lost server alone
            self._free_batch()
            try:
                rpc.call(self._rpc, _L.llama_free, ptr)
            except rpc.RpcLostError:
                pass

    def _decode_chunk(self, tokens: Sequence[int], pos0: int, n_logits: int) -> None:
        n = len(tokens)
        self._tok[:n] = tokens
        self._fill_rows(pos0, n)
        self._pos[:n] = np.arange(pos0, pos0 + n, dtype=np.int32)
        self._logits_flag[:n] = 0
        if n_logits:
            self._logits_flag[n - n_logits : n] = 1
        self._batch.n_tokens = n
        try:
            with deferred_sigint(self._stop_for_sigint):
                rc = rpc.call(self._rpc, _L.llama_decode, self.ptr, self._batch)
                if rc != 0:
                    # drop whatever ubatches were applied, so the cache matches the bookkeeping
                    # (a recurrent state that cannot drop them is emptied: its owner re-fills it)
                    if not rpc.call(self._rpc, _L.llama_memory_seq_rm, self.mem, 0, pos0, -1):
                        rpc.call(self._rpc, _L.llama_memory_clear, self.mem, True)
                    self._room = 0
                    if rc == 1:
                        raise ContextFullError(
                            f"{self.model.path.name}: no KV slot for {n} tokens at position {pos0} (n_ctx {self.n_ctx})"
                        )
                    if rc == 2:
                        raise DecodeError("decode aborted")
                    raise DecodeError(f"llama_decode failed with code {rc}: {recent_log() or 'no details'}")
        finally:
            if self._sigint:
                self._sigint = False
                self._flag[0] = int(self._abort)
        if self.n_rs_seq:
            # llama.cpp keeps the last n_rs_seq + 1 tokens in one micro-batch: the states after
            # each of them but the last are the snapshots a rollback may return to
            self._room = min(n - 1, self.n_rs_seq)
        if self.observer is not None:
            self.observer(tokens, pos0, self.hidden_rows(n))

    def hidden_rows(self, n: int) -> np.ndarray:
        """The last decode's hidden states (``hidden``), ``(n, n_embd)`` float32, a copy."""
        ptr = staging().llama_get_embeddings_nextn(self.ptr)
        if not ptr:
            raise DecodeError(f"{self.model.path.name}: llama.cpp returned no hidden states for the MTP head")
        return np.ctypeslib.as_array(ptr, shape=(n, self.n_embd_hidden)).copy()

    def _stop_for_sigint(self) -> None:
        self._sigint = True
        self._flag[0] = 1

    def decode(self, tokens: Sequence[int], pos0: int, n_logits: int = 1) -> np.ndarray:
        """Decode ``tokens`` at positions ``pos0..``; return logits of the last ``n_logits``.

        ``len(tokens)`` must be at most ``n_batch``.

        Returns:
            float32 array of shape ``(n_logits, n_vocab)`` (a copy).

        Raises:
            ContextFullError: no KV slot (the context window is full).
            DecodeError: any other decode failure; positions ``>= pos0`` are removed.
        """
        if not tokens or len(tokens) > self.n_batch:
            raise DecodeError(f"decode of {len(tokens)} tokens (batch holds 1..{self.n_batch})")
        if pos0 + len(tokens) > self.n_ctx:
            raise ContextFullError(f"{self.model.path.name}: {pos0 + len(tokens)} tokens exceed n_ctx {self.n_ctx}")
        self._decode_chunk(tokens, pos0, n_logits)
        nv = self.model.n_vocab
        if not n_logits:
            return np.empty((0, nv), dtype=np.float32)
        # the rows with logits, in batch order, contiguous: one read, one copy
        # (a remote model's logits wait on its server: never through the GIL-holding reader)
        read = rpc.call(self._rpc, _L.llama_get_logits, self.ptr) if self._rpc else _logits_reader()(self.ptr)
        rows = ctypes.cast(read, ctypes.POINTER(ctypes.c_float))
        return np.ctypeslib.as_array(rows, shape=(n_logits, nv)).copy()

    def prefill(self, tokens: Sequence[int], pos0: int, cancelled: Callable[[], bool] | None = None) -> None:
        """Decode ``tokens`` at ``pos0..`` in ``n_batch`` chunks, no logits.

        Raises:
            ContextFullError, DecodeError: as :meth:`decode`; on failure or
                cancel, positions ``>= pos0`` are removed.
        """
        if pos0 + len(tokens) > self.n_ctx:
            raise ContextFullError(f"{self.model.path.name}: {pos0 + len(tokens)} tokens exceed n_ctx {self.n_ctx}")
        for i in range(0, len(tokens), self.n_batch):
            if cancelled is not None and cancelled():
                self.remove_from(pos0)
                raise DecodeError("prefill cancelled")
            try:
                self._decode_chunk(tokens[i : i + self.n_batch], pos0 + i, 0)
            except SkippyError:
                self.remove_from(pos0)
                raise

    def remove_from(self, pos: int) -> bool:
        """Drop positions ``>= pos``; False when the memory cannot, and then nothing changed.

        A recurrent state drops a tail only back to a snapshot of the last decode
        (``rollback`` ``snapshot``, at most ``n_rs_seq`` tokens, once per decode): llama.cpp
        itself would also accept a rollback into an older micro-batch, whose snapshots
        no longer hold that sequence's states, so that is refused here.
        """
        if self.rollback != "kv" and pos > 0:
            drop = self.pos_max() + 1 - pos
            if drop <= 0:
                return True
            if drop > self._room:
                return False
        self._room = 0
        return bool(rpc.call(self._rpc, _L.llama_memory_seq_rm, self.mem, 0, pos, -1))

    def capture(self, full: bool = False) -> SeqState:
        """The sequence's state now, to :meth:`restore` later.

        Call it at a quiescent boundary (no proposal decoded after what the caller's
        bookkeeping holds). A recurrent or hybrid model's capture is its recurrent state
        alone (``full`` False: a fixed size, whatever the context's length; its KV cache
        drops a tail by itself); ``full`` takes the KV cache too.

        Raises:
            StateError: the state exceeds :data:`MAX_STATE_BYTES`, or llama.cpp wrote
                another size than it announced.
        """
        flags = _L.LLAMA_STATE_SEQ_FLAGS_NONE if full else _L.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        size = int(rpc.call(self._rpc, _L.llama_state_seq_get_size_ext, self.ptr, 0, flags))
        if size > MAX_STATE_BYTES:
            raise StateError(
                f"{self.model.path.name}: its sequence state is {size / 2**20:.1f} MiB, over the "
                f"{MAX_STATE_BYTES >> 20} MiB bound for a saved state"
            )
        buf = (ctypes.c_uint8 * max(size, 1))()
        got = int(rpc.call(self._rpc, _L.llama_state_seq_get_data_ext, self.ptr, buf, size, 0, flags))
        if got != size:
            raise StateError(f"{self.model.path.name}: llama.cpp wrote {got} bytes of a {size}-byte state")
        return SeqState(self.pos_max() + 1, buf, size, flags)

    def restore(self, state: SeqState) -> None:
        """Return to a :meth:`capture`: the state it saved, and the KV cache cut to its tokens.

        Raises:
            StateError: llama.cpp refused the state (nothing it held is to be trusted:
                the sequence is emptied).
        """
        self._room = 0
        read = int(rpc.call(self._rpc, _L.llama_state_seq_set_data_ext, self.ptr, state.data, state.size, 0,
                            state.flags))  # fmt: skip
        if read != state.size or not rpc.call(self._rpc, _L.llama_memory_seq_rm, self.mem, 0, state.n_tokens, -1):
            self.clear()
            raise StateError(f"{self.model.path.name}: llama.cpp could not restore a saved state")

    def warm_up(self) -> None:
        """Decode one token and forget it.

        The first decode of a freshly mapped model pages its weights in and
        allocates the backend's buffers (seconds, not milliseconds); done at
        load, the first timed step of a reply costs what later ones do, and
        ``auto`` does not mistake it for the model's speed.

        Raises:
            DecodeError: the decode failed.
        """
        token = self.model.bos if self.model.bos >= 0 else 0
        try:
            self.decode([token], 0, 1)
        finally:
            self.clear()

    def clear(self) -> None:
        """Empty the KV cache."""
        self._room = 0
        rpc.call(self._rpc, _L.llama_memory_clear, self.mem, True)

    def pos_min(self) -> int:
        """Smallest position still cached (-1 when empty); > 0 once SWA evicted old cells."""
        return int(_L.llama_memory_seq_pos_min(self.mem, 0))

    def pos_max(self) -> int:
        """Largest cached position, -1 when empty."""
        return int(_L.llama_memory_seq_pos_max(self.mem, 0))

    def set_abort(self, flag: bool) -> None:
        """Make a running decode return early (used on quit)."""
        self._abort = flag
        self._flag[0] = int(flag)
