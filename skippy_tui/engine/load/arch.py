"""What an architecture name (``general.architecture``) says about a model's memory and heads.

Read from the GGUF header alone (the model library and the draft finder show it
before anything loads); the loaded model's own flags (``llama_model_is_recurrent``
/ ``_is_hybrid``, ``llama_n_rs_seq`` of a context) decide at run time. The sets
follow the pinned llama.cpp's ``src/llama-arch.cpp``
(``llm_arch_is_recurrent``, ``llm_arch_is_hybrid``, ``llm_arch_supports_rs_rollback``)
and the MTP graphs in its ``src/models/``; ``tests/engine/test_hybrid.py`` checks them
against llama.cpp on models written by ``tools/tiny_gguf.py``.

How a speculating engine drops rejected tokens from such a model
(:func:`rollback_kind`):

* ``kv`` — attention only: the KV cache drops any tail (``llama_memory_seq_rm``);
* ``snapshot`` — recurrent state with per-token snapshots (``n_rs_seq``): llama.cpp
  rolls back up to ``n_rs_seq`` tokens of the last micro-batch itself;
* ``restore`` — any other recurrent state: the engine saves the sequence's state at
  a quiescent boundary (nothing proposed yet) and restores it, then decodes the
  accepted tokens again.
"""

from __future__ import annotations

from typing import Literal

RECURRENT = frozenset({"mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7"})
"""Architectures whose whole memory is a recurrent state."""

HYBRID = frozenset({
    "jamba", "falcon-h1", "plamo2", "granitehybrid", "lfm2", "lfm2moe", "nemotron_h", "nemotron_h_moe",
    "qwen3next", "kimi-linear", "bailingmoe3", "kimi-k3", "glm5-next", "qwen35", "qwen35moe", "qwen4exp",
    "deepseek4", "minimax-01",
})  # fmt: skip
"""Architectures with attention layers and recurrent ones."""

SNAPSHOT_ROLLBACK = frozenset({
    "kimi-k3", "qwen35", "qwen35moe", "qwen4exp", "deepseek4", "glm5-next", "nemotron_h", "nemotron_h_moe",
    "lfm2", "lfm2moe", "bailingmoe3",
})  # fmt: skip
"""Recurrent or hybrid architectures whose state llama.cpp rolls back itself (``n_rs_seq``)."""

MTP_GRAPHS = frozenset({
    "bailingmoe3", "cohere2moe", "deepseek2", "deepseek32", "deepseek4", "glm-dsa", "glm4moe", "glm5-next",
    "hy_v3", "mimo2", "nemotron_h_moe", "qwen35", "qwen35moe", "qwen3next", "step35",
})  # fmt: skip
"""Architectures with a multi-token-prediction (NextN) draft graph in the pinned llama.cpp."""

MTP_CHAINED = frozenset({"hy_v3", "mimo2", "step35"})
"""MTP architectures whose graph runs any of several NextN blocks (one per draft position);
the others run exactly one block, and llama.cpp aborts on a file with more."""

SHARED_KV_DRAFTERS = frozenset({"gemma4-assistant", "eagle3", "dflash"})
"""Drafter architectures that read the target's own KV cache or hidden layers through
``ctx_other`` (llama.cpp's ``is_mem_shared`` path): not run by this engine yet."""

RollbackKind = Literal["kv", "snapshot", "restore"]


def memory_kind(arch: str) -> Literal["attention", "hybrid", "recurrent"]:
    """``attention``, ``hybrid`` (attention and recurrent layers) or ``recurrent``."""
    if arch in RECURRENT:
        return "recurrent"
    return "hybrid" if arch in HYBRID else "attention"


def rollback_kind(arch: str) -> RollbackKind:
    """How rejected tokens leave a model of this architecture (see the module doc)."""
    if arch not in RECURRENT and arch not in HYBRID:
        return "kv"
    return "snapshot" if arch in SNAPSHOT_ROLLBACK else "restore"


def mtp_heads_usable(arch: str, n_nextn: int) -> str:
    """Why ``n_nextn`` MTP blocks of ``arch`` cannot draft with the pinned llama.cpp, or ``""``."""
    if n_nextn <= 0:
        return "the file has no MTP (NextN) layers"
    if arch not in MTP_GRAPHS:
        return f"llama.cpp has no MTP draft graph for the {arch} architecture"
    if n_nextn > 1 and arch not in MTP_CHAINED:
        return f"llama.cpp runs one MTP block of a {arch} model, and this file has {n_nextn}"
    return ""
