"""An asyncio app: several generations stream concurrently without blocking the event loop."""

import asyncio

import muser


async def one(pool: muser.SlotPool, prompt: str, seed: int) -> str:
    parts = []
    async for chunk in muser.astream(pool, prompt, max_tokens=30, seed=seed):
        parts.append(chunk.text)
    return "".join(parts)


async def main() -> None:
    pool = muser.SlotPool(muser.Engine.from_registry(), slots=4)
    prompts = ["Tea is", "Coffee is", "Water is"]
    results = await asyncio.gather(*(one(pool, p, i) for i, p in enumerate(prompts)))
    for prompt, text in zip(prompts, results):
        print(f"{prompt}{text}")


asyncio.run(main())
