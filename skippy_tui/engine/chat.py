"""Chat messages → prompt tokens, with the model's own chat template.

The template comes from the GGUF (``tokenizer.chat_template``) and is rendered by
llama-cpp-python's ``Jinja2ChatFormatter``. A model without one falls back to
llama.cpp's built-in template for its architecture (``llama_chat_apply_template``),
and a configured template (a built-in name such as ``chatml``, or Jinja text)
overrides both. Tokens get exactly one BOS when the model wants one.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .errors import SkippyError
from .native.templates import apply_builtin, render_jinja

if TYPE_CHECKING:
    from .native.model import Model

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
            return apply_builtin(self.builtin or "chatml", messages, add_generation_prompt)
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
        return render_jinja(self.jinja or "", self.eos_text, self.bos_text, messages, add_generation_prompt)


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

    Only the template's own special-token text (``<|im_start|>``) becomes a special
    token: the messages' text (system, user, earlier replies) is tokenized as text,
    so a message holding ``<|im_end|>`` cannot end its turn and forge another
    (llama.cpp #24382 is the same fault upstream). Exactly one BOS leads when the
    model wants one.

    The whole rendered text is tokenized as llama.cpp would (``parse_special``);
    only where that yields special tokens the template's own text does not hold
    are the pieces tokenized apart (:func:`_tokenize_pieces`). So an ordinary
    conversation's tokens are those of the rendered text, unchanged.

    Raises:
        SkippyError: the template failed to render, or it rewrites a message that
            holds special-token text so that its text cannot be told from the template's.
    """
    text = template.render(messages)
    tokens = model.tokenize(text, add_special=False, parse_special=True)
    pieces = _pieces(template, messages, text)
    if pieces is None:
        _refuse_special_text(model, messages)
    elif _markers(model, tokens) != _template_markers(model, pieces):  # a message's text made some
        tokens = _tokenize_pieces(model, pieces)
    return _one_bos(model, tokens)


@dataclass(frozen=True)
class _Piece:
    """A stretch of the rendered prompt: the template's own text (``markup``) or a message's."""

    text: str
    markup: bool


def _placeholder_mark(messages: Sequence[Message], text: str) -> str | None:
    """A private-use character that neither the rendered ``text`` nor a message holds
    (None: every one is taken); placeholders are ``mark + index + mark``."""
    for code in range(0xE000, 0xF900):
        mark = chr(code)
        if mark not in text and all(mark not in m["content"] for m in messages):
            return mark
    return None


def _pieces(template: ChatTemplate, messages: Sequence[Message], text: str) -> list[_Piece] | None:
    """``text`` (``messages`` rendered) cut into the template's text and the messages'.

    The template is rendered again with a placeholder for each message's text, and
    ``text`` must read as that skeleton with each placeholder replaced by its message,
    as written or trimmed (Gemma's template trims). None when it does not (the
    template rewrites messages otherwise, or renders a placeholder differently).
    """
    mark = _placeholder_mark(messages, text)
    if mark is None:
        return None
    try:
        rendered = template.render([{**m, "content": f"{mark}{i}{mark}"} for i, m in enumerate(messages)])
    except SkippyError:
        return None
    skeleton = re.split(f"{mark}(\\d+){mark}", rendered)  # [text, index, text, index, …, text]
    if not text.startswith(skeleton[0]):
        return None
    pieces, pos = [_Piece(skeleton[0], True)], len(skeleton[0])
    for index, after in zip(skeleton[1::2], skeleton[2::2]):
        content = messages[int(index)]["content"]
        shown = next(
            (c for c in dict.fromkeys((content, content.strip(), content.lstrip(), content.rstrip()))
             if text.startswith(c + after, pos)),
            None,
        )  # fmt: skip
        if shown is None:
            return None
        pieces += [_Piece(shown, False), _Piece(after, True)]
        pos += len(shown) + len(after)
    return pieces if pos == len(text) else None


def _parsed(model: Model, text: str) -> list[int]:
    return model.tokenize(text, add_special=False, parse_special=True)


def _markers(model: Model, tokens: Sequence[int]) -> list[int]:
    """The special (control) tokens among ``tokens``, in order."""
    return [t for t in tokens if model.is_control(t)]


def _template_markers(model: Model, pieces: Sequence[_Piece]) -> list[int]:
    """The special tokens the template's own pieces hold, in order."""
    return [t for p in pieces if p.markup for t in _markers(model, _parsed(model, p.text))]


_BLANK = " \t\n\r\v\f"  # what llama.cpp strips beside an lstrip/rstrip token (C isspace)


def _tokenize_pieces(model: Model, pieces: Sequence[_Piece]) -> list[int]:
    """The tokens of ``pieces``: special-token text in the template's pieces becomes its
    token; the text between two such tokens (the template's plain text and the messages'
    text alike) is tokenized as one run without ``parse_special``, as llama.cpp cuts text
    at special tokens before tokenizing what lies between them.

    Raises:
        SkippyError: a special token's text is not where its piece was tokenized from.
    """
    tokens: list[int] = []
    run: list[str] = []
    after_rstrip = False  # the last special token eats the whitespace after it
    for piece in pieces:
        if not piece.markup:
            run.append(piece.text)
            continue
        pos = 0
        for token in _markers(model, _parsed(model, piece.text)):
            mark = model.token_text(token)
            at = piece.text.find(mark, pos)
            if at < 0:
                raise SkippyError(f"the chat template's {mark!r} could not be placed in its text")
            run.append(piece.text[pos:at])
            lstrip, rstrip = model.strips(token)
            tokens += _text_tokens(model, "".join(run), after_rstrip, lstrip)
            tokens.append(token)
            run, after_rstrip, pos = [], rstrip, at + len(mark)
        run.append(piece.text[pos:])
    return tokens + _text_tokens(model, "".join(run), after_rstrip, False)


def _text_tokens(model: Model, text: str, strip_start: bool, strip_end: bool) -> list[int]:
    """``text`` tokenized as plain text (special-token text in it stays text)."""
    if strip_start:
        text = text.lstrip(_BLANK)
    if strip_end:
        text = text.rstrip(_BLANK)
    return model.tokenize(text, add_special=False, parse_special=False) if text else []


def _refuse_special_text(model: Model, messages: Sequence[Message]) -> None:
    """For a template whose text cannot be told from the messages': refuse a message that
    holds special-token text (it would become a special token); the rest tokenize as
    rendered, as before.

    Raises:
        SkippyError: naming the message and the token.
    """
    for m in messages:
        found = _markers(model, _parsed(model, m["content"]))
        if found:
            raise SkippyError(
                f"the {m['role']} message holds {model.token_text(found[0])!r}, and this chat template "
                "rewrites messages so that it could not be kept as text: remove it from the message"
            )


def _one_bos(model: Model, tokens: list[int]) -> list[int]:
    """``tokens`` with exactly one leading BOS where the model wants one."""
    if model.add_bos and model.bos >= 0:
        while len(tokens) > 1 and tokens[0] == model.bos and tokens[1] == model.bos:
            tokens.pop(0)
        if not tokens or tokens[0] != model.bos:
            tokens.insert(0, model.bos)
    return tokens
