"""What every command's subparser is built from: the help formatter, ``command`` (one
subparser with its examples), the shared option groups (``Parents``), the help texts several
commands share, and the global options (``GLOBAL_OPTIONS``: accepted before the command as
well as after it).

Each command module registers its own subparser with a ``register(sub, parents)`` function;
``ragport.cli.parser`` builds the top-level parser and calls them in the order ``ragport
--help`` lists the commands.

Global options before the command (``ragport --store memory:// ingest docs``) mean what they
mean after it. The top-level parser keeps them under their own names (``GLOBAL_DEST``); once
the command line is parsed, ``apply_global_options`` hands each to the command, which must
take that option (``ragport --corpus kb db stop`` is a usage error naming it), and the one
given after the command wins when both are given (as a repeated option does: the last wins;
``ragport --corpus a query x --corpus b`` searches ``b`` only).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, NamedTuple

from ragport.domain.limits import DEFAULT_LIMITS, HARD_LIMITS

__all__ = [
    "EMBEDDERS",
    "GLOBAL_OPTIONS",
    "MODES",
    "Parents",
    "apply_global_options",
    "build_parents",
    "command",
    "group",
]

EMBEDDERS = ("minilm", "hash")
MODES = ("vector", "lexical", "hybrid")

ENCODING_HELP = (
    "how .txt .md .rst bytes are read: utf-8 (strict), auto (UTF-8, else detected: for "
    "Latin-1/cp1252 folders) or a codec name such as cp1252 (default: the one recorded with "
    "the corpus, else ragport.toml, else utf-8)"
)
MAX_BYTES_HELP = (
    f"document byte cap (default: recorded with the corpus, else [limits] parse_bytes in "
    f"ragport.toml, else {DEFAULT_LIMITS.parse_bytes}); at most {HARD_LIMITS.parse_bytes}, or "
    f"the parse_bytes ragport.toml sets; for PDF and DOCX it caps the extracted text, the file "
    f"itself may be up to [limits] binary_bytes, else {DEFAULT_LIMITS.binary_bytes} "
    f"(docs/limits.md)"
)
SIZE_HELP = "chunk size in characters (default: recorded with the corpus, else 1000)"
OVERLAP_HELP = "chunk overlap in characters (default: recorded with the corpus, else 100)"
TIMEOUT_HELP = (
    f"CPU seconds one document's parse may use (default: recorded with the corpus, else "
    f"[limits] parse_ms / 1000 in ragport.toml, else {DEFAULT_LIMITS.parse_ms // 1000}); at most "
    f"{HARD_LIMITS.parse_ms // 1000}, or what parse_ms in ragport.toml sets"
)
WALL_TIMEOUT_HELP = (
    f"wall-clock seconds one document's parse may take however busy the machine, a backstop "
    f"(default: recorded with the corpus, else [limits] parse_wall_ms / 1000 in ragport.toml, else "
    f"{DEFAULT_LIMITS.parse_wall_ms // 1000}); at most {HARD_LIMITS.parse_wall_ms // 1000}"
)


def add_document_options(parser: argparse.ArgumentParser) -> None:
    """The chunking and parse caps ``ingest`` and ``sync`` share (recorded with the corpus):
    ``--size``, ``--overlap``, ``--max-bytes``, ``--timeout``, ``--wall-timeout``."""
    parser.add_argument("--size", type=int, default=None, help=SIZE_HELP)
    parser.add_argument("--overlap", type=int, default=None, help=OVERLAP_HELP)
    parser.add_argument("--max-bytes", type=int, default=None, help=MAX_BYTES_HELP)
    parser.add_argument("--timeout", type=float, default=None, help=TIMEOUT_HELP)
    parser.add_argument("--wall-timeout", type=float, default=None, help=WALL_TIMEOUT_HELP)


NO_CONFIG_HELP = (
    "read no ragport.toml at all, neither one found upward nor your own (also: RAGPORT_NO_CONFIG=1)"
)

STORE_HELP = (
    "memory://, postgresql://... or embedded (default: RAGPORT_STORE, ragport.toml, else the "
    "embedded server)"
)
READ_STORE_HELP = "a streaming replica for reads: postgresql://... (default: RAGPORT_READ_STORE)"
SCHEMA_HELP = "PostgreSQL schema (default: ragport.toml, else ragport)"
TENANT_HELP = "tenant id (default: ragport.toml, else local)"
RESOURCE_HELP = "resource id (default: ragport.toml, else default)"
CORPUS_HELP = "corpus name (default: ragport.toml, else default)"
EMBEDDER_HELP = (
    "embedder: minilm, hash or an installed plugin's name (default: the one the corpus was "
    "ingested with, ragport.toml, else minilm)"
)
JSON_HELP = "print JSON instead of a table"


class _Help(argparse.RawDescriptionHelpFormatter):
    """Keeps the examples' layout and shows each option's default where it has one."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            "%(default)" not in text
            and "default" not in text
            and action.option_strings
            and action.default not in (None, False, argparse.SUPPRESS)
        ):
            text += " (default: %(default)s)"
        return text


def no_config_option(parser: argparse.ArgumentParser, default: Any) -> None:
    """``--no-config``: on the top-level parser (default ``False``) and on every command
    (``SUPPRESS``, so that a ``--no-config`` before the command is not reset after it)."""
    parser.add_argument("--no-config", action="store_true", default=default, help=NO_CONFIG_HELP)


