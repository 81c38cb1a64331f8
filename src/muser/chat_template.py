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

A hostile template must not cost unbounded time or memory either (Jinja2's
sandbox guards attributes, not sizes): strings and lists built by ``*``,
``+``, ``~``, ``**``, ``%``, method calls and filters are checked against
``muser.limits.MAX_TEMPLATE_OUTPUT_CHARS`` before they are built where the
size is known up front, loop iterations are counted against
``MAX_TEMPLATE_LOOP_ITERATIONS``, and the output is streamed and cut off at
``MAX_TEMPLATE_OUTPUT_CHARS``. Every failure is a ``ChatTemplateError``.
"""

from __future__ import annotations

import contextvars
import datetime
import json
import math
import re
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment
from markupsafe import Markup

from muser import limits

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


# ---------------------------------------------------------------- bounds

# Loop iterations left in the rendering running in this context (None: no
# rendering is running, e.g. a template object used directly by a test).
_loop_budget: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("_loop_budget", default=None)

# A number of 7+ digits inside a format string is a width or precision that
# could allocate megabytes ("{:>1000000000}", "%1000000000d").
_WIDE_FORMAT = re.compile(r"\d{7,}")

_SIZED = (str, list, tuple)

# Results of `**` above this many bits are refused (9 ** 9 ** 9 would run for
# minutes); 2 ** 65536 still fits.
_MAX_POWER_BITS = 1 << 16


def _too_big(what: str, size: int | float) -> ChatTemplateError:
    return ChatTemplateError(
        f"the chat template would build {what} of {size:.0f} items, above "
        f"muser.limits.MAX_TEMPLATE_OUTPUT_CHARS = {limits.MAX_TEMPLATE_OUTPUT_CHARS}"
    )


def _check_size(value: Any, what: str = "a value") -> Any:
    if isinstance(value, _SIZED) and len(value) > limits.MAX_TEMPLATE_OUTPUT_CHARS:
        raise _too_big(what, len(value))
    return value


def _check_arguments(args: Iterable[Any], what: str) -> None:
    """Refuse huge counts (widths, repeats) and wide format strings before a call runs."""
    for arg in args:
        if isinstance(arg, bool):
            continue
        if isinstance(arg, int) and abs(arg) > limits.MAX_TEMPLATE_OUTPUT_CHARS:
            raise ChatTemplateError(
                f"the chat template passes {arg} to {what}, above "
                f"muser.limits.MAX_TEMPLATE_OUTPUT_CHARS = {limits.MAX_TEMPLATE_OUTPUT_CHARS}"
            )
        if isinstance(arg, str) and _WIDE_FORMAT.search(arg) and ("{" in arg or "%" in arg):
            raise ChatTemplateError(f"the chat template passes a format with a huge width to {what}")


def _bounded_loop(iterable: Any) -> Iterator[Any]:
    """Every `{% for %}` iterates through this: it counts against the rendering's budget."""
    budget = _loop_budget.get()
    for item in iterable:
        if budget is not None:
            budget[0] -= 1
            if budget[0] < 0:
                raise ChatTemplateError(
                    "the chat template ran more loop iterations than "
                    f"muser.limits.MAX_TEMPLATE_LOOP_ITERATIONS = {limits.MAX_TEMPLATE_LOOP_ITERATIONS}"
                )
        yield item


def _bounded_concat(*parts: Any) -> str:
    """`a ~ b ~ c`, with the total length checked before joining."""
    texts = [p if isinstance(p, str) else str(p) for p in parts]
    total = sum(len(t) for t in texts)
    if total > limits.MAX_TEMPLATE_OUTPUT_CHARS:
        raise _too_big("a string", total)
    return "".join(texts)


