"""DOCX files of a chosen size for the size tests: made at test time, nothing downloaded.

``padded_docx(size)`` is tests/data/security-handbook.docx with a stored part of
incompressible bytes added (an embedded figure as far as the size goes; python-docx never
reads it), so the file comes out at about ``size`` bytes and parses to the handbook's text.
"""

from __future__ import annotations

import io
import random
import zipfile
from pathlib import Path

__all__ = ["HANDBOOK", "padded_docx"]

HANDBOOK = Path(__file__).resolve().parents[1] / "data" / "security-handbook.docx"


def padded_docx(size: int) -> bytes:
    base = HANDBOOK.read_bytes()
    buffer = io.BytesIO(base)
    with zipfile.ZipFile(buffer, "a") as archive:
        pad = max(1, size - len(base) - 200)
        archive.writestr("word/media/figure.bin", random.Random(7).randbytes(pad))
    return buffer.getvalue()
