"""Every ```python block in README.md and docs/*.md runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^(`{3,4})python\n(.*?)^\1$", re.S | re.M)


def _examples() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        blocks = [m.group(2) for m in BLOCK.finditer(page.read_text(encoding="utf-8"))]
        for n, code in enumerate(blocks, start=1):
            found.append((f"{page.relative_to(ROOT)}#{n}", code))
    return found


EXAMPLES = _examples()


def test_docs_have_examples():
    """The documentation carries runnable examples at all.

    If this fails, check that docs/*.md still use ```python fences.
    """
    assert len(EXAMPLES) >= 4


# A deprecated form that an example's own line uses (ragport's warnings name the caller's line,
# here the example, run as module "__docs__") is an error: the docs teach the current forms. An
# example may still show an old form inside its own warnings.catch_warnings block.
@pytest.mark.filterwarnings("error::DeprecationWarning:__docs__")
@pytest.mark.parametrize(("where", "code"), EXAMPLES, ids=[w for w, _ in EXAMPLES])
def test_example_runs(where, code, capsys, monkeypatch, tmp_path):
    """The example at ``where`` executes without raising, and without a deprecated form.

    An example that reads ``RAGPORT_STORE`` gets ``memory://`` (and no example touches the
    user's data directory). If this fails, the page and the code disagree: fix whichever is
    wrong (a DeprecationWarning: use what docs/deprecations.md names instead).
    """
    monkeypatch.setenv("RAGPORT_STORE", "memory://")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    exec(compile(code, where, "exec"), {"__name__": "__docs__"})
