"""Grants and denial reports: ``ChunkStoreGrantContract``, ``ChunkStoreDenialReportContract``."""

from __future__ import annotations

import numpy as np
import pytest

from ragport.application.indexing import delete_source
from ragport.contract_tests._support import (
    derived_batch,
    direction,
    granted,
    hash_vector,
    make_batch,
    publish_sources,
)
from ragport.contract_tests.chunk_store._base import _ChunkStoreContractBase
from ragport.contract_tests.chunk_store._helpers import (
    ALICE,
    DIMS,
    OTHER_CORPUS,
    OTHER_TENANT,
    QUERY_ALL,
    SCOPE,
    TENANT,
    _add,
    _ids,
    _require_acl,
    _require_transactions,
)
from ragport.domain.model import AccessDecision, Authorization, Grant, decide_access
from ragport.ports.store import ChunkStore

__all__ = ["ChunkStoreDenialReportContract", "ChunkStoreGrantContract"]


GRANTS = (
    Grant("s-principal", principal_ids=("alice",)),
    Grant("s-group", group_ids=("g1",)),
    Grant("s-both", principal_ids=("bob",), group_ids=("g2",)),
    Grant("s-v2", principal_ids=("alice",), group_ids=("g1",), access_version=2),
    Grant("s-empty"),
)
CALLERS = (
    ("alice", Authorization("alice", TENANT)),
    ("alice-v1", Authorization("alice", TENANT, access_version=1)),
    ("alice-v2", Authorization("alice", TENANT, access_version=2)),
    ("bob-g1", Authorization("bob", TENANT, group_ids=("g1",))),
    ("carol-g9", Authorization("carol", TENANT, group_ids=("g9",))),
    ("carol-g9-g2", Authorization("carol", TENANT, group_ids=("g9", "g2"), access_version=1)),
)


