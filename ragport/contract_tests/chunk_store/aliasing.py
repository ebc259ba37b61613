"""``ChunkStoreAliasingContract``: no value a caller passes in or gets back aliases the store.

A store that keeps the caller's objects, or hands out its own, lets a caller change stored
state without a unit of work: appending to a chunk's ``metadata["heading"]`` after the write,
or writing to a returned record's metadata, would change what the next reader sees (and, on
a store that copies, would not: the fake and the real store would disagree). Every read here
mutates what it got back, nested lists included, and reads again. A store that declares
``Capabilities.private_reads`` (retrieval then builds hits on the records' metadata without
copying it) also hands out no metadata container twice within one answer.

Part of ``ChunkStoreContract``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from ragport.application.indexing import replace_source
from ragport.application.retrieval import retrieve_context
from ragport.contract_tests._support import (
    CONTRACT_DIMENSIONS,
    CONTRACT_EMBEDDER_ID,
    Batch,
    ContractEmbedder,
    hash_vector,
    make_batch,
    record_written,
)
from ragport.contract_tests.chunk_store._base import _ChunkStoreContractBase
from ragport.contract_tests.chunk_store._helpers import QUERY_ALL, SCOPE
from ragport.domain.model import Chunk, Record
from ragport.ports.store import ChunkStore, supports

__all__ = ["ChunkStoreAliasingContract"]

META = {"heading": ["Policy", "Leave"], "tags": {"lang": ["en"]}}
SOURCE = "al-doc"


def _scribble(records: Iterable[Record]) -> int:
    """Write to every metadata of ``records`` (top level and nested); how many were touched."""
    touched = 0
    for record in records:
        metadata: Any = record.metadata
        metadata["heading"].append("scribbled")
        metadata["tags"]["lang"].append("xx")
        metadata["added"] = True
        touched += 1
    return touched


def _write(store: ChunkStore, *texts: str) -> Batch:
    with store.unit_of_work(SCOPE) as uow:
        generation = uow.generations.stage()
        batch = make_batch(SCOPE, SOURCE, list(texts), generation=generation, metadata=META)
        uow.records.add(batch.records, batch.vectors)
        uow.generations.publish(generation)
        uow.commit()
    return batch


def _stored(store: ChunkStore) -> list[dict[str, Any]]:
    return [dict(r.metadata) for r in store.get_by_source(SCOPE, SOURCE)]


def _containers(value: Any) -> list[Any]:
    """Every dict and list in ``value`` (itself included), depth first."""
    if isinstance(value, dict):
        return [value, *(c for item in value.values() for c in _containers(item))]
    if isinstance(value, list):
        return [value, *(c for item in value for c in _containers(item))]
    return []


def _reads(store: ChunkStore) -> list[tuple[str, list[Record]]]:
    """What every read of the store's port returns for the walrus records, by read."""
    probe = hash_vector("aliasing walrus one")
    reads: list[tuple[str, list[Record]]] = [
        ("get_by_source", list(store.get_by_source(SCOPE, SOURCE))),
        ("query", [s.record for s in store.query(SCOPE, probe, limit=QUERY_ALL)]),
    ]
    caps = store.capabilities
    if supports(store, "lexical", caps):
        mode = caps.lexical_modes[0]
        lexical = store.lexical_query(SCOPE, "walrus", limit=QUERY_ALL, mode=mode)  # type: ignore[attr-defined]
        hybrid = store.hybrid_query(  # type: ignore[attr-defined]
            SCOPE,
            probe,
            "walrus",
            embedder_id=CONTRACT_EMBEDDER_ID,
            dimensions=CONTRACT_DIMENSIONS,
            limit=QUERY_ALL,
            mode=mode,
        )
        reads.append(("lexical_query", [s.record for s in lexical]))
        reads.append(("hybrid_query", [s.record for s in [*hybrid.vector, *hybrid.lexical]]))
    if supports(store, "guarded_query", caps):
        guarded = store.guarded_query(  # type: ignore[attr-defined]
            SCOPE,
            probe,
            embedder_id=CONTRACT_EMBEDDER_ID,
            dimensions=CONTRACT_DIMENSIONS,
            limit=QUERY_ALL,
        )
        reads.append(("guarded_query", [s.record for s in guarded.records]))
    return reads


