"""OpenAI-shaped results: ``create_chat_completion`` and ``create_completion``.

Code written for the OpenAI client (or llama-cpp-python) gets the dicts it
expects: ``chat.completion`` / ``chat.completion.chunk`` / ``text_completion``
objects with ``choices``, ``finish_reason``, ``usage`` and a
``system_fingerprint`` naming muser's version, the backend and the model file.
The shapes are those of the ``openai`` package's types (``ChatCompletion``,
``ChatCompletionChunk``, ``Completion``); muser never imports that package,
the test suite validates against it.

Mapping of the request fields:

- ``max_tokens``/``max_completion_tokens``: muser's ``max_tokens``; when
  neither is given, up to the end of the context.
- ``temperature``, ``top_p``, ``presence_penalty``, ``frequency_penalty``,
  ``seed``, ``stop``: the same-named muser options (unset ones keep muser's,
  i.e. llama.cpp's, defaults). ``logit_bias``: token id (as a string or int)
  -> bias. Any other muser keyword (``top_k``, ``min_p``, ``grammar``, ...)
  may be passed too.
- ``n``: completions run concurrently (seeds ``seed``, ``seed`` + 1, ...),
  up to the pool's slots.
- ``logprobs``/``top_logprobs``: chat's ``{"content": [...]}``; completions'
  ``logprobs=k`` gives the legacy ``tokens``/``token_logprobs``/``top_logprobs``/``text_offset``.
- ``response_format``: ``{"type": "json_object"}`` -> a JSON-object grammar,
  ``{"type": "json_schema", "json_schema": {"schema": ...}}`` -> the schema's grammar.
- ``tools`` go to the chat template. ``tool_choice="required"`` or
  ``{"type": "function", "function": {"name": ...}}`` makes the model call a
  tool: the output is generated under a grammar built from the functions'
  JSON schemas (``{"name": ..., "arguments": {...}}``, or just the arguments
  for a named function) and returned as ``message.tool_calls`` with
  ``finish_reason="tool_calls"``. With ``tool_choice="auto"`` (the default
  when tools are given) the reply is scanned for a tool call the model
  wrote itself (a JSON object ``{"name", "arguments"}`` naming a given tool,
  bare or in ``<tool_call>...</tool_call>`` tags). ``"none"`` never produces
  tool calls. Streaming: a named function's arguments stream as
  ``delta.tool_calls`` fragments; otherwise a reply that may be a tool call
  (``"required"``, or ``"auto"`` while the text so far starts like one) is
  held back and sent whole at the end, as ``tool_calls`` or as content.

Thread safety and errors are those of :func:`muser.stream`; a cancelled
request raises :class:`muser.Cancelled`.
"""

from __future__ import annotations

import json
import queue
import re
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, overload

from muser import limits
from muser.engine import Engine
from muser.errors import Cancelled
from muser.generation import (
    Target,
    _collect,
    _deadline,
    _pool_of,
    _prompt_tokens,
    _Request,
    _split,
    _start,
    render_chat,
)
from muser.grammar import Grammar
from muser.options import SharedOptions, check_keywords
from muser.types import GenerationChunk

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from typing import Unpack
    else:
        from typing_extensions import Unpack

__all__ = ["create_chat_completion", "create_completion", "system_fingerprint"]

JSONDict = dict[str, Any]

# Keywords with an OpenAI meaning handled here; the rest go to muser as they are.
_CHAT_KEYWORDS = ("model", "stream", "stream_options", "tools", "tool_choice", "response_format", "logprobs",
                  "top_logprobs", "n", "max_tokens", "max_completion_tokens", "stop", "template")


def system_fingerprint(target: Target) -> str:
    """``muser-<version>_<backend>_<model file>``: what produced a result."""
    from muser import __version__

    engine = _pool_of(target).engine
    name = engine.path.replace("\\", "/").rsplit("/", 1)[-1]
    return f"muser-{__version__}_{engine.backend}_{name}"


