"""Contract suites every adapter (ours or a user's) must pass.

Subclass a suite in your own test module and supply its fixture::

    from ragport.contract_tests import ChunkStoreContract

    class TestMyStore(ChunkStoreContract):
        @pytest.fixture
        def store(self):
            ...  # yield an empty store, clean up afterwards

Suites: ``ChunkStoreContract`` (fixture ``store``; a package, one module per capability
group), ``EmbedderContract`` (``embedder``), ``RerankerContract`` (``reranker``),
``DerivedArtifactHandlerContract`` (``handler``, plus ``handler_serves`` to observe what it
did), ``IngestionStatusStoreContract`` (``status_store``), ``CheckpointStoreContract``
(``checkpoint_store``), ``ConnectorContract`` (``connector``, plus ``connector_harness`` to
change the upstream system between calls), ``ParserContract`` (``parser``, plus
``parser_sample`` giving valid input for the format). Every suite derives from
``_base.ContractSuite`` (the override guard) and declares its required fixture with
``_base.required_fixture``. Deterministic helpers for your own tests
live in ``ragport.contract_tests.plugin`` (enable it with
``pytest_plugins = ["ragport.contract_tests.plugin"]``); a fresh schema per test on your own
PostgreSQL server, to run ``ChunkStoreContract`` there, in ``ragport.contract_tests.postgres``
(``pytest_plugins = ["ragport.contract_tests.postgres"]`` and ``RAGPORT_TEST_DATABASE_URL``).
Needs the ``contract-tests`` extra (pytest).
"""

import pytest

# Rewrite asserts in the suite modules so an adapter author sees the compared values, not a
# bare AssertionError. This must happen before the modules are imported.
pytest.register_assert_rewrite(
    "ragport.contract_tests._base",
    "ragport.contract_tests._support",
    # The package name alone covers its modules; each is named too, so this list reads as the
    # index of every suite module.
    "ragport.contract_tests.checkpoint_store",
    "ragport.contract_tests.chunk_store",
    "ragport.contract_tests.chunk_store._base",
    "ragport.contract_tests.chunk_store._helpers",
    "ragport.contract_tests.chunk_store.access",
    "ragport.contract_tests.chunk_store.aliasing",
    "ragport.contract_tests.chunk_store.boundary",
    "ragport.contract_tests.chunk_store.capabilities",
    "ragport.contract_tests.chunk_store.concurrency",
    "ragport.contract_tests.chunk_store.failures",
    "ragport.contract_tests.chunk_store.forgetting",
    "ragport.contract_tests.chunk_store.generations",
    "ragport.contract_tests.chunk_store.grant_reads",
    "ragport.contract_tests.chunk_store.guarded_query",
    "ragport.contract_tests.chunk_store.history",
    "ragport.contract_tests.chunk_store.hybrid",
    "ragport.contract_tests.chunk_store.lexical",
    "ragport.contract_tests.chunk_store.lineage",
    "ragport.contract_tests.chunk_store.query",
    "ragport.contract_tests.chunk_store.scope",
    "ragport.contract_tests.chunk_store.tombstones",
    "ragport.contract_tests.chunk_store.unit_of_work",
    "ragport.contract_tests.derived",
    "ragport.contract_tests.differential",
    "ragport.contract_tests.connector",
    "ragport.contract_tests.conformance",
    "ragport.contract_tests.embedder",
    "ragport.contract_tests.parser",
    "ragport.contract_tests.reranker",
    "ragport.contract_tests.status_store",
    "ragport.contract_tests.storage_backend",
    "ragport.contract_tests.storage_backend_engine",
    "ragport.contract_tests.plugin",
    "ragport.contract_tests.postgres",
)

from ragport.contract_tests.checkpoint_store import (  # noqa: E402
    CheckpointInUnitOfWorkContract,
    CheckpointStoreContract,
)
from ragport.contract_tests.chunk_store import (  # noqa: E402
    ChunkStoreAliasingContract,
    ChunkStoreBorrowedQueryContract,
    ChunkStoreBoundaryContract,
    ChunkStoreCapabilityContract,
    ChunkStoreConcurrencyContract,
    ChunkStoreContract,
    ChunkStoreDenialReportContract,
    ChunkStoreFailureContract,
    ChunkStoreFilterContract,
    ChunkStoreForgettingContract,
    ChunkStoreGenerationContract,
    ChunkStoreGenerationHistoryContract,
    ChunkStoreGrantContract,
    ChunkStoreGrantReadContract,
    ChunkStoreGuardedQueryContract,
    ChunkStoreHybridSnapshotContract,
    ChunkStoreLexicalContract,
    ChunkStoreLineageContract,
    ChunkStoreQueryContract,
    ChunkStoreReplaceContract,
    ChunkStoreRepointContract,
    ChunkStoreRepointUniquenessContract,
    ChunkStoreScopeContract,
    ChunkStoreSourceListContract,
    ChunkStoreTombstoneContract,
    ChunkStoreUnitOfWorkContract,
)
from ragport.contract_tests.conformance import assert_conforms, conformance_problems  # noqa: E402
from ragport.contract_tests.connector import ConnectorContract, ConnectorHarness  # noqa: E402
from ragport.contract_tests.derived import DerivedArtifactHandlerContract  # noqa: E402
from ragport.contract_tests.differential import DifferentialContract  # noqa: E402
from ragport.contract_tests.embedder import EmbedderContract  # noqa: E402
from ragport.contract_tests.parser import ParserContract, Sample  # noqa: E402
from ragport.contract_tests.reranker import RerankerContract  # noqa: E402
from ragport.contract_tests.status_store import IngestionStatusStoreContract  # noqa: E402
from ragport.contract_tests.storage_backend import StorageBackendContract  # noqa: E402
from ragport.contract_tests.storage_backend_engine import (  # noqa: E402
    StorageBackendEngineContract,
)