class ChunkStoreAliasingContract(_ChunkStoreContractBase):
    """What goes in and what comes out are copies: stored state changes only by a write."""

    def test_records_written_do_not_alias_the_callers_objects(self, store: ChunkStore) -> None:
        """Checks ``RecordRepository.add``: changing a record's metadata (nested lists included)
        after ``add`` and commit changes nothing stored.

        If this fails, check that ``RecordRepository.add`` stores copies of the records (or
        their metadata), not the caller's objects.
        """
        batch = _write(store, "aliasing one", "aliasing two")
        assert _scribble(batch.records) == 2
        assert _stored(store) == [META, META]

    def test_records_read_back_do_not_alias_the_store(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.get_by_source``, ``ChunkStore.query``,
        ``SupportsLexicalSearch.lexical_query``, ``SupportsLexicalSearch.hybrid_query``,
        ``SupportsGuardedQuery.guarded_query``, ``RecordRepository.list_by_source``,
        ``RecordRepository.list_live``: writing to the metadata of records any of these reads
        returned (the optional ones where declared) changes no later read.

        If this fails, check every read that returns records (``get_by_source``, ``query``,
        ``lexical_query``, ``hybrid_query``, ``guarded_query``, the unit of work's
        ``list_by_source``/``list_live``/``find_dependents``): each must hand out copies.
        """
        _write(store, "aliasing walrus one", "aliasing walrus two")
        reads = _reads(store)
        with store.unit_of_work(SCOPE) as uow:
            reads.append(("list_by_source", list(uow.records.list_by_source(SOURCE))))
            reads.append(("list_live", list(uow.records.list_live(SOURCE))))
        for name, records in reads:
            assert _scribble(records) >= 1, f"{name} returned nothing to check"
            assert _stored(store) == [META, META], (
                f"writing to what {name} returned changed the store"
            )

    def test_declared_private_reads_hand_out_metadata_of_their_own(self, store: ChunkStore) -> None:
        """Checks ``Capabilities.private_reads``: with it declared, no dict or list of a returned
        record's metadata is shared with another record of the same answer, and writing to them
        changes no later read.

        Only for stores that declare ``private_reads``: retrieval then lets each hit hold its
        record's metadata as it is, so two records sharing a container would be two hits
        whose metadata changes together. If this fails, check that every read copies each
        record's metadata at every depth, once per record handed out.
        """
        if not store.capabilities.private_reads:
            pytest.skip(
                f"{type(store).__name__} does not declare capabilities.private_reads; "
                "retrieval copies every hit's metadata"
            )
        _write(store, "aliasing walrus one", "aliasing walrus two")
        for name, records in _reads(store):
            containers = [c for r in records for c in _containers(r.metadata)]
            assert len(records) >= 2, f"{name} returned too little to check"
            assert len({id(c) for c in containers}) == len(containers), (
                f"{name} handed out one metadata container for two records"
            )
            assert _scribble(records) == len(records)
            assert _stored(store) == [META, META], (
                f"writing to what {name} returned changed the store"
            )

    def test_use_cases_neither_keep_nor_hand_out_the_stores_values(self, store: ChunkStore) -> None:
        """Checks ``RecordRepository.add``, ``ChunkStore.get_by_source``, ``ChunkStore.query``,
        ``SupportsGuardedQuery.guarded_query``, ``SupportsBorrowedQuery.borrowed_query``,
        ``replace_source``, ``retrieve_context``: after ``replace_source``, appending to a chunk's
        ``metadata["heading"]`` or writing to a returned hit's metadata changes nothing
        ``retrieve_context`` returns next, and nothing stored.

        If this fails, check that the store copies records in ``add`` and out of its reads.
        """
        chunks = [Chunk.of(SOURCE, 0, "aliasing parental leave", metadata=META)]
        record_written(SCOPE, SOURCE)
        replace_source(
            source_id=SOURCE,
            chunks=chunks,
            embedder=ContractEmbedder(),
            store=store,
            scope=SCOPE,
        )
        chunks[0].metadata["heading"].append("after the write")

        def hits() -> list[Any]:
            return list(
                retrieve_context(
                    "aliasing parental leave", embedder=ContractEmbedder(), store=store, scope=SCOPE
                ).hits
            )

        first = hits()
        assert [h.metadata for h in first] == [META]
        first[0].metadata["heading"].append("scribbled")
        first[0].metadata["tags"]["lang"].clear()
        assert [h.metadata for h in hits()] == [META]
        assert _stored(store) == [META]
