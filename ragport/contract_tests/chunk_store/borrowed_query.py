"""``ChunkStoreBorrowedQueryContract``: ``borrowed_query`` answers what ``guarded_query`` does.

Retrieval reads the vector-only leg through ``borrowed_query`` when a store declares it, and
then copies each hit's metadata itself. So the answer must be ``guarded_query``'s in every
respect, under concurrent writers too. The lent records must also stay as they were: a store
that changed a lent object in place would change what a running query holds. (The
``guarded_query`` tests of ``ChunkStoreGuardedQueryContract`` also run on ``borrowed_query``.)
"""

from __future__ import annotations

import copy
import math
import threading
from typing import Any

from ragport.contract_tests._support import (
    CONTRACT_EMBEDDER_ID,
    derived_batch,
    granted,
    hash_vector,
    make_batch,
    publish_sources,
)
from ragport.contract_tests.chunk_store._base import _ChunkStoreContractBase
from ragport.contract_tests.chunk_store._helpers import (
    DIMS,
    QUERY_ALL,
    READER_TIMEOUT_S,
    SCOPE,
    WRITER_TIMEOUT_S,
    _add,
    _require_borrowed_query,
    _require_guarded_query,
    _require_transactions,
)
from ragport.domain.model import Authorization, Grant, Tombstone
from ragport.ports.borrowed import SupportsBorrowedQuery
from ragport.ports.store import ChunkStore, GuardedQuery, SupportsGuardedQuery

__all__ = ["ChunkStoreBorrowedQueryContract"]

META = {"heading": ["Borrowed", "Leave"], "tags": {"lang": ["en"]}}


def _read(store: ChunkStore, name: str, vector: Any, **kwargs: Any) -> GuardedQuery:
    if name == "borrowed_query":
        assert isinstance(store, SupportsBorrowedQuery)
        method = store.borrowed_query
    else:
        assert isinstance(store, SupportsGuardedQuery)
        method = store.guarded_query
    return method(SCOPE, vector, embedder_id=CONTRACT_EMBEDDER_ID, dimensions=DIMS, **kwargs)


def _same_answer(lent: GuardedQuery, owned: GuardedQuery, what: str) -> None:
    assert lent.foreign_embedders == owned.foreign_embedders, what
    assert [s.record.id for s in lent.records] == [s.record.id for s in owned.records], what
    for a, b in zip(lent.records, owned.records, strict=True):
        assert a.record == b.record, f"{what}: {a.record.id} differs from guarded_query's"
        assert math.isclose(a.score, b.score, rel_tol=1e-9, abs_tol=1e-12), what


