"""Hand-written PDFs for the parser tests: made at test time, nothing downloaded.

``pdf(pages)`` writes a valid PDF 1.4 with one Helvetica text page per entry (each line of a
page is one ``Tj``), Flate-compressed content streams and a correct xref table. Keyword
arguments make the hostile variants the tests need: an ``/Encrypt`` dictionary, a page tree
that claims many pages, pages without text (an image only), a stream that inflates past any
cap, a content stream that keeps pdfminer busy; ``title=`` adds a document information
dictionary with that ``/Title`` (a literal string when it is Latin-1, else UTF-16 with a byte
order mark).

``manual(pages, size=None)`` is a realistic document for size and speed tests: every page a
heading, 45 lines of varied words and a footer naming the page; with ``size=`` each page also
carries an uncompressed figure (an image XObject of incompressible bytes, which pdfminer's
text extraction never decodes) so the file comes out at ``size`` bytes (within 1%).
"""

from __future__ import annotations

import random
import zlib

__all__ = ["manual", "manual_page", "pdf"]

_VOCABULARY = [
    "policy",
    "leave",
    "approval",
    "manager",
    "request",
    "days",
    "notice",
    "records",
    "travel",
    "expense",
    "receipt",
    "hotel",
    "train",
    "booking",
    "security",
    "badge",
    "office",
    "payroll",
    "benefit",
    "review",
    "quarter",
    "budget",
    "contract",
    "supplier",
    "invoice",
    "warranty",
    "maintenance",
    "schedule",
    "inspection",
    "safety",
    "valve",
    "pressure",
    "sensor",
    "calibration",
    "firmware",
    "update",
    "network",
    "gateway",
    "password",
    "rotation",
    "audit",
    "retention",
    "archive",
    "escalation",
    "incident",
    "response",
    "backup",
    "restore",
    "capacity",
    "threshold",
    "alarm",
    "operator",
    "shift",
]


def _escape(text: str) -> bytes:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)").encode("latin-1")


def _text_string(text: str) -> bytes:
    """A PDF text string: ``(literal)`` for ASCII, else ``<FEFF...>`` (UTF-16BE with a BOM)."""
    if text.isascii():
        return b"(" + _escape(text) + b")"
    return b"<FEFF" + text.encode("utf-16-be").hex().upper().encode() + b">"


def _content(lines: list[str]) -> bytes:
    ops = [b"BT /F1 12 Tf 72 720 Td 14 TL"]
    for line in lines:
        ops.append(b"(" + _escape(line) + b") Tj T*")
    ops.append(b"ET")
    return b"\n".join(ops)


def pdf(
    pages: list[str],
    *,
    compress: bool = True,
    encrypt: bool = False,
    claimed_count: int | None = None,
    image_only: bool = False,
    bomb_bytes: int = 0,
    busy_ops: int = 0,
    figure_bytes: int = 0,
    title: str | None = None,
) -> bytes:
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    def stream(data: bytes, extra: bytes = b"") -> bytes:
        if compress:
            data = zlib.compress(data, 9)
            extra += b" /Filter /FlateDecode"
        return b"<< /Length %d%s >>\nstream\n" % (len(data), extra) + data + b"\nendstream"

    catalog = add(b"")  # filled in below
    tree = add(b"")
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    kids = []
    for number, text in enumerate(pages):
        if image_only:
            image = add(
                b"<< /Type /XObject /Subtype /Image /Width 1 /Height 1 /ColorSpace /DeviceGray"
                b" /BitsPerComponent 8 /Length 1 >>\nstream\n\x80\nendstream"
            )
            body = b"q 100 0 0 100 72 600 cm /Im1 Do Q"
            resources = b"<< /XObject << /Im1 %d 0 R >> >>" % image
        else:
            body = _content(text.split("\n"))
            if busy_ops and number == 0:
                body += b"\n" + b"0 0 m 1 1 l S\n" * busy_ops
            resources = b"<< /Font << /F1 %d 0 R >> >>" % font
            if figure_bytes:
                pixels = random.Random(number).randbytes(figure_bytes)
                image = add(
                    b"<< /Type /XObject /Subtype /Image /Width %d /Height 1 /ColorSpace"
                    b" /DeviceGray /BitsPerComponent 8 /Length %d >>\nstream\n"
                    % (figure_bytes, figure_bytes)
                    + pixels
                    + b"\nendstream"
                )
                body += b"\nq 400 0 0 100 72 40 cm /Fig1 Do Q"
                resources = b"<< /Font << /F1 %d 0 R >> /XObject << /Fig1 %d 0 R >> >>" % (
                    font,
                    image,
                )
        if bomb_bytes and number == 0:
            body += b"\n%" + b" " * bomb_bytes
        content = add(stream(body))
        kids.append(
            add(
                b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Resources %s"
                b" /Contents %d 0 R >>" % (tree, resources, content)
            )
        )
    count = len(kids) if claimed_count is None else claimed_count
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R >>" % tree
    objects[tree - 1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % k for k in kids),
        count,
    )
    encrypt_ref = b""
    if encrypt:
        enc = add(
            b"<< /Filter /Standard /V 1 /R 2 /P -44 /O <"
            + b"11" * 32
            + b"> /U <"
            + b"22" * 32
            + b"> >>"
        )
        encrypt_ref = b" /Encrypt %d 0 R /ID [<%s> <%s>]" % (enc, b"ab" * 16, b"ab" * 16)
    info_ref = b""
    if title is not None:
        info_ref = b" /Info %d 0 R" % add(b"<< /Title %s >>" % _text_string(title))
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for i, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root %d 0 R%s%s >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        catalog,
        encrypt_ref,
        info_ref,
        xref,
    )
    return bytes(out)


def manual_page(number: int, pages: int, lines: int = 43) -> str:
    """The text of page ``number`` (1-based) of a ``manual`` with ``pages`` pages."""
    rng = random.Random(number)
    out = [f"Section {number}: {rng.choice(_VOCABULARY)} {rng.choice(_VOCABULARY)}"]
    for _ in range(lines):
        out.append(" ".join(rng.choice(_VOCABULARY) for _ in range(rng.randint(8, 12))))
    out.append(f"Page {number} of {pages}")
    return "\n".join(out)


def manual(pages: int, *, size: int | None = None, lines: int = 43) -> bytes:
    """A ``pages``-page manual, padded with one figure per page to ``size`` bytes if given."""
    texts = [manual_page(n, pages, lines) for n in range(1, pages + 1)]
    plain = pdf(texts)
    if size is None or size <= len(plain):
        return plain
    overhead = len(pdf(texts, figure_bytes=1)) - len(plain) - pages  # per-figure dictionaries
    return pdf(texts, figure_bytes=max(1, (size - len(plain) - overhead) // pages))
