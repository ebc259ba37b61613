"""The guards every shipped suite carries fail when they should.

Each case runs a small test module in a pytester sandbox: a suite without its required fixture
errors at setup, and the chunk-store canary fails when the fixture hands every test the same
store, including for writes to a scope none of the suite's constants names (the builders
recorded them), and a scan checks that every grant the chunk-store suite writes is recorded.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ragport.contract_tests import chunk_store

SUITES = [
    ("ChunkStoreContract", "test_store_satisfies_the_chunk_store_protocol"),
    ("EmbedderContract", "test_satisfies_the_embedder_protocol"),
    ("RerankerContract", "test_empty_input_gives_empty_output"),
    ("IngestionStatusStoreContract", "test_put_then_get_round_trips"),
    ("DerivedArtifactHandlerContract", "test_handler_satisfies_the_protocol"),
    ("ParserContract", "test_satisfies_the_parser_protocol"),
    ("CheckpointStoreContract", "test_first_compare_and_set_expects_version_zero"),
    ("ConnectorContract", "test_no_change_gives_an_empty_exhausted_page_every_time"),
]


def _outcomes(reports: list[pytest.TestReport]) -> dict[str, tuple[str, str]]:
    """``{test name: (phase, outcome)}`` of the first phase that did not pass (else "call");
    a parametrized test's name carries its id (``name[id]``)."""
    found: dict[str, tuple[str, str]] = {}
    for report in reports:
        name = report.nodeid.rpartition("::")[2]
        if report.failed or report.skipped or (report.when == "call" and name not in found):
            found[name] = (report.when, report.outcome)
    return found


@pytest.mark.parametrize(("suite", "test"), SUITES, ids=[s for s, _ in SUITES])
def test_a_suite_without_its_fixture_errors_at_setup(
    pytester: pytest.Pytester, suite: str, test: str
) -> None:
    """Subclassing a suite without overriding its required fixture fails every test at setup.

    If this fails, check ragport.contract_tests._base.required_fixture and that the suite
    declares its fixture with it.
    """
    pytester.makepyfile(
        f"""
        from ragport.contract_tests import {suite}

        class TestNoFixture({suite}):
            pass
        """
    )
    recorder = pytester.inline_run("-p", "no:cacheprovider", "-p", "no:asyncio", "-k", test)
    outcomes = _outcomes(recorder.getreports("pytest_runtest_logreport"))
    assert outcomes.get(test) == ("setup", "failed")


LEAKY_MODULE = """
import pytest

from ragport.adapters.memory import InMemoryStore
from ragport.contract_tests import ChunkStoreContract
from ragport.contract_tests._support import publish_sources
from ragport.domain.model import Scope

ELSEWHERE = Scope("adapter-own-tenant", "adapter-own-resource", "adapter-own-corpus")
SHARED = InMemoryStore()


class AdapterOwnTests:
    # Placed after the suite in the bases, so it is collected before the canary.
    def test_writes_to_a_scope_of_its_own(self, store):
        publish_sources(store, ELSEWHERE, {"adapter-own-source": ["text"]})


class TestStore(ChunkStoreContract, AdapterOwnTests):
    @pytest.fixture
    def store(self):
        yield {store}
"""


@pytest.mark.parametrize(
    ("store", "canary"),
    [("SHARED", "failed"), ("InMemoryStore()", "passed")],
    ids=["one-store-for-every-test", "a-store-per-test"],
)
def test_the_canary_catches_a_fixture_that_leaks_state(
    pytester: pytest.Pytester, store: str, canary: str
) -> None:
    """With one store for every test the canary fails on a write to a scope no suite constant
    names; with a store per test it passes.

    If this fails, check that publish_sources records its writes (_support.record_written)
    and that test_isolation_canary checks what the class recorded.
    """
    pytester.makepyfile(LEAKY_MODULE.replace("{store}", store))
    recorder = pytester.inline_run(
        "-p",
        "no:cacheprovider",
        "-p",
        "no:asyncio",
        "-k",
        "test_writes_to_a_scope_of_its_own or test_isolation_canary",
    )
    outcomes = _outcomes(recorder.getreports("pytest_runtest_logreport"))
    assert outcomes == {
        "test_writes_to_a_scope_of_its_own": ("call", "passed"),
        "test_isolation_canary": ("call", canary),
    }


LEAKY_STATUS_MODULE = """
import pytest

from ragport.adapters.memory import InMemoryStatusStore
from ragport.contract_tests import IngestionStatusStoreContract

SHARED = InMemoryStatusStore()


class TestStatusStore(IngestionStatusStoreContract):
    @pytest.fixture
    def status_store(self):
        yield {store}
"""


@pytest.mark.parametrize(
    ("store", "canary"),
    [("SHARED", "failed"), ("InMemoryStatusStore()", "passed")],
    ids=["one-store-for-every-test", "a-store-per-test"],
)
def test_the_status_store_canary_catches_a_fixture_that_leaks_state(
    pytester: pytest.Pytester, store: str, canary: str
) -> None:
    """The status-store suite's canary fails after a test wrote to a shared store.

    If this fails, check test_isolation_canary of IngestionStatusStoreContract (last in the
    class, so collected after every test that writes).
    """
    pytester.makepyfile(LEAKY_STATUS_MODULE.replace("{store}", store))
    recorder = pytester.inline_run(
        "-p",
        "no:cacheprovider",
        "-p",
        "no:asyncio",
        "-k",
        "test_put_then_get_round_trips or test_isolation_canary",
    )
    outcomes = _outcomes(recorder.getreports("pytest_runtest_logreport"))
    assert outcomes == {
        "test_put_then_get_round_trips": ("call", "passed"),
        "test_isolation_canary": ("call", canary),
    }


