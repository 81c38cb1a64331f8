"""Chat templates render like the models expect, inside a sandbox."""

from __future__ import annotations

import pytest

from muser.chat_template import ChatTemplate, ChatTemplateError

CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
    "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def test_chatml_renders_each_message_and_the_generation_prompt():
    text = ChatTemplate(CHATML).render([{"role": "user", "content": "Hi ü"}])
    assert text == "<|im_start|>user\nHi ü<|im_end|>\n<|im_start|>assistant\n"


def test_generation_prompt_can_be_left_out():
    text = ChatTemplate(CHATML).render([{"role": "user", "content": "Hi"}], add_generation_prompt=False)
    assert text == "<|im_start|>user\nHi<|im_end|>\n"


def test_special_token_variables_and_extra_variables_reach_the_template():
    template = ChatTemplate("{{ bos_token }}{{ messages[0]['content'] }}{{ eos_token }}{{ name }}")
    assert template.render([{"role": "user", "content": "x"}], bos_token="<s>", eos_token="</s>", name="!") == "<s>x</s>!"


def test_raise_exception_in_a_template_becomes_a_chat_template_error():
    template = ChatTemplate("{% if messages[0]['role'] != 'user' %}{{ raise_exception('user first') }}{% endif %}ok")
    assert template.render([{"role": "user", "content": ""}]) == "ok"
    with pytest.raises(ChatTemplateError, match="user first"):
        template.render([{"role": "assistant", "content": ""}])


def test_the_sandbox_blocks_access_to_python_internals():
    template = ChatTemplate("{{ messages.__class__.__mro__ }}")
    with pytest.raises(ChatTemplateError):
        template.render([{"role": "user", "content": ""}])


def test_the_sandbox_blocks_mutating_the_messages():
    messages = [{"role": "user", "content": "keep"}]
    with pytest.raises(ChatTemplateError):
        ChatTemplate("{{ messages.append(1) }}").render(messages)
    assert messages == [{"role": "user", "content": "keep"}]


@pytest.mark.parametrize("messages, fragment", [
    ("hello", "list"),
    ([["user", "hi"]], "must be a dict"),
    ([{"content": "hi"}], "'role'"),
    ([{"role": "user", "content": 3}], "'content'"),
])
def test_malformed_messages_are_rejected_with_the_field_named(messages, fragment):
    with pytest.raises(ChatTemplateError, match=fragment):
        ChatTemplate(CHATML).render(messages)


def test_a_syntax_error_names_the_line():
    with pytest.raises(ChatTemplateError, match="line 2"):
        ChatTemplate("ok\n{% if %}")


def test_tojson_keeps_non_ascii_text():
    assert ChatTemplate("{{ messages[0] | tojson }}").render([{"role": "u", "content": "é"}]) == \
        '{"role": "u", "content": "é"}'
