"""PDF on pdfminer.six, in a worker process that is killed at the deadline.

pdfminer has no way to stop a parse from outside, and a hostile PDF can keep it busy for
minutes, so extraction runs in a child process: ``python -I _pdf_worker.py`` (the standard
library and pdfminer only; about 0.1 s to start). The parent feeds it the bytes and waits;
at ``timeout_s`` or on abort it kills the child and reaps it before raising. No
``multiprocessing``: its spawn and forkserver modes re-import the host's ``__main__`` in the
child, and ``fork`` is unsafe in a threaded host.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from ragport.adapters.parsers._common import BaseParser, Deadline, check_abort
from ragport.domain.errors import ParseError
from ragport.domain.limits import DEFAULT_LIMITS, check_limit
from ragport.ports.documents import ParsedDocument
from ragport.ports.runtime import Abort

__all__ = ["PdfParser"]

_WORKER = Path(__file__).with_name("_pdf_worker.py")
_POLL_S = 0.05  # how often abort is looked at while the worker runs
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
    ) -> None:
        super().__init__(max_bytes=max_bytes, timeout_s=timeout_s)
        self._max_pages = check_limit("pdf_pages", max_pages)
        self._max_inflated = check_limit("inflated_bytes", max_inflated_bytes)

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
        settings = {
            "max_pages": self._max_pages,
            "max_inflated": self._max_inflated,
            "max_memory": _BASE_MEMORY + 4 * self._max_inflated,
        }
        payload: bytes | None = json.dumps(settings).encode() + b"\n" + data
        try:
            process = subprocess.Popen(
                [sys.executable, "-I", str(_WORKER)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
        except OSError as exc:  # no usable interpreter (an embedded host's sys.executable)
            raise ParseError(
                f"the PDF worker could not start ({type(exc).__name__})",
                reason="worker",
                media_type=media_type,
            ) from None
        try:
            while True:
                remaining = deadline.remaining()
                if remaining <= 0:
                    raise ParseError(
                        f"parsing took longer than {self.timeout_s:g} s",
                        reason="timeout",
                        media_type=media_type,
                    )
                try:
                    out, _ = process.communicate(payload, timeout=min(remaining, _POLL_S))
                    break
                except subprocess.TimeoutExpired:
                    payload = None  # already handed over; a retry must not send it again
                    check_abort(abort)
        finally:
            if process.poll() is None:
                process.kill()
                process.communicate()
        try:
            answer = json.loads(out)
        except ValueError:
            return ("error", "malformed", f"worker exit code {process.returncode}")
        if isinstance(answer, dict) and isinstance(answer.get("pages"), list):
            return ("ok", answer["pages"])
        if isinstance(answer, dict) and isinstance(answer.get("error"), str):
            return ("error", answer["error"], str(answer.get("detail") or ""))
        return ("error", "malformed", "unexpected worker answer")
