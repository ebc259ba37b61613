"""docs/hosts.md: the ```python host blocks run as written on the test server.

Each block runs with ``URL`` (the session's PostgreSQL, ``postgresql+psycopg://``) and
``SCHEMA`` (a fresh schema, dropped after); the plain ```python blocks run in
tests/e2e/test_docs_examples.py with the rest of the docs.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _host_blocks() -> list[str]:
    page = (ROOT / "docs" / "hosts.md").read_text(encoding="utf-8")
    return re.findall(r"^```python host\n(.*?)^```$", page, re.S | re.M)


def test_the_host_blocks_run_on_postgres(pg_url, pg_schema):
    """Every ```python host block of docs/hosts.md runs against the test server.

    If this fails, the page and ``PostgresStore.joined`` disagree: fix whichever is wrong.
    """
    blocks = _host_blocks()
    assert blocks, "docs/hosts.md has no ```python host block"
    url = pg_url.replace("postgresql://", "postgresql+psycopg://", 1)
    for n, code in enumerate(blocks, start=1):
        exec(compile(code, f"docs/hosts.md host#{n}", "exec"), {"URL": url, "SCHEMA": pg_schema})


def test_the_async_engine_block_runs_on_postgres(pg_url, pg_schema):
    """docs/async.md's ```python async-engine block runs against the test server.

    If this fails, the page and the wiring it shows disagree: fix whichever is wrong.
    """
    page = (ROOT / "docs" / "async.md").read_text(encoding="utf-8")
    blocks = re.findall(r"^```python async-engine\n(.*?)^```$", page, re.S | re.M)
    assert len(blocks) == 1
    url = pg_url.replace("postgresql://", "postgresql+psycopg://", 1)
    scope: dict[str, object] = {"URL": url, "SCHEMA": pg_schema}
    exec(compile(blocks[0], "docs/async.md async-engine", "exec"), scope)
    scope["ragport_engine"].dispose()  # type: ignore[attr-defined]
