"""Regenerate the binary files of the demo corpus: a multi-page PDF and a DOCX.

Run from the repository root: ``.venv/bin/python ragport/demo/make_corpus.py``. The PDF is
written object by object here (Helvetica text, one bar-chart figure per page, a correct xref
table: no PDF library needed); the DOCX is built with python-docx. Both are deterministic, so
running the script again gives the same bytes (the DOCX up to its zip timestamps). The texts
are ragport's own, about the fictional Harbor Lane Logistics of the Markdown files.
"""

from __future__ import annotations

import textwrap
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent

MANUAL_TITLE = "Fleet maintenance manual"

# (heading, paragraphs) per page of the PDF.
MANUAL: list[tuple[str, list[str]]] = [
    (
        "1. Scope and responsibilities",
        [
            "This manual covers the 42 trucks, 18 vans and 11 refrigerated trailers that Harbor "
            "Lane Logistics runs from its two depots. It applies to every driver, dispatcher and "
            "mechanic, and to contractors who drive our vehicles.",
            "The workshop lead owns the maintenance plan and signs off every vehicle that returns "
            "to service after a repair. Dispatchers may not assign a vehicle whose next service "
            "is overdue; the planning system blocks it and names the missing check.",
            "Each section below states an interval, the person who carries out the check, and "
            "where the result is recorded. Intervals count from the last completed check, not "
            "from the date it was planned.",
        ],
    ),
    (
        "2. Daily walk-around check",
        [
            "Before the first departure of the day the driver walks around the vehicle and checks "
            "lights, indicators, mirrors, wipers, number plates, tyres, wheel nuts and any sign of "
            "leaking fuel, oil or coolant. The check takes about ten minutes.",
            "The result goes into the driver app, with a photo of every defect. A defect that "
            "affects safety, such as a broken light, a damaged tyre or a brake warning, means the "
            "vehicle stays in the yard until the workshop has cleared it.",
            "Minor defects (a scratched panel, a loose trim) are logged and repaired at the next "
            "planned visit. Drivers never repair a vehicle themselves on the road.",
        ],
    ),
    (
        "3. Tyres",
        [
            "Our minimum tread depth is 3 millimetres on every axle, well above the legal limit. "
            "Tyre pressure is checked weekly with the depot gauge, cold, before the first trip.",
            "Winter tyres are fitted from 1 November to 31 March on every vehicle that leaves "
            "the coastal routes. Regrooved tyres are allowed on trailers only, never on a steering "
            "axle.",
            "A tyre with a cut deeper than the tread, a bulge or exposed cords is replaced the "
            "same day. Keep the replaced tyre until the supplier has assessed the warranty claim.",
        ],
    ),
    (
        "4. Brakes",
        [
            "Brake pads and discs are inspected every 25,000 kilometres or every three months, "
            "whichever comes first. The inspection includes a test on the roller brake bench in "
            "the workshop and a check of the air system for leaks.",
            "A driver who notices the vehicle pulling to one side, a longer stopping distance or "
            "a brake warning light reports it the same day and does not take the vehicle out "
            "again until a mechanic has tested it.",
            "Trailer brakes follow the same interval as the tractor units. Brake test results are "
            "kept in the vehicle file for two years.",
        ],
    ),
    (
        "5. Engine oil, filters and AdBlue",
        [
            "Engine oil and the oil filter are changed every 40,000 kilometres or once a year. "
            "Use only the oil grade listed on the vehicle card; mixing grades voids the engine "
            "warranty.",
            "Air and fuel filters are replaced at every second oil change, or sooner on the "
            "quarry routes where the air filter indicator turns red.",
            "Drivers top up AdBlue at the depot pump. A vehicle that shows an emissions warning "
            "goes to the workshop within two working days.",
        ],
    ),
    (
        "6. Refrigeration units",
        [
            "Refrigerated trailers are pre-cooled for 30 minutes before loading. The driver "
            "checks the set point against the delivery note and signs for it in the app.",
            "The temperature logger is read every week and after every trip with frozen goods. "
            "A deviation of more than two degrees for more than fifteen minutes is reported to "
            "the customer service desk before the delivery.",
            "Each refrigeration unit is serviced every 1,500 engine hours by the manufacturer's "
            "partner workshop, including a leak test of the cooling circuit.",
        ],
    ),
    (
        "7. Tachographs and records",
        [
            "Driver cards are downloaded at least every 28 days and vehicle units every 90 days. "
            "The planning office keeps the files for two years and checks them for missing "
            "breaks every month.",
            "The tachograph itself is calibrated every two years by an approved workshop; the "
            "calibration plaque must stay readable.",
            "Service records, brake tests and tyre changes are kept in the vehicle file, which "
            "follows the vehicle when it is sold.",
        ],
    ),
    (
        "8. Breakdowns and accidents",
        [
            "After a breakdown the driver switches on the hazard lights, wears the high-visibility "
            "vest and places the warning triangle at least 45 metres behind the vehicle.",
            "Call the 24-hour workshop line first, then the dispatcher. Photograph the scene, the "
            "vehicles and any damage before anything is moved, unless traffic is in danger.",
            "Every accident, however small, is reported in the driver app within 24 hours. The "
            "workshop lead decides whether the vehicle may be driven back to the depot.",
        ],
    ),
]


