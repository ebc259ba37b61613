"""Output of the ``ragport`` command: exit codes, tables (rich on a terminal, plain columns
otherwise), JSON through one cattrs converter, notes on stderr, and the one escape of
control characters every printed line goes through.

``escape_controls`` writes each C0 control but newline and tab, DEL, each C1 control
(U+0080-U+009F), each bidirectional embedding, override or isolate (U+202A-U+202E,
U+2066-U+2069) and each lone surrogate (U+D800-U+DFFF: how Python decodes a file name's
bytes that are not UTF-8) as ``\\uXXXX``: document text, file names and error messages
cannot clear the screen, set the title or write the clipboard, and a file name that is not
UTF-8 prints as ``bad\\udcff.txt`` whatever the terminal's encoding (never a raw byte, never
an encoding error). The form is JSON's own escape, so JSON output (where ``json.dumps``
already escapes C0 but leaves C1, DEL, bidi and, with ``ensure_ascii=False``, lone
surrogates raw) stays valid and decodes to the original text. ``main`` wraps stdout and
stderr in ``EscapingStream`` for a command's run, so every ``print`` is covered; rich
consoles write to the raw stream (their own styling must pass) and get escaped, markup-free
``Text``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any, TextIO

import cattrs

from ragport.domain.errors import (
    ValidationError,
)

EXIT_OK = 0


EXIT_FAILED = 1  # some inputs failed, or nothing was found


EXIT_USAGE = 2  # a bad option, value or configuration


EXIT_STORE = 3  # the store is unavailable


EXIT_RERANK = 4  # the reranker failed, timed out or answered badly (RerankError)


EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), as a shell reports it


_json = cattrs.Converter()


_json.register_unstructure_hook(datetime, lambda d: d.isoformat())


_CONTROLS = {
    c: f"\\u{c:04x}"
    for c in [
        *range(0x00, 0x20),
        *range(0x7F, 0xA0),
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
        *range(0xD800, 0xE000),  # lone surrogates: undecodable bytes of a file name
    ]
    if c not in (0x09, 0x0A)
}


def escape_controls(text: str) -> str:
    """``text`` with terminal control characters written as ``\\uXXXX`` (see the module)."""
    return text.translate(_CONTROLS)


class EscapingStream:
    """A text stream whose ``write`` escapes control characters before the wrapped one's.

    When the reader goes away (``ragport ingest | head -2``) the stream goes quiet instead of
    raising ``BrokenPipeError``: the command finishes its work, and its exit status says how
    the work went, not whether anyone read the output (``pipe_closed`` records it).
    """

    def __init__(self, raw: TextIO) -> None:
        self.raw = raw
        self.pipe_closed = False

    def write(self, text: str) -> int:
        if not self.pipe_closed:
            try:
                self.raw.write(escape_controls(text))
            except BrokenPipeError:
                self._gone()
        return len(text)

    def flush(self) -> None:
        if not self.pipe_closed:
            try:
                self.raw.flush()
            except BrokenPipeError:
                self._gone()

    def _gone(self) -> None:
        self.pipe_closed = True
        try:  # point the descriptor at /dev/null so the interpreter's last flush is silent
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.raw.fileno())
            os.close(devnull)
        except (OSError, ValueError, AttributeError):  # not a real file (a test's StringIO)
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self.raw, name)


def raw_stream(stream: TextIO) -> TextIO:
    """The stream under an ``EscapingStream`` (for rich, whose styling must pass)."""
    return stream.raw if isinstance(stream, EscapingStream) else stream


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
    return Console(file=raw_stream(sys.stdout))


def _table(columns: Sequence[str], rows: Sequence[Sequence[object]], *, title: str = "") -> None:
    """A rich table on a terminal; plain aligned columns (two-space indent) otherwise."""
    console = _rich_console()
    cells = [["" if c is None else str(c) for c in row] for row in rows]
    if console is not None:
        from rich.table import Table
        from rich.text import Text

        table = Table(title=Text(escape_controls(title)) if title else None)
        for column in columns:
            table.add_column(column)
        for row in cells:
            table.add_row(*(Text(escape_controls(cell)) for cell in row))
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
