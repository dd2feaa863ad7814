"""The context window: how many KV cells to allocate, and moving a cache into a larger one.

With flash attention off (the exact profile) llama.cpp stores V transposed: each of
a layer's channels is one row as long as the window, so every decode reads rows
``n_ctx`` cells apart, and a window larger than the chat needs slows every step
(SmolLM2 F32, plain decoding at ~50 tokens of context: 768 cells 1.09x and 2048
cells 1.04x the speed of 4096; README, Performance). So a window starts at what
the chat needs and grows, by copying the sequence's KV cells into a new context
(bit for bit: the replies do not change), up to the configured ``n_ctx``
(:func:`grows` says where; elsewhere the window is allocated whole at load).
"""

from __future__ import annotations

import ctypes
import dataclasses
from dataclasses import dataclass

from ..errors import ModelFileError
from . import rpc
from .backend import llama_cpp as _L
from .devices import backend_name
from .model import Context, LoadParams

PAD = 256
"""llama.cpp pads a KV cache to a multiple of this many cells."""
MIN = 512
"""The smallest window chosen: it holds the invariance probe's windows (the deep one too)."""
INITIAL = 768
"""The window a chat starts with (its first reply's length is not known at load): a
first message of up to 256 tokens with the default ``max_tokens`` (512) fits."""


@dataclass(frozen=True, slots=True)
class PromptSize:
    """A conversation as the engine would prompt the target with it: ``n_prompt`` tokens
    (template included), ``n_message`` of them its last message's text, in an
    ``n_ctx``-token window."""

    n_prompt: int
    n_message: int
    n_ctx: int

    @property
    def fits(self) -> bool:
        """Whether a reply can start: the prompt holds no more tokens than the window (as
        :meth:`.Speculator.generate` checks); a longer one fails with ``context_full``."""
        return self.n_prompt <= self.n_ctx


def grows(params: LoadParams) -> bool:
    """Whether a chat's window starts at :data:`INITIAL` and grows (else it is allocated
    whole at load): where V is stored transposed (flash attention off) in host memory
    (no GPU backend or no layers on it, no RPC servers). There a smaller window is
    faster and a move is a copy in RAM; in device memory a move would briefly hold
    both windows, which a card sized for the full one may not have."""
    on_cpu = params.n_gpu_layers == 0 or (params.device or "").upper() == "CPU" or backend_name() == "CPU"
    return params.flash_attn == "off" and on_cpu and not params.rpc


def padded(n_ctx: int) -> int:
    """``n_ctx`` as llama.cpp allocates it (tokens)."""
    return -(-n_ctx // PAD) * PAD


def fitted(need: int, n_ctx: int, n_batch: int, speculates: bool = True) -> int:
    """The window in tokens for ``need`` tokens (prompt plus reply cap): ``need``
    padded, at most ``n_ctx`` (configured) and, where something may speculate, at
    least :data:`MIN` and ``n_batch`` (so the probe, its cache entry and the verify
    chunks are the configured window's). Plain decoding needs neither (llama.cpp
    then caps the batch at the window), and every cell more slows its steps."""
    return min(n_ctx, max(padded(need), MIN, n_batch) if speculates else padded(need))


def grown(ctx: Context, n_ctx: int) -> Context:
    """A new context like ``ctx`` with an ``n_ctx`` window, holding ``ctx``'s sequence.

    The KV cells are copied (``llama_state_seq_get_data`` / ``set_data``), so the
    next decode's logits are bit-identical to ``ctx``'s. ``ctx`` is left as it was;
    the caller closes it. Costs a context creation, a warm-up decode and a copy of
    the cells (a few MB for a small model's few hundred tokens: tens of ms).

    Raises:
        ModelFileError: llama.cpp could not create the context (e.g. out of memory)
            or refused the copy; nothing is left allocated.
        DecodeError: the warm-up decode failed.
    """
    new = type(ctx)(ctx.model, dataclasses.replace(ctx.params, n_ctx=n_ctx), **ctx.extras)  # type: ignore[arg-type]
    try:
        new.warm_up()  # before the copy: the warm-up clears the cache
        if ctx.pos_max() < 0:
            return new  # nothing cached
        servers = ctx.model.rpc_servers
        size = rpc.call(servers, _L.llama_state_seq_get_size, ctx.ptr, 0)
        buf = (ctypes.c_uint8 * size)()
        got = rpc.call(servers, _L.llama_state_seq_get_data, ctx.ptr, buf, size, 0)
        if not got or rpc.call(servers, _L.llama_state_seq_set_data, new.ptr, buf, got, 0) != got:
            raise ModelFileError(
                f"llama.cpp could not move {ctx.model.path.name}'s KV cache into a {n_ctx}-token window"
            )
    except BaseException:
        new.close()
        raise
    return new