def _model_name(target: Target, model: str | None) -> str:
    if model is not None:
        return model
    engine = _pool_of(target).engine
    return str(engine.config.get("name") or engine.path.rsplit("/", 1)[-1])


# -- messages and tools ------------------------------------------------------


def _text_of(content: Any, where: str) -> str | None:
    """Message content for the template: a string (text parts joined) or None."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        texts = []
        for index, part in enumerate(content):
            if not isinstance(part, Mapping) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                kind = part.get("type") if isinstance(part, Mapping) else type(part).__name__
                raise ValueError(f"{where}['content'][{index}]: only text parts are supported "
                                 f"({{'type': 'text', 'text': ...}}), got {kind!r}")
            texts.append(part["text"])
        return "".join(texts)
    raise ValueError(f"{where}['content'] must be a string, a list of text parts or None")


def _template_messages(messages: Sequence[Mapping[str, Any]]) -> list[JSONDict]:
    """OpenAI messages as Hugging Face templates expect them: string content,
    tool-call arguments as dicts (templates apply ``tojson`` to them)."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise ValueError("messages must be a list of {'role': ..., 'content': ...} dicts")
    converted = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ValueError(f"messages[{index}] must be a dict, got {type(message).__name__}")
        item = dict(message)
        item["content"] = _text_of(message.get("content"), f"messages[{index}]")
        calls = []
        for call in message.get("tool_calls") or ():
            call = dict(call)
            function = dict(call.get("function") or {})
            arguments = function.get("arguments")
            if isinstance(arguments, str):
                try:
                    function["arguments"] = json.loads(arguments)
                except ValueError:
                    pass  # leave text the template can still print
            call["function"] = function
            calls.append(call)
        if calls:
            item["tool_calls"] = calls
        converted.append(item)
    return converted


def _functions(tools: Sequence[Mapping[str, Any]] | None) -> dict[str, Mapping[str, Any]]:
    functions: dict[str, Mapping[str, Any]] = {}
    for index, tool in enumerate(tools or ()):
        function = tool.get("function") if isinstance(tool, Mapping) else None
        if not isinstance(tool, Mapping) or tool.get("type") != "function" or not isinstance(function, Mapping) \
                or not isinstance(function.get("name"), str):
            raise ValueError(f"tools[{index}] must be {{'type': 'function', 'function': {{'name': ..., "
                             "'parameters': {...}}}")
        functions[function["name"]] = function
    return functions


def _parameters(function: Mapping[str, Any]) -> Any:
    return function.get("parameters") or {"type": "object"}


def _forced_tool(tool_choice: Any, functions: Mapping[str, Mapping[str, Any]]) -> tuple[bool, str | None]:
    """(must call a tool, the named function or None for any)."""
    if tool_choice is None or tool_choice in ("auto", "none"):
        return False, None
    if tool_choice == "required":
        if not functions:
            raise ValueError("tool_choice='required' needs tools=[...]")
        return True, None
    if isinstance(tool_choice, Mapping) and tool_choice.get("type") == "function":
        name = (tool_choice.get("function") or {}).get("name")
        if name not in functions:
            raise ValueError(f"tool_choice names function {name!r}, not among tools: {sorted(functions)}")
        return True, str(name)
    raise ValueError("tool_choice must be 'none', 'auto', 'required' or "
                     "{'type': 'function', 'function': {'name': ...}}")


def _tool_grammar(functions: Mapping[str, Mapping[str, Any]], name: str | None) -> Grammar:
    if name is not None:
        return Grammar.from_json_schema(_parameters(functions[name]))
    options = [{"type": "object", "properties": {"name": {"const": fname}, "arguments": _parameters(f)},
                "required": ["name", "arguments"], "additionalProperties": False}
               for fname, f in functions.items()]
    return Grammar.from_json_schema(options[0] if len(options) == 1 else {"anyOf": options})


