"""``PostgresStore``'s tuning values and the keywords they replaced (one release, deprecated).

No server: a store made without ``create=True`` opens no connection, so each test reads the
settings a constructor call chose off the collaborators it built.
"""

from __future__ import annotations

import warnings

import pytest

from ragport.adapters.postgres import PostgresStore, VectorIndexSettings, WriteSettings
from ragport.adapters.postgres.backend import PostgresBackend
from ragport.adapters.postgres.indexes import HnswBuild
from ragport.domain.errors import ValidationError

URL = "postgresql+psycopg://nobody@127.0.0.1:9/none"  # never connected to


def _chosen(store: PostgresStore) -> tuple[HnswBuild, bool, int, int, int | None, bool]:
    indexes = store._indexes
    return (
        indexes.build,
        indexes.deferred,
        store._ef_search,
        indexes.merge_every,
        store._vectors._threshold,
        store._maintenance is None,
    )


def test_the_settings_values_tune_the_store_without_a_warning() -> None:
    """``vector_index=`` and ``writes=`` reach the index manager, the query width, the vector
    writer and the maintenance thread. If this fails, check ``PostgresStore.__init__``."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        store = PostgresStore(
            URL,
            vector_index=VectorIndexSettings(
                m=32, ef_construction=200, ef_search=300, deferred=True
            ),
            writes=WriteSettings(
                merge_pending_lists=20, maintenance_delay=None, parallel_vector_rows=None
            ),
        )
    assert _chosen(store) == (HnswBuild(32, 200), True, 300, 20, None, True)
    store.engine.dispose()


def test_the_old_keywords_warn_and_still_tune_the_store() -> None:
    """Each replaced keyword works for one release, with a ``DeprecationWarning`` naming it.
    If this fails, check ``settings.from_keywords``."""
    with pytest.warns(DeprecationWarning, match="hnsw_m") as caught:
        store = PostgresStore(
            URL,
            hnsw_m=32,
            hnsw_ef_construction=200,
            ef_search=300,
            defer_vector_indexes=True,
            merge_pending_lists=20,
            maintenance_delay=None,
            parallel_vector_rows=None,
        )
    assert len([w for w in caught if w.category is DeprecationWarning]) == 1
    assert caught[0].filename == __file__  # points at the caller's line
    assert _chosen(store) == (HnswBuild(32, 200), True, 300, 20, None, True)
    store.engine.dispose()


def test_the_defaults_are_the_documented_ones() -> None:
    """No value given: m 24 / ef_construction 128, ef_search 200, indexes built on first
    write, a merge after each write 2 s later, vectors beside records from 4 rows."""
    store = PostgresStore(URL)
    assert _chosen(store) == (HnswBuild(24, 128), False, 200, 1, 4, False)
    store.engine.dispose()


def test_exact_access_rows_reaches_the_vector_leg() -> None:
    """``exact_access_rows`` (default 5,000; 0 allowed: always the walk) is the cap the
    backend's vector legs get beside ``ef_search``. If this fails, check ``PostgresStore``
    and ``PostgresBackend``."""
    for settings, search in (
        (None, (200, 5000)),
        (VectorIndexSettings(exact_access_rows=0), (200, 0)),
        (VectorIndexSettings(exact_access_rows=1_000_000), (200, 1_000_000)),
    ):
        store = PostgresStore(URL, vector_index=settings)
        assert isinstance(store.backend, PostgresBackend)
        assert store.backend._search == search
        store.engine.dispose()


def test_an_old_keyword_beside_its_new_value_is_refused() -> None:
    """``ef_search=`` with ``vector_index=`` is ambiguous: ``ValidationError`` naming the value."""
    with pytest.raises(ValidationError) as caught, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        PostgresStore(URL, vector_index=VectorIndexSettings(), ef_search=100)
    assert caught.value.field == "vector_index"
    with pytest.raises(ValidationError) as caught, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        PostgresStore(URL, writes=WriteSettings(), maintenance_delay=None)
    assert caught.value.field == "writes"


def test_an_unknown_keyword_is_a_type_error() -> None:
    """A keyword the store never took fails as Python fails it, not silently."""
    with pytest.raises(TypeError, match="hnsw_ef"):
        PostgresStore(URL, hnsw_ef=3)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"m": 1}, "hnsw_m"),
        ({"m": 40, "ef_construction": 64}, "hnsw_ef_construction"),
        ({"ef_search": 0}, "ef_search"),
        ({"exact_access_rows": -1}, "exact_access_rows"),
        ({"exact_access_rows": True}, "exact_access_rows"),
        ({"exact_access_rows": 2.5}, "exact_access_rows"),
        ({"exact_access_rows": 1_000_001}, "exact_access_rows"),
        ({"exact_access_rows": 10**20}, "exact_access_rows"),
    ],
)
def test_a_vector_index_value_out_of_range_is_refused(kwargs: dict[str, int], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        VectorIndexSettings(**kwargs)
    assert caught.value.field == field


def test_a_settings_value_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(ValidationError) as caught:
        PostgresStore(URL, writes={"maintenance_delay": None})  # type: ignore[arg-type]
    assert caught.value.field == "writes"
