"""``ChunkStoreCapabilityContract``: ``capabilities`` and ``provider`` are honest and typed."""

from __future__ import annotations

from ragport.contract_tests.chunk_store._base import _ChunkStoreContractBase
from ragport.contract_tests.chunk_store._helpers import SCOPE
from ragport.contract_tests.conformance import conformance_problems
from ragport.domain.model import Capabilities
from ragport.ports.store import ChunkStore, declared, missing_methods, supports

__all__ = ["ChunkStoreCapabilityContract"]


class ChunkStoreCapabilityContract(_ChunkStoreContractBase):
    """``capabilities`` and ``provider`` are honest, typed and stable."""

    def test_store_satisfies_the_chunk_store_protocol(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.capabilities``, ``ChunkStore.provider``, ``ChunkStore.unit_of_work``,
        ``ChunkStore.current_generation``, ``ChunkStore.query``, ``ChunkStore.get_by_source``,
        ``ChunkStore.foreign_embedders``, ``ChunkStore.list_embedders``,
        ``ChunkStore.set_source_access``, ``ChunkStore.check_source_access``,
        ``ChunkStore.list_invalidated_ids``, ``ChunkStore.get_source_access``,
        ``ChunkStore.list_source_ids``: the store has every member of the protocol
        (``isinstance(store, ChunkStore)``).

        If this fails, check that the adapter defines every method and property of ChunkStore.
        """
        assert isinstance(store, ChunkStore)

    def test_store_conforms_to_the_port_signatures(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.capabilities``, ``ChunkStore.provider``, ``ChunkStore.unit_of_work``,
        ``ChunkStore.current_generation``, ``ChunkStore.query``, ``ChunkStore.get_by_source``,
        ``ChunkStore.foreign_embedders``, ``ChunkStore.list_embedders``,
        ``ChunkStore.set_source_access``, ``ChunkStore.check_source_access``,
        ``ChunkStore.list_invalidated_ids``, ``ChunkStore.get_source_access``,
        ``ChunkStore.list_source_ids``, ``SupportsLexicalSearch.lexical_query``,
        ``SupportsLexicalSearch.hybrid_query``, ``SupportsGuardedQuery.guarded_query``,
        ``SupportsBorrowedQuery.borrowed_query``, ``SupportsPreparation.prepare``,
        ``SupportsGenerationHistory.generation_history``,
        ``SupportsForgottenLookup.forgotten_among``: ``conformance_problems`` finds nothing, so
        ``capabilities`` is a ``Capabilities``, ``provider`` a non-empty string, and every method of
        ``ChunkStore`` and of each optional protocol the store declares is defined (an optional one
        by the store's class) and takes the port's positional arguments, every keyword-only one by
        name and a default where the port has one; extra parameters have defaults
        (``assert_conforms``).

        If this fails, check the listed members against ``ragport/ports/store.py``; running
        ``mypy --strict`` over ``assert_conforms(MyStore(...))`` names them too.
        """
        problems = conformance_problems(store)
        assert not problems, problems

    def test_capabilities_is_a_typed_value(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.capabilities``: it is a ``Capabilities`` whose fields have their
        types (``authorization`` "acl" or "none", booleans, ``lexical_modes`` a tuple of non-empty
        strings), equal on every read.

        If this fails, check that the adapter returns ragport.domain.model.Capabilities.
        """
        caps = store.capabilities
        assert isinstance(caps, Capabilities)
        assert caps.authorization in ("acl", "none")
        assert isinstance(caps.transactions, bool)
        assert isinstance(caps.generations, bool)
        assert isinstance(caps.lexical_modes, tuple)
        assert isinstance(caps.guarded_query, bool)
        assert isinstance(caps.preparation, bool)
        assert all(isinstance(mode, str) and mode for mode in caps.lexical_modes)
        assert store.capabilities == caps

    def test_declared_capabilities_are_implemented(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.capabilities``: every optional capability it declares is defined by
        the store's class (``missing_methods`` finds nothing), so ``supports`` accepts it.

        If this fails, check the listed methods: ``lexical_modes`` promises ``lexical_query``
        and ``hybrid_query``, ``guarded_query=True`` promises ``guarded_query``,
        ``preparation=True`` promises ``prepare``. Define them on the store's class (not
        through ``__getattr__``), or stop declaring the capability.
        """
        missing = missing_methods(store)
        assert not missing, (
            f"{type(store).__name__} declares capabilities its class does not implement: "
            + "; ".join(f"{cap} needs {', '.join(methods)}" for cap, methods in missing.items())
        )
        for capability in declared(store.capabilities):
            assert supports(store, capability), capability

    def test_provider_is_a_stable_non_empty_string(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.provider``: it is a non-blank string that does not change.

        If this fails, check the adapter's `provider` property (e.g. "memory").
        """
        provider = store.provider
        assert isinstance(provider, str)
        assert provider.strip()
        assert store.provider == provider

    def test_unit_of_work_exposes_scope_and_repositories(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.unit_of_work``, ``UnitOfWork.scope``, ``UnitOfWork.records``,
        ``UnitOfWork.generations``, ``UnitOfWork.grants``, ``UnitOfWork.tombstones``,
        ``UnitOfWork.commit``, ``UnitOfWork.rollback``: the unit of work has the scope it was opened
        for, all four repositories, and callable ``commit`` and ``rollback``.

        If this fails, check the object `unit_of_work(scope).__enter__` returns.
        """
        with store.unit_of_work(SCOPE) as uow:
            assert uow.scope == SCOPE
            for name in ("records", "generations", "grants", "tombstones"):
                assert getattr(uow, name) is not None, name
            assert callable(uow.commit)
            assert callable(uow.rollback)
