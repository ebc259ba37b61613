"""Fault tests with real processes against PostgresStore.

Children are fresh interpreters (``python -c``) that get the URL, schema and scope through the
environment and talk to the test over stdin/stdout, one JSON object per line. Every chunk text
carries its version marker and the version's chunk count (``"proc-A v7 n12 chunk 3"``), so an
observer can tell from the rows alone whether it sees one complete version or a mix.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator

import pytest
from child_process import Child, fault_env
from sqlalchemy import text

import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStore

SCOPE = ragport.Scope("tenant-faults", "kb", "docs")
EMB = HashEmbedder(dimensions=32)
SOURCE = "doc"

PRELUDE = """
import json, os, sys, time
from contextlib import contextmanager
import ragport
from ragport.adapters.embedders import HashEmbedder
from ragport.adapters.postgres import PostgresStore

SCOPE = ragport.Scope(*json.loads(os.environ["FAULT_SCOPE"]))
SOURCE = os.environ["FAULT_SOURCE"]
EMB = HashEmbedder(dimensions=32)
store = PostgresStore(os.environ["FAULT_URL"], schema=os.environ["FAULT_SCHEMA"])

def say(obj):
    print(json.dumps(obj), flush=True)

def chunks(marker, n):
    return [ragport.Chunk.of(SOURCE, i, f"{marker} n{n} chunk {i}") for i in range(n)]

class Wrapped:
    '''Delegates to the store; `hook(uow)` may patch the unit of work before replace uses it.'''
    def __init__(self, inner, hook):
        self._inner, self._hook = inner, hook
    def __getattr__(self, name):
        return getattr(self._inner, name)
    @contextmanager
    def unit_of_work(self, scope):
        with self._inner.unit_of_work(scope) as uow:
            self._hook(uow)
            yield uow
"""

# Killed while holding an open transaction: everything written, nothing committed.
KILLED_WRITER = (
    PRELUDE
    + """
mode = sys.argv[1]
new = chunks("v2", 5)
if mode == "before-commit":
    def hook(uow):
        def commit():
            say({"ready": uow.generations.counter(), "pointer": uow.generations.current()})
            time.sleep(120)
        uow.commit = commit
    ragport.replace_source(
        source_id=SOURCE, chunks=new, embedder=EMB, store=Wrapped(store, hook), scope=SCOPE
    )
else:  # "after-add": the steps of replace_source by hand, stopping before publish
    vectors = EMB.embed([c.text for c in new])
    with store.unit_of_work(SCOPE) as uow:
        g = uow.generations.stage()
        uow.records.retire_source(SOURCE, generation=g)
        uow.records.add(
            [
                ragport.Record(
                    id=c.id, scope=SCOPE, source_id=SOURCE, kind="chunk", text=c.text,
                    embedder_id=EMB.id, dimensions=EMB.dimensions, generation=g,
                )
                for c in new
            ],
            vectors,
        )
        say({"ready": g, "pointer": uow.generations.current()})
        time.sleep(120)
say({"error": "not killed"})
"""
)

# Replaces SOURCE once per (version, n) in argv[2] after a "go" line on stdin.
WRITER = (
    PRELUDE
    + """
name = sys.argv[1]
versions = json.loads(sys.argv[2])
say({"ready": True})
sys.stdin.readline()
results = []
for version, n in versions:
    marker = f"{name} v{version}"
    try:
        r = ragport.replace_source(
            source_id=SOURCE, chunks=chunks(marker, n), embedder=EMB, store=store, scope=SCOPE
        )
        results.append({"marker": marker, "n": n, "generation": r.generation, "error": None})
    except ragport.RagportError as exc:
        results.append({"marker": marker, "n": n, "generation": None, "error": repr(exc)})
say({"results": results})
"""
)

# Polls get_by_source and retrieve_context until argv[1] exists; reports what it saw.
READER = (
    PRELUDE
    + """
stop = sys.argv[1]

def marker(text):
    return text.rsplit(" chunk ", 1)[0]

seen = {}
polls = 0
REQUEST = ragport.RetrievalRequest(top_k=32, query_candidates=64)
say({"ready": True})
while True:
    done = os.path.exists(stop)
    rows = store.get_by_source(SCOPE, SOURCE)
    key = ("get", sorted({marker(r.text) for r in rows}), len(rows), len({r.id for r in rows}))
    seen[json.dumps(key)] = seen.get(json.dumps(key), 0) + 1
    hits = ragport.retrieve_context(
        "chunk", embedder=EMB, store=store, scope=SCOPE, request=REQUEST
    ).hits
    key = ("retrieve", sorted({marker(h.text) for h in hits}), len(hits), len({h.id for h in hits}))
    seen[json.dumps(key)] = seen.get(json.dumps(key), 0) + 1
    polls += 1
    if done:
        break
say({"polls": polls, "seen": [[json.loads(k), v] for k, v in seen.items()]})
"""
)

# A first write of this process: pauses between retiring and adding until "go" on stdin.
PAUSED_FIRST_WRITER = (
    PRELUDE
    + """
