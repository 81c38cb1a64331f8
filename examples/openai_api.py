"""OpenAI-shaped results: feed muser's answers to code written for the OpenAI client.

``muser.openai.create_chat_completion`` returns the dicts the OpenAI API
returns (``choices``, ``usage``, ``finish_reason``, ``tool_calls``), so code
that reads ``response["choices"][0]["message"]`` works unchanged.
"""

from __future__ import annotations

import json

import muser
import muser.openai

engine = muser.Engine.from_registry()

reply = muser.openai.create_chat_completion(
    engine, [{"role": "user", "content": "Name a fruit in one word."}], max_tokens=8, temperature=0)
print(reply["choices"][0]["message"]["content"], reply["usage"])

# Structured output: the reply is JSON valid against the schema (generated under its grammar).
schema = {"type": "object", "properties": {"fruit": {"type": "string", "maxLength": 20},
                                           "color": {"type": "string", "maxLength": 20}},
          "required": ["fruit", "color"], "additionalProperties": False}
reply = muser.openai.create_chat_completion(
    engine, [{"role": "user", "content": "Describe a fruit as JSON."}], max_tokens=60, temperature=0,
    response_format={"type": "json_schema", "json_schema": {"name": "fruit", "schema": schema}})
print(json.loads(reply["choices"][0]["message"]["content"]))

# Tool calling: the model must call get_weather; its arguments follow the function's schema.
tools = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 30}},
                   "required": ["city"], "additionalProperties": False}}}]
reply = muser.openai.create_chat_completion(
    engine, [{"role": "user", "content": "What's the weather in Lisbon?"}], tools=tools,
    tool_choice={"type": "function", "function": {"name": "get_weather"}}, max_tokens=40, temperature=0)
call = reply["choices"][0]["message"]["tool_calls"][0]
print(call["function"]["name"], json.loads(call["function"]["arguments"]), reply["choices"][0]["finish_reason"])

# Streaming: chat.completion.chunk dicts with deltas.
for chunk in muser.openai.create_chat_completion(
        engine, [{"role": "user", "content": "Count to five."}], max_tokens=30, temperature=0, stream=True):
    print(chunk["choices"][0]["delta"].get("content") or "", end="", flush=True)
print()
