"""What `python -m muser info` shows: a model's configuration and a tokenized sentence."""

from __future__ import annotations

import time


def describe(path: str, text: str) -> str:
    """Load the GGUF at ``path`` and describe it in a few human-readable lines."""
    import muser

    started = time.perf_counter()
    engine = muser.Engine(path)
    elapsed = time.perf_counter() - started
    config = engine.config
    tokens = engine.tokenize(text)
    lines = [
        f"model:        {config.get('name') or path}",
        f"file:         {path}",
        f"architecture: {config['architecture']}",
        f"loaded in:    {elapsed * 1000:.1f} ms (mapped, validated, tokenizer built)",
        f"backend:      {engine.backend}, {engine.threads} threads",
    ]
    for key in ("context_length", "n_vocab", "n_embd", "n_layer", "n_head", "n_head_kv", "n_ff",
                "rope_freq_base", "sliding_window"):
        lines.append(f"  {key:<20} {config.get(key)}")
    lines.append(f"chat template: {'yes' if config.get('chat_template') else 'none'}")
    lines.append(f"text:         {text!r}")
    lines.append(f"tokens ({len(tokens)}): {tokens}")
    lines.append(f"pieces:       {[engine.detokenize([t]) for t in tokens]}")
    return "\n".join(lines)