class ChunkStoreBorrowedQueryContract(_ChunkStoreContractBase):
    """``borrowed_query`` lends what ``guarded_query`` hands out, and never changes it."""

    def test_borrowed_query_comes_with_guarded_query(self, store: ChunkStore) -> None:
        """Checks ``Capabilities.borrowed_query``, ``Capabilities.guarded_query``: a store that
        declares ``borrowed_query`` declares ``guarded_query`` too and its class defines it:
        retrieval asks for the borrowed read only where the guarded one is promised.

        If this fails, declare ``capabilities.guarded_query`` (and define it) or stop
        declaring ``borrowed_query``.
        """
        _require_borrowed_query(store)
        assert store.capabilities.guarded_query, (
            f"{type(store).__name__} declares borrowed_query without guarded_query; "
            "retrieval would never use it"
        )
        _require_guarded_query(store)

    def test_borrowed_query_answers_what_guarded_query_answers(self, store: ChunkStore) -> None:
        """Checks ``SupportsBorrowedQuery.borrowed_query``: it gives the same foreign embedders,
        records (every field), order and scores as ``guarded_query`` on a scope with two lineage
        levels of derived records, tombstones, grants, metadata and a foreign embedder; at every
        limit, with and without an authorization and a filter, with the same denials reported.

        If this fails, check that ``borrowed_query`` runs ``guarded_query``'s predicate and
        ordering and only skips the copies.
        """
        _require_borrowed_query(store)
        _require_guarded_query(store)
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            for n, source_id in enumerate(("open", "closed", "tagged", "gone", "partly")):
                texts = [f"{source_id} walrus {j}" for j in range(3)]
                metas = [{**META, "kind": "note" if (n + j) % 2 else "memo"} for j in range(3)]
                _add(uow, make_batch(SCOPE, source_id, texts, generation=staged, metadata=metas))
            _add(
                uow,
                derived_batch(
                    SCOPE,
                    "summary",
                    "summary of the walrus notes",
                    roots=("open",),
                    lineage=("open",),
                    generation=staged,
                ),
            )
            _add(
                uow,
                derived_batch(
                    SCOPE,
                    "digest",
                    "digest of the walrus summary",
                    roots=("open", "tagged"),
                    lineage=("summary", "tagged"),
                    generation=staged,
                ),
            )
            uow.generations.publish(staged)
            uow.tombstones.add([Tombstone("gone"), Tombstone("partly#0002")])
            uow.commit()
        publish_sources(store, SCOPE, {"foreign": ["walrus elsewhere"]}, embedder_id="other:8")
        predicates: list[dict[str, Any]] = [{}, {"metadata_filter": {"kind": "note"}}]
        if store.capabilities.authorization == "acl":
            store.set_source_access(
                SCOPE,
                granted(
                    SCOPE,
                    [
                        Grant("open", principal_ids=("ann",)),
                        Grant("tagged", principal_ids=("ann",)),
                        Grant("closed", principal_ids=("bob",)),
                        Grant("partly", principal_ids=("ann",)),
                    ],
                ),
            )
            auth = Authorization(tenant_id=SCOPE.tenant_id, principal_id="ann")
            predicates += [
                {"authorization": auth},
                {"authorization": auth, "metadata_filter": {"kind": {"$ne": "note"}}},
            ]
        checked = 0
        for text in ("open walrus 1", "closed walrus 0", "summary of the walrus notes", "zzz"):
            vector = hash_vector(text)
            for limit in (1, 2, 5, QUERY_ALL):
                for kwargs in predicates:
                    what = f"{text!r} limit={limit} {sorted(kwargs)}"
                    reports: dict[str, list[str]] = {"borrowed_query": [], "guarded_query": []}
                    answers = {}
                    for name, seen in reports.items():
                        extra = dict(kwargs)
                        if "authorization" in kwargs:
                            extra["on_denied"] = lambda ds, seen=seen: seen.extend(
                                d.source_id for d in ds
                            )
                        answers[name] = _read(store, name, vector, limit=limit, **extra)
                    _same_answer(answers["borrowed_query"], answers["guarded_query"], what)
                    assert reports["borrowed_query"] == reports["guarded_query"], what
                    checked += len(answers["borrowed_query"].records)
        assert checked > 0, "no query found anything to compare"

    def test_lent_records_stay_as_they_were_after_later_writes(self, store: ChunkStore) -> None:
        """Checks ``SupportsBorrowedQuery.borrowed_query``: the records an answer lent keep every
        field, nested metadata included, while the source is replaced, its grants change, its ids
        are forgotten and it is deleted.

        If this fails, the store changes stored record objects in place (a retirement
        that sets a field, metadata updated in place): build new objects instead, or
        hand out copies and do not declare ``borrowed_query``.
        """
        _require_borrowed_query(store)
        publish_sources(
            store, SCOPE, {"lent": ["lent walrus one", "lent walrus two"]}, metadata=META
        )
        answer = _read(store, "borrowed_query", hash_vector("lent walrus one"), limit=QUERY_ALL)
        assert len(answer.records) == 2
        before = [copy.deepcopy(s.record) for s in answer.records]
        publish_sources(
            store,
            SCOPE,
            {"lent": ["lent walrus three"]},
            metadata={"heading": ["Changed"], "tags": {"lang": ["de"]}},
        )
        if store.capabilities.authorization == "acl":
            store.set_source_access(SCOPE, granted(SCOPE, [Grant("lent", principal_ids=("x",))]))
        with store.unit_of_work(SCOPE) as uow:
            uow.tombstones.add([Tombstone("lent#0001")])
            uow.commit()
        publish_sources(store, SCOPE, {"lent": None})
        for held, was in zip(answer.records, before, strict=True):
            assert held.record == was, f"{was.id} changed after it was lent"
            assert held.record.metadata == META

    def test_borrowed_query_reads_one_version_under_concurrent_writers(
        self, store: ChunkStore
    ) -> None:
        """Checks ``SupportsBorrowedQuery.borrowed_query``: while two writers replace one source 40
        times each, every answer holds one whole version of it (one snapshot), no lent record
        changes after it was returned, and the last answer equals ``guarded_query``'s.

        If this fails, check that ``borrowed_query`` reads one snapshot like
        ``guarded_query`` and that writers build new record objects.
        """
        _require_borrowed_query(store)
        _require_transactions(store)
        rounds = 40
        errors: list[BaseException] = []
        torn: list[list[str]] = []
        lent: list[tuple[Any, Any]] = []  # (a lent record, a deep copy taken when it came back)
        seen: set[str] = set()  # the versions whose records are in ``lent``
        done = threading.Event()

        def writer(owner: str) -> None:
            try:
                for k in range(rounds):
                    texts = [f"shared walrus {owner} v{k} part {j}" for j in range(3)]
                    publish_sources(store, SCOPE, {"shared": texts}, metadata=META)
            except BaseException as exc:
                errors.append(exc)

        def reader() -> None:
            try:
                while not done.is_set():
                    answer = _read(store, "borrowed_query", hash_vector("shared"), limit=QUERY_ALL)
                    texts = [s.record.text for s in answer.records]
                    if texts and (
                        len({t.rsplit(" part ", 1)[0] for t in texts}) != 1 or len(texts) != 3
                    ):
                        torn.append(texts)
                    # Keep the first answer of each version seen (not simply the first
                    # answers), so the sample spans the run and holds records that later
                    # commits could touch; a copy is taken at once.
                    version = texts[0].rsplit(" part ", 1)[0] if texts else None
                    if version is not None and version not in seen and len(lent) < 600:
                        seen.add(version)
                        lent.extend((s.record, copy.deepcopy(s.record)) for s in answer.records)
            except BaseException as exc:
                errors.append(exc)

        publish_sources(
            store,
            SCOPE,
            {"shared": [f"shared walrus init part {j}" for j in range(3)]},
            metadata=META,
        )
        # One answer lent before any writer starts, so the sample always holds records that
        # the writers' commits follow (whatever the threads' timing).
        first = _read(store, "borrowed_query", hash_vector("shared"), limit=QUERY_ALL)
        lent.extend((s.record, copy.deepcopy(s.record)) for s in first.records)
        seen.add("shared walrus init")
        threads = [threading.Thread(target=writer, args=(o,), daemon=True) for o in ("l", "r")]
        readers = [threading.Thread(target=reader, daemon=True) for _ in range(2)]
        for thread in [*readers, *threads]:
            thread.start()
        for thread in threads:
            thread.join(WRITER_TIMEOUT_S)
        done.set()
        for thread in readers:
            thread.join(READER_TIMEOUT_S)
        assert not any(t.is_alive() for t in [*threads, *readers]), "a thread deadlocked"
        assert not errors, f"a thread raised: {errors[0]!r}"
        assert not torn, f"a borrowed_query answer mixed versions: {torn[0]}"
        assert len(first.records) == 3, "the first read before the writers found nothing"
        changed = [was.id for record, was in lent if record != was]
        assert not changed, f"a lent record changed after it was returned: {changed[0]}"
        final = _read(store, "borrowed_query", hash_vector("shared"), limit=QUERY_ALL)
        _same_answer(
            final,
            _read(store, "guarded_query", hash_vector("shared"), limit=QUERY_ALL),
            "after the writers",
        )
