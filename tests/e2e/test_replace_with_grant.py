"""Content and access in one write (issue 44): ``replace_source(grant=...)`` (and
``replace_document``, ``Rag``) sets the source's grant in the unit of work that writes its
content, on every store: a reader never sees the new content under the old grant, and a
failed replace changes neither."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from doubles import Delegating
from sync_support import Stores, sync_stores

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.loaders import ResourceDocumentLoader
from ragport.adapters.parsers import parser_for

SCOPE = ragport.Scope("acme", "kb", "granted")
EMB = HashEmbedder(dimensions=64)
EVEN, ODD = ragport.Authorization("even", "acme"), ragport.Authorization("odd", "acme")
CYCLES = 16


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def stores(request) -> Iterator[Stores]:
    yield sync_stores(request)


def _grant(principal: str) -> ragport.Grant:
    return ragport.Grant("doc", principal_ids=(principal,))


def _put(store: Any, text: str, **kw: Any) -> ragport.ReplaceResult:
    return ragport.application.replace_source(
        source_id="doc", chunks=[ragport.Chunk.of("doc", 0, text)], embedder=EMB, store=store,
        scope=SCOPE, **kw,
    )  # fmt: skip


def _seen(store: Any, who: ragport.Authorization) -> list[str]:
    result = ragport.application.retrieve_context(
        "walrus version", embedder=EMB, store=store, scope=SCOPE, authorization=who,
        request=ragport.RetrievalRequest(top_k=5),
    )  # fmt: skip
    return [h.text for h in result.hits]


def test_replace_sets_content_and_grant_together(stores):
    """The new grant and the new content arrive in one write; the old caller sees neither.

    If this fails, check that replace_source calls uow.grants.set inside its unit of work.
    """
    _put(stores.store, "walrus version 0", grant=_grant("even"))
    assert _seen(stores.store, EVEN) == ["walrus version 0"] and _seen(stores.store, ODD) == []
    result = _put(stores.store, "walrus version 1", grant=_grant("odd"))
    assert result.indexed == 1
    assert _seen(stores.store, ODD) == ["walrus version 1"] and _seen(stores.store, EVEN) == []
    assert stores.store.get_source_access(SCOPE, ["doc"])["doc"] == _grant("odd")
    _put(stores.store, "walrus version 2")  # no grant: the grant stays as it is
    assert _seen(stores.store, ODD) == ["walrus version 2"]


def test_a_grant_for_another_source_is_refused(stores):
    """``grant.source_id`` must be the source written (and a Grant): ValidationError(field=
    "grant") before anything is embedded or written.

    If this fails, check check_grant in ragport/application/indexing.py.
    """
    _put(stores.store, "walrus version 0", grant=_grant("even"))
    generation = stores.store.current_generation(SCOPE)
    for wrong in (ragport.Grant("other", principal_ids=("odd",)), "odd"):
        with pytest.raises(ragport.ValidationError) as caught:
            _put(stores.store, "walrus version 1", grant=wrong)
        assert caught.value.field == "grant"
    assert stores.store.current_generation(SCOPE) == generation
    assert stores.store.get_source_access(SCOPE, ["doc", "other"]) == {"doc": _grant("even")}


class _CommitFails(Delegating):
    """The store, whose units of work fail at commit (everything before it runs for real)."""

    @contextmanager
    def unit_of_work(self, scope: ragport.Scope) -> Iterator[Any]:
        with self._inner.unit_of_work(scope) as uow:
            yield _FailingCommit(uow)


class _FailingCommit(Delegating):
    def commit(self) -> None:
        raise ragport.StoreError("the commit failed")


def test_a_failed_replace_leaves_content_and_grant_as_they_were(stores):
    """A replace whose commit fails leaves the old content under the old grant.

    If this fails, check that the grant is written through the replace's own unit of work.
    """
    _put(stores.store, "walrus version 0", grant=_grant("even"))
    with pytest.raises(ragport.StoreError):
        _put(_CommitFails(stores.store), "walrus version 1", grant=_grant("odd"))
    assert stores.store.get_source_access(SCOPE, ["doc"]) == {"doc": _grant("even")}
    assert _seen(stores.store, EVEN) == ["walrus version 0"] and _seen(stores.store, ODD) == []


def test_unchanged_content_still_takes_the_new_grant(stores):
    """A replace skipped as unchanged (content hash, or replace_document's unchanged bytes)
    still sets the grant it was given.

    If this fails, check set_grant on the skip paths of replace_source and replace_prepared.
    """
    digest = "a" * 64
    _put(stores.store, "walrus version 0", content_hash=digest, grant=_grant("even"))
    skipped = _put(stores.store, "walrus version 0", content_hash=digest, grant=_grant("odd"))
    assert skipped.skipped
    assert _seen(stores.store, ODD) == ["walrus version 0"] and _seen(stores.store, EVEN) == []
    loader = ResourceDocumentLoader(loader=lambda uri: b"walrus version doc")
    rag = ragport.Rag(store=stores.store, embedder=EMB, scope=SCOPE)
    for who, expected_skip in (("even", False), ("odd", True)):
        done = rag.replace_document(
            uri="doc.txt", loader=loader, parser=parser_for, source_id="doc", grant=_grant(who)
        )
        assert done.skipped is expected_skip
        assert stores.store.get_source_access(SCOPE, ["doc"]) == {"doc": _grant(who)}


def test_a_reader_never_sees_new_content_under_the_old_grant(stores):
    """Readers loop while the writer replaces the text and flips the grant, CYCLES times:
    version i is granted to ``even`` or ``odd`` by its parity, and no reader ever sees a
    version its principal is not granted.

    If this fails, check that content and grant commit in one unit of work (replace_source's
    grant=): two transactions expose one or the other for a moment.
    """
    store = stores.store
    _put(store, "walrus version 0", grant=_grant("even"))
    done = threading.Event()
    leaks: list[tuple[str, str]] = []
    reads = {"even": 0, "odd": 0}
    errors: list[BaseException] = []

    def read(who: ragport.Authorization) -> None:
        parity = 0 if who is EVEN else 1
        try:
            while not done.is_set():
                for text in _seen(store, who):
                    if int(text.rsplit(" ", 1)[1]) % 2 != parity:
                        leaks.append((who.principal_id, text))
                reads[who.principal_id] += 1
        except BaseException as exc:  # reported below, never swallowed
            errors.append(exc)

    readers = [threading.Thread(target=read, args=(who,)) for who in (EVEN, ODD)]
    for thread in readers:
        thread.start()
    try:
        for i in range(1, CYCLES + 1):
            _put(store, f"walrus version {i}", grant=_grant("even" if i % 2 == 0 else "odd"))
    finally:
        done.set()
        for thread in readers:
            thread.join(timeout=120)
    assert not errors, errors
    assert not leaks, leaks[:5]
    assert reads["even"] > 0 and reads["odd"] > 0
    assert _seen(store, EVEN) == [f"walrus version {CYCLES}"] and _seen(store, ODD) == []
