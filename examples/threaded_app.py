"""A threaded app: eight request threads share one SlotPool of four slots.

Their decode steps are packed into shared weight passes; each thread gets
exactly the text it would have got alone (same seed, same output).
"""

import threading

import muser

engine = muser.Engine.from_registry()
pool = muser.SlotPool(engine, slots=4, max_waiting=64)
topics = ["rivers", "mountains", "cities", "forests", "deserts", "islands", "glaciers", "volcanoes"]
answers: dict[str, str] = {}


def worker(topic: str) -> None:
    answers[topic] = muser.generate(pool, f"One fact about {topic}:", max_tokens=30, seed=1, temperature=0.7)


threads = [threading.Thread(target=worker, args=(t,)) for t in topics]
for t in threads:
    t.start()
for t in threads:
    t.join()
for topic in topics:
    print(f"{topic}: {answers[topic].strip()}")
stats = pool.stats()
print("decode group sizes:", stats["batcher"]["group_size_counts"], "admissions:", stats["admission"]["admissions"])
