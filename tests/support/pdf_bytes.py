"""Hand-written PDFs for the parser tests: made at test time, nothing downloaded.

``pdf(pages)`` writes a valid PDF 1.4 with one Helvetica text page per entry (each line of a
page is one ``Tj``), Flate-compressed content streams and a correct xref table. Keyword
arguments make the hostile variants the tests need: an ``/Encrypt`` dictionary, a page tree
that claims many pages, pages without text (an image only), a stream that inflates past any
cap, a content stream that keeps pdfminer busy.
"""

from __future__ import annotations

import zlib

__all__ = ["pdf"]


def _escape(text: str) -> bytes:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)").encode("latin-1")


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
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for i, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root %d 0 R%s >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        catalog,
        encrypt_ref,
        xref,
    )
    return bytes(out)