def _response_grammar(response_format: Mapping[str, Any] | None) -> Grammar | None:
    if response_format is None:
        return None
    kind = response_format.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return Grammar.json()
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        if not isinstance(spec, Mapping) or "schema" not in spec:
            raise ValueError("response_format {'type': 'json_schema'} needs 'json_schema': {'name': ..., "
                             "'schema': {...}}")
        return Grammar.from_json_schema(spec["schema"])
    raise ValueError(f"response_format type must be 'text', 'json_object' or 'json_schema', got {kind!r}")


_TAGGED_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*</tool_call>", re.DOTALL)


def _parse_tool_calls(text: str, functions: Mapping[str, Mapping[str, Any]]) -> list[tuple[str, str]]:
    """Tool calls a model wrote on its own: (name, arguments JSON) pairs, or []."""
    candidates = _TAGGED_CALL.findall(text) or [text.strip()]
    calls = []
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            return []
        if not isinstance(value, dict) or value.get("name") not in functions:
            return []
        arguments = value.get("arguments", value.get("parameters", {}))
        calls.append((str(value["name"]), json.dumps(arguments, ensure_ascii=False)))
    return calls


def _call_id() -> str:
    return f"call_{uuid.uuid4().hex[:24]}"


# -- logprobs ----------------------------------------------------------------


class _Tokens:
    """Token texts and bytes as OpenAI reports them."""

    def __init__(self, target: Target) -> None:
        self.engine = _pool_of(target).engine
        self.token_bytes = self.engine.vocabulary()[0]

    def raw(self, token: int) -> bytes:
        piece = self.token_bytes[token]
        if not piece:  # control tokens contribute no text; show their name
            return self.engine.detokenize([token], remove_special=False, unparse_special=True).encode()
        return piece

    def text(self, token: int) -> str:
        return self.raw(token).decode("utf-8", errors="replace")


def _chat_logprobs(chunk: GenerationChunk, tokens: _Tokens) -> list[JSONDict]:
    entries = []
    for position, token in enumerate(chunk.token_ids):
        top = []
        if chunk.top_logprobs is not None:
            top = [{"token": tokens.text(alt.token), "bytes": list(tokens.raw(alt.token)), "logprob": alt.logprob}
                   for alt in chunk.top_logprobs[position]]
        logprob = chunk.logprobs[position] if chunk.logprobs is not None else 0.0
        entries.append({"token": tokens.text(token), "bytes": list(tokens.raw(token)), "logprob": logprob,
                        "top_logprobs": top})
    return entries


# -- running -----------------------------------------------------------------


