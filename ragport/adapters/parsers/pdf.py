"""PDF on pdfminer.six, in a worker process that is killed at the budget.

pdfminer has no way to stop a parse from outside, and a hostile PDF can keep it busy for
minutes, so extraction runs in a child process: ``_pdf_worker.py`` under ``python -I`` (the
standard library and pdfminer only; about 0.1-0.2 s to start), through ``_worker.run_worker``:
the bytes go over on a writer thread and stdin is closed, the answer comes back on a reader
thread, and past ``timeout_s`` of the worker's CPU time, past ``wall_timeout_s`` on the clock
or on abort the worker's process group is killed and the worker reaped before raising. No
``multiprocessing``: its spawn and forkserver modes re-import the host's ``__main__`` in the
child, and ``fork`` is unsafe in a threaded host.

A PDF's bytes are mostly fonts and images, so the file may be up to ``binary_bytes`` (8 MiB)
while its text is held to ``max_text_bytes`` (``parse_bytes``, 1 MiB): ``BinaryParser``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ragport.adapters.parsers._common import BinaryParser, Deadline
from ragport.adapters.parsers._worker import run_worker
from ragport.domain.errors import ParseError
from ragport.domain.limits import DEFAULT_CEILINGS, DEFAULT_LIMITS, Ceilings, Limits
from ragport.ports.documents import ParsedDocument
from ragport.ports.runtime import Abort

__all__ = ["MAX_TITLE_CHARS", "PdfParser"]

_WORKER = Path(__file__).with_name("_pdf_worker.py")
MAX_TITLE_CHARS = 1_000
"""A document information ``/Title`` longer than this is left out of the metadata."""
_BASE_MEMORY = 1 << 30  # address space for the interpreter and pdfminer, besides the streams
_MESSAGES = {
    "encrypted": "the PDF is encrypted; ragport does not decrypt documents",
    "no_text": "the PDF has no extractable text (scanned or image-only?)",
    "too_many_pages": "the PDF has more pages than max_pages",
    "bomb": "a PDF stream inflates past max_inflated_bytes (decompression bomb?)",
    "memory": "the PDF worker ran out of memory",
    "malformed": "pdfminer could not read the PDF",
}


class PdfParser(BinaryParser):
    """Text per page; ``max_pages=`` (default 256, hard 4,096) is checked from the page tree
    before any page is extracted; ``max_inflated_bytes=`` (default 32 MiB) bounds all stream
    decompression. Encrypted or text-less PDFs are a ``ParseError``, never an empty index.
    The document information dictionary's ``/Title``, when it has one (at most
    ``MAX_TITLE_CHARS`` characters, whitespace collapsed), is ``metadata["title"]``.
    """

    name = "pdf"
    library = "pdfminer.six"
    media_types = ("application/pdf",)

    def __init__(
        self,
        *,
        max_pages: int = DEFAULT_LIMITS.pdf_pages,
        max_inflated_bytes: int = DEFAULT_LIMITS.inflated_bytes,
        ceilings: Ceilings = DEFAULT_CEILINGS,
        **options: Any,
    ) -> None:
        super().__init__(ceilings=ceilings, **options)
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
        answer = self._extract(data, deadline, abort, media_type)
        pages, title = answer.get("pages"), answer.get("title")
        if not isinstance(pages, list) or not isinstance(title, (str, type(None))):
            raise _refusal(answer, media_type)
        texts = tuple(str(p) for p in pages)
        if not any(p.strip() for p in texts):
            raise ParseError(_MESSAGES["no_text"], reason="no_text", media_type=media_type)
        metadata: dict[str, Any] = {"pages": len(texts)}
        if title:
            metadata["title"] = title
        return ParsedDocument("\f".join(texts), metadata, "application/pdf", pages=texts)

    def _extract(
        self, data: bytes, deadline: Deadline, abort: Abort | None, media_type: str | None
    ) -> dict[str, Any]:
        settings = {
            "max_pages": self._max_pages,
            "max_inflated": self._max_inflated,
            "max_title": MAX_TITLE_CHARS,
        }
        # The answer is the text as JSON: at most 6 bytes a byte of text (an escaped control
        # character), plus quotes and commas per page, and the title.
        cap = 6 * (self.max_text_bytes + MAX_TITLE_CHARS) + 8 * self._max_pages + (64 << 10)
        try:
            return run_worker(
                _WORKER,
                settings,
                data,
                deadline=deadline,
                abort=abort,
                memory_bytes=_BASE_MEMORY + 4 * self._max_inflated,
                max_answer_bytes=cap,
                media_type=media_type,
            )
        except ParseError as exc:
            if exc.reason == "too_large":  # the only answer that large is too much text
                raise self.text_too_large(None, media_type) from None
            raise


def _refusal(answer: dict[str, Any], media_type: str | None) -> ParseError:
    """The worker's refusal (its reason and a count or type name, never text) as an error."""
    reason, detail = answer.get("error"), str(answer.get("detail") or "")
    if not isinstance(reason, str):
        reason, detail = "malformed", "unexpected worker answer"
    return ParseError(
        _MESSAGES.get(reason, "the PDF could not be read") + (f" ({detail})" if detail else ""),
        reason=reason,
        media_type=media_type,
    )
