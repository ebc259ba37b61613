"""DOCX on python-docx: paragraphs, heading styles as Markdown headings, tables as rows.

A DOCX is a zip. Its central directory states every part's inflated size, but zipfile trusts
it only to cut the output: a whole-part read inflates all the compressed bytes first, then
truncates (a part stating 1,000 bytes that holds 1 MB of deflate became 1 GB). So before
python-docx opens the archive every part is inflated here, through a bounded decompressor that
counts real output: a part that inflates past its stated size, or parts stating more than
``max_inflated_bytes``, are a bomb; parts compressed with anything but deflate (bzip2 and lzma
inflate unbounded in zipfile) are refused.

Tables are walked on the XML, not python-docx's ``row.cells``: that repeats a cell once per
grid column it spans (``gridSpan`` 2**31 - 1 ran out of memory) and finds a vertically merged
cell's content by searching upwards row by row (150 x 40 cells took minutes).
"""

from __future__ import annotations

import io
import re
import struct
import zipfile
import zlib
from typing import Any

from ragport.adapters.parsers._common import BinaryParser, Deadline, check_abort, failed
from ragport.domain.errors import ParseError, RagportError
from ragport.domain.limits import DEFAULT_CEILINGS, DEFAULT_LIMITS, HARD_LIMITS, Ceilings, Limits
from ragport.ports.documents import ParsedDocument
from ragport.ports.runtime import Abort

__all__ = ["DocxParser"]

MAX_PARTS = 10_000
MAX_TABLE_COLUMNS = 1_024
"""Grid columns a table row may span (``gridBefore`` plus every ``gridSpan``); Word's own
maximum is 63. Past it: ``ParseError(reason="too_large")``."""
MAX_TEXT_CHARS = HARD_LIMITS.document_chars
"""Characters of text a DOCX may render to (merged cells repeat their text on every row they
span); the chunker refuses longer documents anyway. Past it: ``ParseError(reason="too_large")``.
"""
_CHUNK = 1 << 20  # inflate at most this much at a time
_LOCAL_HEADER = struct.Struct("<4s5H3L2H")
_HEADING = re.compile(r"heading (\d)$", re.I)
_LIST = re.compile(r"list (bullet|number)", re.I)


class DocxParser(BinaryParser):
    """Word documents; ``max_inflated_bytes=`` (default 32 MiB) caps the parts' total size;
    the file may be up to ``max_bytes`` (``binary_bytes``, 8 MiB), its text up to
    ``max_text_bytes`` (``parse_bytes``, 1 MiB; ``BinaryParser``).

    Body paragraphs and tables in document order; ``Title`` and ``Heading N`` styles become
    ``#`` headings, ``List Bullet`` / ``List Number`` styles ``-`` / ``1.`` items, each table
    row one line with `` | `` between cells (merged cells once per row). Core properties
    ``title`` and ``author`` go to metadata. A row past ``MAX_TABLE_COLUMNS`` grid columns or
    text past ``MAX_TEXT_CHARS`` is ``ParseError(reason="too_large")``.
    """

    name = "docx"
    library = "python-docx"
    media_types = ("application/vnd.openxmlformats-officedocument.wordprocessingml.document",)

    def __init__(
        self,
        *,
        max_inflated_bytes: int = DEFAULT_LIMITS.inflated_bytes,
        ceilings: Ceilings = DEFAULT_CEILINGS,
        **options: Any,
    ) -> None:
        super().__init__(ceilings=ceilings, **options)
        self._max_inflated = ceilings.check("inflated_bytes", max_inflated_bytes)

    @classmethod
    def limit_options(cls, limits: Limits) -> dict[str, Any]:
        return {**super().limit_options(limits), "max_inflated_bytes": limits.inflated_bytes}

    def _parse(
        self, data: bytes, *, media_type: str | None, deadline: Deadline, abort: Abort | None
    ) -> ParsedDocument:
        self._check_archive(data, media_type, deadline, abort)
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
            lines = self._body(document, _Budget(deadline, abort, media_type))
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

    def _check_archive(
        self, data: bytes, media_type: str | None, deadline: Deadline, abort: Abort | None
    ) -> None:
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
        # Each part inflates to at most its stated size (checked below), so the real total is
        # at most the stated one, which is within the cap.
        for n, info in enumerate(infos):
            if n % 64 == 0:
                deadline.check()
                check_abort(abort)
            _inflate_bounded(data, info, deadline, media_type)

    def _body(self, document: Any, budget: _Budget) -> list[str]:
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
                budget.check()
            if isinstance(block, Table):
                rows = _table_rows(block, budget)
                if rows:
                    lines.extend(["", *rows, ""])
                counter = 0
                continue
            text = " ".join(block.text.split())
            if not text:
                continue
            budget.spend(len(text) + 8)  # with a heading's or an item's marker
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


