"""Command line: ``python -m muser fetch|info ...``.

Every command defaults to the default registry model, so a newcomer can type
``python -m muser info`` and see something real.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from muser import models
from muser.errors import MuserError


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _model_path(name: str) -> str:
    """A registry key (fetched on demand) or a path to any GGUF file."""
    if name in models.REGISTRY:
        return str(models.fetch(name, progress=_stderr))
    return name


def _cmd_fetch(args: argparse.Namespace) -> int:
    keys = list(models.REGISTRY) if args.all else args.keys or [models.DEFAULT_MODEL]
    for key in keys:
        print(models.fetch(key, progress=_stderr))
    return 0


def _cmd_info(args: argparse.Namespace) -> int:
    from muser.demo import describe

    print(describe(_model_path(args.model), args.text))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m muser", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    fetch = sub.add_parser("fetch", help="download and verify registry models into the cache")
    fetch.add_argument("keys", nargs="*", help=f"registry keys (default {models.DEFAULT_MODEL}); known: "
                       + ", ".join(models.REGISTRY))
    fetch.add_argument("--all", action="store_true", help="fetch every registry model")
    fetch.set_defaults(run=_cmd_fetch)

    info = sub.add_parser("info", help="load a model, print its config and tokenize a sentence")
    info.add_argument("model", nargs="?", default=models.DEFAULT_MODEL, help="registry key or .gguf path")
    info.add_argument("--text", default="The quick brown fox jumps over the lazy dog.",
                      help="sentence to tokenize")
    info.set_defaults(run=_cmd_info)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (MuserError, ValueError) as exc:
        _stderr(f"muser: error: {exc}")
        return 1
