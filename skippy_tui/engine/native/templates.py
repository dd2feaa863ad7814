"""Chat templates rendered by llama.cpp: its built-in ones (a C call) and a GGUF's Jinja
template (llama-cpp-python's formatter). :mod:`..chat` picks which and feeds them."""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence

import llama_cpp as L
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from ..errors import SkippyError


def render_jinja(
    template: str, eos: str, bos: str, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool
) -> str:
    """``messages`` rendered by a Jinja chat template.

    Raises:
        SkippyError: the template failed to render (it names the cause).
    """
    try:
        fmt = Jinja2ChatFormatter(
            template=template, eos_token=eos, bos_token=bos, add_generation_prompt=add_generation_prompt
        )
        return fmt(messages=[dict(m) for m in messages]).prompt
    except Exception as e:  # jinja raises many types; all mean "bad template/input"
        raise SkippyError(f"chat template failed to render: {e}") from e


def apply_builtin(name: str, messages: Sequence[Mapping[str, str]], add_ass: bool) -> str:
    """``messages`` rendered by llama.cpp's built-in template ``name`` (``chatml``, ``gemma``…).

    Raises:
        SkippyError: llama.cpp has no such template.
    """

    msgs = [dict(m) for m in messages]
    arr = (L.llama_chat_message * len(msgs))()
    keep = []
    for i, m in enumerate(msgs):
        role, content = m["role"].encode(), m["content"].encode()
        keep += [role, content]
        arr[i].role, arr[i].content = role, content
    cap = sum(len(m["content"]) for m in msgs) * 2 + 512
    buf = ctypes.create_string_buffer(cap)
    n = L.llama_chat_apply_template(name.encode(), arr, len(msgs), add_ass, buf, cap)
    if n > cap:
        buf = ctypes.create_string_buffer(n)
        n = L.llama_chat_apply_template(name.encode(), arr, len(msgs), add_ass, buf, n)
    if n < 0:
        raise SkippyError(f"llama.cpp has no built-in chat template named {name!r}")
    return buf.raw[:n].decode("utf-8", "replace")
