"""The ``ragport`` argument parser: the top-level parser and its global options; each command
module registers its own subparser (``register(sub, parents)``; ``ragport.cli.options`` holds
what they share)."""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence

from ragport.cli import config, db, demo, evaluate, ingest, lifecycle, query, sync
from ragport.cli.options import (
    EMBEDDERS,
    MODES,
    Parents,
    _Help,
    add_global_options,
    apply_global_options,
    build_parents,
    no_config_option,
)

__all__ = ["DESCRIPTION", "EMBEDDERS", "MODES", "_iter_commands", "_parser"]

DESCRIPTION = "The ``ragport`` command line (composition root for the command line)."

# In the order `ragport --help` lists the commands.
_REGISTER = (
    demo.register,
    ingest.register,
    query.register,
    evaluate.register,
    lifecycle.register,  # delete ... reindex
    config.register,
    query.register_mcp,
    sync.register,
    db.register,
)


class _RagportParser(argparse.ArgumentParser):
    """The top-level parser: once the command line is parsed, the global options given before
    the command are handed to it (``ragport.cli.options.apply_global_options``)."""

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        apply_global_options(self, parsed)
        return parsed, extras


def _parser() -> argparse.ArgumentParser:
    from importlib.metadata import PackageNotFoundError, version

    try:
        ragport_version = version("ragport")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        ragport_version = "unknown"

    parser = _RagportParser(
        prog="ragport",
        description=DESCRIPTION,
        epilog="exit codes: 0 ok, 1 some inputs failed or nothing found, 2 usage, "
        "3 store unavailable, 4 the reranker failed or timed out. "
        "`ragport COMMAND --help` for each command.\n",
        formatter_class=_Help,
    )
    parser.add_argument("--version", action="version", version=f"ragport {ragport_version}")
    no_config_option(parser, False)
    add_global_options(parser)
    sub = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=argparse.ArgumentParser
    )
    parents: Parents = build_parents()
    for register in _REGISTER:
        register(sub, parents)
    return parser


def _iter_commands(
    parser: argparse.ArgumentParser,
) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every (command path, parser) under ``parser`` (for the help tests and docs)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield name, child
                for sub_name, grandchild in _iter_commands(child):
                    yield f"{name} {sub_name}", grandchild
