"""``PostgresStore`` is the generation engine over ``PostgresBackend`` (no server needed: a
store made without ``create=True`` opens no connection)."""

from __future__ import annotations

from ragport.adapters.postgres import PostgresBackend, PostgresStore
from ragport.engine import BackendStore

URL = "postgresql+psycopg://nobody@127.0.0.1:9/none"  # never connected to


def test_a_postgres_store_is_a_backend_store_with_postgres_pushdowns() -> None:
    """If this fails, check ``PostgresStore.__init__`` (``BackendStore.__init__`` over
    ``PostgresBackend``) and the pushdown names on ``PostgresBackend``."""
    store = PostgresStore(URL)
    assert isinstance(store, BackendStore)
    assert isinstance(store.backend, PostgresBackend)
    assert store.provider == "postgres"
    assert {
        "search_vectors", "search_lexical", "embedders", "source_id_page", "history",
        "forgotten_among", "prepare",
    } <= set(store.pushdowns)  # fmt: skip
    caps = store.capabilities
    assert caps.lexical_modes == ("bm25",)
    assert caps.forgotten_lookup and caps.preparation and caps.borrowed_query
    store.engine.dispose()


def test_a_view_runs_on_its_own_backend() -> None:
    """``with_min_position`` gives a view whose engine reads through the view's connections
    (a copy would keep the store's backend and pushdowns bound to it)."""
    store = PostgresStore(URL)
    view = store.with_min_position("0/3000148")
    assert view.backend is not store.backend
    assert view.backend.connections is view._db
    assert isinstance(view, PostgresStore) and isinstance(view, BackendStore)
    store.engine.dispose()
