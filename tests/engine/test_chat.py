"""Chat messages for a template that takes a system message only at the start (no models)."""

from __future__ import annotations

import pytest

from skippy_tui.engine.chat import ChatTemplate, fold_system_changes
from skippy_tui.engine.errors import SkippyError


def m(role: str, content: str) -> dict[str, str]:
    return {"role": role, "content": content}


@pytest.mark.parametrize(
    ("messages", "folded"),
    [
        ([m("system", "S"), m("user", "a")], [m("system", "S"), m("user", "a")]),  # at the start: stays
        (
            [m("user", "a"), m("assistant", "b"), m("system", "X"), m("user", "c")],
            [m("user", "a"), m("assistant", "b"), m("user", "X\n\nc")],
        ),
        (  # a cleared one says nothing; two before one message both go with it
            [m("user", "a"), m("system", ""), m("assistant", "b"), m("system", "X"), m("system", "Y"), m("user", "c")],
            [m("user", "a"), m("assistant", "b"), m("user", "X\n\nY\n\nc")],
        ),
        ([m("user", "a"), m("system", "X")], [m("user", "a"), m("system", "X")]),  # no user message after it
    ],
)
def test_a_system_change_mid_chat_folds_into_the_next_user_message(messages: list, folded: list) -> None:
    assert fold_system_changes(messages) == folded


# roles must alternate, as Gemma 3's own Jinja template says
STRICT = (
    "{% for message in messages %}{% if message['role'] == 'system' and not loop.first %}"
    "{{ raise_exception('Conversation roles must alternate') }}{% endif %}"
    "<{{ message['role'] }}>{{ message['content'] }}</>{% endfor %}"
)


def test_a_template_that_refuses_a_system_message_mid_chat_gets_it_with_the_next_user_message() -> None:
    template = ChatTemplate(STRICT, None, "", "")
    said = [m("user", "a"), m("assistant", "b"), m("system", "X"), m("user", "c")]
    assert template.render(said, add_generation_prompt=False) == "<user>a</><assistant>b</><user>X\n\nc</>"
    with pytest.raises(SkippyError, match="chat template failed to render"):  # no system change: its own error
        ChatTemplate("{{ nope(", None, "", "").render([m("user", "a")])
