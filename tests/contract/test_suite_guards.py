"""The guards every shipped suite carries fail when they should.

Each case runs a small test module in a pytester sandbox: a suite without its required fixture
errors at setup, and the chunk-store canary fails when the fixture hands every test the same
store, including for writes to a scope none of the suite's constants names (the builders
recorded them).
"""

from __future__ import annotations

import pytest

SUITES = [
    ("ChunkStoreContract", "test_store_satisfies_the_chunk_store_protocol"),
    ("EmbedderContract", "test_satisfies_the_embedder_protocol"),
    ("RerankerContract", "test_empty_input_gives_empty_output"),
    ("IngestionStatusStoreContract", "test_put_then_get_round_trips"),
    ("DerivedArtifactHandlerContract", "test_handler_satisfies_the_protocol"),
]


def _outcomes(reports: list[pytest.TestReport]) -> dict[str, tuple[str, str]]:
    """``{test name: (phase, outcome)}`` of the first phase that did not pass (else "call")."""
    found: dict[str, tuple[str, str]] = {}
    for report in reports:
        name = report.nodeid.rpartition("::")[2]
        if report.failed or (report.when == "call" and name not in found):
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