def _merged(requests: list[_Request]) -> Iterator[GenerationChunk]:
    """Chunks of several requests as they come. Bounded: a consumer that stalls
    stalls the pumps, and then the requests' own stall detection applies."""
    from muser.generation import _chunks

    if len(requests) == 1:
        yield from _chunks(requests[0])
        return
    merged: queue.Queue[tuple[int, GenerationChunk | BaseException | None]] = queue.Queue(maxsize=64)
    done = threading.Event()

    def pump(index: int) -> None:
        item: GenerationChunk | BaseException | None = None
        try:
            for chunk in _chunks(requests[index]):
                while not done.is_set():
                    try:
                        merged.put((index, chunk), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if done.is_set():
                    return
        except BaseException as exc:  # handed to the consumer
            item = exc
        while not done.is_set():
            try:
                merged.put((index, item), timeout=0.1)
                return
            except queue.Full:
                continue

    pumps = [threading.Thread(target=pump, args=(i,), name=f"muser-openai-{i}", daemon=True)
             for i in range(len(requests))]
    for thread in pumps:
        thread.start()
    try:
        live = len(requests)
        while live:
            _, item = merged.get()
            if item is None:
                live -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield item
    finally:
        done.set()
        for request in requests:
            request.abandon()


def _check_finish(chunk: GenerationChunk) -> None:
    if chunk.finish_reason == "cancelled":
        raise Cancelled("the generation was cancelled")


def _tokenize_prompt(engine: Engine, prompt: str, parse_special: bool, options: Mapping[str, Any],
                     started_at: float) -> list[int]:
    """The prompt's ids, tokenized under the request's ``cancel`` and ``timeout``
    (Cancelled or DeadlineExceeded, as the request would end)."""
    timeout = limits.check_timeout("timeout", options.get("timeout"))
    return _prompt_tokens(engine, prompt, parse_special, options.get("cancel"), _deadline(timeout, started_at), timeout)


def _prepare(target: Target, tokens: list[int], n: int, max_tokens: int | None, extra: Mapping[str, Any],
             grammar: Grammar | None, logprobs: bool, top_logprobs: int | None, stop: Any,
             function: str, started_at: float | None = None) -> list[_Request]:
    pool = _pool_of(target)
    options: dict[str, Any] = dict(extra)
    if grammar is not None:
        if options.get("grammar") is not None:
            raise ValueError("pass either grammar= or response_format/tool_choice, not both")
        options["grammar"] = grammar
    if max_tokens is None:
        max_tokens = max(1, pool.max_context - len(tokens))
    options["max_tokens"] = max_tokens
    if stop is not None:
        options["stop"] = stop
    if logprobs or top_logprobs:
        options["logprobs"] = True
        options["top_logprobs"] = int(top_logprobs or 0)
    if "logit_bias" in options and options["logit_bias"] is not None:
        options["logit_bias"] = {int(k): float(v) for k, v in options["logit_bias"].items()}
    parsed, cancel, _ = _split(options, function, own=_CHAT_KEYWORDS)
    return _start(target, tokens, n, cancel, False, parsed, started_at=started_at)


def _usage(prompt_tokens: int, completion_tokens: int) -> JSONDict:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


@overload
def create_chat_completion(
    target: Target, messages: Sequence[Mapping[str, Any]], *, model: str | None = None,
    stream: Literal[False] = False, stream_options: Mapping[str, Any] | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None, tool_choice: str | Mapping[str, Any] | None = None,
    response_format: Mapping[str, Any] | None = None, logprobs: bool = False, top_logprobs: int | None = None,
    n: int = 1, max_tokens: int | None = None, max_completion_tokens: int | None = None,
    template: str | None = None, **options: Unpack[SharedOptions],
) -> JSONDict: ...
@overload
def create_chat_completion(
    target: Target, messages: Sequence[Mapping[str, Any]], *, model: str | None = None,
    stream: Literal[True], stream_options: Mapping[str, Any] | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None, tool_choice: str | Mapping[str, Any] | None = None,
    response_format: Mapping[str, Any] | None = None, logprobs: bool = False, top_logprobs: int | None = None,
    n: int = 1, max_tokens: int | None = None, max_completion_tokens: int | None = None,
    template: str | None = None, **options: Unpack[SharedOptions],
) -> Iterator[JSONDict]: ...


def create_chat_completion(
    target: Target,
    messages: Sequence[Mapping[str, Any]],
    *,
    model: str | None = None,
    stream: bool = False,
    stream_options: Mapping[str, Any] | None = None,
    tools: Sequence[Mapping[str, Any]] | None = None,
    tool_choice: str | Mapping[str, Any] | None = None,
    response_format: Mapping[str, Any] | None = None,
    logprobs: bool = False,
    top_logprobs: int | None = None,
    n: int = 1,
    max_tokens: int | None = None,
    max_completion_tokens: int | None = None,
    template: str | None = None,
    **options: Unpack[SharedOptions],
) -> JSONDict | Iterator[JSONDict]:
    """Reply to ``messages`` like OpenAI's ``chat.completions.create``.

    Returns a ``chat.completion`` dict, or with ``stream=True`` an iterator of
    ``chat.completion.chunk`` dicts (the first of each choice carries
    ``delta.role``, the last its ``finish_reason``; with
    ``stream_options={"include_usage": True}`` a final chunk with empty
    ``choices`` carries ``usage``). See the module docstring for the mapping.
    ``template`` overrides the model's chat template.

    Raises:
        ValueError: malformed messages, tools, tool_choice or response_format.
        TypeError: an unknown keyword (naming the closest valid one).
        ChatTemplateError, Cancelled, Overloaded, ...: as :func:`muser.chat`.
    """
    check_keywords("create_chat_completion", options, set(SharedOptions.__annotations__) | set(_CHAT_KEYWORDS))
    functions = _functions(tools)
    forced, forced_name = _forced_tool(tool_choice, functions)
    if tool_choice == "none" or not functions:
        functions_for_parse: dict[str, Mapping[str, Any]] = {}
    else:
        functions_for_parse = functions
    grammar = _tool_grammar(functions, forced_name) if forced else _response_grammar(response_format)
    if forced and response_format is not None and response_format.get("type") != "text":
        raise ValueError("response_format cannot be combined with a forced tool call")
    prompt = render_chat(target, _template_messages(messages), template, tools=list(tools) if tools else None)
    engine = _pool_of(target).engine
    started_at = time.monotonic()
    tokens = _tokenize_prompt(engine, prompt, True, options, started_at)
    requests = _prepare(target, tokens, n, max_completion_tokens if max_completion_tokens is not None else max_tokens,
                        options, grammar, logprobs, top_logprobs, None, "create_chat_completion", started_at)
    header = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": _model_name(target, model),
              "system_fingerprint": system_fingerprint(target)}
    vocab = _Tokens(target)
    want_logprobs = bool(logprobs or top_logprobs)
    if stream:
        include_usage = bool((stream_options or {}).get("include_usage"))
        return _chat_chunks(requests, header, len(tokens), vocab, want_logprobs, forced, forced_name,
                            functions if forced else functions_for_parse, include_usage)
    choices = []
    completion_tokens = 0
    for index, chunks in enumerate(_collect(requests)):
        for chunk in chunks:
            _check_finish(chunk)
        text = "".join(c.text for c in chunks)
        completion_tokens += sum(len(c.token_ids) for c in chunks)
        finish: str | None = chunks[-1].finish_reason if chunks else "length"
        message: JSONDict = {"role": "assistant", "content": text}
        calls = []
        if forced:
            calls = [(forced_name, text)] if forced_name is not None else _parse_tool_calls(text, functions)
        elif functions_for_parse:
            calls = _parse_tool_calls(text, functions_for_parse)
        if calls:
            message = {"role": "assistant", "content": None,
                       "tool_calls": [{"id": _call_id(), "type": "function",
                                       "function": {"name": name, "arguments": arguments}}
                                      for name, arguments in calls]}
            if finish == "stop":
                finish = "tool_calls"
        choice: JSONDict = {"index": index, "message": message, "finish_reason": finish, "logprobs": None}
        if want_logprobs:
            choice["logprobs"] = {"content": [entry for c in chunks for entry in _chat_logprobs(c, vocab)]}
        choices.append(choice)
    return {**header, "object": "chat.completion", "choices": choices,
            "usage": _usage(len(tokens), completion_tokens)}


