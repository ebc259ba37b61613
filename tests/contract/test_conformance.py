"""``assert_conforms``: mypy names a missing or mistyped ChunkStore member; the run-time check
names a member whose parameters differ from the port's."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import ragport.ports.store as store_port
from ragport.adapters.memory import InMemoryStore
from ragport.contract_tests import (
    ChunkStoreCapabilityContract,
    assert_conforms,
    conformance_problems,
)
from ragport.ports.store import ChunkStore

ROOT = Path(__file__).resolve().parents[2]


def _missing_store_source(member: str) -> str:
    """A class with ChunkStore's members, read from the port itself, minus ``member``."""
    # drop "@runtime_checkable" and "class ChunkStore(Protocol):", then the member's method
    body = inspect.getsource(ChunkStore).split("\n", 2)[2]
    start = body.index(f"    def {member}(")
    ends = [body.find(mark, start + 1) for mark in ("\n    def ", "\n    @property")]
    end = min([i for i in ends if i != -1] or [len(body)])
    cls = (body[:start] + body[end:]).replace(
        "        ...\n", "        raise NotImplementedError\n"
    )
    header = inspect.getsource(store_port).split("__all__")[0]
    return (
        header
        + "from ragport.ports.store import EmbedderKey, ScoredRecord, UnitOfWork\n"
        + "from ragport.adapters.memory import InMemoryStore\n"
        + "from ragport.contract_tests import assert_conforms\n\n\n"
        + "class Missing:\n"
        + cls
        + "\n\nclass Mistyped(InMemoryStore):\n    provider = 3  # type: ignore[assignment]\n\n\n"
        + "assert_conforms(InMemoryStore())  # GOOD\n"
        + "assert_conforms(Missing())  # MISSING\n"
        + "assert_conforms(Mistyped())  # MISTYPED\n"
    )


@pytest.mark.slow
def test_mypy_names_the_missing_and_the_mistyped_member(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """One ``mypy --strict`` run over a small adapter file: the call with a store lacking
    ``list_source_ids`` and the one whose ``provider`` is an int are errors naming those
    members; the call with InMemoryStore is not.

    Slow only with a cold mypy cache (about 25 s; the cache is kept in pytest's cache dir,
    then it takes about a second). If this fails, check the parameter type of
    ``ragport.contract_tests.assert_conforms`` (it must be ChunkStore, not Any or object)."""
    path = tmp_path / "my_store.py"
    path.write_text(_missing_store_source("list_source_ids"), encoding="utf-8")
    lines = path.read_text(encoding="utf-8").splitlines()
    line_of = {
        tag: lines.index(line) + 1
        for line in lines
        for tag in ("GOOD", "MISSING", "MISTYPED")
        if line.endswith(f"# {tag}")
    }
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
    cache_dir = cache.mkdir("mypy") if cache is not None else tmp_path / "mypy-cache"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--cache-dir",
            str(cache_dir),
            "--no-error-summary",
            str(path),
        ],
        cwd=tmp_path,
        env={**os.environ, "MYPYPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = run.stdout
    assert run.returncode == 1, (run.returncode, out, run.stderr)
    errors = {int(line.split(":")[1]) for line in out.splitlines() if ": error:" in line}
    assert errors == {line_of["MISSING"], line_of["MISTYPED"]}, out
    assert (
        f'my_store.py:{line_of["MISSING"]}: note: "Missing" is missing following "ChunkStore" protocol member:'
        in out
    ), out
    assert "list_source_ids" in out, out
    assert 'provider: expected "str", got "int"' in out, out


class _NoAfter(InMemoryStore):
    def list_source_ids(self, scope: Any, *, start: str | None = None, limit: int = 1_000) -> Any:
        return super().list_source_ids(scope, after=start, limit=limit)


class _NoDefault(InMemoryStore):
    def query(self, scope: Any, vector: Any, *, limit: int, authorization: Any, **kw: Any) -> Any:
        return super().query(scope, vector, limit=limit, authorization=authorization, **kw)


class _ExtraRequired(InMemoryStore):
    def get_by_source(self, scope: Any, source_id: str, generation: int) -> Any:  # type: ignore[override]
        return super().get_by_source(scope, source_id)


class _DeclaresWithoutDefining:
    """Delegates ChunkStore (allowed) and declares a lexical leg only the inner class defines."""

    def __init__(self) -> None:
        self._inner = InMemoryStore()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@pytest.mark.parametrize(
    ("store", "named"),
    [
        (_NoAfter(), "list_source_ids does not accept the keyword argument 'after'"),
        (_NoDefault(), "query: 'authorization' needs a default"),
        (_ExtraRequired(), "get_by_source: the extra parameter 'generation' needs a default"),
        (_DeclaresWithoutDefining(), "missing method lexical_query (capabilities declare"),
        (object(), "missing member capabilities"),
    ],
    ids=["renamed-keyword", "no-default", "extra-required", "declared-not-defined", "nothing"],
)
def test_runtime_check_names_the_member_that_differs(store: object, named: str) -> None:
    """``assert_conforms`` raises AssertionError naming a member whose parameters differ from
    the port's, and the capability contract test fails the same store.

    If this fails, check ``ragport.contract_tests.conformance._signature_problems``."""
    with pytest.raises(AssertionError, match=named.replace("(", r"\(")):
        assert_conforms(store)  # type: ignore[arg-type]
    with pytest.raises(AssertionError):
        ChunkStoreCapabilityContract().test_store_conforms_to_the_port_signatures(store)  # type: ignore[arg-type]


def test_runtime_check_passes_the_shipped_stores_and_returns_the_store() -> None:
    """The control: InMemoryStore conforms and comes back as itself.

    If this fails, check the port's signatures against InMemoryStore's."""
    store = InMemoryStore()
    assert conformance_problems(store) == []
    assert assert_conforms(store) is store
