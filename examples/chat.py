"""Chat with the model's own template (ChatML for SmolLM2), and JSON output under a schema."""

import json

import muser

engine = muser.Engine.from_registry()
messages = [{"role": "user", "content": "Give me two tips for learning to cook."}]
for chunk in muser.chat(engine, messages, stream=True, max_tokens=120, temperature=0.3, seed=1):
    print(chunk.text, end="", flush=True)
print()

schema = {"type": "object", "properties": {"dish": {"type": "string", "maxLength": 30},
                                            "minutes": {"type": "integer", "minimum": 1, "maximum": 240}},
          "required": ["dish", "minutes"], "additionalProperties": False}
reply = muser.chat(engine, [{"role": "user", "content": "Suggest a quick dinner as JSON."}],
                   grammar=muser.Grammar.from_json_schema(schema), max_tokens=60, seed=2)
print(json.loads(reply))
