"""Item 4: chat templates (from a GGUF or template=) render in bounded time and
memory: string/list building, loops and output are bounded, and every failure
is a ChatTemplateError."""

from __future__ import annotations

import time

import pytest

import muser.limits
from muser.chat_template import ChatTemplate, ChatTemplateError

MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("source", [
    "{{ 'ab ' * 300000000 }}",
    "{{ 300000000 * 'ab ' }}",
    "{{ ['x'] * 300000000 }}",
    "{{ 7 ** 99999999 }}",
    "{{ 10 ** 100000000 }}",
    "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}",
    "{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}",
    "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "{% for i in range(100000) %}{% for j in range(100000) %}x{% endfor %}{% endfor %}",
    "{{ 'x'|center(1000000000) }}",
    "{{ 'x'.ljust(1000000000) }}",
    "{{ '{:>1000000000}'.format(1) }}",
    "{{ '%1000000000d'|format(1) }}",
    "{{ 'x'|indent(1000000000, true) }}",
    "{{ ('a' * 1000)|replace('a', 'a' * 100000) }}",
    "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}",
    "{{ 'x' * 4000000 + 'y' * 4000000 }}",
])
def test_template_bombs_raise_chat_template_error_quickly(source):
    started = time.perf_counter()
    with pytest.raises(ChatTemplateError):
        ChatTemplate(source).render(MESSAGES)
    assert time.perf_counter() - started < 20


@pytest.mark.parametrize("source", [
    "{{ 1 + 'a' }}",
    "{{ none.attribute.deeper }}",
    "{{ messages[5]['content'] }}",
    "{{ 1 / 0 }}",
    "{{ range(1, 2, 0)|list }}",
])
def test_template_runtime_errors_are_chat_template_errors(source):
    with pytest.raises(ChatTemplateError):
        ChatTemplate(source).render(MESSAGES)


def test_output_limit_is_checked_and_can_be_raised(monkeypatch):
    source = "{% for m in messages %}{{ m.content }}{% endfor %}"
    long = [{"role": "user", "content": "x" * 5000}] * 3
    monkeypatch.setattr(muser.limits, "MAX_TEMPLATE_OUTPUT_CHARS", 10_000)
    with pytest.raises(ChatTemplateError, match="MAX_TEMPLATE_OUTPUT_CHARS"):
        ChatTemplate(source).render(long)
    monkeypatch.setattr(muser.limits, "MAX_TEMPLATE_OUTPUT_CHARS", 20_000)
    assert len(ChatTemplate(source).render(long)) == 15_000


def test_loop_limit_is_checked(monkeypatch):
    monkeypatch.setattr(muser.limits, "MAX_TEMPLATE_LOOP_ITERATIONS", 1000)
    with pytest.raises(ChatTemplateError, match="MAX_TEMPLATE_LOOP_ITERATIONS"):
        ChatTemplate("{% for i in range(30) %}{% for j in range(40) %}{% endfor %}{% endfor %}").render(MESSAGES)
    ChatTemplate("{% for i in range(30) %}{% for j in range(30) %}{% endfor %}{% endfor %}").render(MESSAGES)


def test_ordinary_templates_still_render():
    source = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
              "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
              "{{ '-' * 3 }}{{ [1, 2] * 2 }}{{ 2 ** 10 }}{{ loop_free|default('ok') }}")
    out = ChatTemplate(source).render(MESSAGES)
    assert out == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n---[1, 2, 1, 2]1024ok"


def test_template_source_that_is_not_a_string_is_refused():
    with pytest.raises(ChatTemplateError):
        ChatTemplate(b"{{ x }}")  # type: ignore[arg-type]
