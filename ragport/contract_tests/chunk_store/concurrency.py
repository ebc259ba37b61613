"""``ChunkStoreConcurrencyContract``: writers are serialized; readers see whole versions."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from ragport.contract_tests._support import hash_vector, publish_sources
from ragport.contract_tests.chunk_store._base import _ChunkStoreContractBase
from ragport.contract_tests.chunk_store._helpers import (
    QUERY_ALL,
    READER_TIMEOUT_S,
    SCOPE,
    WRITER_TIMEOUT_S,
    _ids,
    _require_transactions,
)
from ragport.ports.store import ChunkStore

__all__ = ["ChunkStoreConcurrencyContract"]


class ChunkStoreConcurrencyContract(_ChunkStoreContractBase):
    """Concurrent writers on one scope are serialized; readers see whole versions."""

    def test_concurrent_writers_leave_one_complete_version(self, store: ChunkStore) -> None:
        """Checks ``ChunkStore.unit_of_work``, ``ChunkStore.get_by_source``, ``ChunkStore.query``,
        ``ChunkStore.current_generation``: two threads making 50 replacements each on one scope end
        with one whole version per source; a concurrent reader never sees two versions of a source
        mixed, ``query`` shows no id twice, and (with ``generations``) the pointer is 100.

        If this fails, check that units of work on the same scope are serialized (stage, retire,
        add and publish must not interleave) and that reads see one committed pointer.
        """
        _require_transactions(store)
        rounds = 50

        def texts(owner: str, source_id: str, k: int) -> list[str]:
            return [
                f"{source_id} by {owner} v{k} part {j}" for j in range(1 + (k + len(owner)) % 3)
            ]

        errors: list[BaseException] = []
        torn: list[list[str]] = []
        done = threading.Event()

        def writer(owner: str) -> None:
            try:
                for k in range(rounds):
                    publish_sources(
                        store,
                        SCOPE,
                        {
                            f"own-{owner}": texts(owner, f"own-{owner}", k),
                            "shared": texts(owner, "shared", k),
                        },
                    )
            except BaseException as exc:
                errors.append(exc)

        def reader() -> None:
            try:
                while not done.is_set():
                    seen = [r.text for r in store.get_by_source(SCOPE, "shared")]
                    if seen and not _one_version(seen):
                        torn.append(seen)
            except BaseException as exc:
                errors.append(exc)

        threads = [
            threading.Thread(target=writer, args=(name,), daemon=True) for name in ("left", "right")
        ]
        watcher = threading.Thread(target=reader, daemon=True)
        watcher.start()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WRITER_TIMEOUT_S)
        done.set()
        watcher.join(READER_TIMEOUT_S)
        assert not any(t.is_alive() for t in [*threads, watcher]), "writers or reader deadlocked"
        assert not errors, f"a thread raised: {errors[0]!r}"
        assert not torn, f"a reader saw a mixed version of 'shared': {torn[0]}"

        for owner in ("left", "right"):
            expected = texts(owner, f"own-{owner}", rounds - 1)
            assert [r.text for r in store.get_by_source(SCOPE, f"own-{owner}")] == expected
        shared = [r.text for r in store.get_by_source(SCOPE, "shared")]
        assert shared in (texts("left", "shared", rounds - 1), texts("right", "shared", rounds - 1))
        results = store.query(SCOPE, hash_vector("shared"), limit=QUERY_ALL)
        ids = _ids(results)
        assert len(ids) == len(set(ids)), "duplicate ids are visible"
        assert len(ids) == sum(
            len(store.get_by_source(SCOPE, s)) for s in ("own-left", "own-right", "shared")
        )
        if store.capabilities.generations:
            assert store.current_generation(SCOPE) == 2 * rounds


def _one_version(texts: Sequence[str]) -> bool:
    """True when ``texts`` are parts 0..n-1 of a single (owner, version) of a source."""
    tags = {t.rsplit(" part ", 1)[0] for t in texts}
    if len(tags) != 1:
        return False
    owner = next(iter(tags)).split(" by ", 1)[1].split(" v", 1)
    expected = 1 + (int(owner[1]) + len(owner[0])) % 3
    return [t.rsplit(" part ", 1)[1] for t in texts] == [str(j) for j in range(expected)]
