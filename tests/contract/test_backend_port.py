"""The narrow storage port stays narrow: a new store adapter writes at most 15 members.

Counted over every Protocol a minimal adapter must satisfy (``StorageBackend`` and the
``BackendReader`` / ``BackendWriter`` its blocks yield); adding a member fails the count, and
the SQLite example of docs/adapters.md implements those members and nothing else public.
"""

from __future__ import annotations

import inspect

from ragport_sqlite import SqliteBackend, _Db

from ragport.adapters.memory.backend import MemoryBackend
from ragport.adapters.memory.unit_of_work import SnapshotWriter
from ragport.ports.backend import BackendReader, BackendWriter, StorageBackend
from ragport.ports.pushdowns import PUSHDOWNS

MOST = 15
EXPECTED = {
    "StorageBackend": {"provider", "read", "write"},
    "BackendReader": {"state", "rows", "nearest", "grants", "tombstones"},
    "BackendWriter": {"insert", "update", "delete", "set_state", "put_grants", "put_tombstones"}
    | {"commit"},
}


def members(protocol: type) -> set[str]:
    """The public members a Protocol's own body declares (not its Protocol bases')."""
    return {name for name in vars(protocol) if not name.startswith("_")}


def required() -> dict[str, set[str]]:
    return {p.__name__: members(p) for p in (StorageBackend, BackendReader, BackendWriter)}


def public(cls: type) -> set[str]:
    """Public methods and attributes a class defines, its bases' included (not object's)."""
    return {
        name
        for klass in inspect.getmro(cls)
        if klass is not object
        for name in vars(klass)
        if not name.startswith("_")
    }


def test_a_new_store_adapter_writes_at_most_fifteen_members() -> None:
    """If this fails, a member was added to ragport.ports.backend: make it optional (a
    capability Protocol of its own) or derive it in ragport.engine from the ones there."""
    found = required()
    assert found == EXPECTED
    assert sum(len(names) for names in found.values()) <= MOST


def test_the_writer_is_a_reader() -> None:
    """A write block reads its own writes through the reader's members: counted once."""
    assert issubclass(BackendWriter, BackendReader)
    assert not members(BackendWriter) & members(BackendReader)


def test_the_sqlite_example_implements_only_the_narrow_port() -> None:
    """If this fails, examples/sqlite_store grew a public member the port does not ask for
    (docs/adapters.md promises it implements only those, and pushdowns of
    ragport.ports.pushdowns)."""
    assert public(SqliteBackend) - {"provider", "read", "write"} <= set(PUSHDOWNS)
    port = EXPECTED["BackendReader"] | EXPECTED["BackendWriter"]
    assert public(_Db) - port == {"run"}  # its one helper: a statement with the scope bound
    assert port <= public(_Db)


def test_the_reference_backend_implements_only_the_narrow_port() -> None:
    """If this fails, MemoryBackend or the SnapshotWriter it reads and writes through grew a
    public member the port does not ask for (besides ``committed``, whether the view's
    snapshot is installed, and ``add_commit_hook``, what InMemoryCheckpointStore joins)."""
    assert public(MemoryBackend) - {"provider", "read", "write"} == set()
    own = {"committed", "add_commit_hook"}
    assert public(SnapshotWriter) - own == EXPECTED["BackendReader"] | EXPECTED["BackendWriter"]