def _escape(text: str) -> bytes:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)").encode("latin-1")


def _page_content(number: int, heading: str, paragraphs: list[str]) -> bytes:
    ops = [b"BT /F2 16 Tf 72 730 Td (" + _escape(heading) + b") Tj ET"]
    ops.append(b"BT /F1 11 Tf 72 700 Td 15 TL")
    for paragraph in paragraphs:
        for line in textwrap.wrap(paragraph, width=88):
            ops.append(b"(" + _escape(line) + b") Tj T*")
        ops.append(b"T*")
    ops.append(b"ET")
    ops.append(b"q 360 0 0 150 126 150 cm /Fig1 Do Q")
    footer = f"{MANUAL_TITLE} - page {number} of {len(MANUAL)}"
    ops.append(b"BT /F1 9 Tf 72 60 Td (" + _escape(footer) + b") Tj ET")
    return b"\n".join(ops)


def _figure(number: int, width: int = 192, height: int = 128) -> bytes:
    """A grey bar chart (uncompressed 8-bit pixels): interval figures, as a real manual has."""
    bars = [(number * 7 + k * 13) % 90 + 20 for k in range(8)]
    rows = []
    for y in range(height):
        row = bytearray(b"\xff" * width)
        for k, value in enumerate(bars):
            if height - y <= value:
                left = 12 + k * 22
                row[left : left + 14] = bytes([60 + 18 * (k % 4)]) * 14
        if y == height - 4:
            row[8:-8] = b"\x00" * (width - 16)
        rows.append(bytes(row))
    return b"".join(rows)


def manual_pdf() -> bytes:
    """The fleet maintenance manual: one page per section, each with a figure."""
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog = add(b"")
    tree = add(b"")
    regular = add(
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
    )
    bold = add(
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica-Bold /Encoding /WinAnsiEncoding >>"
    )
    info = add(b"<< /Title (" + _escape(MANUAL_TITLE) + b") /Author (Harbor Lane Logistics) >>")
    kids = []
    for number, (heading, paragraphs) in enumerate(MANUAL, start=1):
        pixels = _figure(number)
        image = add(
            b"<< /Type /XObject /Subtype /Image /Width 192 /Height 128 /ColorSpace /DeviceGray"
            b" /BitsPerComponent 8 /Length %d >>\nstream\n" % len(pixels) + pixels + b"\nendstream"
        )
        data = zlib.compress(_page_content(number, heading, paragraphs), 9)
        content = add(
            b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(data) + data + b"\nendstream"
        )
        kids.append(
            add(
                b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] /Resources << /Font"
                b" << /F1 %d 0 R /F2 %d 0 R >> /XObject << /Fig1 %d 0 R >> >> /Contents %d 0 R >>"
                % (tree, regular, bold, image, content)
            )
        )
    objects[catalog - 1] = b"<< /Type /Catalog /Pages %d 0 R >>" % tree
    objects[tree - 1] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % k for k in kids),
        len(kids),
    )
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for i, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root %d 0 R /Info %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        catalog,
        info,
        xref,
    )
    return bytes(out)


def expenses_docx(path: Path) -> None:
    """The travel and expenses policy: Word headings, a list and a table."""
    import docx

    document = docx.Document()
    document.core_properties.title = "Travel and expenses"
    document.core_properties.author = "Finance team"
    document.add_heading("Travel and expenses", 0)
    document.add_paragraph(
        "This policy says how Harbor Lane Logistics staff book business travel and claim "
        "their costs back. Finance reviews it every January."
    )
    document.add_heading("Booking travel", 1)
    document.add_paragraph(
        "Book trains, flights and hotels through the travel desk at least five working days "
        "ahead. Trips under five hours go by train; a flight needs your manager's approval."
    )
    document.add_heading("Hotels", 2)
    document.add_paragraph(
        "Choose a hotel from the travel desk's list. The nightly limit is 140 EUR in most "
        "cities and 190 EUR in capitals; breakfast is included in the limit."
    )
    document.add_heading("Mileage", 2)
    document.add_paragraph(
        "Using your private car for a business trip is reimbursed at 0.30 EUR per kilometre. "
        "Log the odometer reading at the start and the end of every trip in the expenses app."
    )
    document.add_paragraph("Parking fees and tolls are claimed on top", style="List Bullet")
    document.add_paragraph("Fines are never reimbursed", style="List Bullet")
    document.add_heading("Meal allowances", 1)
    table = document.add_table(rows=4, cols=2)
    for r, (meal, amount) in enumerate(
        [("Meal", "Allowance"), ("Breakfast", "8 EUR"), ("Lunch", "15 EUR"), ("Dinner", "25 EUR")]
    ):
        table.cell(r, 0).text = meal
        table.cell(r, 1).text = amount
    document.add_heading("Claims", 1)
    document.add_paragraph(
        "Submit every claim within 30 days of the trip, with a photo of each receipt. Claims "
        "older than 90 days are paid only with the finance director's approval."
    )
    document.save(str(path))


def main() -> None:
    (HERE / "fleet-maintenance.pdf").write_bytes(manual_pdf())
    expenses_docx(HERE / "travel-expenses.docx")


if __name__ == "__main__":
    main()
