"""reStructuredText on docutils, as Markdown: sections to ``#`` headings, literal blocks kept.

docutils is a document *processor*: by default it reads config files, includes files, passes
raw HTML through and prints warnings. Here it only parses: no config files, no file inclusion,
no raw directive, nothing printed, never halts. A directive it does not know becomes a
``system_message`` holding the directive's source; that source is kept as a literal block, so
the text survives and nothing runs.

``publish_doctree`` is one library call that never looks at a deadline and can run for a
minute on a megabyte (a simple table, many sections), so the conversion (docutils and the
Markdown writer) runs in a worker process, ``_rst_worker.py`` through ``_worker.run_worker``
as the PDF parser does: its process group killed and the worker reaped past ``timeout_s`` of
CPU time, past ``wall_timeout_s`` on the clock or on abort (within 50 ms), under an
address-space limit of ``worker_memory_bytes(len(data))``; a worker killed by a signal is
``ParseError(reason="worker")``, which a sync retries. Every document pays the worker's
start, about 0.1-0.2 s on an idle machine.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from ragport.adapters.parsers._common import (
    Deadline,
    EncodedTextParser,
)
from ragport.adapters.parsers._worker import run_worker
from ragport.domain.errors import ParseError
from ragport.ports.documents import ParsedDocument
from ragport.ports.runtime import Abort

__all__ = ["RstParser", "worker_memory_bytes"]

MAX_DEPTH = 256
SETTINGS = {
    "_disable_config": True,
    "file_insertion_enabled": False,
    "raw_enabled": False,
    "report_level": 5,  # keep every system message out of the warning stream
    "halt_level": 5,  # never stop on a problem: we keep what docutils could read
    "exit_status_level": 5,
    "warning_stream": False,
    "doctitle_xform": False,  # a lone top section stays a section (and a heading)
    "docinfo_xform": False,
    "sectsubtitle_xform": False,
    "input_encoding": "unicode",
    "traceback": True,
    "syntax_highlight": "none",
}
_WORKER = Path(__file__).with_name("_rst_worker.py")
_BASE_MEMORY = 512 << 20  # the interpreter and docutils
_MEMORY_PER_BYTE = 256  # a doctree takes about 300 bytes a source byte at its peak
_MESSAGES = {
    "too_deep": f"the document nests deeper than {MAX_DEPTH}",
    "memory": "the reST worker ran out of memory",
    "dependency": "reStructuredText needs docutils: install ragport[rst]",
    "malformed": "docutils could not read the document",
}


def worker_memory_bytes(size: int) -> int:
    """The worker's address-space limit (``RLIMIT_AS``) for a document of ``size`` bytes."""
    return _BASE_MEMORY + _MEMORY_PER_BYTE * size


class RstParser(EncodedTextParser):
    """reStructuredText as Markdown-ish text; ``title`` from the first section title."""

    name = "rst"
    library = "docutils"
    media_types = ("text/x-rst", "text/prs.fallenstein.rst")

    def _parse(
        self, data: bytes, *, media_type: str | None, deadline: Deadline, abort: Abort | None
    ) -> ParsedDocument:
        metadata: dict[str, Any] = {}
        text = self._text(data, media_type, metadata)
        if importlib.util.find_spec("docutils") is None:  # pragma: no cover - ragport[rst]
            raise ParseError(_MESSAGES["dependency"], reason="dependency", media_type=media_type)
        payload = text.encode("utf-8")
        answer = run_worker(
            _WORKER,
            {"docutils": SETTINGS, "max_depth": MAX_DEPTH},
            payload,
            deadline=deadline,
            abort=abort,
            memory_bytes=worker_memory_bytes(len(payload)),
            # JSON of the text and title: escapes can take 6 bytes a character, and text
            # that substitutions inflate past this is a bomb, not a document.
            max_answer_bytes=8 * self.max_bytes + (64 << 10),
            media_type=media_type,
        )
        body, title = answer.get("text"), answer.get("title")
        if isinstance(body, str) and (title is None or isinstance(title, str)):
            if title:
                metadata["title"] = title
            return ParsedDocument(body, metadata, "text/x-rst", markdown=True)
        reason = str(answer.get("error"))
        reason = reason if reason in _MESSAGES else "malformed"
        detail = str(answer.get("detail") or "") if reason == "malformed" else ""
        raise ParseError(
            _MESSAGES[reason] + (f" ({detail})" if detail else ""),
            reason=reason,
            media_type=media_type,
        )
