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


# -- the environment matches transformers' apply_chat_template ---------------


def test_loopcontrols_break_and_continue_work():
    template = ("{% for m in messages %}{% if m.role == 'system' %}{% continue %}{% endif %}"
                "{{ m.content }};{% if m.content == 'stop' %}{% break %}{% endif %}{% endfor %}")
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "a"},
                {"role": "user", "content": "stop"}, {"role": "user", "content": "never"}]
    assert ChatTemplate(template).render(messages) == "a;stop;"


def test_tojson_takes_transformers_keyword_arguments_and_does_not_html_escape():
    template = "{{ tools | tojson(indent=2, sort_keys=True) }}|{{ tools | tojson(separators=(',', ':')) }}"
    tools = [{"b": "<x & 'y'>", "a": 1}]
    assert ChatTemplate(template).render([], tools=tools) == (
        '[\n  {\n    "a": 1,\n    "b": "<x & \'y\'>"\n  }\n]|[{"b":"<x & \'y\'>","a":1}]')
    assert ChatTemplate("{{ 'é' | tojson(ensure_ascii=True) }}").render([]) == '"\\u00e9"'


def test_strftime_now_formats_the_current_date():
    import datetime

    text = ChatTemplate("{{ strftime_now('%Y') }}").render([])
    assert text == str(datetime.datetime.now().year)


def test_the_generation_block_renders_its_body_and_reports_its_spans():
    template = ("{% for m in messages %}{% if m.role == 'assistant' %}A: {% generation %}{{ m.content }}"
                "{% endgeneration %}|{% else %}U: {{ m.content }}|{% endif %}{% endfor %}")
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "again"}, {"role": "assistant", "content": "sure"}]
    plain = ChatTemplate(template).render(messages)
    assert plain == "U: hi|A: hello|U: again|A: sure|"
    text, spans = ChatTemplate(template).render_with_generation_spans(messages)
    assert text == plain
    assert [text[a:b] for a, b in spans] == ["hello", "sure"]


def test_tools_and_documents_reach_the_template_and_default_to_none():
    template = "{{ tools is none }} {{ documents is none }}{% if tools %} {{ tools[0].function.name }}" \
               " {{ documents[0].title }}{% endif %}"
    assert ChatTemplate(template).render([]) == "True True"
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
    assert ChatTemplate(template).render([], tools=tools, documents=[{"title": "doc"}]) == \
        "False False get_weather doc"


def test_openai_message_shapes_are_accepted():
    template = "{% for m in messages %}{{ m.role }}:{{ m.content is string }}{% endfor %}"
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    assert ChatTemplate(template).render(messages) == "user:Falseassistant:Falsetool:True"
    with pytest.raises(ChatTemplateError, match="None without tool_calls"):
        ChatTemplate(template).render([{"role": "assistant", "content": None}])
    with pytest.raises(ChatTemplateError, match=r"\['content'\]\[0\] must be a dict with a 'type'"):
        ChatTemplate(template).render([{"role": "user", "content": ["hi"]}])


def test_the_command_line_template_option_takes_a_file_or_the_text(tmp_path):
    from muser.cli import _template

    path = tmp_path / "chatml.jinja"
    path.write_text(CHATML)
    assert _template(str(path)) == CHATML
    assert _template("{{ messages[0].content }}") == "{{ messages[0].content }}"
    assert _template(None) is None
