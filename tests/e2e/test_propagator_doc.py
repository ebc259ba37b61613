"""docs/forgetting.md documents every option of ``create_deletion_propagator`` (issue 44: a
host found ``as_owner=True`` only in the source, while the page said an authorization is
always required)."""

from __future__ import annotations

import inspect
from pathlib import Path

from ragport.application import create_deletion_propagator

PAGE = Path(__file__).resolve().parents[2] / "docs/forgetting.md"


def test_the_forgetting_page_names_every_propagator_option() -> None:
    """Each keyword of create_deletion_propagator appears on the page as ``name=`` in its
    signature line, and as_owner has a section with a runnable example (run by
    tests/e2e/test_docs_examples.py). If this fails, document the option in
    docs/forgetting.md, "Propagation"."""
    text = PAGE.read_text(encoding="utf-8")
    for name in inspect.signature(create_deletion_propagator).parameters:
        assert f"{name}=" in text, name
    section = text[text.index("### Acting as the data's owner") :].split("\n### ", 1)[0]
    assert "```python" in section and "as_owner=True" in section
