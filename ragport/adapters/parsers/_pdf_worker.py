"""The PDF extraction that runs in a worker process (pdfminer cannot be interrupted).

Run as a script by ``_worker.run_worker`` (``python -I``, under ``RLIMIT_AS``), so the child
imports only the standard library and pdfminer (not ragport, not the host's ``__main__``).
It reads one JSON line of settings then the PDF bytes from stdin, and writes one JSON object
to stdout:
``{"pages": [...], "title": ... or null}`` or ``{"error": reason, "detail": ...}`` where ``detail`` is a count or an
exception type name, never document text. JSON, not pickle: the parent must not execute what
a child that read hostile bytes sends back. Flate streams inflate
through a bounded decompressor so a decompression bomb stops at ``max_inflated`` bytes
instead of exhausting memory; the refusal is a ``BaseException`` so no ``except Exception``
inside pdfminer can swallow it.
"""

from __future__ import annotations

import io
import json
import sys
import zlib
from typing import Any

import pdfminer.pdftypes
from pdfminer.converter import TextConverter
from pdfminer.layout import LAParams
from pdfminer.pdfdocument import PDFDocument, PDFEncryptionError
from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager
from pdfminer.pdfpage import PDFPage
from pdfminer.pdfparser import PDFParser
from pdfminer.pdftypes import resolve1
from pdfminer.utils import decode_text

__all__ = ["document_title", "extract_pages", "main"]


class Refusal(BaseException):
    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


class _BoundedDecompressor:
    def __init__(self, owner: BoundedZlib, inner: Any) -> None:
        self._owner = owner
        self._inner = inner

    def decompress(self, data: bytes, max_length: int = 0) -> bytes:
        out = bytes(self._inner.decompress(data, self._owner.left + 1))
        self._owner.take(len(out))
        if self._inner.unconsumed_tail:
            self._owner.take(self._owner.left + 1)
        return out

    def flush(self, *args: Any) -> bytes:
        out = bytes(self._inner.flush(*args))
        self._owner.take(len(out))
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class BoundedZlib:
    """The parts of the ``zlib`` module pdfminer uses, with one budget for all inflation."""

    error = zlib.error

    def __init__(self, budget: int) -> None:
        self.left = budget
        self.budget = budget
        self.tripped = False

    def take(self, n: int) -> None:
        self.left -= n
        if self.left < 0:
            self.tripped = True
            raise Refusal("bomb", str(self.budget))

    def decompressobj(self, *args: Any, **kwargs: Any) -> _BoundedDecompressor:
        return _BoundedDecompressor(self, zlib.decompressobj(*args, **kwargs))

    def decompress(self, data: bytes, *args: Any, **kwargs: Any) -> bytes:
        inner = zlib.decompressobj()
        out = inner.decompress(data, self.left + 1)
        self.take(len(out))
        if inner.unconsumed_tail:
            self.take(self.left + 1)
        rest = inner.flush()
        self.take(len(rest))
        if not inner.eof:
            # What zlib.decompress does with a truncated stream; pdfminer then retries with
            # its corrupted-data path (through decompressobj, also bounded).
            raise zlib.error("incomplete or truncated stream")
        return out + rest


def document_title(document: PDFDocument, max_chars: int) -> str | None:
    """The information dictionary's ``/Title`` (PDFDocEncoding, or UTF-16 after a byte order
    mark), whitespace collapsed; ``None`` when there is none, it is blank, or it is longer
    than ``max_chars`` (a title that long is not one: left out, never cut)."""
    for info in document.info:
        value = resolve1(info.get("Title")) if isinstance(info, dict) else None
        if isinstance(value, bytes):
            title = " ".join(decode_text(value).split())
            return title if 0 < len(title) <= max_chars else None
    return None


def extract_pages(
    data: bytes, *, max_pages: int, max_inflated: int, max_title: int = 1000
) -> tuple[tuple[str, ...], str | None]:
    """The text of every page and the title, after checking encryption and the page count
    first."""
    bounded = BoundedZlib(max_inflated)
    pdfminer.pdftypes.zlib = bounded  # type: ignore[attr-defined,assignment]  # this process only
    try:
        document = PDFDocument(PDFParser(io.BytesIO(data)), password="")
    except PDFEncryptionError:
        raise Refusal("encrypted") from None
    if document.encryption is not None:
        raise Refusal("encrypted")
    tree = resolve1(document.catalog.get("Pages"))
    claimed = resolve1(tree.get("Count")) if isinstance(tree, dict) else None
    if isinstance(claimed, int) and claimed > max_pages:
        raise Refusal("too_many_pages", str(claimed))
    title = document_title(document, max_title)
    manager = PDFResourceManager(caching=True)
    output = io.StringIO()
    device = TextConverter(manager, output, laparams=LAParams())
    interpreter = PDFPageInterpreter(manager, device)
    ends: list[int] = []
    for number, page in enumerate(PDFPage.create_pages(document), start=1):
        if number > max_pages:
            raise Refusal("too_many_pages", f"more than {max_pages}")
        interpreter.process_page(page)
        ends.append(output.tell())
    device.close()
    if bounded.tripped:
        raise Refusal("bomb", str(max_inflated))
    text = output.getvalue()
    pages: list[str] = []
    start = 0
    for end in ends:
        # TextConverter ends every page with a form feed; a form feed inside a page's own
        # text would break the "\f".join(pages) invariant, so it becomes a line break.
        chunk = text[start:end]
        chunk = chunk[:-1] if chunk.endswith("\f") else chunk
        pages.append(chunk.replace("\f", "\n").rstrip())
        start = end
    return tuple(pages), title


def main() -> int:
    """Read settings and bytes from stdin, write one JSON answer to stdout."""
    settings = json.loads(sys.stdin.buffer.readline())
    data = sys.stdin.buffer.read()
    answer: dict[str, Any]
    try:
        pages, title = extract_pages(
            data,
            max_pages=int(settings["max_pages"]),
            max_inflated=int(settings["max_inflated"]),
            max_title=int(settings["max_title"]),
        )
        answer = {"pages": list(pages), "title": title}
    except Refusal as refusal:
        answer = {"error": refusal.reason, "detail": refusal.detail}
    except MemoryError:
        answer = {"error": "memory", "detail": ""}
    except RecursionError:
        answer = {"error": "malformed", "detail": "RecursionError"}
    except Exception as exc:  # the parent turns this into ParseError(reason="malformed")
        answer = {"error": "malformed", "detail": type(exc).__name__}
    # UTF-8 with lone surrogates passed through, as the parent decodes it: the text arrives
    # exactly as pdfminer produced it, at one to four bytes a character.
    sys.stdout.buffer.write(json.dumps(answer, ensure_ascii=False).encode("utf-8", "surrogatepass"))
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
