"""Many hits at once: ``ranked_hits`` and ``citations_of``, one loop per query.

The ``of_*`` constructors of ``ragport.domain.model`` build one instance per call; these
build a query's instances with every slot setter looked up once. Each equals what the
``of_*`` constructors build (``tests/unit/test_hit_of_record.py`` compares every field).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from ragport.domain.model import (
    _CITATION,
    _HIT,
    _PROVENANCE,
    Citation,
    Hit,
    Provenance,
    Record,
    RetrievalLeg,
    Scope,
    Trust,
    _new,
)
from ragport.domain.values import copy_frozen

__all__ = ["citations_of", "ranked_hits"]


def ranked_hits(
    found: Iterable[tuple[Scope, Record, float, RetrievalLeg]],
    *,
    texts: Sequence[str] | None = None,
    provider: str,
    retrieved_at: datetime,
    trust: Trust,
    take_metadata: bool = False,
) -> list[Hit]:
    """The hits of ``found``, ``(scope, record, score, retrieval)`` in rank order.

    The i-th hit (rank i, from 1) equals ``Hit.of_record(record, text=texts[i - 1] (or
    record.text), score=score, retrieval_rank=i, provenance=Provenance.of_record(record,
    scope, provider=provider, retrieval=retrieval, retrieved_at=retrieved_at),
    trust=trust, take_metadata=take_metadata)``: the same instances, built in one loop
    with every slot setter looked up once (one call per query instead of two per hit).
    """
    new, h, p = _new, _HIT, _PROVENANCE
    h_id, h_source, h_text, h_metadata = h["id"], h["source_id"], h["text"], h["metadata"]
    h_score, h_rank, h_provenance, h_trust = (
        h["score"],
        h["retrieval_rank"],
        h["provenance"],
        h["trust"],
    )
    p_source, p_chunk, p_citation, p_provider = (
        p["source_id"],
        p["chunk_id"],
        p["citation_id"],
        p["provider"],
    )
    p_tenant, p_resource, p_corpus = p["tenant_id"], p["resource_id"], p["corpus_id"]
    p_retrieval, p_at, p_lineage = p["retrieval"], p["retrieved_at"], p["lineage"]
    out: list[Hit] = []
    for rank, (scope, record, score, retrieval) in enumerate(found, start=1):
        record_id, source_id = record.id, record.source_id
        prov = new(Provenance)
        p_source(prov, source_id)
        p_chunk(prov, record_id)
        p_citation(prov, record_id)
        p_provider(prov, provider)
        p_tenant(prov, scope.tenant_id)
        p_resource(prov, scope.resource_id)
        p_corpus(prov, scope.corpus_id)
        p_retrieval(prov, retrieval)
        p_at(prov, retrieved_at)
        p_lineage(prov, record.lineage)
        hit = new(Hit)
        h_id(hit, record_id)
        h_source(hit, source_id)
        h_text(hit, record.text if texts is None else texts[rank - 1])
        h_metadata(hit, record.metadata if take_metadata else copy_frozen(record.metadata))
        h_score(hit, score)
        h_rank(hit, rank)
        h_provenance(hit, prov)
        h_trust(hit, trust)
        out.append(hit)
    return out


def citations_of(hits: Iterable[Hit]) -> list[Citation]:
    """The citation of each hit, in order: each equals ``Citation.of_hit(hit)``."""
    new, c = _new, _CITATION
    c_id, c_source, c_chunk, c_provenance, c_trust = (
        c["id"],
        c["source_id"],
        c["chunk_id"],
        c["provenance"],
        c["trust"],
    )
    out: list[Citation] = []
    for hit in hits:
        provenance = hit.provenance
        citation = new(Citation)
        c_id(citation, provenance.citation_id)
        c_source(citation, hit.source_id)
        c_chunk(citation, hit.id)
        c_provenance(citation, provenance)
        c_trust(citation, hit.trust)
        out.append(citation)
    return out
