"""Output of the ``ragport`` command: exit codes, tables (rich on a terminal, plain columns
otherwise), JSON through one cattrs converter, notes on stderr.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import cattrs

from ragport.domain.errors import (
    ValidationError,
)

EXIT_OK = 0


EXIT_FAILED = 1  # some inputs failed, or nothing was found


EXIT_USAGE = 2  # a bad option, value or configuration


EXIT_STORE = 3  # the store is unavailable


_json = cattrs.Converter()


_json.register_unstructure_hook(datetime, lambda d: d.isoformat())


class NothingFound(Exception):
    """The command ran and found nothing to act on (exit 1); the message says what."""


def _rich_console() -> Any | None:
    """A rich Console when stdout is a terminal and rich is installed, else None."""
    if not sys.stdout.isatty():
        return None
    try:
        from rich.console import Console
    except ImportError:  # pragma: no cover - rich is in the cli extra
        return None
    return Console()


def _table(columns: Sequence[str], rows: Sequence[Sequence[object]], *, title: str = "") -> None:
    """A rich table on a terminal; plain aligned columns (two-space indent) otherwise."""
    console = _rich_console()
    cells = [["" if c is None else str(c) for c in row] for row in rows]
    if console is not None:
        from rich.table import Table

        table = Table(title=title or None)
        for column in columns:
            table.add_column(column)
        for row in cells:
            table.add_row(*row)
        console.print(table)
        return
    if title:
        print(title)
    head = [c.upper() for c in columns]
    widths = [max(len(r[i]) for r in [head, *cells]) for i in range(len(columns))]
    for row in [head, *cells]:
        line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        print("  " + line.rstrip())


def _print_json(value: object, *, indent: int | None = 2) -> None:
    print(json.dumps(_json.unstructure(value), indent=indent, ensure_ascii=False))


def _note(message: str) -> None:
    print(f"ragport: {message}", file=sys.stderr)


def _confirm(question: str, *, yes: bool) -> bool:
    if yes:
        return True
    if not sys.stdin.isatty():
        raise ValidationError(f"{question}: pass --yes to confirm without a terminal", field="yes")
    answer = input(f"{question} [y/N] ")
    return answer.strip().lower() in ("y", "yes")