LEAKY_CHECKPOINT_MODULE = """
import pytest

from ragport.adapters.memory import InMemoryCheckpointStore
from ragport.contract_tests import CheckpointStoreContract

SHARED = InMemoryCheckpointStore()


class TestCheckpointStore(CheckpointStoreContract):
    @pytest.fixture
    def checkpoint_store(self):
        yield {store}
"""


@pytest.mark.parametrize(
    ("store", "canary"),
    [("SHARED", "failed"), ("InMemoryCheckpointStore()", "passed")],
    ids=["one-store-for-every-test", "a-store-per-test"],
)
def test_the_checkpoint_store_canary_catches_a_fixture_that_leaks_state(
    pytester: pytest.Pytester, store: str, canary: str
) -> None:
    """The checkpoint-store suite's canary fails after a test wrote to a shared store.

    If this fails, check test_isolation_canary of CheckpointStoreContract (last in the class).
    """
    pytester.makepyfile(LEAKY_CHECKPOINT_MODULE.replace("{store}", store))
    recorder = pytester.inline_run(
        "-p",
        "no:cacheprovider",
        "-p",
        "no:asyncio",
        "-k",
        "test_first_compare_and_set_expects_version_zero or test_isolation_canary",
    )
    outcomes = _outcomes(recorder.getreports("pytest_runtest_logreport"))
    assert outcomes == {
        "test_first_compare_and_set_expects_version_zero": ("call", "passed"),
        "test_isolation_canary": ("call", canary),
    }


def _grant_writes_not_recorded(path: Path) -> list[str]:
    """``grants.set(...)``/``set_source_access(scope, ...)`` calls whose grants are not wrapped
    in ``granted(...)``, as ``file:line``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        func = node.func
        if func.attr == "set_source_access" and len(node.args) == 2:
            grants = node.args[1]
        elif func.attr == "set" and isinstance(func.value, ast.Attribute):
            if func.value.attr != "grants" or len(node.args) != 1:
                continue
            grants = node.args[0]
        else:
            continue
        wrapped = (
            isinstance(grants, ast.Call)
            and isinstance(grants.func, ast.Name)
            and grants.func.id == "granted"
        )
        if not wrapped:
            found.append(f"{path.name}:{node.lineno}")
    return found


def test_every_grant_the_chunk_store_suite_writes_is_recorded() -> None:
    """Every grant write in the chunk-store suite goes through ``granted``, so the canary and
    the emptiness test check those sources.

    If this fails, wrap the grants at the listed lines: ``uow.grants.set(granted(uow.scope,
    [...]))`` or ``store.set_source_access(scope, granted(scope, [...]))``.
    """
    package = Path(chunk_store.__file__).parent
    found = [
        hit for path in sorted(package.glob("*.py")) for hit in _grant_writes_not_recorded(path)
    ]
    assert not found


def test_the_grant_scan_sees_an_unrecorded_write(tmp_path: Path) -> None:
    """The scan behind the test above flags both ways of writing a grant unwrapped.

    If this fails, check _grant_writes_not_recorded.
    """
    module = tmp_path / "suite.py"
    module.write_text(
        "def t(store, uow, scope, grants):\n"
        "    uow.grants.set(grants)\n"
        "    store.set_source_access(scope, grants)\n"
        "    uow.grants.set(granted(uow.scope, grants))\n"
    )
    assert _grant_writes_not_recorded(module) == ["suite.py:2", "suite.py:3"]


MINIMAL_MODULE = """
import attrs
import pytest

from ragport.adapters.memory import InMemoryStore
from ragport.contract_tests import ChunkStoreContract


class Minimal(InMemoryStore):
    @property
    def capabilities(self):
        return attrs.evolve(
            super().capabilities, guarded_query=False, transactions={transactions},
            generations={transactions},
        )


class TestMinimal(ChunkStoreContract):
    @pytest.fixture
    def store(self):
        yield Minimal()
"""


@pytest.mark.parametrize(
    "transactions", [True, False], ids=["no-guarded-query", "nothing-optional"]
)
def test_an_optional_section_skips_only_its_own_tests(
    pytester: pytest.Pytester, transactions: bool
) -> None:
    """A store that declares neither guarded_query (nor, in the second case, transactions and
    generations) still runs the scope and query tests and the canary: only the sections that
    need those capabilities skip.

    If this fails, look for an autouse fixture in a ChunkStoreContract mixin that skips: it
    applies to every test of the aggregate. Check the requirement inside each test instead.
    """
    pytester.makepyfile(MINIMAL_MODULE.replace("{transactions}", str(transactions)))
    recorder = pytester.inline_run(
        "-p",
        "no:cacheprovider",
        "-p",
        "no:asyncio",
        "-k",
        "test_query_orders_by_score_then_id or test_isolation_canary "
        "or test_guarded_query_equals_the_two_separate_reads "
        "or test_the_predicate_withholds_a_derived_record_by_its_roots",
    )
    outcomes = _outcomes(recorder.getreports("pytest_runtest_logreport"))
    assert outcomes["test_query_orders_by_score_then_id"] == ("call", "passed")
    assert outcomes["test_isolation_canary"] == ("call", "passed")
    for read in ("guarded_query", "borrowed_query"):
        name = f"test_guarded_query_equals_the_two_separate_reads[{read}]"
        assert outcomes[name][1] == "skipped", read
    forgetting = outcomes["test_the_predicate_withholds_a_derived_record_by_its_roots"]
    if transactions:
        assert forgetting == ("call", "passed")
    else:
        assert forgetting[1] == "skipped"
