"""Command line: ``python -m muser generate|chat|fetch|info|bench ...``.

Every command defaults to the default registry model, so a newcomer can type
``python -m muser info`` and see something real.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Sequence

from muser import models

if TYPE_CHECKING:
    import muser
    from muser.types import GenerationChunk
from muser.errors import MuserError


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _setup_logging(verbosity: int) -> None:
    """The library logs to ``logging.getLogger("muser")``; the command line shows
    INFO and up on stderr (``-v``: DEBUG, ``-q``: warnings only)."""
    logger = logging.getLogger("muser")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("muser: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if verbosity > 0 else logging.WARNING if verbosity < 0 else logging.INFO)
    logger.propagate = False


def _model_path(name: str) -> str:
    """A registry key (fetched on demand, with a progress bar on a terminal) or a path to any GGUF file."""
    if name in models.REGISTRY:
        return str(models.fetch(name))
    return name


def _cmd_fetch(args: argparse.Namespace) -> int:
    keys = list(models.REGISTRY) if args.all else args.keys or [models.DEFAULT_MODEL]
    for key in keys:
        print(models.fetch(key, progress=False if args.no_progress else None))
    return 0


def _cmd_info(args: argparse.Namespace) -> int:
    from muser.demo import describe

    print(describe(_model_path(args.model), args.text))
    return 0


def _engine(name: str, threads: int | None) -> muser.Engine:
    import muser

    return muser.Engine(_model_path(name), threads=threads)


def _sampling(args: argparse.Namespace) -> dict[str, Any]:
    return dict(max_tokens=args.max_tokens, temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                seed=args.seed)


@contextlib.contextmanager
def _closing(chunks: Iterator[GenerationChunk]) -> Iterator[Iterator[GenerationChunk]]:
    """Closes the stream on leaving the block for any reason (Ctrl-C, a closed
    pipe), which cancels its request."""
    try:
        yield chunks
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


def _cmd_generate(args: argparse.Namespace) -> int:
    import muser

    engine = _engine(args.model, args.threads)
    last = None
    # Leaving the block for any reason (Ctrl-C, a closed pipe) cancels the request.
    with _closing(muser.stream(engine, args.prompt, **_sampling(args))) as chunks:
        for chunk in chunks:
            print(chunk.text, end="", flush=True)
            last = chunk
    print()
    if last is not None and last.timings is not None:
        t = last.timings
        _stderr(f"[{t.prompt_tokens} prompt tokens at {t.prompt_tokens_per_second:.1f} tok/s, "
                f"{t.generated_tokens} generated at {t.generated_tokens_per_second:.1f} tok/s, "
                f"finish: {last.finish_reason}]")
    return 0


def _template(value: str | None) -> str | None:
    """``--template``: a file holding a Jinja2 chat template, or the template text itself."""
    if value is not None and os.path.isfile(value):
        with open(value, encoding="utf-8") as handle:
            return handle.read()
    return value


def _cmd_chat(args: argparse.Namespace) -> int:
    import muser

    engine = _engine(args.model, args.threads)
    messages: list[dict[str, str]] = []
    if args.system:
        messages.append({"role": "system", "content": args.system})
    turns = list(args.message) if args.message else None
    while True:
        if turns is not None:
            if not turns:
                return 0
            user = turns.pop(0)
        else:
            try:
                user = input("you> ")
            except EOFError:
                print()
                return 0
        messages.append({"role": "user", "content": user})
        reply = []
        with _closing(muser.chat(engine, messages, stream=True, template=_template(args.template),
                                 **_sampling(args))) as chunks:
            for chunk in chunks:
                print(chunk.text, end="", flush=True)
                reply.append(chunk.text)
        print()
        messages.append({"role": "assistant", "content": "".join(reply)})


def _cmd_bench(args: argparse.Namespace) -> int:
    import time

    engine = _engine(args.model, args.threads)
    prompt = engine.tokenize("The quick brown fox jumps over the lazy dog. " * 64)[: args.prompt_tokens]
    session = engine.session(max_context=len(prompt) + args.decode_tokens + 1)
    started = time.perf_counter()
    session.prefill(prompt)
    prefill_s = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(args.decode_tokens):
        logits = session.logits
        assert logits is not None  # (prefilled above)
        session.decode(int(logits.argmax()))
    decode_s = time.perf_counter() - started
    print(f"{engine.config['name']} ({engine.backend}, {engine.threads} threads)")
    print(f"prefill: {len(prompt)} tokens in {prefill_s:.3f} s = {len(prompt) / prefill_s:.1f} tok/s")
    print(f"decode:  {args.decode_tokens} tokens in {decode_s:.3f} s = {args.decode_tokens / decode_s:.1f} tok/s")
    return 0


def _add_generation_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default=models.DEFAULT_MODEL, help="registry key or .gguf path")
    parser.add_argument("--threads", type=int, default=None, help="compute threads (default: physical cores)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--top-k", type=int, default=40)
    parser.add_argument("--top-p", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=None)


def build_parser() -> argparse.ArgumentParser:
    from muser import __version__

    parser = argparse.ArgumentParser(prog="python -m muser", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"muser {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log more (DEBUG)")
    parser.add_argument("-q", "--quiet", action="store_true", help="log warnings only")
    sub = parser.add_subparsers(dest="command", required=True)

    fetch = sub.add_parser("fetch", help="download and verify registry models into the cache")
    fetch.add_argument("keys", nargs="*", help=f"registry keys (default {models.DEFAULT_MODEL}); known: "
                       + ", ".join(models.REGISTRY))
    fetch.add_argument("--all", action="store_true", help="fetch every registry model")
    fetch.add_argument("--no-progress", action="store_true", help="no progress bar (default: shown on a terminal)")
    fetch.set_defaults(run=_cmd_fetch)

    info = sub.add_parser("info", help="load a model, print its config and tokenize a sentence")
    info.add_argument("model", nargs="?", default=models.DEFAULT_MODEL, help="registry key or .gguf path")
    info.add_argument("--text", default="The quick brown fox jumps over the lazy dog.",
                      help="sentence to tokenize")
    info.set_defaults(run=_cmd_info)

    generate = sub.add_parser("generate", help="stream a completion of a prompt")
    generate.add_argument("prompt", nargs="?", default="Once upon a time,", help="the prompt text")
    _add_generation_options(generate)
    generate.set_defaults(run=_cmd_generate)

    chat = sub.add_parser("chat", help="chat with the model (interactive unless --message is given)")
    chat.add_argument("--message", action="append", help="a user turn (repeatable); omit for interactive")
    chat.add_argument("--system", default=None, help="a system prompt")
    chat.add_argument("--template", default=None, help="a Jinja2 chat template, or a file holding one (for models without one)")
    _add_generation_options(chat)
    chat.set_defaults(run=_cmd_chat)

    bench = sub.add_parser("bench", help="quick prefill/decode speed check")
    bench.add_argument("--model", default=models.DEFAULT_MODEL, help="registry key or .gguf path")
    bench.add_argument("--threads", type=int, default=None)
    bench.add_argument("--prompt-tokens", type=int, default=128)
    bench.add_argument("--decode-tokens", type=int, default=64)
    bench.set_defaults(run=_cmd_bench)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    _setup_logging(-1 if args.quiet else args.verbose)
    try:
        code: int = args.run(args)
        return code
    except (MuserError, ValueError) as exc:
        _stderr(f"muser: error: {exc}")
        return 1
    except KeyboardInterrupt:
        # The request was cancelled on the way out; the exit hook joins its thread.
        _stderr("\nmuser: interrupted")
        return 130
    except BrokenPipeError:
        # The reader went away (`... | head`). Point stdout at /dev/null so the
        # interpreter's final flush does not fail a second time.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a shell reports a writer killed by a closed pipe
