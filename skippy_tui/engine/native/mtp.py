"""The MTP head's context: a llama.cpp context of type MTP over a model's NextN block(s).

A multi-token-prediction head drafts the token after next from two inputs per row:
the token, and the target's hidden state at the position before it (for the first
row of a proposal) or the head's own hidden state at that position (for the rows it
drafts itself). llama.cpp runs the head as a context of type
``LLAMA_CONTEXT_TYPE_MTP`` whose KV cache holds only the NextN layer(s), over the
target model (heads in the target's file) or over a separate drafter file
(``load_mtp``). Rows reach it as a ``llama_batch`` carrying both token ids and
embeddings (the hidden states).

Only this module and :mod:`.model` call llama.cpp for it; the bookkeeping is the
drafter's (:mod:`..drafting.mtp`).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import numpy as np

from ..errors import DecodeError
from .backend import llama_cpp as _L
from .model import Context, LoadParams, Model, staging

HiddenSource = Callable[[int, int], np.ndarray]
"""``rows(a, b)``: the target's hidden states at positions ``a..b-1`` (position -1: zeros)."""


class MtpContext(Context):
    """An MTP draft context. Each decoded row takes the target's hidden state at the
    position before it from ``source``, unless :meth:`decode_drafted` hands one in."""

    def __init__(self, model: Model, params: LoadParams, source: HiddenSource, n_embd: int) -> None:
        self.source = source
        self.n_embd_in = n_embd
        self._given: np.ndarray | None = None
        super().__init__(model, params)
        self.rollback = "kv"  # the head's own memory is attention: any tail drops
        self.n_embd_hidden = n_embd
        staging().llama_set_embeddings_nextn(self.ptr, True, True)  # the head's state, for rows with logits

    @property
    def extras(self) -> dict[str, object]:
        return {"source": self.source, "n_embd": self.n_embd_in}

    def _configure(self, cp: object) -> None:
        cp.ctx_type = _L.LLAMA_CONTEXT_TYPE_MTP  # type: ignore[attr-defined]

    def _make_batch(self) -> None:
        # embeddings and token ids together: llama_batch_init allocates one or the other
        self._batch = _L.llama_batch_init(self.n_batch, self.n_embd_in, 1)
        b = self._batch
        self._tok_buf = (_L.llama_token * self.n_batch)()
        b.token = self._tok_buf
        self._tok = np.ctypeslib.as_array(self._tok_buf, shape=(self.n_batch,))
        self._embd = np.ctypeslib.as_array(b.embd, shape=(self.n_batch, self.n_embd_in))
        self._wire_batch()

    def _free_batch(self) -> None:
        self._batch.token = ctypes.POINTER(_L.llama_token)()  # ours, not llama_batch_free's
        _L.llama_batch_free(self._batch)

    def _fill_rows(self, pos0: int, n: int) -> None:
        if self._given is not None:
            self._embd[:n] = self._given
        else:
            self._embd[:n] = self.source(pos0 - 1, pos0 - 1 + n)

    def decode_drafted(self, token: int, pos: int, hidden: np.ndarray) -> np.ndarray:
        """Decode a token the head drafted itself, with the head's own hidden state ``hidden``
        from the row before it; the logits row (1, n_vocab)."""
        self._given = hidden.reshape(1, -1)
        try:
            return self.decode([token], pos, 1)
        finally:
            self._given = None

    def head_state(self) -> np.ndarray:
        """The head's hidden state at the last decode's logits row, ``(n_embd,)``: what it
        drafts the following token from."""
        ptr = staging().llama_get_embeddings_nextn(self.ptr)
        if not ptr:
            raise DecodeError(f"{self.model.path.name}: the MTP head returned no hidden state")
        return np.ctypeslib.as_array(ptr, shape=(self.n_embd_in,)).copy()