def hook(uow):
    add = uow.records.add
    def paused_add(records, vectors):
        say({"ready": True})
        sys.stdin.readline()
        return add(records, vectors)
    uow.records.add = paused_add
try:
    r = ragport.replace_source(
        source_id=SOURCE, chunks=chunks("first", 3), embedder=EMB,
        store=Wrapped(store, hook), scope=SCOPE,
    )
    say({"generation": r.generation, "error": None})
except ragport.RagportError as exc:
    say({"generation": None, "error": repr(exc)})
"""
)


@pytest.fixture
def spawn(pg_url, pg_schema, tmp_path) -> Iterator:
    children: list[Child] = []

    def start(
        code: str, *args: str, app: str = "ragport-fault-child", scope: ragport.Scope = SCOPE
    ) -> Child:
        env = fault_env(pg_url, app=app, schema=pg_schema, scope=scope, source=SOURCE)
        child = Child(code, list(args), env, tmp_path / f"child-{len(children)}.log")
        children.append(child)
        return child

    yield start
    for child in children:
        child.stop()


@pytest.fixture
def store(pg_engine, pg_schema) -> PostgresStore:
    return PostgresStore(pg_engine, schema=pg_schema, create=True)


def _chunks(marker: str, n: int) -> list[ragport.Chunk]:
    return [ragport.Chunk.of(SOURCE, i, f"{marker} n{n} chunk {i}") for i in range(n)]


def _marker(chunk_text: str) -> str:
    return chunk_text.rsplit(" chunk ", 1)[0]


def _declared_count(marker: str) -> int:
    return int(marker.rsplit(" n", 1)[1])


def _replace(store: PostgresStore, marker: str, n: int) -> ragport.ReplaceResult:
    return ragport.application.replace_source(
        source_id=SOURCE, chunks=_chunks(marker, n), embedder=EMB, store=store, scope=SCOPE
    )


def _sql(engine, sql: str, **params):
    with engine.connect() as conn:
        return conn.execute(text(sql), params).all()


def _scope_row(engine, schema: str) -> tuple[int, int, int]:
    (row,) = _sql(
        engine,
        f'SELECT counter, pointer, floor FROM "{schema}".scopes '
        "WHERE tenant_id = :t AND resource_id = :r AND corpus_id = :c",
        t=SCOPE.tenant_id,
        r=SCOPE.resource_id,
        c=SCOPE.corpus_id,
    )
    return (row.counter, row.pointer, row.floor)


def _source_rows(engine, schema: str) -> list:
    return _sql(
        engine,
        f'SELECT id, text, generation, retired_generation FROM "{schema}".records '
        "WHERE tenant_id = :t AND resource_id = :r AND corpus_id = :c AND source_id = :s",
        t=SCOPE.tenant_id,
        r=SCOPE.resource_id,
        c=SCOPE.corpus_id,
        s=SOURCE,
    )


def _wait_for_backend_exit(engine, app: str, timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _sql(engine, "SELECT pid FROM pg_stat_activity WHERE application_name = :a", a=app):
            return
        time.sleep(0.05)
    raise AssertionError(f"the killed client's backend ({app}) is still alive after {timeout}s")


def _assert_one_complete_version(store: PostgresStore) -> str:
    rows = store.get_by_source(SCOPE, SOURCE)
    markers = {_marker(r.text) for r in rows}
    assert len(markers) == 1, f"rows of several versions are visible: {sorted(markers)}"
    (marker,) = markers
    n = _declared_count(marker)
    assert len(rows) == n, f"{marker}: {len(rows)} rows visible, the version has {n}"
    assert sorted(r.id for r in rows) == [f"{SOURCE}#{i + 1:04d}" for i in range(n)]
    return marker


@pytest.mark.parametrize("kill_point", ["before-commit", "after-add"])
def test_sigkilled_writer_leaves_previous_version_and_no_orphans(
    store, pg_engine, pg_schema, spawn, kill_point
):
    """SIGKILL inside the replace transaction keeps v1 intact. If this fails, check PostgresBackend.write and ScopeTransaction."""
    v1 = _replace(store, "v1", 3)
    assert v1.generation == 1
    v1_rows = store.get_by_source(SCOPE, SOURCE)
    v1_view = [(r.id, r.text) for r in v1_rows]
    scope_before = _scope_row(pg_engine, pg_schema)

    app = f"kill-{kill_point}-{pg_schema}"
    child = spawn(KILLED_WRITER, kill_point, app=app)
    ready = child.expect()
    assert ready.get("ready") == 2, f"child did not stage generation 2: {ready}"
    # While the child holds its open transaction, readers still see v1 and do not wait.
    assert [(r.id, r.text) for r in store.get_by_source(SCOPE, SOURCE)] == v1_view
    os.kill(child.proc.pid, signal.SIGKILL)
    assert child.proc.wait(10) == -signal.SIGKILL
    _wait_for_backend_exit(pg_engine, app)

    assert [(r.id, r.text) for r in store.get_by_source(SCOPE, SOURCE)] == v1_view
    hits = ragport.application.retrieve_context(
        "chunk", embedder=EMB, store=store, scope=SCOPE, request=ragport.RetrievalRequest(top_k=10)
    ).hits
    assert sorted(h.text for h in hits) == sorted(t for _, t in v1_view)
    rows = _source_rows(pg_engine, pg_schema)
    assert len(rows) == len(v1_rows), "no orphan rows of the killed write"
    assert {(r.generation, r.retired_generation) for r in rows} == {(1, None)}
    assert _scope_row(pg_engine, pg_schema) == scope_before, "counter/pointer unchanged"
    assert store.current_generation(SCOPE) == 1
    # The scope lock died with the backend: the next writer is not blocked.
    v3 = _replace(store, "v3", 2)
    assert v3.generation == 2
    assert _assert_one_complete_version(store) == "v3 n2"


@pytest.mark.slow
def test_two_processes_replacing_one_source_end_with_one_complete_version(
    store, pg_engine, pg_schema, spawn
):
    """Two writers x 20 replaces: one complete version, pointer = 41. If this fails, check statements.lock_scope (PostgresBackend.write)."""
    _replace(store, "init v0", 3)
    # 40 versions with 40 distinct chunk counts (7 is a generator mod 41).
    plans = {
        name: [[v, (k * 7) % 41 + 1] for v, k in zip(range(1, 21), ks, strict=True)]
        for name, ks in (("proc-A", range(0, 20)), ("proc-B", range(20, 40)))
    }
    children = {name: spawn(WRITER, name, json.dumps(plan)) for name, plan in plans.items()}
    for child in children.values():
        assert child.expect() == {"ready": True}
    for child in children.values():
        child.send()
    results = [r for child in children.values() for r in child.expect(timeout=60)["results"]]

    ok = [r for r in results if r["error"] is None]
    final = _assert_one_complete_version(store)
    pointer = store.current_generation(SCOPE)
    assert pointer == len(ok) + 1, "every successful replace advanced the pointer once"
    assert sorted(r["generation"] for r in ok) == list(range(2, 2 + len(ok))), (
        "each replace got its own generation: writers were serialized"
    )
    last = max(ok, key=lambda r: r["generation"])
    assert final == f"{last['marker']} n{last['n']}", "the visible version is the last committed"
    live = [r for r in _source_rows(pg_engine, pg_schema) if r.retired_generation is None]
    assert len(live) == last["n"], "no live rows left over from other versions"
    assert [r for r in results if r["error"] is not None] == [], "no replace failed"


@pytest.mark.slow
def test_reader_never_sees_two_versions_or_a_partial_one(store, spawn, tmp_path):
    """A polling reader sees whole single versions during 30 replaces. If this fails, check store.py get_by_source/query."""
    _replace(store, "init v0", 3)
    stop = tmp_path / "stop-reader"
    reader = spawn(READER, str(stop))
    assert reader.expect() == {"ready": True}
    plan = [[v, (v * 7) % 31 + 1] for v in range(1, 31)]  # 30 distinct counts in 1..31
    writer = spawn(WRITER, "writer", json.dumps(plan))
    assert writer.expect() == {"ready": True}
    writer.send()
    results = writer.expect(timeout=60)["results"]
    stop.touch()
    report = reader.expect(timeout=30)

    assert [r for r in results if r["error"] is not None] == []
    bad = []
    versions_seen = set()
    for (kind, markers, count, unique), times in report["seen"]:
        if len(markers) != 1:
            bad.append((kind, markers, count, times))
            continue
        versions_seen.add(markers[0])
        if count != _declared_count(markers[0]) or unique != count:
            bad.append((kind, markers, count, times))
    assert bad == [], f"mixed or partial versions observed: {bad}"
    assert report["polls"] >= 10
    assert len(versions_seen) >= 3, f"the reader overlapped too few versions: {versions_seen}"
    assert _assert_one_complete_version(store) == f"writer v30 n{plan[-1][1]}"


def test_first_writes_of_two_fresh_processes_in_different_scopes_both_commit(store, spawn):
    """Two new processes' first writes (other scopes) both commit. If this fails, check indexes.py VectorIndexes.ensure."""
    _replace(store, "init v0", 1)  # the HNSW index for 32 dimensions already exists
    scopes = [ragport.Scope("tenant-faults", "kb", f"other-{i}") for i in range(2)]
    # Both children retire (taking their row locks on records), then both add at once.
    children = [spawn(PAUSED_FIRST_WRITER, scope=scope) for scope in scopes]
    for child in children:
        assert child.expect() == {"ready": True}
    for child in children:
        child.send()
    outcomes = [child.expect(timeout=30) for child in children]
    assert outcomes == [{"generation": 1, "error": None}] * 2
    for scope in scopes:
        assert len(store.get_by_source(scope, SOURCE)) == 3