def _could_be_tool_call(text: str) -> bool:
    """Whether a reply that starts with ``text`` may still turn out to be a tool call."""
    head = text.lstrip()
    return not head or head.startswith("{") or head.startswith("<tool_call>") or "<tool_call>".startswith(head)


def _chat_chunks(requests: list[_Request], header: JSONDict, prompt_tokens: int, vocab: _Tokens,
                 want_logprobs: bool, forced: bool, forced_name: str | None,
                 functions: Mapping[str, Mapping[str, Any]], include_usage: bool) -> Iterator[JSONDict]:
    """Chunks per choice. A named forced call streams its arguments as they
    come. Otherwise, while tools may be called ("required", or "auto" with a
    reply that so far could be a call), the text is held back and parsed at
    the end: tool_calls if it is a call, else the held text as content."""
    started: set[int] = set()
    held: dict[int, str] = {}  # choices whose text is held back, and the text so far
    call_ids: dict[int, str] = {}
    completion_tokens = 0
    base = {**header, "object": "chat.completion.chunk"}
    for chunk in _merged(requests):
        _check_finish(chunk)
        completion_tokens += len(chunk.token_ids)
        index = chunk.index
        delta: JSONDict = {}
        if index not in started:
            started.add(index)
            delta["role"] = "assistant"
            if functions and not (forced and forced_name is not None):
                held[index] = ""
        finish: str | None = chunk.finish_reason
        if forced and forced_name is not None:
            if chunk.text or index not in call_ids:
                call: JSONDict = {"index": 0, "function": {"arguments": chunk.text}}
                if index not in call_ids:
                    call_ids[index] = _call_id()
                    call.update(id=call_ids[index], type="function", function={"name": forced_name,
                                                                               "arguments": chunk.text})
                delta["tool_calls"] = [call]
            if finish == "stop":
                finish = "tool_calls"
        elif index in held:
            held[index] += chunk.text
            if finish is not None:
                text = held.pop(index)
                calls = _parse_tool_calls(text, functions)
                if calls:
                    delta["tool_calls"] = [{"index": i, "id": _call_id(), "type": "function",
                                            "function": {"name": name, "arguments": arguments}}
                                           for i, (name, arguments) in enumerate(calls)]
                    if finish == "stop":
                        finish = "tool_calls"
                else:
                    delta["content"] = text
            elif not forced and not _could_be_tool_call(held[index]):
                delta["content"] = held.pop(index)  # plain text after all: stream from here on
        elif chunk.text or "role" in delta:
            delta["content"] = chunk.text
        choice: JSONDict = {"index": index, "delta": delta, "finish_reason": finish, "logprobs": None}
        if want_logprobs and chunk.token_ids:
            choice["logprobs"] = {"content": _chat_logprobs(chunk, vocab)}
        if delta or finish is not None or choice["logprobs"] is not None:
            yield {**base, "choices": [choice]}
    if include_usage:
        yield {**base, "choices": [], "usage": _usage(prompt_tokens, completion_tokens)}