CONTRACT_VERSION = "2.7"
# Contract versions (bump the minor for added tests, the major for changed promises):
# 1.0  ChunkStoreContract (scope, unit of work, replace, generations, grants, tombstones,
#      query, capabilities, concurrency, isolation canary, override guard),
#      EmbedderContract, IngestionStatusStoreContract.
# 1.1  ChunkStoreFilterContract (the filter language), ChunkStoreLexicalContract (stores
#      that advertise lexical_modes), ChunkStoreDenialReportContract (on_denied).
# 1.2  RerankerContract (empty input, permutation of the same objects, determinism, caps).
# 1.3  ChunkStoreLineageContract, ChunkStoreRepointContract, DerivedArtifactHandlerContract.
# 1.4  ChunkStoreGuardedQueryContract (stores that implement SupportsGuardedQuery).
# 1.5  ChunkStoreForgettingContract (forgetting at any depth through re-points, deletes and
#      rollbacks; chunk and derived ids never shared), ChunkStoreRepointUniquenessContract
#      (ids unique at every reachable pointer), ChunkStoreHybridSnapshotContract (hybrid_query:
#      both legs from one snapshot). find_dependents and rewrite_lineage cover every stored
#      version; lexical_modes now also promises hybrid_query.
# 1.6  ChunkStoreBoundaryContract (NUL and lone surrogates refused before any write, errors
#      chain nothing, one metadata_bytes, ragged embedder rows, reranker errors and copies).
# 1.7  ParserContract (caps, strict decoding, abort, determinism, no text in errors).
# 1.8  ragport.contract_tests.chunk_store is a package, one module per capability group (same
#      import path and names). The emptiness test and the isolation canary check every
#      (scope, source) the builders recorded writing (_support.record_written, granted)
#      instead of a hand-kept source list. IngestionStatusStoreContract gains the isolation
#      canary. DerivedArtifactHandlerContract gains the handler_serves fixture and two effect
#      tests (on_propagate stops serving every id; on_repoint moves what it counts), which skip
#      with a reason until handler_serves is overridden.
# 1.9  ChunkStoreAliasingContract: records written, records read back (every read) and the
#      use cases' chunks and hits never alias the store's state.
# 1.10 CheckpointStoreContract (versioned compare-and-set per connector and exact scope,
#      one winner among racing writers), ConnectorContract (bootstrap paging, changes after
#      upstream edits, idempotent replays, SyncCursorError for foreign cursors).
# 1.11 Fix: an optional section (guarded query, forgetting, re-point uniqueness) skips only its
#      own tests; up to 1.10 its autouse skip applied to every test of ChunkStoreContract, so a
#      store without guarded_query, transactions or generations skipped the whole suite.
# 1.12 ChunkStoreGrantReadContract (get_source_access reads grants back),
#      ChunkStoreSourceListContract (list_source_ids pages the visible sources).
# 1.13 ChunkStoreGenerationHistoryContract (stores that declare generation_history: what each
#      generation in (floor, pointer] wrote and retired, after rollback, compaction, staging
#      and forgetting; limit and id cap). Capabilities gains generation_history.
# 1.14 ChunkStoreTombstoneContract: forgotten_among (stores that declare forgotten_lookup,
#      SupportsForgottenLookup) answers what list_invalidated_ids & ids answers.
# 1.15 ChunkStoreAliasingContract: stores that declare Capabilities.private_reads hand out no
#      metadata container twice within one answer (retrieval then builds hits on the records'
#      metadata without copying it). Capabilities gains private_reads.
# 1.16 ChunkStoreBorrowedQueryContract (stores that declare borrowed_query,
#      SupportsBorrowedQuery): the answer equals guarded_query's, lent records never change,
#      one snapshot under concurrent writers; ChunkStoreGuardedQueryContract's tests also run
#      on borrowed_query. Capabilities gains borrowed_query.
# 1.17 Fix: ChunkStoreBorrowedQueryContract's concurrency test lends one answer before the
#      writers start and keeps the first answer of each version; up to 1.16 it kept the first
#      600 lent records, which could all precede the first commit, so a store that changes
#      lent records at its next commit could pass it.
# 1.18 CheckpointInUnitOfWorkContract (checkpoint stores that SupportsCheckpointsInUnitOfWork):
#      a compare-and-set inside a chunk store's unit of work commits and rolls back with it;
#      racing units of work, one winner.
# 1.19 ParserContract: input nested thousands deep (markup, YAML front matter, brackets,
#      indentation) gives a ParsedDocument or a ParseError, never another exception.
# 1.20 ChunkStoreLexicalContract: another tenant's and another corpus's documents change no
#      order or score of a scope (BM25 statistics per scope), and mode bm25 matches exactly
#      tokenize_lexical's tokens (cafe is not café, strasse is Straße); query and
#      lexical_query answer nothing for limit <= 0 (lexical: ()); ChunkStoreUnitOfWorkContract:
#      a second commit() is ValidationError(field="unit_of_work"). Every chunk_store mixin also
#      imports from ragport.contract_tests.
# 1.21 ChunkStoreLexicalContract: every mode in capabilities.lexical_modes works through
#      retrieve_context (a store declaring "fts5" failed every retrieval); ChunkStoreFailureContract
#      (optional fixture break_store): once the backend is broken, every read and write, the
#      optional legs and retrieve_context raise StoreError with nothing chained. assert_conforms
#      (static: typed ChunkStore; run time: the port's parameters), checked by the capability
#      section's test_store_conforms_to_the_port_signatures.
# 1.22 Retrieval takes any mode a store declares: the lexical section's retrieval test now
#      passes a store declaring "fts5" (and fails one whose hybrid_query refuses its own
#      declared name). Every contract test's docstring opens with "Checks ``Port.member``"
#      (tests/contract/test_contract_docstrings.py). The boundary section accepts any Sequence
#      from get_by_source, as the port promises. The port's unit-of-work protocols live in
#      ragport.ports.unit_of_work (still importable from ragport.ports.store).
# 2.0  The store port a new adapter writes is the narrow storage port, ragport.ports.backend
#      (StorageBackend, BackendReader, BackendWriter: 15 members); ragport.engine.BackendStore
#      makes it a ChunkStore, and StorageBackendContract (fixture ``backend``) runs the whole
#      ChunkStoreContract on it, with three tests of the backend's own members. Changed
#      promises: RecordRepository.rekey refuses two ids moved onto one id
#      (ValidationError(field="to_id"), check_rekey_moves), which 1.x stores could let
#      through (the in-memory store then kept one of the two rows); GenerationRepository.reset
#      below the floor is ValidationError(field="generation") and raise_floor stops at the
#      pointer (the in-memory store and PostgreSQL differed). A ChunkStore written for 1.x
#      passes 2.0 once it makes those checks; docs/contract-tests.md has the migration note.
# 2.1  Records withheld by a forgotten tombstone count in no lexical statistic (the in-memory
#      store counted them; docs/contract-tests.md).
# 2.2  TombstoneRepository gains get(ids) and readmit(ids) (a forgotten tombstone turned
#      corrected; BackendStore implements both over the narrow port, so a StorageBackend needs
#      nothing new). ChunkStoreTombstoneContract checks both; ChunkStoreForgettingContract
#      checks that writes to a forgotten id are refused (ForgottenError), also when the forget
#      commits while the write embeds, and that readmit_source purges what was forgotten.
# 2.3  DifferentialContract (fixture store_pair): two stores answer alike on random operation
#      sequences (hypothesis, derandomized); BackendStore(backend) against
#      BackendStore(backend, pushdown=False) checks a backend's pushdowns.
# 2.4  "bm25" names the ranking (BM25 over exact per-scope statistics): PostgreSQL declares it
#      (it declared "fts", still accepted for one release with a DeprecationWarning). The
#      lexical section's tokenizer test skips for a test class with bm25_tokens = "engine"
#      (a bm25 leg on the engine's own analyzer, PostgreSQL's text-search configuration).
# 2.5  StorageBackendContract includes StorageBackendEngineContract: GenerationState gains the
#      embedder claim (``embedders``), which a backend stores and returns as given (new
#      promise); the engine's guard reads it, not rows(); the engine reads nothing while a
#      nearest() iterator is open, refuses rows outside the scope or source asked
#      (StoreError), and leaves a unit rollback-only after any backend error in a write.
#      BackendStore has a lexical leg (the engine's BM25) on every backend.
# 2.6  DifferentialContract: fixed sequences first (forgotten rows visible again), a lexical
#      read per caller in the final state, differential_lexical_sets (modes compared by the
#      hits they admit, not by rank: PostgreSQL's bm25 against the engine's).
# 2.7  DifferentialContract: a fifth fixed sequence, a source two pinned levels derive from,
#      deleted then restored by a rollback (a delete pushdown must retire the dependents).

__all__ = [
    "CONTRACT_VERSION",
    "CheckpointInUnitOfWorkContract",
    "CheckpointStoreContract",
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
    "ConnectorContract",
    "ConnectorHarness",
    "DerivedArtifactHandlerContract",
    "DifferentialContract",
    "EmbedderContract",
    "IngestionStatusStoreContract",
    "ParserContract",
    "RerankerContract",
    "Sample",
    "StorageBackendContract",
    "StorageBackendEngineContract",
    "assert_conforms",
    "conformance_problems",
]
