"""Chat templates: the Jinja2 template a GGUF file ships in
``tokenizer.chat_template``, rendered in a sandbox.

Templates come from model files, i.e. from strangers, so they run in Jinja2's
immutable sandbox: no attribute access to internals, no mutation of the
messages passed in. Rendering follows the conventions templates are written
for (Hugging Face's): ``trim_blocks`` and ``lstrip_blocks`` on, a
``raise_exception(message)`` helper, ``strftime_now(format)``, and the
variables ``messages``, ``add_generation_prompt``, ``bos_token``,
``eos_token`` plus any extra keyword arguments.
"""

from __future__ import annotations

import datetime
import json
from typing import Any, Mapping, Sequence

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment

__all__ = ["ChatTemplate", "ChatTemplateError"]


class ChatTemplateError(ValueError):
    """A chat template failed to compile or render, or the messages are malformed."""


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(f"the chat template refused the conversation: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def _tojson(value: Any, indent: int | None = None) -> str:
    # Templates expect non-ASCII text kept as is (as Hugging Face's tojson does).
    return json.dumps(value, ensure_ascii=False, indent=indent)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.Undefined)
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.filters["tojson"] = _tojson
    return env


def _check_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise ChatTemplateError("messages must be a list of {'role': ..., 'content': ...} dicts")
    checked = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ChatTemplateError(f"messages[{index}] must be a dict, got {type(message).__name__}")
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or not role:
            raise ChatTemplateError(f"messages[{index}]['role'] must be a non-empty string")
        if not isinstance(content, str):
            raise ChatTemplateError(f"messages[{index}]['content'] must be a string")
        checked.append(dict(message))
    return checked


class ChatTemplate:
    """A compiled chat template. Immutable and safe to share across threads.

    Raises:
        ChatTemplateError: the source is not a valid Jinja2 template.
    """

    def __init__(self, source: str) -> None:
        if not isinstance(source, str) or not source.strip():
            raise ChatTemplateError("a chat template must be a non-empty string")
        self.source = source
        try:
            self._template = _environment().from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise ChatTemplateError(f"chat template syntax error at line {exc.lineno}: {exc.message}") from exc

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = True,
        bos_token: str = "",
        eos_token: str = "",
        **variables: Any,
    ) -> str:
        """Render ``messages`` into the prompt text the model was trained on.

        Raises:
            ChatTemplateError: malformed messages, or the template raised or failed.
        """
        checked = _check_messages(messages)
        try:
            return self._template.render(
                messages=checked,
                add_generation_prompt=add_generation_prompt,
                bos_token=bos_token,
                eos_token=eos_token,
                **variables,
            )
        except ChatTemplateError:
            raise
        except jinja2.TemplateError as exc:
            raise ChatTemplateError(f"chat template failed: {exc}") from exc