@overload
def create_completion(
    target: Target, prompt: str | Sequence[int], *, model: str | None = None, stream: Literal[False] = False,
    stream_options: Mapping[str, Any] | None = None, logprobs: int | None = None, n: int = 1,
    max_tokens: int | None = 16, **options: Unpack[SharedOptions],
) -> JSONDict: ...
@overload
def create_completion(
    target: Target, prompt: str | Sequence[int], *, model: str | None = None, stream: Literal[True],
    stream_options: Mapping[str, Any] | None = None, logprobs: int | None = None, n: int = 1,
    max_tokens: int | None = 16, **options: Unpack[SharedOptions],
) -> Iterator[JSONDict]: ...


def create_completion(
    target: Target,
    prompt: str | Sequence[int],
    *,
    model: str | None = None,
    stream: bool = False,
    stream_options: Mapping[str, Any] | None = None,
    logprobs: int | None = None,
    n: int = 1,
    max_tokens: int | None = 16,
    **options: Unpack[SharedOptions],
) -> JSONDict | Iterator[JSONDict]:
    """Complete ``prompt`` like OpenAI's legacy ``completions.create``.

    Returns a ``text_completion`` dict (or, streaming, an iterator of them).
    ``max_tokens`` defaults to 16 as in OpenAI's API; ``None`` runs to the end
    of the context. ``logprobs=k`` reports the chosen tokens' log-probabilities
    and the top ``k`` alternatives; ``echo=True`` prepends the prompt (its
    tokens then have no logprobs, so ``echo`` with ``logprobs`` is refused).

    Raises:
        ValueError, TypeError: as :func:`create_chat_completion`.
    """
    check_keywords("create_completion", options,
                   set(SharedOptions.__annotations__) | {"model", "stream", "stream_options", "logprobs", "n",
                                                              "max_tokens"})
    echo = bool(options.get("echo", False))
    if echo and logprobs is not None:
        raise ValueError("echo=True with logprobs is not supported (muser has no logprobs for prompt tokens)")
    engine = _pool_of(target).engine
    parse_special = bool(options.get("parse_special", False))
    started_at = time.monotonic()
    if isinstance(prompt, str):
        tokens = _tokenize_prompt(engine, prompt, parse_special, options, started_at)
    elif isinstance(prompt, Sequence) and prompt and all(isinstance(t, int) for t in prompt):
        tokens = [int(t) for t in prompt]
    else:
        raise TypeError("create_completion() takes one prompt: a string or a list of token ids; for several "
                        "prompts call it once per prompt, or use muser.generate(target, [p1, p2, ...])")
    rest = {k: v for k, v in options.items() if k != "parse_special"}
    requests = _prepare(target, tokens, n, max_tokens, rest, None, logprobs is not None, logprobs,
                        None, "create_completion", started_at)
    header = {"id": f"cmpl-{uuid.uuid4().hex}", "created": int(time.time()), "model": _model_name(target, model),
              "system_fingerprint": system_fingerprint(target), "object": "text_completion"}
    vocab = _Tokens(target)
    if stream:
        include_usage = bool((stream_options or {}).get("include_usage"))
        return _completion_chunks(requests, header, len(tokens), vocab, logprobs is not None, include_usage)
    choices = []
    completion_tokens = 0
    for index, chunks in enumerate(_collect(requests)):
        for chunk in chunks:
            _check_finish(chunk)
        completion_tokens += sum(len(c.token_ids) for c in chunks)
        finish = chunks[-1].finish_reason if chunks else "length"
        choices.append({"index": index, "text": "".join(c.text for c in chunks), "finish_reason": finish,
                        "logprobs": _completion_logprobs(chunks, vocab, 0) if logprobs is not None else None})
    return {**header, "choices": choices, "usage": _usage(len(tokens), completion_tokens)}


