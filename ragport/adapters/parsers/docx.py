"""DOCX on python-docx: paragraphs, heading styles as Markdown headings, tables as rows.

A DOCX is a zip. Its central directory states every part's inflated size, and Python's
zipfile never inflates a part past its stated size (a lie ends in ``BadZipFile``), so the zip
bomb check is decided from the directory alone, before anything is inflated.
"""

from __future__ import annotations

import io
import re
import zipfile
from typing import Any

from ragport.adapters.parsers._common import BaseParser, Deadline, check_abort, failed
from ragport.domain.errors import ParseError, RagportError
from ragport.domain.limits import DEFAULT_LIMITS, check_limit
from ragport.ports.documents import ParsedDocument
from ragport.ports.runtime import Abort

__all__ = ["DocxParser"]

MAX_PARTS = 10_000
_HEADING = re.compile(r"heading (\d)$", re.I)
_LIST = re.compile(r"list (bullet|number)", re.I)


class DocxParser(BaseParser):
    """Word documents; ``max_inflated_bytes=`` (default 32 MiB) caps the parts' total size.

    Body paragraphs and tables in document order; ``Title`` and ``Heading N`` styles become
    ``#`` headings, ``List Bullet`` / ``List Number`` styles ``-`` / ``1.`` items, each table
    row one line with `` | `` between cells (merged cells once). Core properties ``title``
    and ``author`` go to metadata.
    """

    name = "docx"
    library = "python-docx"
    media_types = ("application/vnd.openxmlformats-officedocument.wordprocessingml.document",)

    def __init__(
        self,
        *,
        max_bytes: int = DEFAULT_LIMITS.parse_bytes,
        timeout_s: float = DEFAULT_LIMITS.parse_ms / 1000,
        max_inflated_bytes: int = DEFAULT_LIMITS.inflated_bytes,
    ) -> None:
        super().__init__(max_bytes=max_bytes, timeout_s=timeout_s)
        self._max_inflated = check_limit("inflated_bytes", max_inflated_bytes)

    def _parse(
        self, data: bytes, *, media_type: str | None, deadline: Deadline, abort: Abort | None
    ) -> ParsedDocument:
        self._check_archive(data, media_type)
        try:
            import docx
        except ImportError:  # pragma: no cover - part of ragport[docx]
            raise ParseError(
                "DOCX needs python-docx: install ragport[docx]",
                reason="dependency",
                media_type=media_type,
            ) from None
        try:
            document = docx.Document(io.BytesIO(data))
            lines = self._body(document, deadline, abort)
            props = document.core_properties
            metadata = {
                key: value.strip()
                for key, value in (("title", props.title), ("author", props.author))
                if isinstance(value, str) and value.strip()
            }
        except RagportError:  # our own caps and abort, raised from inside the walk
            raise
        except Exception as exc:  # python-docx raises KeyError, ValueError, lxml errors, ...
            raise failed("python-docx", exc, media_type=media_type) from None
        return ParsedDocument(
            "\n".join(lines).strip("\n"), metadata, self.media_types[0], markdown=True
        )

    def _check_archive(self, data: bytes, media_type: str | None) -> None:
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as archive:
                infos = archive.infolist()
        except (zipfile.BadZipFile, ValueError, OSError, EOFError) as exc:
            raise failed("zipfile", exc, media_type=media_type) from None
        if len(infos) > MAX_PARTS:
            raise ParseError(
                f"the archive has {len(infos)} parts, over {MAX_PARTS}",
                reason="bomb",
                media_type=media_type,
            )
        total = sum(info.file_size for info in infos)
        if total > self._max_inflated:
            raise ParseError(
                f"the archive inflates to {total} bytes, over max_inflated_bytes="
                f"{self._max_inflated} (zip bomb?)",
                reason="bomb",
                media_type=media_type,
            )

    def _body(self, document: Any, deadline: Deadline, abort: Abort | None) -> list[str]:
        from docx.enum.style import WD_STYLE_TYPE
        from docx.table import Table

        # Style names by style id, once: ``paragraph.style`` looks the style up in the styles
        # part on every call, which made the walk ten times slower than python-docx's parse.
        names = {style.style_id: style.name or "" for style in document.styles}
        default = document.styles.default(WD_STYLE_TYPE.PARAGRAPH)
        default_name = (default.name or "") if default is not None else ""
        lines: list[str] = []
        counter = 0
        for n, block in enumerate(document.iter_inner_content()):
            if n % 256 == 0:
                deadline.check()
                check_abort(abort)
            if isinstance(block, Table):
                rows = _table_rows(block)
                if rows:
                    lines.extend(["", *rows, ""])
                counter = 0
                continue
            text = " ".join(block.text.split())
            if not text:
                continue
            style_id = block._p.style
            style = names.get(style_id, default_name) if style_id else default_name
            heading = _HEADING.match(style)
            listing = _LIST.match(style)
            if style.lower() == "title":
                lines.extend(["", f"# {text}", ""])
            elif heading:
                level = min(6, max(1, int(heading.group(1))))
                lines.extend(["", f"{'#' * level} {text}", ""])
            elif listing:
                counter += 1
                marker = f"{counter}." if listing.group(1).lower() == "number" else "-"
                lines.append(f"{marker} {text}")
                continue
            else:
                lines.extend([text, ""])
            counter = 0
        return _squeeze(lines)


def _table_rows(table: Any) -> list[str]:
    rows = []
    for row in table.rows:
        cells: list[str] = []
        seen: set[int] = set()
        for cell in row.cells:
            if id(cell._tc) in seen:  # a merged cell appears once per grid column it spans
                continue
            seen.add(id(cell._tc))
            cells.append(" ".join(cell.text.split()))
        if any(cells):
            rows.append(" | ".join(cells))
    return rows


def _squeeze(lines: list[str]) -> list[str]:
    """No leading, trailing or doubled blank lines."""
    out: list[str] = []
    for line in lines:
        if line == "" and (not out or out[-1] == ""):
            continue
        out.append(line)
    while out and out[-1] == "":
        out.pop()
    return out
