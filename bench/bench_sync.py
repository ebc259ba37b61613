"""Knowledge sync throughput: a 2,000-file folder and a 2,000-file fake Drive.

- Folder bootstrap: 2,000 Markdown files (about 600 bytes each, 20 subfolders) synced with
  ``sync_knowledge`` into the in-memory store (``HashEmbedder(256)``, ``FolderConnector``
  pages of 200): files/s.
- Folder no-change incremental run: the same folder synced again with nothing changed,
  files older than the 2 s "racy" window (stat only) and, for reference, right after being
  written (every file hashed again): wall time and how many texts were embedded (target: 0
  and under 1 s).
- Fake-Drive bootstrap: 2,000 text files in 20 folders served by the fake Drive API of
  tests/support/fake_drive.py over loopback HTTP (``files.list`` pages of 100, one
  ``alt=media`` download per file): files/s, and a no-change ``changes.list`` run.

``--postgres`` repeats the folder figures on an embedded PostgreSQL server in a temporary
directory. Each figure is the median of ``--repeat`` runs (default 3) on fresh stores.

Run: .venv/bin/python bench/bench_sync.py [--repeat N] [--files N] [--postgres]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "support"))

from _results import figure, note_postgres, target, write_result  # noqa: E402

import ragport  # noqa: E402
from ragport.adapters.connectors import (  # noqa: E402
    DriveOptions,
    FolderConnector,
    GoogleDriveConnector,
    HttpOptions,
)
from ragport.adapters.embedders import HashEmbedder  # noqa: E402
from ragport.adapters.memory import (  # noqa: E402
    InMemoryCheckpointStore,
    InMemoryStatusStore,
    InMemoryStore,
)
from ragport.adapters.parsers import parser_for  # noqa: E402

WORDS = [
    "policy",
    "leave",
    "approval",
    "manager",
    "request",
    "days",
    "notice",
    "records",
    "travel",
    "expense",
    "receipt",
]
SCOPE = ragport.Scope("bench", "sync", "corpus")


class CountingEmbedder:
    def __init__(self) -> None:
        self.inner = HashEmbedder(256)
        self.texts = 0
        self.id, self.dimensions = self.inner.id, self.inner.dimensions

    def embed(self, texts):
        self.texts += len(texts)
        return self.inner.embed(texts)


def _text(i: int) -> str:
    words = " ".join(WORDS[(i * 7 + j) % len(WORDS)] for j in range(80))
    return f"# Document {i}\n\n{words} item{i}.\n"


def make_folder(base: Path, n: int, *, age_s: float) -> Path:
    root = base / "folder"
    old = time.time() - age_s
    for i in range(n):
        path = root / f"section-{i % 20:02d}" / f"doc-{i:05d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(_text(i))
        if age_s:
            os.utime(path, (old, old))
    return root


def memory_stores():
    return InMemoryStore(), InMemoryCheckpointStore(), InMemoryStatusStore()


def sync(connector, stores, embedder):
    store, checkpoints, status = stores
    return ragport.bootstrap.sync_knowledge(
        connector=connector,
        checkpoints=checkpoints,
        store=store,
        embedder=embedder,
        scope=SCOPE,
        status_store=status,
        parser=parser_for,
    )


def bench_folder(n: int, repeat: int, make_stores) -> dict[str, object]:
    boots, quiet, racy, embedded, state = [], [], [], [], 0
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as tmp:
            root = make_folder(Path(tmp), n, age_s=3600)
            stores = make_stores()
            connector = FolderConnector(root)
            started = time.perf_counter()
            result = sync(connector, stores, CountingEmbedder())
            boots.append(time.perf_counter() - started)
            assert result.upserted == n and result.exhausted, result
            state = len(stores[1].get(connector.id, SCOPE).cursor or "")
            embedder = CountingEmbedder()
            started = time.perf_counter()
            again = sync(connector, stores, embedder)
            quiet.append(time.perf_counter() - started)
            assert again.upserted == 0 and embedder.texts == 0, again
            embedded.append(embedder.texts)
        with tempfile.TemporaryDirectory() as tmp:
            root = make_folder(Path(tmp), n, age_s=0)
            stores = make_stores()
            connector = FolderConnector(root)
            sync(connector, stores, CountingEmbedder())
            embedder = CountingEmbedder()
            started = time.perf_counter()
            again = sync(connector, stores, embedder)
            racy.append(time.perf_counter() - started)
            assert again.upserted == 0 and embedder.texts == 0, again
    boot = statistics.median(boots)
    return {
        "bootstrap_s": boot,
        "files_per_s": n / boot,
        "no_change_s": statistics.median(quiet),
        "no_change_racy_s": statistics.median(racy),
        "embedded": max(embedded),
        "state_bytes": state,
    }


def bench_drive(n: int, repeat: int) -> dict[str, object]:
    from fake_drive import FakeDrive
    from fake_http import start, stop

    boots, quiet = [], []
    for _ in range(repeat):
        drive = FakeDrive()
        team = drive.folder("Team")
        folders = [drive.folder(f"Folder {k:02d}", parent=team) for k in range(20)]
        for i in range(n):
            drive.add(f"doc-{i:05d}.txt", parent=folders[i % 20], data=_text(i).encode())
        server = start(drive)
        try:
            connector = GoogleDriveConnector(
                token_provider=lambda: "token-1",
                resolve_access=lambda f: ragport.domain.Access(principal_ids=("alice",)),
                folder_id=team,
                base_url=server.url,
                http=HttpOptions(allow_loopback=True),
                options=DriveOptions(page_size=100),
            )
            stores = memory_stores()
            started = time.perf_counter()
            result = sync(connector, stores, CountingEmbedder())
            boots.append(time.perf_counter() - started)
            assert result.upserted == n and result.exhausted, result
            embedder = CountingEmbedder()
            started = time.perf_counter()
            again = sync(connector, stores, embedder)
            quiet.append(time.perf_counter() - started)
            assert again.upserted == 0 and embedder.texts == 0, again
            connector.close()
        finally:
            stop(server)
    boot = statistics.median(boots)
    return {"bootstrap_s": boot, "files_per_s": n / boot, "no_change_s": statistics.median(quiet)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--postgres", action="store_true")
    args = parser.parse_args()

    folder = bench_folder(args.files, args.repeat, memory_stores)
    print(f"folder, in memory, {args.files} files (median of {args.repeat}):")
    print(
        f"  bootstrap            {folder['bootstrap_s']:.2f} s  = {folder['files_per_s']:.0f} files/s"
    )
    print(
        f"  no-change run        {folder['no_change_s'] * 1000:.0f} ms, {folder['embedded']} texts embedded"
    )
    print(
        f"  no-change run, racy  {folder['no_change_racy_s'] * 1000:.0f} ms (every file re-hashed)"
    )
    print(f"  sync state           {folder['state_bytes'] / 1024:.0f} KiB")
    drive = bench_drive(args.files, args.repeat)
    print(f"fake Drive over loopback HTTP, in memory, {args.files} files:")
    print(
        f"  bootstrap            {drive['bootstrap_s']:.2f} s  = {drive['files_per_s']:.0f} files/s"
    )
    print(f"  no-change run        {drive['no_change_s'] * 1000:.0f} ms")
    n = f"{args.files:,}"
    figures = {
        "memory_files_per_s": figure(
            f"folder bootstrap of {n} files, in memory", "files/s", folder["files_per_s"]
        ),
        "memory_no_change_s": figure("no-change run, in memory", "s", folder["no_change_s"]),
        "memory_embedded": figure(
            "texts embedded by the no-change run, in memory", "texts", folder["embedded"]
        ),
        "drive_files_per_s": figure(
            f"fake-Drive bootstrap of {n} files", "files/s", drive["files_per_s"]
        ),
        "drive_no_change_s": figure("fake-Drive no-change run", "s", drive["no_change_s"]),
    }
    targets = [target("memory_no_change_s", "<=", 1.0), target("memory_embedded", "<=", 0)]
    if args.postgres:
        import shutil

        from ragport.adapters.postgres import (
            PostgresCheckpointStore,
            PostgresStatusStore,
            PostgresStore,
            embedded_server,
        )

        base = Path(tempfile.mkdtemp(prefix="ragport-bench-sync-"))
        try:
            with embedded_server(base / "data", keep_running=False) as url:
                note_postgres(url)
                counter = iter(range(1000))

                def pg_stores():
                    schema = f"bench_sync_{next(counter)}"
                    store = PostgresStore(url, schema=schema, create=True)
                    return (
                        store,
                        PostgresCheckpointStore(store.engine, schema=schema),
                        PostgresStatusStore(store.engine, schema=schema),
                    )

                pg = bench_folder(args.files, args.repeat, pg_stores)
        finally:
            shutil.rmtree(base, ignore_errors=True)
        print(f"folder, PostgreSQL (embedded), {args.files} files:")
        print(
            f"  bootstrap            {pg['bootstrap_s']:.2f} s  = {pg['files_per_s']:.0f} files/s"
        )
        print(
            f"  no-change run        {pg['no_change_s'] * 1000:.0f} ms, {pg['embedded']} texts embedded"
        )
        print(f"  no-change run, racy  {pg['no_change_racy_s'] * 1000:.0f} ms")
        figures.update(
            pg_files_per_s=figure(
                f"folder bootstrap of {n} files, PostgreSQL", "files/s", pg["files_per_s"]
            ),
            pg_no_change_s=figure("no-change run, PostgreSQL", "s", pg["no_change_s"]),
            pg_embedded=figure(
                "texts embedded by the no-change run, PostgreSQL", "texts", pg["embedded"]
            ),
        )
        targets += [target("pg_no_change_s", "<=", 1.0), target("pg_embedded", "<=", 0)]
    write_result("sync", figures=figures, targets=targets)


if __name__ == "__main__":
    main()
