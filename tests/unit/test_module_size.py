"""No module of the package is over 600 lines (issue 11: files a newcomer can read in one pass)."""

from __future__ import annotations

from pathlib import Path

import ragport

MAX_LINES = 600
PACKAGE = Path(ragport.__file__).resolve().parent
# Keep this empty (postgres/store.py, the last exception, was split: connections.py).
ALLOWED: set[str] = set()


def _sizes() -> dict[str, int]:
    return {
        path.relative_to(PACKAGE).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def test_no_module_is_over_600_lines():
    """Every .py file under ragport/ has at most 600 lines, except the allow-list.

    If this fails, split the module named (by use case, capability or layer of the adapter)
    and keep its public names importable from where they were; do not grow the allow-list.
    """
    sizes = _sizes()
    assert len(sizes) > 50, "the walk found too few modules: is PACKAGE the package folder?"
    over = {name: n for name, n in sizes.items() if n > MAX_LINES and name not in ALLOWED}
    assert not over, f"modules over {MAX_LINES} lines: {over}"


def test_the_allow_list_names_only_modules_that_still_need_it():
    """An allow-listed module exists and is still over the limit (else remove it from ALLOWED).

    If this fails, the module was split: delete its entry from ALLOWED.
    """
    sizes = _sizes()
    stale = {name for name in ALLOWED if sizes.get(name, 0) <= MAX_LINES}
    assert not stale, f"no longer needed in ALLOWED: {sorted(stale)}"
