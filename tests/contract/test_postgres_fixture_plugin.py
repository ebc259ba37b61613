"""The shipped PostgreSQL fixtures (``ragport.contract_tests.postgres``) in a host's test run.

Each case runs the example of docs/contract-tests.md ("Running the suites on your PostgreSQL
server": its ``conftest.py`` and its test module, as written) in a pytester sandbox, on a few
tests of ``ChunkStoreContract``: with ``RAGPORT_TEST_DATABASE_URL`` set to the session server
they pass, each in a fresh schema, and every schema is gone afterwards; unset, they skip
naming the variable; set to a server that does not answer, they fail at setup without
quoting the URL.
"""

from __future__ import annotations

import re
from pathlib import Path

import psycopg
import pytest

from ragport.contract_tests.postgres import DATABASE_URL_ENV, SCHEMA_PREFIX

PAGE = Path(__file__).resolve().parents[2] / "docs/contract-tests.md"
SECTION = "## Running the suites on your PostgreSQL server"
GUARD = "test_contract_tests_are_not_overridden"  # the suite's own guard needs no server
# Three tests of the suite, each on a schema of its own, and the guard.
PICK = (
    "test_store_fixture_yields_an_empty_store or test_generation_pointer_is_per_scope or "
    f"test_retire_in_one_scope_leaves_the_other or {GUARD}"
)
USING_THE_SERVER = 3
# Added to the page's conftest in the first case: every schema a test got, one per line.
RECORD = """
import pytest


@pytest.fixture(autouse=True)
def _record_schema(request):
    if "store" in request.fixturenames:
        name = request.getfixturevalue("ragport_postgres_schema")
        with open("schemas.txt", "a") as out:
            out.write(name + "\\n")
"""


def _example() -> tuple[str, str]:
    """The page's ``conftest.py`` and test module."""
    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index(SECTION) :].split("\n## ", 1)[0]
    conftest, module = re.findall(r"^```python\n(.*?)^```$", section, re.S | re.M)
    assert conftest.startswith("# tests/conftest.py") and "ChunkStoreContract" in module
    return conftest, module


def _schemas(url: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", (SCHEMA_PREFIX + "%",)
        ).fetchall()
    return {row[0] for row in rows}


def _run(pytester: pytest.Pytester, *, record: bool = False) -> pytest.HookRecorder:
    conftest, module = _example()
    pytester.makeconftest(conftest + (RECORD if record else ""))
    pytester.makepyfile(test_postgres_contract=module)
    return pytester.inline_run("-p", "no:cacheprovider", "-p", "no:asyncio", "-k", PICK)


def _names(reports: list[pytest.TestReport]) -> list[str]:
    return [r.nodeid.rpartition("::")[2] for r in reports]


def test_the_documented_example_runs_the_suite_on_the_server(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, pg_url: str
) -> None:
    """With RAGPORT_TEST_DATABASE_URL set, the page's example runs ChunkStoreContract on
    PostgresStore, each test in a schema of its own that did not exist before, and leaves no
    schema behind. If this fails, check ragport_postgres_schema or the page's example."""
    monkeypatch.setenv(DATABASE_URL_ENV, pg_url)
    before = _schemas(pg_url)
    recorder = _run(pytester, record=True)
    passed, skipped, failed = recorder.listoutcomes()
    assert not failed, [r.nodeid for r in failed]
    assert len(passed) == USING_THE_SERVER + 1 and not skipped
    used = (pytester.path / "schemas.txt").read_text().split()
    assert len(used) == len(set(used)) == USING_THE_SERVER
    assert all(name.startswith(SCHEMA_PREFIX) and name not in before for name in used)
    assert _schemas(pg_url) == before, "a schema of the fixture was left behind"


def test_without_the_variable_the_tests_skip_saying_why(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Unset, every test that needs the server skips with a reason naming the variable.
    If this fails, check ragport_postgres_url."""
    monkeypatch.delenv(DATABASE_URL_ENV, raising=False)
    passed, skipped, failed = _run(pytester).listoutcomes()
    assert _names(passed) == [GUARD] and not failed
    assert len(skipped) == USING_THE_SERVER
    assert all(DATABASE_URL_ENV in str(r.longrepr) for r in skipped)


def test_a_server_that_does_not_answer_fails_without_quoting_the_url(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Set to a server nothing listens at, the tests fail at setup (never a silent skip) and
    the message names the variable, not the URL with its password. If this fails, check
    _check_server in ragport/contract_tests/postgres.py."""
    secret = "s3cret-pw"
    monkeypatch.setenv(DATABASE_URL_ENV, f"postgresql://host:{secret}@127.0.0.1:9/none")
    passed, skipped, failed = _run(pytester).listoutcomes()
    assert _names(passed) == [GUARD] and not skipped
    assert len(failed) == USING_THE_SERVER
    for report in failed:
        assert report.when == "setup"
        assert DATABASE_URL_ENV in str(report.longrepr)
        assert secret not in str(report.longrepr)
