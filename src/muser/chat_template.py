"""Chat templates: the Jinja2 template a GGUF file ships in
``tokenizer.chat_template``, rendered in a sandbox.

Templates come from model files, i.e. from strangers, so they run in Jinja2's
immutable sandbox: no attribute access to internals, no mutation of the
messages passed in. The environment is the one transformers'
``apply_chat_template`` builds, so templates written for it render the same:
``trim_blocks`` and ``lstrip_blocks`` on, the ``loopcontrols`` extension
(``{% break %}``, ``{% continue %}``), the ``{% generation %}...{% endgeneration %}``
block (renders its body; the character spans it produced are available from
:meth:`ChatTemplate.render_with_generation_spans`), ``tojson`` with its
keyword arguments (``indent``, ``separators``, ``sort_keys``, ``ensure_ascii``),
the ``raise_exception(message)`` and ``strftime_now(format)`` helpers, and the
variables ``messages``, ``add_generation_prompt``, ``bos_token``,
``eos_token``, ``tools``, ``documents`` plus any extra keyword arguments.
"""

from __future__ import annotations

import datetime
import json
from typing import Any, Mapping, Sequence

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment
from markupsafe import Markup

__all__ = ["ChatTemplate", "ChatTemplateError"]


class ChatTemplateError(ValueError):
    """A chat template failed to compile or render, or the messages are malformed."""


def _raise_exception(message: str) -> None:
    raise ChatTemplateError(f"the chat template refused the conversation: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # Templates expect non-ASCII text kept as is (transformers' tojson default),
    # and not HTML-escaped (Jinja's own tojson would escape < > & ').
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent,
                      separators=None if separators is None else tuple(separators),  # type: ignore[arg-type]
                      sort_keys=sort_keys)


class _GenerationBlock(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}``: marks what the assistant
    generated (transformers uses it for assistant-token masks). Renders its
    body; when a render asks for it, records the body's character spans."""

    tags = {"generation"}

    def __init__(self, environment: jinja2.Environment) -> None:
        super().__init__(environment)
        environment.extend(generation_spans=None)

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_mark", [jinja2.nodes.DerivedContextReference()])
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _mark(self, eval_ctx: jinja2.nodes.EvalContext, context: Any, caller: Any) -> str:
        text: str = caller()
        spans = context.get("__generation_spans__")
        if isinstance(spans, _SpanRecorder):
            spans.pending.append(text)
        return Markup(text) if eval_ctx.autoescape else text


class _SpanRecorder:
    """Collects generation-block texts of one render, in order."""

    def __init__(self) -> None:
        self.pending: list[str] = []


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.Undefined,
                                        extensions=[jinja2.ext.loopcontrols, _GenerationBlock])
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
        if content is None:
            # OpenAI's shape for an assistant turn that only calls tools.
            if not message.get("tool_calls"):
                raise ChatTemplateError(f"messages[{index}]['content'] is None without tool_calls")
        elif isinstance(content, list):
            for part_index, part in enumerate(content):
                if not isinstance(part, Mapping) or not isinstance(part.get("type"), str):
                    raise ChatTemplateError(
                        f"messages[{index}]['content'][{part_index}] must be a dict with a 'type' "
                        "(e.g. {'type': 'text', 'text': ...})")
        elif not isinstance(content, str):
            raise ChatTemplateError(
                f"messages[{index}]['content'] must be a string, a list of parts or None (with tool_calls), "
                f"got {type(content).__name__}")
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
        return self._render(messages, add_generation_prompt, bos_token, eos_token, None, variables)

    def render_with_generation_spans(
        self,
        messages: Sequence[Mapping[str, Any]],
        *,
        add_generation_prompt: bool = False,
        bos_token: str = "",
        eos_token: str = "",
        **variables: Any,
    ) -> tuple[str, list[tuple[int, int]]]:
        """Render, and return the ``(start, end)`` character spans of the text
        each ``{% generation %}`` block produced (what transformers turns into
        its assistant-token mask). Empty for templates without the block.
        """
        recorder = _SpanRecorder()
        text = self._render(messages, add_generation_prompt, bos_token, eos_token, recorder, variables)
        spans, cursor = [], 0
        for piece in recorder.pending:
            start = text.find(piece, cursor)
            if start < 0:  # the template post-processed the block's text: no reliable span
                raise ChatTemplateError("a {% generation %} block's text does not appear in the output")
            spans.append((start, start + len(piece)))
            cursor = start + len(piece)
        return text, spans

    def _render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool, bos_token: str,
                eos_token: str, recorder: _SpanRecorder | None, variables: Mapping[str, Any]) -> str:
        checked = _check_messages(messages)
        try:
            return self._template.render(
                messages=checked,
                add_generation_prompt=add_generation_prompt,
                bos_token=bos_token,
                eos_token=eos_token,
                __generation_spans__=recorder,
                **{"tools": None, "documents": None, **variables},
            )
        except ChatTemplateError:
            raise
        except jinja2.TemplateError as exc:
            raise ChatTemplateError(f"chat template failed: {exc}") from exc
