"""PDF on pdfminer.six, in a worker process that is killed at the deadline.

pdfminer has no way to stop a parse from outside, and a hostile PDF can keep it busy for
minutes, so extraction runs in a child process: ``_pdf_worker.py`` under ``python -I`` (the
standard library and pdfminer only; about 0.1-0.2 s to start), through ``_worker.run_worker``:
the bytes go over on a writer thread and stdin is closed, the answer comes back on a reader
thread, and at ``timeout_s`` or on abort the child is killed and reaped before raising. No
``multiprocessing``: its spawn and forkserver modes re-import the host's ``__main__`` in the
child, and ``fork`` is unsafe in a threaded host.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragport.adapters.parsers._common import BaseParser, Deadline
from ragport.adapters.parsers._worker import run_worker
from ragport.domain.errors import ParseError
from ragport.domain.limits import DEFAULT_CEILINGS, DEFAULT_LIMITS, Ceilings, Limits
from ragport.ports.documents import ParsedDocument
from ragport.ports.runtime import Abort

__all__ = ["PdfParser"]

_WORKER = Path(__file__).with_name("_pdf_worker.py")
_BASE_MEMORY = 1 << 30  # address space for the interpreter and pdfminer, besides the streams
_MESSAGES = {
    "encrypted": "the PDF is encrypted; ragport does not decrypt documents",
    "no_text": "the PDF has no extractable text (scanned or image-only?)",
    "too_many_pages": "the PDF has more pages than max_pages",
    "bomb": "a PDF stream inflates past max_inflated_bytes (decompression bomb?)",
    "memory": "the PDF worker ran out of memory",
    "malformed": "pdfminer could not read the PDF",
}


class PdfParser(BaseParser):
    """Text per page; ``max_pages=`` (default 256, hard 4,096) is checked from the page tree
    before any page is extracted; ``max_inflated_bytes=`` (default 32 MiB) bounds all stream
    decompression. Encrypted or text-less PDFs are a ``ParseError``, never an empty index.
    """

    name = "pdf"
    library = "pdfminer.six"
    media_types = ("application/pdf",)

    def __init__(
        self,
        *,
        max_bytes: int = DEFAULT_LIMITS.parse_bytes,
        timeout_s: float = DEFAULT_LIMITS.parse_ms / 1000,
        max_pages: int = DEFAULT_LIMITS.pdf_pages,
        max_inflated_bytes: int = DEFAULT_LIMITS.inflated_bytes,
        ceilings: Ceilings = DEFAULT_CEILINGS,
    ) -> None:
        super().__init__(max_bytes=max_bytes, timeout_s=timeout_s, ceilings=ceilings)
        self._max_pages = ceilings.check("pdf_pages", max_pages)
        self._max_inflated = ceilings.check("inflated_bytes", max_inflated_bytes)

    @classmethod
    def limit_options(cls, limits: Limits) -> dict[str, Any]:
        return {
            **super().limit_options(limits),
            "max_pages": limits.pdf_pages,
            "max_inflated_bytes": limits.inflated_bytes,
        }

    def _parse(
        self, data: bytes, *, media_type: str | None, deadline: Deadline, abort: Abort | None
    ) -> ParsedDocument:
        if not data.lstrip()[:5].startswith(b"%PDF-") and b"%PDF-" not in data[:1024]:
            raise ParseError("the bytes are not a PDF", reason="malformed", media_type=media_type)
        message = self._extract(data, deadline, abort, media_type)
        if message[0] != "ok":
            reason = str(message[1])
            detail = f" ({message[2]})" if message[2] else ""
            raise ParseError(
                _MESSAGES.get(reason, "the PDF could not be read") + detail,
                reason=reason,
                media_type=media_type,
            )
        pages = tuple(str(p) for p in message[1])
        if not any(p.strip() for p in pages):
            raise ParseError(_MESSAGES["no_text"], reason="no_text", media_type=media_type)
        return ParsedDocument(
            "\f".join(pages), {"pages": len(pages)}, "application/pdf", pages=pages
        )

    def _extract(
        self, data: bytes, deadline: Deadline, abort: Abort | None, media_type: str | None
    ) -> tuple[Any, ...]:
        settings = {"max_pages": self._max_pages, "max_inflated": self._max_inflated}
        answer = run_worker(
            _WORKER,
            settings,
            data,
            deadline=deadline,
            abort=abort,
            memory_bytes=_BASE_MEMORY + 4 * self._max_inflated,
            # Text comes from content streams (inflated ones at most max_inflated bytes), at
            # most 4 bytes a character in UTF-8: four times both is more than any real PDF.
            max_answer_bytes=4 * (self._max_inflated + self.max_bytes),
            media_type=media_type,
        )
        if isinstance(answer.get("pages"), list):
            return ("ok", answer["pages"])
        if isinstance(answer.get("error"), str):
            return ("error", answer["error"], str(answer.get("detail") or ""))
        return ("error", "malformed", "unexpected worker answer")
