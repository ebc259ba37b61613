"""The store's schema and index maintenance: migrations, HNSW indexes before a write, and
the bulk-load mode that builds them after the load instead (``PostgresStore`` builds on it).
"""

from __future__ import annotations

from sqlalchemy import text

from ragport.adapters.postgres._driver import translate_errors
from ragport.adapters.postgres.connections import StoreConnections
from ragport.adapters.postgres.indexes import VectorIndexes, check_build_memory
from ragport.adapters.postgres.schema import upgrade
from ragport.domain.model import Scope

__all__ = ["StoreMaintenance"]


class StoreMaintenance(StoreConnections):
    """``upgrade``, ``prepare`` and ``build_vector_indexes`` of ``PostgresStore``."""

    _indexes: VectorIndexes
    _ts_config: str
    _partitions: int | None

    def upgrade(self) -> list[int]:
        """Apply missing migrations (idempotent); returns the versions applied."""
        with translate_errors("upgrade"), self._engine.begin() as conn:
            applied = upgrade(
                conn,
                self._schema,
                text_search_config=self._ts_config,
                partitions=self._partitions,
            )
        self._checked = True
        return applied

    def prepare(self, scope: Scope, *, dimensions: int) -> None:
        """Create the HNSW index for ``dimensions`` if missing, outside any write transaction
        (unless the store defers its vector indexes: see ``build_vector_indexes``).

        Creating an index takes a lock that conflicts with open writers; doing it here, before
        a unit of work touches ``records``, means two first writers never deadlock.
        """
        with self._connect("prepare") as conn:
            self._indexes.ensure(conn, dimensions)
            conn.commit()
            self._indexes.analyze_once(conn, scope.tenant_id)

    def build_vector_indexes(self, *, build_memory: str = "1GB") -> list[int]:
        """Build the HNSW index of every vector dimension stored but not yet indexed, with
        ``maintenance_work_mem = build_memory`` (about 2 GB per million 384-dimension rows:
        docs/operations.md, "Sizing"); returns the dimensions built, in order.

        The second half of the bulk-load mode (``PostgresStore(defer_vector_indexes=True)``):
        writes then skip creating the index, and every HNSW insert into it, until this call
        builds it once over all rows. Each dimension is built and committed on its own, so a
        failure (memory, a cancel) keeps the ones already built and raises; call it again to
        finish. It blocks writes to ``record_vectors`` while it runs (reads go on; a vector
        query without its index scans exactly: correct, slower). On any store it builds what
        is missing (nothing, unless indexes were deferred or dropped).
        """
        check_build_memory(build_memory)
        with self._connect("list vector dimensions") as conn:
            stored = conn.execute(
                text(f"SELECT DISTINCT dimensions FROM {self._s}.record_vectors ORDER BY 1")
            ).scalars()
            dimensions = [int(d) for d in stored]
        built: list[int] = []
        for d in dimensions:
            try:
                with self._connect("build vector index") as conn:
                    if self._indexes.has(conn, d):
                        continue
                    self._indexes.create(conn, d, build_memory=build_memory)
                    conn.commit()
            except BaseException:
                self._indexes.forget(d)  # rolled back: not built
                raise
            built.append(d)
        if built:
            with self._connect("analyze vectors") as conn:
                conn.execute(text(f"ANALYZE {self._s}.record_vectors"))
                conn.commit()
        return built
