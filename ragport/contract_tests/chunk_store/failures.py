"""``ChunkStoreFailureContract``: a failure inside the store surfaces as an unchained ``StoreError``.

The suite cannot break an arbitrary backend by itself, so the adapter's test class says how,
by overriding ``break_store`` with a callable that makes the store's backend fail from then
on (drop its schema, stop its server, overwrite its file with garbage)::

    @pytest.fixture
    def break_store(self):
        def break_it(store):
            store.engine.execute("DROP SCHEMA my_schema CASCADE")
        return break_it

Then every operation of the port that reaches the backend must raise ``StoreError`` with
nothing chained (``__cause__`` and ``__context__`` are ``None``, ``__suppress_context__`` is
set: a driver's exception may quote SQL parameters, hence document text), and so must
``retrieve_context`` over it: no ``RuntimeError``, ``sqlite3.Error`` or ``psycopg.Error``
escapes, and no read answers "nothing found" instead. Without ``break_store`` (a store with
no backend that can fail, like the in-memory one) the test skips with that reason.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import pytest

from ragport.application.retrieval import retrieve_context
from ragport.contract_tests._support import (
    CONTRACT_EMBEDDER_ID,
    ContractEmbedder,
    granted,
    publish_sources,
)
from ragport.contract_tests.chunk_store._base import _ChunkStoreContractBase
from ragport.contract_tests.chunk_store._helpers import ALICE, DIMS, QUERY_ALL, SCOPE
from ragport.domain.errors import StoreError
from ragport.domain.model import Grant
from ragport.ports.store import (
    ChunkStore,
    SupportsForgottenLookup,
    SupportsGuardedQuery,
    SupportsLexicalSearch,
    supports,
)

__all__ = ["BreakStore", "ChunkStoreFailureContract", "unchained_store_error"]

BreakStore = Callable[[ChunkStore], None]
"""``break_store``: make the given store's backend fail for every later operation."""

_EMBEDDER = ContractEmbedder()


def unchained_store_error(what: str, call: Callable[[], object]) -> str | None:
    """What is wrong with how ``call`` fails (``None`` when it raises a clean ``StoreError``)."""
    try:
        call()
    except StoreError as exc:
        if exc.__cause__ is not None:
            return f"{what}: StoreError chains a __cause__ ({type(exc.__cause__).__name__})"
        if exc.__context__ is not None:
            return f"{what}: StoreError chains a __context__ ({type(exc.__context__).__name__})"
        if not exc.__suppress_context__:
            return f"{what}: StoreError is not raised with __suppress_context__ (raise_unchained)"
        return None
    except Exception as exc:  # the defect this section exists to catch
        return f"{what}: raised {type(exc).__name__}, not StoreError"
    return f"{what}: answered although the backend is broken"


class ChunkStoreFailureContract(_ChunkStoreContractBase):
    """Driver failures: typed, unchained ``StoreError`` from every operation (``break_store``)."""

    @pytest.fixture
    def break_store(self) -> BreakStore | None:
        """Override: a callable ``(store) -> None`` after which the store's backend fails."""
        return None

    def test_a_broken_backend_is_an_unchained_store_error_everywhere(
        self, store: ChunkStore, break_store: BreakStore | None
    ) -> None:
        """Checks ``ChunkStore.current_generation``, ``ChunkStore.query``,
        ``ChunkStore.get_by_source``, ``ChunkStore.foreign_embedders``,
        ``ChunkStore.list_embedders``, ``ChunkStore.list_invalidated_ids``,
        ``ChunkStore.get_source_access``, ``ChunkStore.list_source_ids``,
        ``ChunkStore.set_source_access``, ``ChunkStore.check_source_access``,
        ``ChunkStore.unit_of_work``, ``UnitOfWork.commit``, ``SupportsLexicalSearch.lexical_query``,
        ``SupportsLexicalSearch.hybrid_query``, ``SupportsGuardedQuery.guarded_query``,
        ``SupportsForgottenLookup.forgotten_among``, ``retrieve_context``: once ``break_store`` has
        broken the backend, each of them (the optional ones where declared) raises ``StoreError``
        with no ``__cause__`` and no ``__context__`` (``ragport.domain.errors.raise_unchained``);
        nothing else escapes and nothing answers as if the scope were empty.

        If this fails, check the store's one translation point for driver exceptions: catch
        the driver's base error class around every statement (and around connecting and
        committing) and raise ``StoreError`` through ``raise_unchained`` (``raise ... from
        None`` still leaves ``__context__``); an exception the store raises itself must be a
        ragport error too.
        """
        if break_store is None:
            pytest.skip(
                f"override `break_store` in your test class (a callable that makes the "
                f"{type(store).__name__}'s backend fail) so the suite can check how driver "
                "failures surface; a store without a backend that can fail has none"
            )
        publish_sources(store, SCOPE, {"fail-a": ["walrus colonies on the ice"]})
        break_store(store)
        vector = _EMBEDDER.embed(["walrus"])[0]
        calls: dict[str, Callable[[], object]] = {
            "current_generation": lambda: store.current_generation(SCOPE),
            "query": lambda: store.query(SCOPE, vector, limit=QUERY_ALL),
            "get_by_source": lambda: store.get_by_source(SCOPE, "fail-a"),
            "foreign_embedders": lambda: store.foreign_embedders(SCOPE, CONTRACT_EMBEDDER_ID, DIMS),
            "list_embedders": lambda: store.list_embedders(SCOPE),
            "list_invalidated_ids": lambda: store.list_invalidated_ids(SCOPE),
            "get_source_access": lambda: store.get_source_access(SCOPE, ["fail-a"]),
            "list_source_ids": lambda: store.list_source_ids(SCOPE),
            "set_source_access": lambda: store.set_source_access(
                SCOPE, granted(SCOPE, [Grant("fail-a", principal_ids=("alice",))])
            ),
            "unit_of_work+commit": lambda: publish_sources(store, SCOPE, {"fail-b": ["seal"]}),
            "retrieve_context": lambda: retrieve_context(
                "walrus", embedder=_EMBEDDER, store=store, scope=SCOPE
            ),
        }
        if store.capabilities.authorization == "acl":
            calls["check_source_access"] = lambda: store.check_source_access(
                SCOPE, ["fail-a"], ALICE
            )
        if isinstance(store, SupportsLexicalSearch) and supports(store, "lexical"):
            for mode in store.capabilities.lexical_modes:
                calls[f"lexical_query({mode})"] = functools.partial(
                    store.lexical_query, SCOPE, "walrus", limit=QUERY_ALL, mode=mode
                )
                calls[f"hybrid_query({mode})"] = functools.partial(
                    store.hybrid_query,
                    SCOPE,
                    vector,
                    "walrus",
                    embedder_id=CONTRACT_EMBEDDER_ID,
                    dimensions=DIMS,
                    limit=QUERY_ALL,
                    mode=mode,
                )
        if isinstance(store, SupportsGuardedQuery) and supports(store, "guarded_query"):
            calls["guarded_query"] = lambda: store.guarded_query(
                SCOPE, vector, embedder_id=CONTRACT_EMBEDDER_ID, dimensions=DIMS, limit=QUERY_ALL
            )
        if isinstance(store, SupportsForgottenLookup) and supports(store, "forgotten_lookup"):
            calls["forgotten_among"] = lambda: store.forgotten_among(SCOPE, ["fail-a"])
        problems = [p for what, call in calls.items() if (p := unchained_store_error(what, call))]
        assert not problems, "after break_store:\n" + "\n".join(problems)
