"""docs/adapters.md shows the example store's test file and code as they are.

The guide's ```python blocks run in test_docs_examples.py; this module checks the parts that
are quoted rather than run: the contract test file in full, and the store excerpts.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = (ROOT / "docs" / "adapters.md").read_text(encoding="utf-8")
STORE_PATH = "examples/sqlite_store/ragport_sqlite.py"
STORE = (ROOT / STORE_PATH).read_text(encoding="utf-8")
TEST_FILE = (ROOT / "tests" / "e2e" / "test_sqlite_example_store.py").read_text(encoding="utf-8")


def _blocks(fence: str) -> list[str]:
    return re.findall(rf"^```{fence}\n(.*?)^```$", GUIDE, re.S | re.M)


def test_the_guide_quotes_the_contract_test_file_in_full():
    """The guide's contract run is byte for byte tests/e2e/test_sqlite_example_store.py.

    If this fails, copy the test file into the guide's block (or the block into the file).
    """
    assert TEST_FILE in _blocks("python")


def test_every_store_excerpt_is_in_the_store():
    """Each ```py block headed by the store's path is a verbatim slice of the store.

    If this fails, re-copy the excerpt from examples/sqlite_store/ragport_sqlite.py.
    """
    excerpts = [b for b in _blocks("py") if b.startswith(f"# {STORE_PATH}\n")]
    assert len(excerpts) >= 3
    for excerpt in excerpts:
        body = excerpt.split("\n", 1)[1]
        assert body in STORE, body.splitlines()[0]
