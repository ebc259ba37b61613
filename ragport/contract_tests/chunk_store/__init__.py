"""``ChunkStoreContract``: the promises of ``ragport.ports.store`` as pytest tests.

Use it by subclassing and supplying a ``store`` fixture that yields an *empty* store and
cleans up afterwards::

    class TestMyStore(ChunkStoreContract):
        @pytest.fixture
        def store(self):
            store = MyStore(...)
            yield store
            store.drop_everything()

Each capability is a mixin of its own (``ChunkStoreScopeContract``,
``ChunkStoreUnitOfWorkContract``, ...) so an adapter can adopt them one by one;
``ChunkStoreContract`` is all of them plus an isolation canary. One module per capability
group: ``capabilities``, ``scope``, ``unit_of_work``, ``generations`` (replace and
generations), ``access`` (grants, denial reports), ``tombstones``, ``query`` (query, filters,
lexical), ``guarded_query``, ``borrowed_query``, ``concurrency``, ``lineage`` (lineage, re-pointing),
``forgetting`` (forgetting, re-point uniqueness), ``hybrid``, ``boundary``, ``aliasing``,
``grant_reads`` (grant reads, source listing), ``history`` (generation history) and
``failures`` (driver failures, with the optional ``break_store`` fixture); the shared base
class is in ``_base`` and the constants and helpers in ``_helpers``. Tests that depend on a
declared capability (``transactions``, ``generations``, ``authorization == "acl"``) skip with
a reason when the store does not declare it, and must pass when it does. To record a known gap,
override a test only by wrapping it in ``pytest.mark.xfail(reason=...)``; any other override
fails ``test_contract_tests_are_not_overridden``.

Everything goes through the port: ``store.unit_of_work(scope)`` and the store's read methods.
All data is deterministic (vectors come from SHA-256, see ``_support``). The builders of
``_support`` record every (scope, source) they write, so the emptiness checks and the canary
cover whatever the tests wrote.
"""

from __future__ import annotations

from ragport.contract_tests.chunk_store._base import written_by
from ragport.contract_tests.chunk_store._helpers import _assert_store_empty
from ragport.contract_tests.chunk_store.access import (
    ChunkStoreDenialReportContract,
    ChunkStoreGrantContract,
)
from ragport.contract_tests.chunk_store.aliasing import ChunkStoreAliasingContract
from ragport.contract_tests.chunk_store.borrowed_query import ChunkStoreBorrowedQueryContract
from ragport.contract_tests.chunk_store.boundary import ChunkStoreBoundaryContract
from ragport.contract_tests.chunk_store.capabilities import ChunkStoreCapabilityContract
from ragport.contract_tests.chunk_store.concurrency import ChunkStoreConcurrencyContract
from ragport.contract_tests.chunk_store.failures import ChunkStoreFailureContract
from ragport.contract_tests.chunk_store.forgetting import (
    ChunkStoreForgettingContract,
    ChunkStoreRepointUniquenessContract,
)
from ragport.contract_tests.chunk_store.generations import (
    ChunkStoreGenerationContract,
    ChunkStoreReplaceContract,
)
from ragport.contract_tests.chunk_store.grant_reads import (
    ChunkStoreGrantReadContract,
    ChunkStoreSourceListContract,
)
from ragport.contract_tests.chunk_store.guarded_query import ChunkStoreGuardedQueryContract
from ragport.contract_tests.chunk_store.history import ChunkStoreGenerationHistoryContract
from ragport.contract_tests.chunk_store.hybrid import ChunkStoreHybridSnapshotContract
from ragport.contract_tests.chunk_store.lineage import (
    ChunkStoreLineageContract,
    ChunkStoreRepointContract,
)
from ragport.contract_tests.chunk_store.query import (
    ChunkStoreFilterContract,
    ChunkStoreLexicalContract,
    ChunkStoreQueryContract,
)
from ragport.contract_tests.chunk_store.scope import ChunkStoreScopeContract
from ragport.contract_tests.chunk_store.tombstones import ChunkStoreTombstoneContract
from ragport.contract_tests.chunk_store.unit_of_work import ChunkStoreUnitOfWorkContract
from ragport.ports.store import ChunkStore

__all__ = [
    "ChunkStoreAliasingContract",
    "ChunkStoreBorrowedQueryContract",
    "ChunkStoreBoundaryContract",
    "ChunkStoreCapabilityContract",
    "ChunkStoreConcurrencyContract",
    "ChunkStoreContract",
    "ChunkStoreDenialReportContract",
    "ChunkStoreFailureContract",
    "ChunkStoreFilterContract",
    "ChunkStoreForgettingContract",
    "ChunkStoreGenerationContract",
    "ChunkStoreGenerationHistoryContract",
    "ChunkStoreGrantContract",
    "ChunkStoreGrantReadContract",
    "ChunkStoreGuardedQueryContract",
    "ChunkStoreHybridSnapshotContract",
    "ChunkStoreLexicalContract",
    "ChunkStoreLineageContract",
    "ChunkStoreQueryContract",
    "ChunkStoreReplaceContract",
    "ChunkStoreRepointContract",
    "ChunkStoreRepointUniquenessContract",
    "ChunkStoreScopeContract",
    "ChunkStoreSourceListContract",
    "ChunkStoreTombstoneContract",
    "ChunkStoreUnitOfWorkContract",
]


class ChunkStoreContract(
    ChunkStoreCapabilityContract,
    ChunkStoreScopeContract,
    ChunkStoreUnitOfWorkContract,
    ChunkStoreReplaceContract,
    ChunkStoreGenerationContract,
    ChunkStoreGrantContract,
    ChunkStoreGrantReadContract,
    ChunkStoreSourceListContract,
    ChunkStoreTombstoneContract,
    ChunkStoreGuardedQueryContract,
    ChunkStoreBorrowedQueryContract,
    ChunkStoreQueryContract,
    ChunkStoreConcurrencyContract,
    ChunkStoreFilterContract,
    ChunkStoreLexicalContract,
    ChunkStoreDenialReportContract,
    ChunkStoreLineageContract,
    ChunkStoreRepointContract,
    ChunkStoreForgettingContract,
    ChunkStoreRepointUniquenessContract,
    ChunkStoreHybridSnapshotContract,
    ChunkStoreBoundaryContract,
    ChunkStoreAliasingContract,
    ChunkStoreGenerationHistoryContract,
    ChunkStoreFailureContract,
):
    """Every ChunkStore promise. Subclass it and override the ``store`` fixture."""

    def test_isolation_canary(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.current_generation``, ``ChunkStore.query``,
        ``ChunkStore.get_by_source``, ``ChunkStore.list_embedders``,
        ``ChunkStore.list_invalidated_ids``, ``TombstoneRepository.list``, ``GrantRepository.get``,
        ``GenerationRepository.counter``: collected after every other contract test, the fixture
        still yields an empty store (pointer and counter 0; no records, embedders, grants or
        tombstones).

        Checked: every scope of the suite's constants and every (scope, source) the tests of
        this class recorded writing (the builders of ``_support`` record them). If this fails,
        check that the `store` fixture does not share state between tests (a module-level
        store, a database not truncated, a class attribute).
        """
        _assert_store_empty(store, written_by(type(self)))
