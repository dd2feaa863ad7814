"""Chat messages → prompt tokens, with the model's own chat template.

The template comes from the GGUF (``tokenizer.chat_template``) and is rendered by
llama-cpp-python's ``Jinja2ChatFormatter``. A model without one falls back to
llama.cpp's built-in template for its architecture (``llama_chat_apply_template``),
and a configured template (a built-in name such as ``chatml``, or Jinja text)
overrides both. Tokens get exactly one BOS when the model wants one.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import SkippyError

if TYPE_CHECKING:
    from .native import Model

Message = dict[str, str]  # {"role": "system"|"user"|"assistant", "content": str}

# llama.cpp built-in template names, by GGUF architecture, for models without one.
_BUILTIN_BY_ARCH = {"gemma": "gemma", "gemma2": "gemma", "gemma3": "gemma", "gemma3n": "gemma"}
_BUILTIN_NAMES = (
    "chatml", "llama2", "llama3", "mistral-v7", "phi3", "zephyr", "gemma", "vicuna",
    "deepseek", "deepseek3", "command-r", "granite", "falcon3", "gigachat", "megrez",
)  # fmt: skip


@dataclass(frozen=True)
class ChatTemplate:
    """How one model renders a conversation.

    ``jinja`` is set for a Jinja template, ``builtin`` for a llama.cpp built-in.
    """

    jinja: str | None
    builtin: str | None
    bos_text: str
    eos_text: str

    @property
    def label(self) -> str:
        return f"builtin:{self.builtin}" if self.builtin else "gguf"

    def render(self, messages: Sequence[Message], add_generation_prompt: bool = True) -> str:
        """The prompt text for ``messages``.

        Raises:
            SkippyError: the template failed to render (it names the cause).
        """
        if self.jinja is None:
            return _apply_builtin(self.builtin or "chatml", messages, add_generation_prompt)
        try:
            return self._render_jinja(messages, add_generation_prompt)
        except SkippyError:
            folded = fold_system_changes(messages)
            if list(folded) == list(messages):
                raise
            # a system message mid-chat (the system prompt changed there) that the template
            # refuses ("roles must alternate"): said to the model with the next user message
            return self._render_jinja(folded, add_generation_prompt)

    def _render_jinja(self, messages: Sequence[Message], add_generation_prompt: bool) -> str:
        """Raises: SkippyError: the template failed to render (it names the cause)."""
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        try:
            fmt = Jinja2ChatFormatter(
                template=self.jinja or "",
                eos_token=self.eos_text,
                bos_token=self.bos_text,
                add_generation_prompt=add_generation_prompt,
            )
            return fmt(messages=[dict(m) for m in messages]).prompt
        except Exception as e:  # jinja raises many types; all mean "bad template/input"
            raise SkippyError(f"chat template failed to render: {e}") from e


def fold_system_changes(messages: Sequence[Message]) -> list[Message]:
    """``messages`` with each system message after the first message moved into the next user
    message, ahead of its text (as llama.cpp's built-in Gemma template does with every system
    message): for a template that takes a system message only at the start. One with no user
    message after it stays where it is."""
    out: list[Message] = []
    held: list[str] = []
    for i, m in enumerate(messages):
        if m["role"] == "system" and i > 0 and any(later["role"] == "user" for later in messages[i + 1 :]):
            if m["content"]:
                held.append(m["content"])
            continue
        if m["role"] == "user" and held:
            m = {**m, "content": "\n\n".join([*held, m["content"]])}
            held = []
        out.append(dict(m))
    return out


def _apply_builtin(name: str, messages: Sequence[Message], add_ass: bool) -> str:
    import llama_cpp as L

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


def template_for(model: Model, gguf_template: str | None, architecture: str, override: str | None) -> ChatTemplate:
    """Pick the template: configured override, else the GGUF's, else a built-in.

    Raises:
        SkippyError: an override that is neither a built-in name nor a Jinja
            template that renders a one-message chat.
    """
    bos = model.token_text(model.bos) if model.bos >= 0 else ""
    eos = model.token_text(model.eos) if model.eos >= 0 else ""
    if override:
        if override in _BUILTIN_NAMES:
            return ChatTemplate(None, override, bos, eos)
        if "{{" not in override and "{%" not in override:
            raise SkippyError(
                f"chat_template {override!r} is neither a built-in name ({', '.join(sorted(_BUILTIN_NAMES))}) "
                "nor a Jinja template"
            )
        template = ChatTemplate(override, None, bos, eos)
        template.render([{"role": "user", "content": "hi"}])  # fail at load, not at the first message
        return template
    if gguf_template:
        return ChatTemplate(gguf_template, None, bos, eos)
    return ChatTemplate(None, _BUILTIN_BY_ARCH.get(architecture, "chatml"), bos, eos)


def prompt_tokens(model: Model, template: ChatTemplate, messages: Sequence[Message]) -> list[int]:
    """Render and tokenize ``messages``, ending with the assistant's turn opener.

    Special-token text in the rendered template (``<|im_start|>``) becomes the
    special token; exactly one BOS leads when the model wants one.
    """
    text = template.render(messages)
    toks = model.tokenize(text, add_special=False, parse_special=True)
    if model.add_bos and model.bos >= 0:
        while len(toks) > 1 and toks[0] == model.bos and toks[1] == model.bos:
            toks.pop(0)
        if not toks or toks[0] != model.bos:
            toks.insert(0, model.bos)
    return toks
