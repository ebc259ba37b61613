"""The engine store at the sizes users bring: a folder of a thousand files, one file at the
parse cap and one a byte over it, synced by two workers at once into one SQLite corpus.

``SqliteStore`` is ``BackendStore`` over the narrow port (docs/adapters.md), so this drives
the generation engine, SQLite's one-writer lock and the sync checkpoint race together.
"""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

import pytest
from ragport_sqlite import SqliteStore

import ragport
from ragport.adapters.connectors import FolderConnector
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.memory import InMemoryCheckpointStore, InMemoryStatusStore
from ragport.adapters.parsers import parser_for
from ragport.domain.limits import DEFAULT_LIMITS

SCOPE = ragport.Scope("acme", "kb", "big")
SMALL = 1_000
CAP = DEFAULT_LIMITS.parse_bytes  # 1 MiB: what a file may hold


def _big_text(size: int) -> str:
    line = "The quarterly report lists revenue, costs and the forecast for next year.\n"
    text = line * (size // len(line) + 1)
    return text[:size]


@pytest.mark.slow  # about 40-50 s: a thousand files through two workers (make test-slow runs it)
def test_two_workers_sync_a_thousand_files_and_one_at_the_cap(tmp_path: Path) -> None:
    """Every small file lands once, the file at the cap is indexed whole (its chunks tile all
    of its text), the one a byte over is refused by name without stopping the folder, and
    the two workers' results add up to one pass.

    If this fails, check BackendStore's unit of work under SQLite's write lock and
    sync_knowledge's checkpoint race."""
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(SMALL):
        (root / f"note-{i:04d}.md").write_text(f"# Note {i}\n\nItem {i} is filed under t{i % 7}.\n")
    (root / "at-cap.txt").write_text(_big_text(CAP), encoding="utf-8")
    (root / "over-cap.txt").write_text(_big_text(CAP + 1), encoding="utf-8")
    store = SqliteStore(tmp_path / "kb.sqlite3")
    checkpoints, status = InMemoryCheckpointStore(), InMemoryStatusStore()
    barrier = threading.Barrier(2)
    results: dict[str, object] = {}

    def worker(name: str) -> None:
        barrier.wait(10)
        try:
            for _ in range(50):
                r = ragport.bootstrap.sync_knowledge(
                    connector=FolderConnector(root, page_size=100),
                    checkpoints=checkpoints,
                    store=store,
                    embedder=HashEmbedder(),
                    scope=SCOPE,
                    status_store=status,
                    parser=parser_for,
                )
                if r.exhausted and not r.lost:
                    break
            results[name] = r
        except Exception as exc:  # reported by the assertion below
            results[name] = exc

    threads = [threading.Thread(target=worker, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    assert all(isinstance(r, ragport.SyncResult) for r in results.values()), results

    sources: list[str] = []
    after = None
    while page := store.list_source_ids(SCOPE, after=after, limit=1_000):
        sources += page
        after = page[-1]
    assert len(sources) == SMALL + 1 and len(set(sources)) == len(sources)
    assert not any("over-cap" in s for s in sources)
    big = next(s for s in sources if "at-cap" in s)
    chunks = store.get_by_source(SCOPE, big)
    spans = sorted((c.start, c.end) for c in chunks)
    assert spans[0][0] == 0 and spans[-1][1] == CAP  # nothing truncated
    assert all(a[1] >= b[0] for a, b in itertools.pairwise(spans))  # no gap
    failed = [f for r in results.values() for f in r.failures]  # type: ignore[attr-defined]
    # the refused file stays failed: a worker that passes over it again reports it again
    assert failed and {("over-cap" in f.source_id, f.reason) for f in failed} == {
        (True, "too_large")
    }
    note = next(s for s in sources if "note-0007" in s)
    assert [c.text for c in store.get_by_source(SCOPE, note)] == [
        "# Note 7\n\nItem 7 is filed under t0."
    ]