class ChunkStoreGrantContract(_ChunkStoreContractBase):
    """Grants round-trip, follow ``decide_access``, and filter queries before top-k."""

    def test_grant_repository_round_trips(self, store: ChunkStore) -> None:
        """Checks ``GrantRepository.set``, ``GrantRepository.get``: ``get`` returns, by source id,
        the grants ``set`` stored (principal ids, group ids, access version) and omits sources
        without one.

        If this fails, check the grant repository's set/get and that get omits absent sources.
        """
        with store.unit_of_work(SCOPE) as uow:
            uow.grants.set(granted(uow.scope, GRANTS[:4]))
            uow.commit()
        with store.unit_of_work(SCOPE) as uow:
            found = dict(uow.grants.get(["s-principal", "s-v2", "missing"]))
        assert set(found) == {"s-principal", "s-v2"}
        assert set(found["s-v2"].principal_ids) == {"alice"}
        assert set(found["s-v2"].group_ids) == {"g1"}
        assert found["s-v2"].access_version == 2
        assert found["s-principal"].source_id == "s-principal"

    @pytest.mark.parametrize("caller", [c for _, c in CALLERS], ids=[name for name, _ in CALLERS])
    def test_check_source_access_follows_the_grant_rule(
        self, store: ChunkStore, caller: Authorization
    ) -> None:
        """Checks ``ChunkStore.check_source_access``: for each caller it gives one decision per
        distinct source id, equal to ``decide_access`` for that source's grant.

        If this fails, check principal/group matching, access_version equality, and that
        missing or empty grants are no_grant.
        """
        _require_acl(store)
        store.set_source_access(SCOPE, granted(SCOPE, GRANTS))
        asked = ["s-principal", "s-group", "s-both", "s-v2", "s-empty", "s-none", "s-group"]
        decisions = dict(store.check_source_access(SCOPE, asked, caller))
        assert set(decisions) == set(asked)
        by_source = {g.source_id: g for g in GRANTS}
        for source_id in set(asked):
            got = decisions[source_id]
            assert isinstance(got, AccessDecision)
            assert got == decide_access(source_id, by_source.get(source_id), caller), source_id

    def test_grant_rule_examples(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.check_source_access``: spot checks of the grant rule with literal
        expectations: ``granted``, ``no_grant`` (no grant, an empty one, no matching principal or
        group), ``version_mismatch``.

        If this fails, check the decision reasons: granted, no_grant, version_mismatch.
        """
        _require_acl(store)
        store.set_source_access(SCOPE, granted(SCOPE, GRANTS))
        ids = ["s-principal", "s-group", "s-v2", "s-empty", "s-none"]
        alice_v1 = dict(store.check_source_access(SCOPE, ids, CALLERS[1][1]))
        assert {k: (v.allowed, v.reason) for k, v in alice_v1.items()} == {
            "s-principal": (True, "granted"),
            "s-group": (False, "no_grant"),
            "s-v2": (False, "version_mismatch"),
            "s-empty": (False, "no_grant"),
            "s-none": (False, "no_grant"),
        }
        bob = dict(store.check_source_access(SCOPE, ids, CALLERS[3][1]))
        assert [k for k, v in sorted(bob.items()) if v.allowed] == ["s-group", "s-v2"]

    def test_set_source_access_replaces_and_empty_grant_revokes(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.set_source_access``: a second grant for a source replaces the first
        (it is not merged), and an empty grant revokes access.

        If this fails, check that set_source_access replaces rather than merges.
        """
        _require_acl(store)
        store.set_source_access(SCOPE, granted(SCOPE, [Grant("doc", principal_ids=("alice",))]))
        assert store.check_source_access(SCOPE, ["doc"], ALICE)["doc"].allowed
        store.set_source_access(SCOPE, granted(SCOPE, [Grant("doc", principal_ids=("bob",))]))
        assert store.check_source_access(SCOPE, ["doc"], ALICE)["doc"].reason == "no_grant"
        bob = Authorization("bob", TENANT)
        assert store.check_source_access(SCOPE, ["doc"], bob)["doc"].allowed
        store.set_source_access(SCOPE, granted(SCOPE, [Grant("doc")]))
        assert store.check_source_access(SCOPE, ["doc"], bob)["doc"] == AccessDecision(
            "doc", False, "no_grant"
        )

    def test_delete_source_revokes_its_grant_and_no_other(self, store: ChunkStore) -> None:
        """Checks ``GrantRepository.get``, ``GrantRepository.set``: after ``delete_source``
        the deleted source's grant is empty (``Grant(source_id)``: no principal, no group,
        access version 1); another source's grant stays as it was, and a source deleted
        without a grant gets none.

        If this fails, check the grant revoke of the store's unit of work (the engine's
        ``grants.revoke``, a backend's ``revoke_grants`` pushdown).
        """
        _require_acl(store)
        _require_transactions(store)
        kept = Grant("rv-kept", group_ids=("g1",), access_version=3)
        store.set_source_access(
            SCOPE, granted(SCOPE, [Grant("rv-doc", principal_ids=("alice",)), kept])
        )
        delete_source(source_id="rv-doc", store=store, scope=SCOPE)
        delete_source(source_id="rv-none", store=store, scope=SCOPE)
        found = dict(store.get_source_access(SCOPE, ["rv-doc", "rv-kept", "rv-none"]))
        assert found == {"rv-doc": Grant("rv-doc"), "rv-kept": kept}, found

    def test_grants_of_another_scope_do_not_apply(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.check_source_access``: a grant in one corpus or tenant decides
        nothing in another (``no_grant``).

        If this fails, check that grant reads filter on the exact scope.
        """
        _require_acl(store)
        store.set_source_access(SCOPE, granted(SCOPE, [Grant("doc", principal_ids=("alice",))]))
        for scope in (OTHER_CORPUS, OTHER_TENANT):
            caller = Authorization("alice", scope.tenant_id)
            decision = store.check_source_access(scope, ["doc"], caller)["doc"]
            assert (decision.allowed, decision.reason) == (False, "no_grant")

    def test_query_applies_grants_before_top_k(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.query``: the grant predicate applies before ``limit``: with
        ``limit=1`` the one allowed record comes back although ten denied ones are nearer, and a
        caller with no grant gets nothing.

        If this fails, check that the grant predicate is part of the query, not a filter
        applied to the top-k results afterwards.
        """
        _require_acl(store)
        probe = direction(DIMS, 1.0)
        denied = {f"denied-{i:02d}": direction(DIMS, 1.0, 0.01 * (i + 1)) for i in range(10)}
        allowed = direction(DIMS, 1.0, 1.0)
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            for source_id, vector in [*denied.items(), ("allowed", allowed)]:
                _add(
                    uow,
                    make_batch(SCOPE, source_id, [source_id], generation=staged, vectors=[vector]),
                )
            uow.generations.publish(staged)
            uow.grants.set(
                granted(
                    uow.scope,
                    [Grant("allowed", principal_ids=("alice",))]
                    + [Grant(s, principal_ids=("bob",)) for s in list(denied)[:5]],
                )
            )
            uow.commit()
        assert _ids(store.query(SCOPE, probe, limit=1)) == ["denied-00#0001"]
        assert _ids(store.query(SCOPE, probe, limit=1, authorization=ALICE)) == ["allowed#0001"]
        assert _ids(store.query(SCOPE, probe, limit=QUERY_ALL, authorization=ALICE)) == [
            "allowed#0001"
        ]
        bob = Authorization("bob", TENANT)
        assert _ids(store.query(SCOPE, probe, limit=3, authorization=bob)) == [
            "denied-00#0001",
            "denied-01#0001",
            "denied-02#0001",
        ]
        assert not store.query(
            SCOPE, probe, limit=QUERY_ALL, authorization=Authorization("eve", TENANT)
        )

    def test_query_with_few_allowed_rows_is_their_exact_top_k(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.query``: when a caller's grants allow few rows (here 22 of 121:
        7 sources of 3 chunks in one group, and one derived record resting on two of them),
        the access-checked top-k is exactly the k allowed rows nearest the query, by cosine
        (ids and scores), not an approximation; a derived record with one root not granted
        stays out.

        If this fails, check that a small allowed set is ranked exactly (the PostgreSQL store:
        ``queries.allowed_leg`` under ``exact_access_rows``), before ``limit``.
        """
        _require_acl(store)
        vectors = {f"s{i:02d}": [hash_vector(f"few-{i}-{j}") for j in range(3)] for i in range(40)}
        extra = {"d-ok": ("s01", "s07"), "d-half": ("s01", "s02")}
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            for source_id, rows in vectors.items():
                texts = [f"{source_id} {j}" for j in range(3)]
                _add(uow, make_batch(SCOPE, source_id, texts, generation=staged, vectors=rows))
            for record_id, roots in extra.items():
                _add(
                    uow, derived_batch(SCOPE, record_id, record_id, roots=roots, generation=staged)
                )
            uow.generations.publish(staged)
            uow.grants.set(
                granted(uow.scope, [Grant(s, group_ids=(f"g{int(s[1:]) % 6}",)) for s in vectors])
            )
            uow.commit()
        allowed = {
            f"{s}#{j + 1:04d}": v for s, rows in vectors.items() if int(s[1:]) % 6 == 1
            for j, v in enumerate(rows)
        }  # fmt: skip
        allowed["d-ok"] = hash_vector("d-ok")  # both roots in g1; d-half's s02 is g2
        probe = hash_vector("few-probe")
        exact = sorted(allowed, key=lambda k: (-float(np.dot(allowed[k], probe)), k))
        caller = Authorization("bob", TENANT, group_ids=("g1", "g9"))
        for limit in (1, 5, QUERY_ALL):
            got = store.query(SCOPE, probe, limit=limit, authorization=caller)
            assert _ids(got) == exact[:limit], limit
            for hit in got:
                assert hit.score == pytest.approx(
                    float(np.dot(allowed[hit.record.id], probe)), abs=1e-4
                )

    def test_query_sees_grant_changes_at_once(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.query``, ``ChunkStore.set_source_access``: revoking a grant or moving
        its access version hides its records from the next query.

        If this fails, check that the query reads live grants (no stale cache).
        """
        _require_acl(store)
        publish_sources(store, SCOPE, {"doc": ["alpha"]})
        probe = hash_vector("alpha")
        store.set_source_access(
            SCOPE, granted(SCOPE, [Grant("doc", principal_ids=("alice",), access_version=1)])
        )
        caller = Authorization("alice", TENANT, access_version=1)
        assert _ids(store.query(SCOPE, probe, limit=5, authorization=caller)) == ["doc#0001"]
        store.set_source_access(
            SCOPE, granted(SCOPE, [Grant("doc", principal_ids=("alice",), access_version=2)])
        )
        assert not store.query(SCOPE, probe, limit=5, authorization=caller)
        store.set_source_access(SCOPE, granted(SCOPE, [Grant("doc")]))
        assert not store.query(SCOPE, probe, limit=5, authorization=ALICE)

    def test_derived_record_needs_every_root_allowed(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.query``: a derived record is returned only to callers allowed on
        every one of its roots.

        If this fails, check that the query's grant predicate checks a derived record's roots,
        not its own id.
        """
        _require_acl(store)
        with store.unit_of_work(SCOPE) as uow:
            staged = uow.generations.stage()
            _add(uow, make_batch(SCOPE, "s1", ["first source"], generation=staged))
            _add(uow, make_batch(SCOPE, "s2", ["second source"], generation=staged))
            _add(
                uow,
                derived_batch(
                    SCOPE, "summary-1", "summary of both", roots=("s1", "s2"), generation=staged
                ),
            )
            _add(
                uow,
                derived_batch(
                    SCOPE,
                    "note-1",
                    "note on one",
                    roots=("s1",),
                    lineage=("s1",),
                    generation=staged,
                ),
            )
            _add(
                uow,
                derived_batch(
                    SCOPE,
                    "digest-1",
                    "digest of the summary",
                    roots=("s1", "s2"),
                    lineage=("summary-1",),
                    generation=staged,
                ),
            )
            uow.generations.publish(staged)
            uow.grants.set(
                granted(
                    uow.scope,
                    [
                        Grant("s1", principal_ids=("alice", "bob")),
                        Grant("s2", principal_ids=("alice",)),
                    ],
                )
            )
            uow.commit()
        probe = hash_vector("summary of both")

        def visible(caller: Authorization | None) -> set[str]:
            return set(_ids(store.query(SCOPE, probe, limit=QUERY_ALL, authorization=caller)))

        everything = {"s1#0001", "s2#0001", "summary-1", "note-1", "digest-1"}
        assert visible(None) == everything
        assert visible(ALICE) == everything
        assert visible(Authorization("bob", TENANT)) == {"s1#0001", "note-1"}
        assert visible(Authorization("carol", TENANT)) == set()


class ChunkStoreDenialReportContract(_ChunkStoreContractBase):
    """Stores report what their own grant predicate withheld, only when asked."""

    def test_query_reports_sources_its_grant_predicate_withheld(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.query``: with an ``authorization`` and ``on_denied``, ``on_denied``
        receives the sources the grant predicate withheld, with their reasons, and only allowed
        records come back.

        If this fails, check the extra read behind ``on_denied`` in the store's query.
        """
        _require_acl(store)
        publish_sources(
            store,
            SCOPE,
            {"allowed": ["allowed text"], "denied-00": ["denied text"], "s-v2": ["versioned"]},
        )
        store.set_source_access(
            SCOPE,
            granted(
                SCOPE,
                [
                    Grant("allowed", principal_ids=("alice",)),
                    Grant("s-v2", principal_ids=("alice",), access_version=2),
                ],
            ),
        )
        reported: list[AccessDecision] = []
        caller = Authorization("alice", TENANT, access_version=1)
        found = store.query(
            SCOPE,
            hash_vector("probe"),
            limit=QUERY_ALL,
            authorization=caller,
            on_denied=reported.extend,
        )
        assert {item.record.source_id for item in found} == {"allowed"}
        reasons = {d.source_id: d.reason for d in reported}
        assert reasons == {"denied-00": "no_grant", "s-v2": "version_mismatch"}