def _bounded_filter(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def bounded(*args: Any, **kwargs: Any) -> Any:
        # The filtered value itself is checked only for 'format', where it is the format string.
        checked = args if name == "format" else args[1:]
        _check_arguments(list(checked) + list(kwargs.values()), f"the filter '{name}'")
        if name == "replace" and len(args) >= 3 and all(isinstance(a, str) for a in args[:3]):
            text, old, new = args[:3]
            count = len(text) + 1 if not old else text.count(old)
            if len(text) + count * (len(new) - len(old)) > limits.MAX_TEMPLATE_OUTPUT_CHARS:
                raise _too_big("a string", len(text) + count * (len(new) - len(old)))
        return _check_size(fn(*args, **kwargs), f"a value (filter '{name}')")

    # Jinja2 passes the context/environment to filters marked for it.
    for marker in ("jinja_pass_arg",):
        if hasattr(fn, marker):
            setattr(bounded, marker, getattr(fn, marker))
    return bounded


class _BoundedEnvironment(ImmutableSandboxedEnvironment):
    """The immutable sandbox plus size, loop and power bounds (see the module docstring)."""

    intercepted_binops = frozenset(["*", "**", "+", "%"])

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, count in ((left, right), (right, left)):
                if isinstance(seq, _SIZED) and isinstance(count, int) and len(seq) * count > (
                    limits.MAX_TEMPLATE_OUTPUT_CHARS
                ):
                    raise _too_big("a repeated value", len(seq) * count)
        elif operator == "**":
            if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
                if right * math.log2(abs(left)) > _MAX_POWER_BITS:
                    raise ChatTemplateError(f"the chat template computes {left} ** {right}, a number too large")
        elif operator == "+":
            if isinstance(left, _SIZED) and isinstance(right, _SIZED):
                if len(left) + len(right) > limits.MAX_TEMPLATE_OUTPUT_CHARS:
                    raise _too_big("a value", len(left) + len(right))
        elif operator == "%" and isinstance(left, str):
            _check_arguments([left], "'%' formatting")
        return _check_size(super().call_binop(context, operator, left, right))

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        what = f"'{getattr(__obj, '__name__', type(__obj).__name__)}'"
        _check_arguments(list(args) + list(kwargs.values()), what)
        return _check_size(super().call(__context, __obj, *args, **kwargs), f"a value (from {what})")

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        # `"{:>1000000000}".format(...)`: the format string is the method's own string.
        if getattr(value, "__name__", None) in ("format", "format_map") and isinstance(
            getattr(value, "__self__", None), str
        ):
            _check_arguments([value.__self__], "str.format")
        return super().wrap_str_format(value)

    def _parse(self, source: str, name: str | None, filename: str | None) -> jinja2.nodes.Template:
        # Route every loop and every `~` through the bounded helpers above.
        tree = super()._parse(source, name, filename)
        for loop in tree.find_all(jinja2.nodes.For):
            loop.iter = jinja2.nodes.Call(jinja2.nodes.Name("__muser_bounded_loop", "load"), [loop.iter], [], None, None)
        for concat in list(tree.find_all(jinja2.nodes.Concat)):
            call = jinja2.nodes.Call(jinja2.nodes.Name("__muser_bounded_concat", "load"), list(concat.nodes), [], None, None)
            _replace_node(tree, concat, call)
        tree.set_lineno(1, override=False)
        return tree


def _replace_node(tree: jinja2.nodes.Node, old: jinja2.nodes.Node, new: jinja2.nodes.Node) -> None:
    for parent in tree.find_all(jinja2.nodes.Node):
        for field in parent.fields:
            value = getattr(parent, field, None)
            if value is old:
                setattr(parent, field, new)
                return
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if item is old:
                        value[i] = new
                        return
    if tree is old:  # pragma: no cover - a template is never a bare Concat
        raise ChatTemplateError("internal: cannot bound a top-level concatenation")


def _environment() -> ImmutableSandboxedEnvironment:
    env = _BoundedEnvironment(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.Undefined,
                              extensions=[jinja2.ext.loopcontrols, _GenerationBlock])
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["__muser_bounded_loop"] = _bounded_loop
    env.globals["__muser_bounded_concat"] = _bounded_concat
    env.filters["tojson"] = _tojson
    env.filters = {name: _bounded_filter(name, fn) for name, fn in env.filters.items()}
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
        limit = limits.MAX_TEMPLATE_OUTPUT_CHARS
        token = _loop_budget.set([limits.MAX_TEMPLATE_LOOP_ITERATIONS])
        try:
            pieces: list[str] = []
            total = 0
            for piece in self._template.generate(
                messages=checked,
                add_generation_prompt=add_generation_prompt,
                bos_token=bos_token,
                eos_token=eos_token,
                __generation_spans__=recorder,
                **{"tools": None, "documents": None, **variables},
            ):
                total += len(piece)
                if total > limit:
                    raise ChatTemplateError(
                        f"the chat template rendered more than muser.limits.MAX_TEMPLATE_OUTPUT_CHARS = {limit} "
                        "characters"
                    )
                pieces.append(piece)
            return "".join(pieces)
        except ChatTemplateError:
            raise
        except jinja2.TemplateError as exc:
            raise ChatTemplateError(f"chat template failed: {exc}") from exc
        except RecursionError:
            raise ChatTemplateError("chat template failed: it recurses too deeply (a macro calling itself?)") from None
        except (TypeError, ValueError, ArithmeticError, LookupError, AttributeError) as exc:
            # Template code is data from the model file: its own errors
            # (1 + 'a', 1 / 0, ...) are the template's failure, not ours.
            raise ChatTemplateError(f"chat template failed: {type(exc).__name__}: {exc}") from exc
        finally:
            _loop_budget.reset(token)
