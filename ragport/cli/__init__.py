"""The ``ragport`` command line (composition root for the command line).

Every command that reads or writes a corpus takes ``--store URL`` (or ``RAGPORT_STORE``, or
``store`` in a ``ragport.toml`` found upward from the current directory): ``memory://``, a
``postgresql://`` URL, or by default an embedded PostgreSQL + pgvector server under the
user's data directory, started on demand and reused by the next command.

Exit codes: 0 ok, 1 some inputs failed or nothing was found, 2 usage (a bad option, value or
configuration), 3 the store is unavailable, 4 the reranker failed or timed out (``RerankError``).

The package: ``parser`` (the top-level parser and its global options, accepted before the
command as well as after it), ``options`` (what the commands' subparsers share), ``config``
(store, scope and embedder from options, environment and ``ragport.toml``), ``output``
(tables, JSON, exit codes), ``progress``, and one module per command group (``query``,
``evaluate``, ``ingest``, ``lifecycle``, ``sync``, ``db``, ``demo``), each registering its
own subparsers (``register(sub, parents)``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO, cast

from ragport.cli.config import _resolve
from ragport.cli.demo import DEMO_QUERIES as DEMO_QUERIES

# Every public name of the former single module stays importable from here (and the help and
# docs tests walk _parser and _iter_commands).
from ragport.cli.lifecycle import GenerationsOut as GenerationsOut
from ragport.cli.lifecycle import GrantOut as GrantOut
from ragport.cli.output import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_RERANK,
    EXIT_STORE,
    EXIT_USAGE,
    EscapingStream,
)
from ragport.cli.output import NothingFound as NothingFound
from ragport.cli.parser import EMBEDDERS as EMBEDDERS
from ragport.cli.parser import MODES as MODES
from ragport.cli.parser import _iter_commands as _iter_commands
from ragport.cli.parser import _parser as _parser
from ragport.cli.query import TOKENS_PER_HIT as TOKENS_PER_HIT
from ragport.cli.query import HitOut as HitOut
from ragport.cli.query import QueryOut as QueryOut
from ragport.cli.query import WithheldOut as WithheldOut
from ragport.domain.errors import (
    CapabilityError,
    EmbedderMismatchError,
    RagportError,
    RerankError,
    StoreError,
    ValidationError,
)

__all__ = [
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_RERANK",
    "EXIT_STORE",
    "EXIT_USAGE",
    "main",
]


def _exit_code(exc: RagportError) -> int:
    if isinstance(exc, StoreError):
        return EXIT_STORE
    if isinstance(exc, RerankError):
        return EXIT_RERANK
    if isinstance(exc, ValidationError | CapabilityError | EmbedderMismatchError):
        return EXIT_USAGE
    return EXIT_FAILED


def _quiet_stdout() -> None:
    """After a closed pipe: point stdout at /dev/null so the interpreter's flush is silent."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _run(args: argparse.Namespace) -> int:
    _resolve(args)
    func: Callable[[argparse.Namespace], int] = args.func
    return int(func(args))


def main(argv: Sequence[str] | None = None, *, stderr: TextIO | None = None) -> int:
    args: Any = _parser().parse_args(argv)
    if args.command == "mcp":  # JSON-RPC on stdio, not a terminal: left as the server writes it
        return _main(args, stderr or sys.stderr)
    # Everything a command prints goes through escape_controls (see ragport/cli/output.py).
    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _escaping(out), _escaping(err)
    try:
        return _main(args, _escaping(stderr) if stderr is not None else sys.stderr)
    finally:
        sys.stdout, sys.stderr = out, err


def _escaping(stream: TextIO) -> TextIO:
    return stream if isinstance(stream, EscapingStream) else cast(TextIO, EscapingStream(stream))


def _main(args: Any, err: TextIO) -> int:
    try:
        return _run(args)
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_OK
    except KeyboardInterrupt:
        # Ctrl-C: what was committed stays (each file and each sync page is one transaction);
        # the one in flight wrote nothing. No traceback, the shell's exit status for SIGINT.
        print("ragport: interrupted; work already committed stays", file=err)
        return EXIT_INTERRUPTED
    except NothingFound as exc:
        print(f"ragport: {exc}", file=err)
        return EXIT_FAILED
    except RagportError as exc:
        print(f"ragport: {type(exc).__name__}: {exc}", file=err)
        return _exit_code(exc)
    except OSError as exc:
        name = f" {exc.filename}" if exc.filename else ""
        print(f"ragport: {type(exc).__name__}:{name} {exc.strerror or exc}", file=err)
        return EXIT_FAILED
