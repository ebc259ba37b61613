"""One system's worker process for ``bench_peers.py``: ``python bench/peers/worker.py NAME``.

Reads one JSON command a line on stdin, answers one JSON line on the stdout it was started
with (the library's own prints go to stderr). Every timing is taken here, around the
system's own call, so the driver's IPC is not in it. ``NAME`` is ``ragport`` (run it with
ragport's interpreter) or ``langchain``, ``llamaindex``, ``haystack`` (the peers' venv).
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import Dataset, VectorTable, receive, send

MODULES = {
    "ragport": "sys_ragport",
    "langchain": "sys_langchain",
    "llamaindex": "sys_llamaindex",
    "haystack": "sys_haystack",
}


def classify(answer: list[tuple[str, int]], old: int, new: int) -> str:
    """A reader's answer about a source being replaced (version 1 -> 2): ``ok`` when it is
    all of one version, ``mixed`` when it holds both, ``empty`` when nothing, ``partial``
    when one version's chunks are missing."""
    versions = {v for _k, v in answer}
    if not answer:
        return "empty"
    if len(versions) > 1:
        return "mixed"
    expected = old if versions == {1} else new
    return "ok" if len({k for k, _v in answer}) == expected else "partial"


class Worker:
    def __init__(self, name: str):
        self.name = name
        self.system: Any = None
        self.data: Dataset | None = None

    # -- commands -----------------------------------------------------------------------------
    def setup(self, url: str, folder: str, sources: int) -> dict[str, Any]:
        self.data = Dataset(sources)
        table = VectorTable.load(Path(folder), "corpus")
        module = importlib.import_module(MODULES[self.name])
        self.system = module.System(url, table)
        return {"versions": self.system.versions()}

    def ingest(self, sources: list[str]) -> dict[str, Any]:
        assert self.data is not None
        chunks = [c for s in sources for c in self.data.chunks(s, 1)]
        t0 = time.perf_counter()
        self.system.ingest(sources, chunks)
        return {"seconds": time.perf_counter() - t0, "chunks": len(chunks)}

    def grants(self) -> dict[str, Any]:
        assert self.data is not None
        t0 = time.perf_counter()
        self.system.grants({s: self.data.group[s] for s in self.data.ids})
        return {"seconds": time.perf_counter() - t0}

    def update(self, source: str) -> dict[str, Any]:
        assert self.data is not None
        chunks = self.data.chunks(source, 2)
        t0 = time.perf_counter()
        self.system.update(source, chunks)
        return {"seconds": time.perf_counter() - t0}

    def update_with_reader(self, source: str) -> dict[str, Any]:
        """Workload 3: a reader thread asks about ``source`` as fast as it can while it is
        replaced; each answer is classified (``classify``)."""
        assert self.data is not None
        chunks = self.data.chunks(source, 2)
        marker = self.data.marker[source]
        stop = threading.Event()
        counts = {"ok": 0, "mixed": 0, "empty": 0, "partial": 0, "error": 0}
        started = threading.Event()

        def read() -> None:
            while not stop.is_set():
                try:
                    answer = self.system.read_source(source, marker)
                    counts[classify(answer, 10, 8)] += 1
                except Exception:  # a reader error counts, and the reader goes on
                    counts["error"] += 1
                started.set()

        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        started.wait(30)
        t0 = time.perf_counter()
        self.system.update(source, chunks)
        seconds = time.perf_counter() - t0
        stop.set()
        thread.join()
        return {"seconds": seconds, **counts}

    def read_sources(self, sources: list[str], old: int, new: int) -> dict[str, Any]:
        """One reader answer per source, classified (the control of workload 3 and the
        after-state checks of workloads 2 and 4): ``{source: [class, keys]}``."""
        assert self.data is not None
        out = {}
        for s in sources:
            answer = self.system.read_source(s, self.data.marker[s])
            out[s] = [classify(answer, old, new), sorted({k for k, _v in answer})]
        return out

    def delete(self, source: str) -> dict[str, Any]:
        t0 = time.perf_counter()
        self.system.delete(source)
        return {"seconds": time.perf_counter() - t0}

    def query(self, kind: str, queries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for q in queries:
            t0 = time.perf_counter()
            keys = self.system.query(kind, q)
            out.append({"seconds": time.perf_counter() - t0, "keys": keys})
        return out

    def stored_vectors(self, keys: list[str]) -> dict[str, list[float]]:
        return self.system.stored_vectors(keys)

    def cranfield(self, folder: str, docs: list[dict[str, str]], queries: list[str]) -> Any:
        table = VectorTable.load(Path(folder), "cranfield")
        t0 = time.perf_counter()
        self.system.cranfield_index(docs, table)
        indexed = time.perf_counter() - t0
        ranked = []
        for q in queries:
            t1 = time.perf_counter()
            ranked.append([self.system.cranfield_query(q), time.perf_counter() - t1])
        return {"index_seconds": indexed, "ranked": ranked}

    def close(self) -> dict[str, Any]:
        if self.system is not None:
            self.system.close()
        return {}


def main() -> int:
    name = sys.argv[1]
    # The protocol owns the original stdout; anything a library prints goes to stderr.
    wire = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    worker = Worker(name)
    while True:
        try:
            command = receive(sys.stdin)
        except EOFError:
            return 0
        op = command.pop("op")
        try:
            result = getattr(worker, op)(**command)
            send(wire, {"ok": True, "result": result})
        except Exception as exc:
            traceback.print_exc()
            send(wire, {"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        if op == "close":
            return 0


if __name__ == "__main__":
    raise SystemExit(main())
