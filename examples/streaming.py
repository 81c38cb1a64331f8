"""Stream tokens as they are generated, with a stop string and timings."""

import muser

engine = muser.Engine.from_registry()
last = None
for chunk in muser.stream(engine, "A short poem about the sea:\n", max_tokens=80, seed=7, stop=["\n\n"]):
    print(chunk.text, end="", flush=True)
    last = chunk
print()
if last is not None and last.timings is not None:  # the last chunk carries the finish reason and timings
    print(f"[finish: {last.finish_reason}, {last.timings.generated_tokens_per_second:.1f} tok/s]")
