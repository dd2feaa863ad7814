"""Can this draft propose tokens for this target? Decided from headers alone.

Speculation exchanges token *ids*, so both models must read ids the same way.
The rules follow llama.cpp's speculative example: the same vocab kind, sizes
within 128 (padding), the same BOS/EOS, and the same text for every token id
both vocabularies hold. An MTP drafter file (MTP blocks alone) reads the
target's hidden states as well, so it drafts only for its own architecture.
"""

from __future__ import annotations

from ..errors import IncompatibleModelsError
from .gguf_info import ModelInfo

MAX_VOCAB_SIZE_DIFFERENCE = 128


def incompatibility(target: ModelInfo, draft: ModelInfo) -> str | None:
    """Why the pair cannot speculate, as one sentence; ``None`` when it can."""
    if target.vocab_model != draft.vocab_model:
        t, d = target, draft
        return f"vocab type differs: target {t.label} is {t.vocab_kind}, draft {d.label} is {d.vocab_kind}"
    diff = abs(target.vocab_size - draft.vocab_size)
    if diff > MAX_VOCAB_SIZE_DIFFERENCE:
        return (
            f"vocab size differs by {diff} tokens (more than {MAX_VOCAB_SIZE_DIFFERENCE}): "
            f"target has {target.vocab_size}, draft has {draft.vocab_size}"
        )
    for label, t, d in (
        ("BOS id", target.bos_id, draft.bos_id),
        ("EOS id", target.eos_id, draft.eos_id),
        ("add_bos", target.add_bos, draft.add_bos),
    ):
        if t != d:
            return f"special tokens differ: target {label} is {t}, draft {label} is {d}"
    for i, (a, b) in enumerate(zip(target.tokens, draft.tokens)):
        if a != b:
            return f"token {i} differs: target has {a!r}, draft has {b!r}"
    if draft.mtp_only and draft.architecture != target.architecture:
        return (
            f"the MTP drafter {draft.label} reads the hidden states of {draft.architecture} models, "
            f"and the target {target.label} is {target.architecture}"
        )
    return None


def check_compatible(target: ModelInfo, draft: ModelInfo) -> None:
    """Refuse an incompatible pair before any weights load.

    Raises:
        IncompatibleModelsError: naming what differs and both files.
    """
    why = incompatibility(target, draft)
    if why is not None:
        raise IncompatibleModelsError(
            f"draft {draft.path.name} cannot speculate for target {target.path.name}: {why}. "
            "Choose a draft from the same model family (same tokenizer), or run without a draft."
        )
