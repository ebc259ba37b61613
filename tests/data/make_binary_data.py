"""Regenerate the committed binary samples (a PDF and a DOCX) of tests/data.

Run from the repository root: ``.venv/bin/python tests/data/make_binary_data.py``. The PDF is
hand-written by tests/support/pdf_bytes.py; the DOCX is built with python-docx.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "support"))

from pdf_bytes import pdf  # noqa: E402

PAGES = [
    "Travel policy\nThis policy covers business travel for all staff.",
    "Booking trains\nTrips under five hours go by train.\nBook through the travel desk.",
    "Expense claims\nClaim hotel costs within thirty days of the trip.\nReceipts are required.",
]


def main() -> None:
    import docx

    (HERE / "travel-policy.pdf").write_bytes(pdf(PAGES))
    document = docx.Document()
    document.core_properties.title = "Security handbook"
    document.core_properties.author = "Security team"
    document.add_heading("Security handbook", 0)
    document.add_heading("Passwords", 1)
    document.add_paragraph("Use a password manager and never reuse a password.")
    document.add_paragraph("Turn on two-factor sign-in", style="List Bullet")
    document.add_paragraph("Lock your screen when you leave your desk", style="List Bullet")
    document.add_heading("Incident contacts", 1)
    table = document.add_table(rows=3, cols=2)
    for r, (team, contact) in enumerate(
        [("Team", "Contact"), ("Security desk", "ext. 4242"), ("On-call", "ext. 5151")]
    ):
        table.cell(r, 0).text = team
        table.cell(r, 1).text = contact
    document.save(str(HERE / "security-handbook.docx"))


if __name__ == "__main__":
    main()
