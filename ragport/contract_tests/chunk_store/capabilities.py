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
        """The store has every ChunkStore member.

        If this fails, check that the adapter defines every method and property of ChunkStore.
        """
        assert isinstance(store, ChunkStore)

    def test_store_conforms_to_the_port_signatures(self, store: ChunkStore) -> None:
        """Checks every ``ChunkStore`` member (and those of the optional protocols the store
        declares): ``conformance_problems`` finds nothing, so each method takes the port's
        positional arguments, every keyword-only one by name and a default where the port
        has one (``assert_conforms``).

        If this fails, check the listed members against ``ragport/ports/store.py``; running
        ``mypy --strict`` over ``assert_conforms(MyStore(...))`` names them too.
        """
        problems = conformance_problems(store)
        assert not problems, problems

    def test_capabilities_is_a_typed_value(self, store: ChunkStore) -> None:
        """`capabilities` is a Capabilities with well-typed fields, the same on every read.

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
        """Every optional capability the store declares is defined by its class.

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
        """`provider` is a short non-empty string that does not change.

        If this fails, check the adapter's `provider` property (e.g. "memory").
        """
        provider = store.provider
        assert isinstance(provider, str)
        assert provider.strip()
        assert store.provider == provider

    def test_unit_of_work_exposes_scope_and_repositories(self, store: ChunkStore) -> None:
        """A unit of work names its scope and offers the four repositories.

        If this fails, check the object `unit_of_work(scope).__enter__` returns.
        """
        with store.unit_of_work(SCOPE) as uow:
            assert uow.scope == SCOPE
            for name in ("records", "generations", "grants", "tombstones"):
                assert getattr(uow, name) is not None, name
            assert callable(uow.commit)
            assert callable(uow.rollback)
