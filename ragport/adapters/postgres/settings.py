"""The tuning values of ``PostgresStore``: its vector indexes and its write path.

Two frozen values, each validated when made (``ValidationError`` naming the old keyword as
its field, so a message reads the same whichever way the value was given):

- ``VectorIndexSettings``: the HNSW build (``m``, ``ef_construction``), the search width
  (``ef_search``) and the bulk-load mode (``deferred``);
- ``WriteSettings``: the GIN pending-list merges (``merge_pending_lists``), the maintenance
  thread's delay (``maintenance_delay``) and the size of an add that writes its vectors on a
  second connection (``parallel_vector_rows``).

``PostgresStore(vector_index=VectorIndexSettings(m=32), writes=WriteSettings(...))``. The
keywords they replace (``hnsw_m``, ``hnsw_ef_construction``, ``ef_search``,
``defer_vector_indexes``, ``merge_pending_lists``, ``maintenance_delay``,
``parallel_vector_rows``) keep working for one release with a ``DeprecationWarning``
(``from_keywords``).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import attrs

from ragport.adapters.postgres.background import (
    DEFAULT_MAINTENANCE_DELAY,
    validate_maintenance_delay,
)
from ragport.adapters.postgres.indexes import (
    DEFAULT_EF_SEARCH,
    HNSW_EF_CONSTRUCTION,
    HNSW_M,
    HnswBuild,
    validate_ef_search,
    validate_merge_every,
)
from ragport.adapters.postgres.vector_writes import (
    DEFAULT_PARALLEL_VECTOR_ROWS,
    validate_parallel_vector_rows,
)
from ragport.domain.errors import ValidationError

__all__ = [
    "DEFAULT_EXACT_ACCESS_ROWS",
    "MAX_EXACT_ACCESS_ROWS",
    "VectorIndexSettings",
    "WriteSettings",
    "from_keywords",
]

DEFAULT_EXACT_ACCESS_ROWS = 5000
"""``VectorIndexSettings.exact_access_rows``: under it, ranking every allowed row (one
vector each, read by primary key) is both exact and faster than a graph walk whose
candidates the grants thin out (``bench/bench_peers.py``, workload 7)."""

MAX_EXACT_ACCESS_ROWS = 1_000_000
"""The ceiling of ``exact_access_rows``: ranking a million vectors per read is already far
past where the walk is cheaper, and a larger value would only fail at query time (the
statement's ``LIMIT``)."""


@attrs.frozen
class VectorIndexSettings:
    """The HNSW indexes a store builds and how wide its queries search them.

    ``m`` / ``ef_construction`` (default 24 / 128, pgvector's ranges 2..100 / 4..1000,
    ``ef_construction >= 2 * m``): the build of the indexes this store creates (an existing
    index keeps its own). ``ef_search`` (default 200, 1..1000): ``hnsw.ef_search`` of a plain
    vector query, doubled per grant or filter (at most 1,000). ``deferred``: no HNSW index or
    insert until ``build_vector_indexes()`` (the bulk-load mode; docs/operations.md).
    ``exact_access_rows`` (default 5,000; 0: never; at most 1,000,000): an access-checked
    vector read without a metadata filter, in a scope of at most that many grants, whose
    caller is granted at most half of them and allowed at most that many rows, ranks those
    rows exactly, without the HNSW walk (recall 1; docs/access-control.md).
    """

    m: int = HNSW_M
    ef_construction: int = HNSW_EF_CONSTRUCTION
    ef_search: int = DEFAULT_EF_SEARCH
    deferred: bool = attrs.field(default=False, converter=bool)
    exact_access_rows: int = DEFAULT_EXACT_ACCESS_ROWS

    def __attrs_post_init__(self) -> None:
        HnswBuild(self.m, self.ef_construction)  # raises ValidationError naming the field
        validate_ef_search(self.ef_search)
        rows = self.exact_access_rows
        integer = isinstance(rows, int) and not isinstance(rows, bool)
        if not integer or not 0 <= rows <= MAX_EXACT_ACCESS_ROWS:
            raise ValidationError(
                f"exact_access_rows must be an integer in 0..{MAX_EXACT_ACCESS_ROWS}",
                field="exact_access_rows",
            )

    @property
    def build(self) -> HnswBuild:
        return HnswBuild(self.m, self.ef_construction)


@attrs.frozen
class WriteSettings:
    """How a store's writes keep its indexes (docs/operations.md, "Bulk loads" and "Sizing").

    ``merge_pending_lists`` (default ``True``: after each write; N: per N rows; ``False``:
    autovacuum) merges the GIN pending lists of ``records`` on the store's maintenance thread
    ``maintenance_delay`` seconds later (default 2.0; ``None``: inline after each commit),
    with the growth re-analysis. ``parallel_vector_rows`` (default 4; ``None``: never): an add
    of that many rows writes most of its vectors on a second connection beside its records.
    """

    merge_pending_lists: bool | int = True
    maintenance_delay: float | None = DEFAULT_MAINTENANCE_DELAY
    parallel_vector_rows: int | None = DEFAULT_PARALLEL_VECTOR_ROWS

    def __attrs_post_init__(self) -> None:
        validate_merge_every(self.merge_pending_lists)
        validate_maintenance_delay(self.maintenance_delay)
        validate_parallel_vector_rows(self.parallel_vector_rows)

    @property
    def merge_every(self) -> int:
        """Rows between GIN merges (``indexes.validate_merge_every``)."""
        return validate_merge_every(self.merge_pending_lists)


_INDEX_KEYWORDS = {
    "hnsw_m": "m",
    "hnsw_ef_construction": "ef_construction",
    "ef_search": "ef_search",
    "defer_vector_indexes": "deferred",
}
_WRITE_KEYWORDS = {
    "merge_pending_lists": "merge_pending_lists",
    "maintenance_delay": "maintenance_delay",
    "parallel_vector_rows": "parallel_vector_rows",
}


def from_keywords(
    vector_index: VectorIndexSettings | None,
    writes: WriteSettings | None,
    legacy: Mapping[str, object],
) -> tuple[VectorIndexSettings, WriteSettings]:
    """The two settings values of a store, with the keywords they replaced folded in.

    Each old keyword warns (``DeprecationWarning``, once per call) and overrides the field of
    the value it moved to; an old keyword beside the value it moved to is ambiguous
    (``ValidationError``), as is any keyword ``PostgresStore`` never took (``TypeError``,
    as Python raises for an unknown keyword).
    """
    unknown = sorted(set(legacy) - set(_INDEX_KEYWORDS) - set(_WRITE_KEYWORDS))
    if unknown:
        raise TypeError(f"PostgresStore() got an unexpected keyword argument {unknown[0]!r}")
    index_changes = {_INDEX_KEYWORDS[k]: v for k, v in legacy.items() if k in _INDEX_KEYWORDS}
    write_changes = {_WRITE_KEYWORDS[k]: v for k, v in legacy.items() if k in _WRITE_KEYWORDS}
    for given, changes, name in (
        (vector_index, index_changes, "vector_index"),
        (writes, write_changes, "writes"),
    ):
        if given is not None and changes:
            raise ValidationError(
                f"give {name}= or its old keywords ({', '.join(sorted(changes))}), not both",
                field=name,
            )
    if legacy:
        moved = ", ".join(sorted(legacy))
        warnings.warn(
            f"PostgresStore({moved}=...) is deprecated: pass "
            "vector_index=VectorIndexSettings(...) / writes=WriteSettings(...) "
            "(ragport.adapters.postgres); the keywords go in the next release",
            DeprecationWarning,
            stacklevel=3,
        )
    if vector_index is None:
        vector_index = VectorIndexSettings(**index_changes)  # type: ignore[arg-type]
    elif not isinstance(vector_index, VectorIndexSettings):
        raise ValidationError("vector_index must be a VectorIndexSettings", field="vector_index")
    if writes is None:
        writes = WriteSettings(**write_changes)  # type: ignore[arg-type]
    elif not isinstance(writes, WriteSettings):
        raise ValidationError("writes must be a WriteSettings", field="writes")
    return vector_index, writes