def _completion_logprobs(chunks: Sequence[GenerationChunk], vocab: _Tokens, offset: int) -> JSONDict:
    tokens, token_logprobs, top, offsets = [], [], [], []
    for chunk in chunks:
        for position, token in enumerate(chunk.token_ids):
            text = vocab.text(token)
            tokens.append(text)
            token_logprobs.append(chunk.logprobs[position] if chunk.logprobs is not None else 0.0)
            alternatives: dict[str, float] = {}
            if chunk.top_logprobs is not None:
                for alt in chunk.top_logprobs[position]:
                    alternatives.setdefault(vocab.text(alt.token), alt.logprob)
            top.append(alternatives)
            offsets.append(offset)
            offset += len(text)
    return {"tokens": tokens, "token_logprobs": token_logprobs, "top_logprobs": top, "text_offset": offsets}


def _completion_chunks(requests: list[_Request], header: JSONDict, prompt_tokens: int, vocab: _Tokens,
                       want_logprobs: bool, include_usage: bool) -> Iterator[JSONDict]:
    completion_tokens = 0
    offsets: dict[int, int] = {}
    for chunk in _merged(requests):
        _check_finish(chunk)
        completion_tokens += len(chunk.token_ids)
        logprobs = None
        if want_logprobs:
            logprobs = _completion_logprobs([chunk], vocab, offsets.get(chunk.index, 0))
            offsets[chunk.index] = offsets.get(chunk.index, 0) + sum(len(t) for t in logprobs["tokens"])
        if chunk.text or chunk.finish_reason is not None or chunk.token_ids:
            yield {**header, "choices": [{"index": chunk.index, "text": chunk.text,
                                          "finish_reason": chunk.finish_reason, "logprobs": logprobs}]}
    if include_usage:
        yield {**header, "choices": [], "usage": _usage(prompt_tokens, completion_tokens)}
