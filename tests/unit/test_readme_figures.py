"""README.md gives no figure about the project's own test run that goes stale with the next
commit (issue 43, item 9: it said `make test` took 5m31s for 3,581 tests when 4,125 ran)."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"
STALE = [
    re.compile(r"\b\d[\d,]*\s+tests\b"),  # a test count: "3,581 tests", "4125 tests"
    re.compile(r"\b\d+m\d+s\b"),  # a wall time as `time` prints it: "5m31s"
    re.compile(r"make test(?:-slow)?`?\s+took\b"),  # "`make test` took ..."
]


def test_the_readme_has_no_test_count_or_test_run_time():
    """No hard-coded test count or `make test` duration anywhere in README.md: pytest's own
    last line says both.

    If this fails, drop the figure from README.md (or say where it is measured each run)."""
    text = README.read_text(encoding="utf-8")
    found = [m.group(0) for pattern in STALE for m in pattern.finditer(text)]
    assert not found, found
