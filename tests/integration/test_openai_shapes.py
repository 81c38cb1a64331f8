"""muser.openai results validate against the openai package's own types
(ChatCompletion, ChatCompletionChunk, Completion): usage counts, finish
reasons, logprobs, n, streaming, response_format and tool calls."""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk

import muser
import muser.openai as mo
from tests.fixtures.tiny_models import write_tiny_model


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return muser.Engine(write_tiny_model(tmp_path_factory.mktemp("oai") / "llama.gguf", weight_type="Q8_0"),
                        threads=2)


@pytest.fixture(scope="module")
def smollm2(smollm2_path):
    return muser.Engine(smollm2_path, threads=2)


def _completion_chunk(chunk: dict) -> Completion:
    """A streamed text_completion. The API (and so muser) sends finish_reason
    null until the last chunk, which the SDK's Completion type does not allow
    (the SDK builds stream chunks without validating them): everything else
    is validated, and a null finish_reason only where the stream goes on."""
    patched = {**chunk, "choices": [{**c, "finish_reason": c["finish_reason"] or "length"} for c in chunk["choices"]]}
    return Completion.model_validate(patched)


def _chat(result: dict) -> ChatCompletion:
    parsed = ChatCompletion.model_validate(result)
    # Every field we send is one the type knows (extra fields would pass silently).
    assert set(result) <= set(ChatCompletion.model_fields)
    return parsed


def test_a_completion_validates_and_counts_usage(tiny):
    result = mo.create_completion(tiny, [1, 2, 3], max_tokens=5, temperature=0)
    parsed = Completion.model_validate(result)
    assert parsed.object == "text_completion" and parsed.id.startswith("cmpl-")
    assert parsed.usage is not None
    assert (parsed.usage.prompt_tokens, parsed.usage.completion_tokens, parsed.usage.total_tokens) == (3, 5, 8)
    assert parsed.choices[0].finish_reason == "length"
    assert parsed.choices[0].text == muser.generate(tiny, [1, 2, 3], max_tokens=5, temperature=0)
    assert parsed.system_fingerprint == f"muser-{muser.__version__}_{tiny.backend}_llama.gguf"


def test_completion_logprobs_have_the_legacy_shape(tiny):
    result = mo.create_completion(tiny, [4, 5], max_tokens=4, temperature=0, logprobs=3)
    logprobs = Completion.model_validate(result).choices[0].logprobs
    assert logprobs is not None and logprobs.tokens is not None and logprobs.top_logprobs is not None
    assert len(logprobs.tokens) == len(logprobs.token_logprobs or []) == len(logprobs.top_logprobs) == 4
    assert all(len(alts) <= 3 and max(alts.values()) == pytest.approx(lp) for alts, lp in
               zip(logprobs.top_logprobs, logprobs.token_logprobs or []))  # greedy: chosen = most likely
    assert logprobs.text_offset == [sum(len(t) for t in logprobs.tokens[:i]) for i in range(4)]


def test_streamed_completion_chunks_validate_and_join_to_the_whole(tiny):
    chunks = list(mo.create_completion(tiny, [1, 2, 3], max_tokens=6, temperature=0, stream=True,
                                       stream_options={"include_usage": True}))
    parsed = [_completion_chunk(c) for c in chunks]
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-2]] == [None] * (len(chunks) - 2)
    text = "".join(p.choices[0].text for p in parsed if p.choices)
    assert text == mo.create_completion(tiny, [1, 2, 3], max_tokens=6, temperature=0)["choices"][0]["text"]
    assert parsed[-2].choices[0].finish_reason == "length"
    assert parsed[-1].choices == [] and parsed[-1].usage is not None and parsed[-1].usage.completion_tokens == 6
    assert len({p.id for p in parsed}) == 1


def test_n_completions_have_their_own_index_and_seed(tiny):
    result = mo.create_completion(tiny, [7, 8], max_tokens=6, n=3, seed=11, temperature=1.0)
    parsed = Completion.model_validate(result)
    assert [c.index for c in parsed.choices] == [0, 1, 2]
    assert [c.text for c in parsed.choices] == [
        muser.generate(tiny, [7, 8], max_tokens=6, seed=11 + i, temperature=1.0) for i in range(3)]
    assert parsed.usage is not None and parsed.usage.completion_tokens == 18
    streamed = list(mo.create_completion(tiny, [7, 8], max_tokens=6, n=3, seed=11, temperature=1.0, stream=True))
    by_index = {i: "".join(c["choices"][0]["text"] for c in streamed if c["choices"][0]["index"] == i)
                for i in range(3)}
    assert [by_index[i] for i in range(3)] == [c.text for c in parsed.choices]


def test_unknown_keywords_and_lists_of_prompts_are_explained(tiny):
    with pytest.raises(TypeError, match="did you mean max_tokens"):
        mo.create_completion(tiny, "hi", max_new_tokens=3)
    with pytest.raises(TypeError, match=r"muser.generate\(target, \[p1, p2, ...\]\)"):
        mo.create_completion(tiny, ["a", "b"])