def _inflate_bounded(
    data: bytes, info: zipfile.ZipInfo, deadline: Deadline, media_type: str | None
) -> None:
    """Inflate one part in bounded steps; refuse it if it inflates past its stated size."""
    if info.flag_bits & 0x1:
        raise ParseError(
            "the archive has an encrypted part", reason="malformed", media_type=media_type
        )
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise ParseError(
            f"a part is compressed with method {info.compress_type}, not deflate",
            reason="malformed",
            media_type=media_type,
        )
    header = data[info.header_offset : info.header_offset + _LOCAL_HEADER.size]
    if len(header) < _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
        raise ParseError(
            "a part's local header is missing", reason="malformed", media_type=media_type
        )
    fields = _LOCAL_HEADER.unpack(header)
    start = info.header_offset + _LOCAL_HEADER.size + fields[-2] + fields[-1]
    payload = data[start : start + info.compress_size]
    if len(payload) < info.compress_size:
        raise ParseError("a part is cut short", reason="malformed", media_type=media_type)
    if info.compress_type == zipfile.ZIP_STORED:
        return  # zipfile returns at most the stored bytes: bounded by the input
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    produced, pending = 0, payload
    try:
        while not inflater.eof:
            # One byte past the stated size is enough to prove the lie.
            out = inflater.decompress(pending, min(_CHUNK, info.file_size - produced + 1))
            produced += len(out)
            if produced > info.file_size:
                raise ParseError(
                    f"a part inflates past its stated {info.file_size} bytes (zip bomb?)",
                    reason="bomb",
                    media_type=media_type,
                )
            pending = inflater.unconsumed_tail
            if not out and not pending:
                break  # input used up; zipfile finds the truncation itself
            deadline.check()
    except zlib.error as exc:
        raise failed("zlib", exc, media_type=media_type) from None


class _Budget:
    """The characters left for the text, with the deadline and abort checks of a long walk."""

    def __init__(self, deadline: Deadline, abort: Abort | None, media_type: str | None) -> None:
        self.media_type = media_type
        self.left = MAX_TEXT_CHARS
        self.deadline = deadline
        self.abort = abort
        self.steps = 0

    def spend(self, chars: int) -> None:
        self.left -= chars
        if self.left < 0:
            raise ParseError(
                f"the document renders to more than {MAX_TEXT_CHARS} characters",
                reason="too_large",
                media_type=self.media_type,
            )
        self.steps += 1
        if self.steps % 256 == 0:
            self.check()

    def check(self) -> None:
        self.deadline.check()
        check_abort(self.abort)


def _table_rows(table: Any, budget: _Budget) -> list[str]:
    """One line per row, a cell's text once per row however many grid columns it spans.

    A ``vMerge="continue"`` cell shows the text of the cell that starts at the same grid
    offset in the row above (which may itself continue one above it), as python-docx's
    ``row.cells`` does; here each row's cells are kept by grid offset, so that is one lookup.
    """
    from docx.table import _Cell

    rows = []
    above: dict[int, tuple[Any, str]] = {}  # grid offset -> (root tc, its text), row above
    for tr in table._tbl.tr_lst:
        offset = tr.grid_before
        here: dict[int, tuple[Any, str]] = {}
        cells: list[str] = []
        seen: set[int] = set()  # ids of root tcs, alive in ``here``
        for tc in tr.tc_lst:
            span = tc.grid_span
            if offset < 0 or span < 1:
                raise ParseError(
                    "a table cell has a negative span",
                    reason="malformed",
                    media_type=budget.media_type,
                )
            if offset + span > MAX_TABLE_COLUMNS:
                raise ParseError(
                    f"a table row spans more than {MAX_TABLE_COLUMNS} grid columns",
                    reason="too_large",
                    media_type=budget.media_type,
                )
            if tc.vMerge == "continue":
                root = above.get(offset)
                if root is None:  # python-docx raises ValueError here too
                    raise ParseError(
                        "a vertically merged cell has no cell above it",
                        reason="malformed",
                        media_type=budget.media_type,
                    )
            else:
                root = (tc, " ".join(_Cell(tc, table).text.split()))
            here[offset] = root
            offset += span
            if id(root[0]) in seen:
                continue
            seen.add(id(root[0]))
            budget.spend(len(root[1]) + 3)
            cells.append(root[1])
        above = here
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
