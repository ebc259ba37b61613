"""Where ragport's time goes in the peer benchmark's workloads (issue 45): the statements each
``retrieve_context`` / ``delete_source`` of ``bench_peers.py`` sends, their time, and
``EXPLAIN (ANALYZE, BUFFERS)`` of each, on the same 20,000-chunk corpus built the same way
(``bench/peers/sys_ragport.py``: ``replace_source`` per source, then the grants).

Run: ``.venv/bin/python bench/explain_peers.py DATA_DIR [--chunks 20000] [--out bench/explain]``.
The embedded server on DATA_DIR keeps the corpus (a second run reuses it; ``--stop`` stops the
server at the end). Writes ``OUT/<kind>.txt``: per statement its median time over the
queries, then the plan of the first query's statement.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "peers"))

import psycopg  # noqa: E402
from common import Dataset, VectorTable, feature_hash, log  # noqa: E402
from sqlalchemy import event  # noqa: E402

from ragport.adapters.postgres import (  # noqa: E402
    embedded_server,
    reads,
    stop_embedded_server,
)


@dataclass
class Call:
    """One statement as sent: its SQL (``%(name)s`` form, or PostgreSQL's ``$n`` form with a
    parameter list when ``numbered``: a ``psycopg.RawCursor``), whether it ran prepared (so
    with its generic plan: ``reads.fetch_generic``, or after ``lock_scope(generic=True)``),
    and its seconds (``piped``: from its send to its pipeline's end)."""

    sql: str
    params: Any
    generic: bool
    seconds: float
    numbered: bool = False
    piped: bool = False
    start: float = 0.0


class Capture:
    """The statements the store sends while ``on``: (SQL, parameters, whether it ran as a
    prepared generic plan, seconds). Reads go through ``reads.fetch`` (patched here, as its
    docstring invites); writes through SQLAlchemy (its cursor events); and every other
    statement sent on a psycopg cursor directly (``psycopg.Cursor.execute``, patched here:
    the delete's scope lock and its one statement on a ``RawCursor`` in ``$n`` form, the
    retirement's steps), from any thread. A statement sent inside a psycopg pipeline is timed
    from its send to the pipeline's end (its results are read there): the statements of one
    pipeline overlap."""

    def __init__(self, engine: Any):
        self.on = False
        self.calls: list[Call] = []
        self._local = threading.local()  # per thread: inside fetch / SQLAlchemy, its start
        self._inner = reads.fetch
        reads.fetch = self._fetch
        self._execute = psycopg.Cursor.execute
        self._pipeline = psycopg.Connection.pipeline
        capture = self

        def execute(cur: Any, query: Any, params: Any = None, **kw: Any) -> Any:
            return capture._direct(cur, query, params, kw)

        @contextmanager
        def pipeline(conn: Any) -> Iterator[Any]:
            with capture._pipeline(conn) as p:
                yield p
            capture._piped_end(conn)

        psycopg.Cursor.execute = execute  # type: ignore[method-assign,assignment]
        psycopg.Connection.pipeline = pipeline  # type: ignore[method-assign,assignment]
        event.listen(engine, "before_cursor_execute", self._before)
        event.listen(engine, "after_cursor_execute", self._after)

    def _inside(self) -> int:
        return int(getattr(self._local, "inside", 0))

    def _fetch(
        self, conn: Any, sql: str, params: Any, *, prepare: bool | None = None, **kw: Any
    ) -> Any:
        t0 = time.perf_counter()
        self._local.inside = self._inside() + 1
        try:
            rows = self._inner(conn, sql, params, prepare=prepare, **kw)
        finally:
            self._local.inside -= 1
        if self.on:
            self.calls.append(
                Call(reads.pyformat(sql), dict(params), prepare is True, time.perf_counter() - t0)
            )
        return rows

    def _direct(self, cur: Any, query: Any, params: Any, kw: dict[str, Any]) -> Any:
        """``psycopg.Cursor.execute``, recorded when neither ``fetch`` nor SQLAlchemy sent it."""
        if not self.on or self._inside():
            return self._execute(cur, query, params, **kw)
        t0 = time.perf_counter()
        out = self._execute(cur, query, params, **kw)
        sql = query if isinstance(query, str) else bytes(query).decode()
        numbered = isinstance(cur, psycopg.RawCursor)
        args = list(params) if numbered and params is not None else params
        call = Call(sql, args, kw.get("prepare") is True, time.perf_counter() - t0, numbered)
        if cur.connection._pipeline is not None:  # results read at its end
            call.start = t0
            pending = getattr(self._local, "piped", [])
            self._local.piped = [*pending, (cur.connection, call)]
        self.calls.append(call)
        return out

    def _piped_end(self, conn: Any) -> None:
        end = time.perf_counter()
        pending = getattr(self._local, "piped", [])
        for c, call in pending:
            if c is conn:
                call.seconds, call.piped = end - call.start, True
        self._local.piped = [(c, call) for c, call in pending if c is not conn]

    def _before(self, conn: Any, cursor: Any, statement: str, params: Any, *_a: Any) -> None:
        self._local.inside = self._inside() + 1
        self._local.t0 = time.perf_counter()

    def _after(self, conn: Any, cursor: Any, statement: str, params: Any, *_a: Any) -> None:
        self._local.inside -= 1
        if self.on:
            self.calls.append(Call(statement, params, False, time.perf_counter() - self._local.t0))

    def clear(self) -> None:
        self.calls.clear()
        self._local.inside = 0
        self._local.piped = []


def label(call: Call) -> str:
    s = " ".join(call.sql.split())
    if "ranked AS" in s:
        name = "lexical leg (bm25_ctes)"
    elif s.startswith("WITH sc") and "record_vectors" in s:
        name = "vector leg"
    elif s.startswith("WITH sg AS") and "grants" in s:
        name = "delete_source (one statement)"
    elif s.startswith("INSERT INTO") and ".scopes AS x" in s and "set_config" in s:
        name = "scope lock (lock_scope, generic=True)"
    else:
        name = s[:100]
    return name + (" [pipelined]" if call.piped else "")


_NAMED = re.compile(r"%\((\w+)\)s")
_NOT_REPLAYED = ("SET TRANSA", "BEGIN", "START", "COMMIT", "ROLLBACK", "END")


def _numbered(call: Call) -> tuple[str, list[Any]]:
    """``call`` in PostgreSQL's ``$n`` form and its parameters in number order."""
    if call.numbered:
        return call.sql, list(call.params or [])
    names: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    sql = _NAMED.sub(number, call.sql).replace("%%", "%")
    return sql, [call.params[n] for n in names]


def _explain_generic(cur: Any, call: Call) -> list[str]:
    """EXPLAIN of ``call`` as the store runs it: PREPAREd, its generic plan forced."""
    sql, args = _numbered(call)
    cur.execute("SET LOCAL plan_cache_mode = force_generic_plan")
    cur.execute("PREPARE ragport_explained AS " + sql)
    client = psycopg.ClientCursor(cur.connection)
    marks = ", ".join(["%s"] * len(args))
    client.execute(f"EXPLAIN (ANALYZE, BUFFERS, SETTINGS) EXECUTE ragport_explained({marks})", args)
    rows = [r[0] for r in client.fetchall()]
    cur.execute("DEALLOCATE ragport_explained")
    cur.execute("RESET plan_cache_mode")  # SET LOCAL: back to the transaction's own
    return rows


def _run(cur: Any, call: Call, prefix: str = "") -> list[Any]:
    """Run ``call`` (after ``prefix``) on ``cur``'s connection: its rows, if it has any."""
    with psycopg.RawCursor(cur.connection) if call.numbered else cur.connection.cursor() as c:
        c.execute(prefix + call.sql, call.params)
        return c.fetchall() if c.description is not None else []


def explain(engine: Any, calls: Sequence[Call]) -> list[str]:
    """Replays ``calls`` in one rolled-back transaction on one connection (session settings
    included; ``BEGIN``, ``COMMIT`` and a snapshot import left out) and EXPLAINs every
    statement that reads (a ``WITH`` writing in its CTEs included: it runs once, under
    EXPLAIN ANALYZE): ANALYZE, BUFFERS; a statement the store runs prepared, so with its
    generic plan, is EXPLAINed with that plan."""
    out: list[str] = []
    raw = engine.raw_connection()
    try:
        cur = raw.driver_connection.cursor()
        for call in calls:
            head = call.sql.lstrip()[:12].upper()
            if head.startswith(("WITH", "SELECT")) and "set_config" not in call.sql:
                if call.generic:
                    plan = _explain_generic(cur, call)
                else:
                    explained = _run(cur, call, "EXPLAIN (ANALYZE, BUFFERS, SETTINGS) ")
                    plan = [r[0] for r in explained]
                kind = "generic plan" if call.generic else "custom plan"
                out += [f"-- {label(call)} ({kind})", call.sql, "", *plan, ""]
            elif not head.startswith(_NOT_REPLAYED):  # the replay is one transaction already
                _run(cur, call)
        raw.driver_connection.rollback()
    finally:
        raw.close()
    return out


def profile(
    name: str,
    run: Callable[[Any], None],
    items: Sequence[Any],
    cap: Capture,
    engine: Any,
    restore: Callable[[], None] | None = None,
) -> list[str]:
    per: dict[str, list[float]] = {}
    totals = []
    first: list[Call] = []
    for i, item in enumerate(items):
        cap.clear()
        cap.on = True
        t0 = time.perf_counter()
        run(item)
        totals.append(time.perf_counter() - t0)
        cap.on = False
        if i == 0:
            first = list(cap.calls)
        for call in cap.calls:
            per.setdefault(label(call), []).append(call.seconds)
    n = len(items)
    lines = [
        f"# {name}: {n} calls, median {1000 * statistics.median(totals):.2f} ms per call",
        "",
        "statement | calls per call | median ms | total ms per call",
    ]
    for key, values in sorted(per.items(), key=lambda kv: -sum(kv[1])):
        lines.append(
            f"{key} | {len(values) / n:.1f} | {1000 * statistics.median(values):.2f} | "
            f"{1000 * sum(values) / n:.2f}"
        )
    if restore is not None:
        restore()  # the first call's rows back, so the replay has something to do
    return [*lines, "", *explain(engine, first)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--chunks", type=int, default=20000)
    parser.add_argument("--queries", type=int, default=40)
    parser.add_argument("--out", type=Path, default=HERE / "explain")
    parser.add_argument("--only", default="vector,filter,group_filter,hybrid,access,delete")
    parser.add_argument("--stop", action="store_true")
    args = parser.parse_args(argv)
    data = Dataset(args.chunks // 10)
    qs = data.queries(args.queries)
    texts = sorted(set(data.texts.values()) | {q["text"] for q in qs} | set(data.marker.values()))
    table = VectorTable(texts, feature_hash(texts))
    import sys_ragport

    with embedded_server(args.data_dir) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            built = conn.execute(
                "SELECT count(*) FROM pg_namespace WHERE nspname = 'ragport'"
            ).fetchone()
            n = 0
            if built and built[0]:
                row = conn.execute("SELECT count(*) FROM ragport.records").fetchone()
                n = int(row[0]) if row else 0
        system = sys_ragport.System(url, table)
        if n < args.chunks:
            log(f"building the corpus ({args.chunks:,} chunks, replace_source per source)")
            for i in range(0, len(data.ids), 100):
                sources = data.ids[i : i + 100]
                system.ingest(sources, [c for s in sources for c in data.chunks(s, 1)])
            system.grants({s: data.group[s] for s in data.ids})
        engine = system.store.engine
        cap = Capture(engine)
        args.out.mkdir(parents=True, exist_ok=True)
        for kind in args.only.split(","):
            if kind == "delete":
                victims = [s for s in data.ids[-40:] if s not in data.deletes][:10]

                def restore(victims: list[str] = victims) -> None:
                    for s in victims:  # an earlier run on this corpus deleted them
                        system.update(s, data.chunks(s, 1))

                restore()
                lines = profile("delete one source", system.delete, victims, cap, engine, restore)
            else:
                system.query(kind, qs[0])  # warm

                def run(q: dict[str, Any], kind: str = kind) -> None:
                    system.query(kind, q)

                lines = profile(f"{kind} top-10", run, qs, cap, engine)
            (args.out / f"{kind}.txt").write_text("\n".join(lines) + "\n")
            log(f"{kind}: {lines[0]}")
        system.close()
    if args.stop:
        stop_embedded_server(args.data_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