def test_a_chat_completion_validates(tiny):
    messages = [{"role": "system", "content": "Be brief."},
                {"role": "user", "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}]}]
    result = mo.create_chat_completion(tiny, messages, max_tokens=4, temperature=0, logprobs=True, top_logprobs=2)
    parsed = _chat(result)
    assert parsed.object == "chat.completion" and parsed.id.startswith("chatcmpl-")
    choice = parsed.choices[0]
    assert choice.message.role == "assistant" and choice.finish_reason == "length"
    assert choice.logprobs is not None and choice.logprobs.content is not None
    assert len(choice.logprobs.content) == 4 and all(len(e.top_logprobs) == 2 for e in choice.logprobs.content)
    prompt = muser.generation.render_chat(tiny, [messages[0], {"role": "user", "content": "Hello there"}])
    assert parsed.usage is not None
    assert parsed.usage.prompt_tokens == len(tiny.tokenize(prompt, parse_special=True))
    assert choice.message.content == muser.chat(tiny, [messages[0], {"role": "user", "content": "Hello there"}],
                                                max_tokens=4, temperature=0)


def test_streamed_chat_chunks_validate(tiny):
    chunks = list(mo.create_chat_completion(tiny, [{"role": "user", "content": "hi"}], max_tokens=5, temperature=0,
                                            stream=True, stream_options={"include_usage": True}))
    parsed = [ChatCompletionChunk.model_validate(c) for c in chunks]
    assert parsed[0].choices[0].delta.role == "assistant"
    assert parsed[-2].choices[0].finish_reason == "length"
    assert parsed[-1].usage is not None and parsed[-1].usage.completion_tokens == 5
    text = "".join(p.choices[0].delta.content or "" for p in parsed if p.choices)
    assert text == mo.create_chat_completion(tiny, [{"role": "user", "content": "hi"}], max_tokens=5,
                                             temperature=0)["choices"][0]["message"]["content"]


def test_assistant_tool_call_turns_with_none_content_are_accepted(tiny):
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
    ]
    template = ("{% for m in messages %}{% if m.tool_calls %}{{ m.tool_calls[0].function.arguments.city }}"
                "{% else %}{{ m.content }}{% endif %}|{% endfor %}")
    _chat(mo.create_chat_completion(tiny, messages, template=template, max_tokens=2))
    assert muser.generation.render_chat(tiny, mo._template_messages(messages), template) == "weather?|Oslo|rain|"


def test_bad_requests_are_clear_errors(tiny):
    user = [{"role": "user", "content": "x"}]
    with pytest.raises(ValueError, match="only text parts"):
        mo.create_chat_completion(tiny, [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])
    with pytest.raises(ValueError, match="tool_choice='required' needs tools"):
        mo.create_chat_completion(tiny, user, tool_choice="required")
    with pytest.raises(ValueError, match="not among tools"):
        mo.create_chat_completion(tiny, user, tools=[_WEATHER], tool_choice={"type": "function",
                                                                             "function": {"name": "nope"}})
    with pytest.raises(ValueError, match="response_format type"):
        mo.create_chat_completion(tiny, user, response_format={"type": "yaml"})


_WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 20},
                                                    "unit": {"enum": ["c", "f"]}},
                   "required": ["city", "unit"], "additionalProperties": False}}}
_TIME = {"type": "function", "function": {
    "name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 10}},
                                       "required": ["zone"], "additionalProperties": False}}}


