"""The facade covers the lifecycle: ``Rag`` and ``AsyncRag`` each run one scenario end to end.

Write text and a folder (sync), set and read grants, check access, retrieve under an
authorization, re-point and rename, forget (with the erasure layer), compact, read the
generations and the source list, on the in-memory store and PostgreSQL. ``AsyncRag`` runs
the same scenario through its coroutines and must answer the same; a parity test holds the
two method sets and signatures equal, so a method added to one without the other fails.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

import ragport
from ragport.adapters.connectors import FolderConnector
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryCheckpointStore, InMemoryStatusStore, InMemoryStore
from ragport.aio import AsyncRag
from ragport.application import DerivedErasureHandler, Rag, RagDeletionHandler
from ragport.ports.store import ChunkStore

SCOPE = ragport.Scope("acme", "kb", "facade")
ALICE = ragport.Authorization("alice", "acme", group_ids=("staff",))
EMB = HashEmbedder(dimensions=32)


def _public(cls: type) -> dict[str, Any]:
    return {
        name: member
        for name, member in vars(cls).items()
        if not name.startswith("_") and callable(member) and not isinstance(member, property)
    }


def test_async_rag_mirrors_every_rag_method():
    """Every public method of ``Rag`` is a coroutine of ``AsyncRag`` with the same signature
    (``sync_knowledge`` is AsyncRag's deprecated untyped form of ``sync``).

    If this fails, add the method to ``AsyncRag`` with ``_mirror`` (or the same keywords).
    """
    sync_methods = _public(Rag)
    async_methods = _public(AsyncRag)
    async_methods.pop("sync_knowledge")
    assert set(sync_methods) == set(async_methods)
    for name, method in sync_methods.items():
        mirror = async_methods[name]
        assert inspect.iscoroutinefunction(mirror), name
        assert inspect.signature(mirror) == inspect.signature(method), name
    expected = {"forget", "repoint", "rename", "set_grants", "grants", "check_access", "sync"}
    assert expected <= set(sync_methods)


def _folder(tmp_path: Path) -> Path:
    root = tmp_path / "handbook"
    root.mkdir()
    (root / "leave.md").write_text("# Leave\n\nParental leave lasts sixteen weeks.\n")
    (root / "travel.md").write_text("# Travel\n\nBook trains for trips under 500 km.\n")
    return root


Call = Callable[..., Any]


def _scenario(call: Call, store: ChunkStore, root: Path) -> list[Any]:
    """The lifecycle through ``call(name, *args, **kwargs)``; returns what it observed."""
    seen: list[Any] = []
    synced = call(
        "sync", connector=FolderConnector(root, page_size=10), checkpoints=InMemoryCheckpointStore()
    )
    seen.append(synced.upserted)
    call("replace_text", source_id="note", text="# Note\n\nStaff may work remotely.", markdown=True)
    call("index_derived", record_id="note-summary", text="Remote work summary", lineage=["note"])
    seen.append(list(call("sources")))
    call(
        "set_grants",
        [
            ragport.Grant("note", group_ids=("staff",)),
            ragport.Grant("leave.md", group_ids=("staff",)),
        ],
    )
    seen.append(sorted(call("grants", ["note", "travel.md"])))
    decisions = call("check_access", ["note", "travel.md"], ALICE)
    seen.append({k: d.allowed for k, d in decisions.items()})
    hits = call("retrieve", "remote work", authorization=ALICE, top_k=10).hits
    seen.append(sorted({h.source_id for h in hits}))
    seen.append(call("repoint", from_id="note", to_id="notes/remote").moved_chunks)
    renamed = call("rename", [ragport.Rename("leave.md", "policies/leave")])
    seen.append(len(renamed.results))
    handlers = [
        RagDeletionHandler(store=store, scope=SCOPE),
        DerivedErasureHandler(store=store, scope=SCOPE),
    ]
    forgotten = call("forget", "notes/remote", as_owner=True, handlers=handlers)
    seen.append(sorted(forgotten.ids))
    seen.append(sorted({h.source_id for h in call("retrieve", "remote work", top_k=10).hits}))
    seen.append(call("generation"))
    seen.append(len(call("generations", limit=3)))
    seen.append(call("compact", keep=0).floor)
    seen.append(list(call("sources")))
    return seen


def _sync_call(rag: Rag) -> Call:
    return lambda name, *args, **kwargs: getattr(rag, name)(*args, **kwargs)


def _async_call(rag: AsyncRag) -> Call:
    def call(name: str, *args: Any, **kwargs: Any) -> Any:
        method: Callable[..., Awaitable[Any]] = getattr(rag, name)

        async def run() -> Any:
            return await method(*args, **kwargs)

        return anyio.run(run)

    return call


EXPECTED = [
    2,
    ["leave.md", "note", "travel.md"],
    ["note", "travel.md"],  # travel.md: the folder's empty grant (trusted callers only)
    {"note": True, "travel.md": False},
    ["leave.md", "note", "note-summary"],
    1,
    1,
    ["note-summary", "notes/remote"],
    ["policies/leave", "travel.md"],
]


def _check(seen: list[Any]) -> None:
    assert seen[: len(EXPECTED)] == EXPECTED
    generation, history, floor, sources = seen[len(EXPECTED) :]
    assert (generation, history, floor) == (3, 3, 2)  # sync, text, summary
    assert sources == ["policies/leave", "travel.md"]


def _rag(store: ChunkStore) -> Rag:
    return ragport.Rag(store=store, embedder=EMB, scope=SCOPE, status_store=InMemoryStatusStore())


def test_the_lifecycle_through_rag_in_memory(tmp_path):
    """``Rag`` on the in-memory store: every step answers as expected.

    If this fails, check the facade method named by the first differing step.
    """
    store = InMemoryStore()
    _check(_scenario(_sync_call(_rag(store)), store, _folder(tmp_path)))


def test_the_lifecycle_through_async_rag_in_memory(tmp_path):
    """``AsyncRag`` on the in-memory store answers the scenario exactly as ``Rag`` does.

    If this fails, check the mirror of the method named by the first differing step.
    """
    store = InMemoryStore()
    _check(_scenario(_async_call(AsyncRag(_rag(store))), store, _folder(tmp_path)))


def test_the_lifecycle_through_rag_on_postgres(tmp_path, pg_engine, pg_schema):
    """``Rag`` on PostgreSQL: the same scenario, the same answers.

    If this fails and memory passes, the PostgreSQL store and the in-memory one disagree.
    """
    from ragport.adapters.postgres import PostgresStore

    store = PostgresStore(pg_engine, schema=pg_schema, create=True)
    _check(_scenario(_sync_call(_rag(store)), store, _folder(tmp_path)))


def test_the_facade_refuses_grants_on_a_store_without_acl():
    """Grant methods on a store without ``authorization == "acl"`` raise ``CapabilityError``.

    If this fails, check ``Rag._acl``.
    """
    import attrs

    class NoAcl(InMemoryStore):
        @property
        def capabilities(self) -> ragport.domain.Capabilities:
            return attrs.evolve(super().capabilities, authorization="none")

    rag = ragport.Rag(store=NoAcl(), embedder=EMB, scope=SCOPE)
    for call in (
        lambda: rag.set_grants([ragport.Grant("x", group_ids=("g",))]),
        lambda: rag.grants(["x"]),
        lambda: rag.check_access(["x"], ALICE),
    ):
        with pytest.raises(ragport.CapabilityError):
            call()


def test_async_sync_knowledge_is_deprecated(tmp_path):
    """``AsyncRag.sync_knowledge`` still works for one release and warns.

    If this fails, check the deprecation in ``AsyncRag.sync_knowledge``.
    """
    rag = AsyncRag(_rag(InMemoryStore()))

    async def run() -> Any:
        return await rag.sync_knowledge(
            connector=FolderConnector(_folder(tmp_path)), checkpoints=InMemoryCheckpointStore()
        )

    with pytest.warns(DeprecationWarning):
        assert anyio.run(run).upserted == 2


async def _await(coroutine: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
    return await coroutine(*args, **kwargs)


def test_each_coroutine_forwards_its_arguments_to_the_rag_method_of_its_name():
    """Each ``AsyncRag`` coroutine calls the ``Rag`` method of its own name with the arguments
    it was given (the signature check above reads a mirror's signature from the method it
    wraps, so only a call shows a mirror wired to the wrong method or dropping a keyword).

    If this fails, check ``_mirror`` in ragport/aio.py and the hand-written coroutines.
    """
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def recorder(name: str) -> Callable[..., str]:
        def record(self: Rag, *args: Any, **kwargs: Any) -> str:
            calls.append((name, args, kwargs))
            return name

        return record

    names = sorted(_public(Rag))
    spy_class = type("SpyRag", (Rag,), {name: recorder(name) for name in names})
    arag = AsyncRag(spy_class(store=InMemoryStore(), embedder=EMB, scope=SCOPE))
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    for name in names:
        params = [p for p in inspect.signature(getattr(Rag, name)).parameters.values()]
        args = tuple(f"{name}:{p.name}" for p in params if p.kind in kinds and p.name != "self")
        kwargs = {
            p.name: f"{name}:{p.name}"
            for p in params
            if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name != "runtime"
        }
        coroutine: Callable[..., Awaitable[Any]] = getattr(arag, name)
        assert anyio.run(functools.partial(_await, coroutine, *args, **kwargs)) == name
        called, got_args, got_kwargs = calls[-1]
        got_kwargs.pop("runtime", None)  # the coroutine adds its own abort to the runtime
        assert (called, got_args, got_kwargs) == (name, args, kwargs), name
