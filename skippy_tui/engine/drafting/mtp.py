"""Drafting with the target's own multi-token-prediction (MTP) heads.

A target trained with NextN blocks (Qwen3.5, GLM-4.5 and later, DeepSeek, MiMo)
drafts without a second model: its MTP head predicts the token after next from the
target's hidden state at a position and the token that follows it. The head keeps a
KV cache of its own layer(s); its entry at position ``q`` is computed from token
``x_q`` and the target's hidden state ``h_{q-1}`` (zeros before position 0).
The heads sit in the target's file (*integrated*) or in a separate drafter file
attached to it (*external*: a sidecar holding only the NextN blocks).

So the head follows the target: every target decode hands its rows' hidden states
to a :class:`HiddenLog` (the target context's observer), and when the target's
cache drops a tail (a rejection, an edit) the head's cache and the log drop it too
(:meth:`MtpDrafter.truncated`). The head's sync plan is then always ``synced`` or
an ``extend`` over what the target decoded since, which the first draft call folds
into its batch like a draft model's (:data:`.model.FOLD_MAX`); a long catch-up
(a prompt) is a prefill of its own.

A proposal's first call decodes the catch-up and the last committed token with the
target's hidden states; each further call decodes the token the head just drafted
with the head's *own* hidden state (what it predicted from), as llama.cpp's
``draft-mtp`` does. Those rows are the head's guesses, not the target's, so they
never join the synced prefix: they are dropped from the head's cache after the
proposal. The head's logits are the draft's distribution ``q``: the verification
rules (greedy, coupled, rejection sampling) treat them as a draft model's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ..events import SyncInfo
from ..native.model import Context, Model
from ..native.mtp import MtpContext
from ..sampling.verify import DraftRule
from .model import FOLD_MAX, ModelDrafter, Proposal

LOG_FLUSH_ROWS = 1024
"""Hidden rows the log holds for the head before the head decodes them (a long prompt
would otherwise be held whole: rows are ``n_embd`` floats each)."""


class HiddenLog:
    """The target's hidden state and input token per position, for the rows the head has
    yet to decode (and the one before them, which its next entry reads)."""

    def __init__(self, n_embd: int) -> None:
        self.n_embd = n_embd
        self.start = 0  # position of row 0
        self._rows = np.zeros((64, n_embd), dtype=np.float32)
        self._tokens: list[int] = []
        self.on_full: Callable[[], None] | None = None  # called when more than LOG_FLUSH_ROWS wait

    @property
    def end(self) -> int:
        """One past the last position held."""
        return self.start + len(self._tokens)

    def write(self, tokens: Sequence[int], pos0: int, rows: np.ndarray) -> None:
        """A target decode of ``tokens`` at ``pos0..`` gave ``rows``; what the log held from
        ``pos0`` on is replaced (that decode overwrote those positions)."""
        if not self.start <= pos0 <= self.end:
            self.start, self._tokens = pos0, []  # not contiguous: what came before is no use
        keep = pos0 - self.start
        need = keep + len(tokens)
        if need > self._rows.shape[0]:
            grown = np.zeros((max(need, 2 * self._rows.shape[0]), self.n_embd), dtype=np.float32)
            grown[:keep] = self._rows[:keep]
            self._rows = grown
        self._rows[keep:need] = rows
        del self._tokens[keep:]
        self._tokens.extend(tokens)
        if len(self._tokens) > LOG_FLUSH_ROWS and self.on_full is not None:
            self.on_full()

    def truncate(self, end: int) -> None:
        """Forget positions ``>= end``."""
        del self._tokens[max(end - self.start, 0) :]

    def forget_before(self, pos: int) -> None:
        """Rows before ``pos`` are no longer needed."""
        drop = min(max(pos - self.start, 0), len(self._tokens))
        if drop:
            n = len(self._tokens) - drop
            self._rows[:n] = self._rows[drop : drop + n]
            del self._tokens[:drop]
            self.start += drop

    def holds(self, a: int, b: int) -> bool:
        """Whether rows ``a..b-1`` are held (position -1 always is: zeros)."""
        return b <= a or (max(a, 0) >= self.start and b <= self.end)

    def rows(self, a: int, b: int) -> np.ndarray:
        """Rows of positions ``a..b-1``; position -1 (before the first token) is zeros.

        Raises:
            KeyError: a row is not held.
        """
        if not self.holds(a, b):
            raise KeyError(f"hidden rows {a}..{b - 1} are not held ({self.start}..{self.end - 1} are)")
        lead = np.zeros((max(-a, 0), self.n_embd), dtype=np.float32)
        a0 = max(a, 0)
        body = self._rows[a0 - self.start : b - self.start]
        return np.concatenate([lead, body]) if lead.shape[0] else body.copy()

    def tokens(self, a: int, b: int) -> list[int]:
        """Tokens decoded at positions ``a..b-1`` (held ones)."""
        return self._tokens[a - self.start : b - self.start]

    def clear(self) -> None:
        self.start, self._tokens = 0, []


class MtpDrafter(ModelDrafter):
    """Proposals from an MTP head that follows the target's cache (see the module doc).

    ``model``: the model whose NextN block(s) draft (the target itself, or an external
    drafter file); ``ctx``: its :class:`MtpContext`; ``target``: the target's context,
    whose hidden states the head reads (its observer is set here).
    """

    source = "mtp"

    def __init__(self, model: Model, ctx: MtpContext, target: Context, log: HiddenLog, n_ctx_max: int | None = None):
        super().__init__(model, ctx, n_ctx_max)
        self.external = model is not target.model
        self.log = log
        self.n_heads = max(model.n_nextn, 1)
        self.vocab_limit = min(model.n_vocab, target.model.n_vocab)
        self._state = np.zeros(log.n_embd, dtype=np.float32)  # the head's hidden state at its last row
        self.attach(target)
        log.on_full = self._catch_up

    def attach(self, target: Context) -> None:
        """Read the hidden states of ``target``'s decodes (a grown window's new context too)."""
        target.observer = self._observe

    def _observe(self, tokens: Sequence[int], pos0: int, rows: np.ndarray) -> None:
        self.log.write(tokens, pos0, rows)

    def truncated(self, keep: int) -> None:
        """The target's cache dropped positions ``>= keep``: so do the log and the head."""
        self.log.truncate(keep)
        if keep == 0:
            self.cache.reset()
        elif len(self.cache.state) > keep:
            self.cache.drop_after(keep)

    def _catch_up(self) -> None:
        """Decode what the log holds into the head's cache (keeps the log small)."""
        end = self.log.end - 1  # the last row's entry needs the token after it: not known yet
        have = len(self.cache.state)
        if end > have and self.log.holds(have - 1, end - 1):
            tokens = self.log.tokens(have, end)
            self.cache.ctx.prefill(tokens, have)
            self.cache.state.record_extend(tokens)
            self.log.forget_before(end - 1)

    def sync(self, context: Sequence[int], epoch: object | None = None) -> SyncInfo:
        """Bring the head's cache to ``context[:-1]`` from the log (an extend of at most
        :data:`FOLD_MAX` tokens is left to the proposal's first call)."""
        info = super().sync(context, epoch)
        self.log.forget_before(len(self.cache.state) - 1)
        return info

    def room(self, context: Sequence[int]) -> int:
        have = len(self.cache.state)
        if not self.log.holds(have - 1, len(context) - 1):
            return 0  # the head missed hidden states it needs (a model switch mid-chat): it waits for a new chat
        return super().room(context)

    def propose(
        self,
        context: Sequence[int],
        k: int,
        p_min: float,
        rule: DraftRule | None = None,
        stop: Callable[[Sequence[int]], bool] | None = None,
    ) -> Proposal:
        """As :meth:`ModelDrafter.propose`; rows past the first call carry the head's own
        hidden state and leave the head's cache afterwards."""
        try:
            return super().propose(context, k, p_min, rule, stop)
        finally:
            self.cache.ctx.remove_from(len(self.cache.state))  # the head's own guesses

    def _decode(self, step: int, tokens: list[int], pos: int) -> np.ndarray:
        ctx: MtpContext = self.cache.ctx  # type: ignore[assignment]
        # the first call reads the target's hidden states from the log, later ones the head's own
        row = ctx.decode(tokens, pos, 1) if step == 0 else ctx.decode_drafted(tokens[-1], pos, self._state)
        self._state = ctx.head_state()
        return row[0]

    def _record(self, step: int, token: int) -> None:
        if step == 0:  # the first call's row read the target's hidden state: a real entry
            self.cache.state.record_proposal_step(token)


__all__ = ["FOLD_MAX", "HiddenLog", "MtpDrafter"]