@pytest.mark.real_model
def test_json_schema_response_format_gives_valid_json(smollm2):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                               "age": {"type": "integer", "minimum": 0, "maximum": 120}},
              "required": ["name", "age"], "additionalProperties": False}
    result = mo.create_chat_completion(
        smollm2, [{"role": "user", "content": "Give a person as JSON."}], max_tokens=60, temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": schema}})
    content = _chat(result).choices[0].message.content
    assert content is not None
    jsonschema.validate(json.loads(content), schema)
    obj = mo.create_chat_completion(smollm2, [{"role": "user", "content": "Return a JSON object with your name "
                                               "and age."}], max_tokens=80, temperature=0,
                                    response_format={"type": "json_object"})
    assert obj["choices"][0]["finish_reason"] == "stop"
    assert isinstance(json.loads(obj["choices"][0]["message"]["content"]), dict)


@pytest.mark.real_model
def test_a_named_tool_choice_returns_schema_valid_arguments(smollm2):
    result = mo.create_chat_completion(
        smollm2, [{"role": "user", "content": "What's the weather in Paris?"}], tools=[_WEATHER, _TIME],
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=60, temperature=0)
    choice = _chat(result).choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls or []
    assert call.type == "function" and call.function.name == "get_weather" and call.id.startswith("call_")
    jsonschema.validate(json.loads(call.function.arguments), _WEATHER["function"]["parameters"])


@pytest.mark.real_model
def test_required_tool_choice_picks_one_of_the_tools(smollm2):
    result = mo.create_chat_completion(
        smollm2, [{"role": "user", "content": "What time is it in UTC?"}], tools=[_WEATHER, _TIME],
        tool_choice="required", max_tokens=60, temperature=0)
    (call,) = _chat(result).choices[0].message.tool_calls or []
    spec = {"get_weather": _WEATHER, "get_time": _TIME}[call.function.name]
    jsonschema.validate(json.loads(call.function.arguments), spec["function"]["parameters"])
    chunks = list(mo.create_chat_completion(
        smollm2, [{"role": "user", "content": "Weather in Rome?"}], tools=[_WEATHER],
        tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=60, temperature=0,
        stream=True))
    parsed = [ChatCompletionChunk.model_validate(c) for c in chunks]
    first = (parsed[0].choices[0].delta.tool_calls or [])[0]
    assert first.id is not None and first.function is not None and first.function.name == "get_weather"
    arguments = "".join((c.choices[0].delta.tool_calls or [])[0].function.arguments or ""  # type: ignore[union-attr]
                        for c in parsed if c.choices[0].delta.tool_calls)
    jsonschema.validate(json.loads(arguments), _WEATHER["function"]["parameters"])
    assert parsed[-1].choices[0].finish_reason == "tool_calls"


def test_tool_calls_the_model_writes_itself_are_recognized():
    functions = {"get_weather": _WEATHER["function"]}
    assert mo._parse_tool_calls('<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
                                functions) == [("get_weather", '{"city": "Oslo"}')]
    assert mo._parse_tool_calls('{"name": "get_weather", "parameters": {"city": "Rome"}}', functions) == \
        [("get_weather", '{"city": "Rome"}')]
    assert mo._parse_tool_calls("It is sunny.", functions) == []
    assert mo._parse_tool_calls('{"name": "other", "arguments": {}}', functions) == []


def _forcing(engine: muser.Engine, text: str, prompt_length: int):
    """A logits processor that makes the model write exactly ``text``, then end."""
    target = engine.tokenize(text, add_special=False)
    end = engine.eog_ids[0]

    def force(token_ids, logits):
        step = len(token_ids) - prompt_length
        out = np.full_like(logits, -np.inf)
        out[target[step] if step < len(target) else end] = 0.0
        return out

    return force


def _prompt_length(engine: muser.Engine, messages, tools) -> int:
    prompt = muser.generation.render_chat(engine, mo._template_messages(messages), tools=tools)
    return len(engine.tokenize(prompt, parse_special=True))


@pytest.mark.real_model
@pytest.mark.parametrize("written", [
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c"}}\n</tool_call>',
    '{"name": "get_weather", "arguments": {"city": "Oslo", "unit": "c"}}',
])
def test_auto_tool_choice_recognizes_a_call_the_model_writes_streamed_or_not(smollm2, written):
    messages = [{"role": "user", "content": "Weather in Oslo?"}]
    force = _forcing(smollm2, written, _prompt_length(smollm2, messages, [_WEATHER]))
    result = _chat(mo.create_chat_completion(smollm2, messages, tools=[_WEATHER], max_tokens=60, temperature=0,
                                             logits_processors=[force]))
    (call,) = result.choices[0].message.tool_calls or []
    assert (call.function.name, json.loads(call.function.arguments)) == ("get_weather", {"city": "Oslo", "unit": "c"})
    assert result.choices[0].finish_reason == "tool_calls" and result.choices[0].message.content is None
    chunks = [ChatCompletionChunk.model_validate(c) for c in mo.create_chat_completion(
        smollm2, messages, tools=[_WEATHER], max_tokens=60, temperature=0, logits_processors=[force], stream=True)]
    assert not any(c.choices[0].delta.content for c in chunks)  # held back, never leaked as text
    calls = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
    assert len(calls) == 1 and calls[0].function is not None and calls[0].function.name == "get_weather"
    assert json.loads(calls[0].function.arguments or "") == {"city": "Oslo", "unit": "c"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.real_model
def test_auto_tool_choice_streams_plain_text_as_it_comes(smollm2):
    messages = [{"role": "user", "content": "Say hello."}]
    written = "Hello there, friend. It is a fine day."
    force = _forcing(smollm2, written, _prompt_length(smollm2, messages, [_WEATHER]))
    chunks = [ChatCompletionChunk.model_validate(c) for c in mo.create_chat_completion(
        smollm2, messages, tools=[_WEATHER], max_tokens=30, temperature=0, logits_processors=[force], stream=True)]
    pieces = [c.choices[0].delta.content for c in chunks if c.choices[0].delta.content]
    assert "".join(pieces) == written and len(pieces) > 3  # streamed, not held to the end
    assert chunks[-1].choices[0].finish_reason == "stop"
    assert not any(c.choices[0].delta.tool_calls for c in chunks)


def test_a_cancelled_request_raises_cancelled(tiny):
    cancel = muser.CancelToken()
    cancel.cancel()
    with pytest.raises(muser.Cancelled):
        mo.create_completion(tiny, [1, 2, 3], max_tokens=5, cancel=cancel)
    with pytest.raises(muser.Cancelled):
        list(mo.create_chat_completion(tiny, [{"role": "user", "content": "hi"}], max_tokens=5, cancel=cancel,
                                       stream=True))