def command(
    sub: Any, name: str, summary: str, examples: Sequence[str], parents: Sequence[Any] = ()
) -> argparse.ArgumentParser:
    """The subparser of one command under ``sub``: its one-line summary, its examples as the
    epilog, the shared option groups ``parents``, and ``--no-config``."""
    epilog = "examples:\n" + "".join(f"  {e}\n" for e in examples) if examples else None
    parser: argparse.ArgumentParser = sub.add_parser(
        name,
        parents=list(parents),
        help=summary,
        description=summary[0].upper() + summary[1:] + ".",
        epilog=epilog,
        formatter_class=_Help,
    )
    no_config_option(parser, argparse.SUPPRESS)  # given before or after the command: both work
    return parser


def group(sub: Any, name: str, summary: str, description: str, dest: str) -> Any:
    """A command group (``grants``, ``sync``, ``db``): its subparser and the subparsers action
    its own commands register on (``dest`` names the chosen one)."""
    parser = sub.add_parser(name, help=summary, formatter_class=_Help, description=description)
    return parser.add_subparsers(dest=dest, required=True, metavar="COMMAND")


class Parents(NamedTuple):
    """The option groups commands share (argparse parents, added to each command that takes
    them)."""

    stored: argparse.ArgumentParser  # --store --read-store --schema --tenant --resource
    one_corpus: argparse.ArgumentParser  # --corpus (one)
    embed: argparse.ArgumentParser  # --embedder
    json_out: argparse.ArgumentParser  # --json
    common: argparse.ArgumentParser  # stored + one_corpus + embed
    corpus_only: argparse.ArgumentParser  # stored + one_corpus


def build_parents() -> Parents:
    """Fresh option groups (a parser built twice never shares an action)."""
    stored = argparse.ArgumentParser(add_help=False)
    stored.add_argument("--store", help=STORE_HELP)
    stored.add_argument("--read-store", help=READ_STORE_HELP)
    stored.add_argument("--schema", help=SCHEMA_HELP)
    stored.add_argument("--tenant", help=TENANT_HELP)
    stored.add_argument("--resource", help=RESOURCE_HELP)
    one_corpus = argparse.ArgumentParser(add_help=False)
    one_corpus.add_argument("--corpus", help=CORPUS_HELP)
    one_corpus.set_defaults(corpus_many=False)
    embed = argparse.ArgumentParser(add_help=False)
    embed.add_argument("--embedder", help=EMBEDDER_HELP)
    json_out = argparse.ArgumentParser(add_help=False)
    json_out.add_argument("--json", action="store_true", help=JSON_HELP)
    return Parents(
        stored=stored,
        one_corpus=one_corpus,
        embed=embed,
        json_out=json_out,
        common=argparse.ArgumentParser(add_help=False, parents=[stored, one_corpus, embed]),
        corpus_only=argparse.ArgumentParser(add_help=False, parents=[stored, one_corpus]),
    )


# -- global options ------------------------------------------------------------------------------

GLOBAL_OPTIONS: tuple[tuple[str, str | None, str], ...] = (
    ("--store", "URL", STORE_HELP),
    ("--read-store", "URL", READ_STORE_HELP),
    ("--schema", "NAME", SCHEMA_HELP),
    ("--tenant", "ID", TENANT_HELP),
    ("--resource", "ID", RESOURCE_HELP),
    ("--corpus", "NAME", CORPUS_HELP),
    ("--embedder", "NAME", EMBEDDER_HELP),
    ("--json", None, JSON_HELP),
)
"""The options most commands take, accepted before the command too: (flag, metavar or
``None`` for a switch, help). ``--no-config`` is global as well (argparse alone handles it).
Each applies only to a command that takes it."""

_PREFIX = "global_before_"
_GLOBAL_HELP = """\
also accepted after the command, where they mean the same; given both before and after
the command, the one after wins. Each applies only to the commands that take it (`ragport
COMMAND --help` lists a command's options); `ragport reindex` needs its --embedder after
the command."""


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def add_global_options(parser: argparse.ArgumentParser) -> None:
    """The global options on the top-level parser, each under its own name (``_PREFIX``) so
    that a command's own default never hides one given before the command."""
    before = parser.add_argument_group("global options", _GLOBAL_HELP)
    for flag, metavar, text in GLOBAL_OPTIONS:
        dest = _PREFIX + _dest(flag)
        if metavar is None:
            before.add_argument(
                flag, dest=dest, action="store_true", default=argparse.SUPPRESS, help=text
            )
        else:
            before.add_argument(
                flag, dest=dest, metavar=metavar, default=argparse.SUPPRESS, help=text
            )


def _leaf(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The subparser of the command that ``args`` were parsed for."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            chosen = getattr(args, action.dest)
            return _leaf(action.choices[chosen], args)
    return parser


def apply_global_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Hand the global options given before the command to it: each only where the command
    takes that option (else ``parser.error``, exit 2), and never over the same option given
    after the command (the later one wins)."""
    given = {k[len(_PREFIX) :]: v for k, v in vars(args).items() if k.startswith(_PREFIX)}
    if not given:
        return
    leaf = _leaf(parser, args)
    takes = {a.dest: a for a in leaf._actions if a.option_strings}
    for dest, value in given.items():
        delattr(args, _PREFIX + dest)
        action = takes.get(dest)
        if action is None:
            flag = "--" + dest.replace("_", "-")
            parser.error(f"{flag} (given before the command) does not apply to `{leaf.prog}`")
        after = getattr(args, dest, action.default)
        if after != action.default:
            continue  # given after the command too: that one wins
        if isinstance(action, argparse._AppendAction):
            value = [value]
        setattr(args, dest, value)
