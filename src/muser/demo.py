"""What `python -m muser info` shows: a model's configuration and a tokenized sentence."""

from __future__ import annotations

import time

from muser import _core


def describe(path: str, text: str) -> str:
    """Load the GGUF at ``path`` and describe it in a few human-readable lines."""
    started = time.perf_counter()
    gguf = _core.GgufFile.open(path)
    elapsed = time.perf_counter() - started
    metadata = gguf.metadata()
    arch = metadata.get("general.architecture", "?")
    lines = [
        f"model:        {metadata.get('general.name', path)}",
        f"file:         {path}",
        f"architecture: {arch}",
        f"loaded in:    {elapsed * 1000:.1f} ms (mapped, validated)",
        f"tensors:      {len(gguf.tensor_infos())}",
    ]
    for key, value in metadata.items():
        if isinstance(key, str) and key.startswith(f"{arch}."):
            lines.append(f"  {key[len(arch) + 1:]:<40} {value}")
    tokens = metadata.get("tokenizer.ggml.tokens")
    if tokens is not None:
        lines.append(f"vocabulary:   {len(tokens)} tokens ({metadata.get('tokenizer.ggml.model')}, "
                     f"pre-tokenizer {metadata.get('tokenizer.ggml.pre', 'default')})")
    lines.append(f"text:         {text!r}")
    return "\n".join(lines)
