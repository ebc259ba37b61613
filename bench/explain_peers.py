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
import time
from collections.abc import Callable, Sequence
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


class Capture:
    """The statements the store sends while ``on``: (SQL, parameters, whether it ran as a
    prepared generic plan, seconds). Reads go through ``reads.fetch`` (patched here, as its
    docstring invites); writes through SQLAlchemy (its cursor events)."""

    def __init__(self, engine: Any):
        self.on = False
        self.calls: list[tuple[str, Any, bool, float]] = []
        self._t0 = 0.0
        self._inner = reads.fetch
        reads.fetch = self._fetch
        event.listen(engine, "before_cursor_execute", self._before)
        event.listen(engine, "after_cursor_execute", self._after)

    def _fetch(
        self, conn: Any, sql: str, params: Any, *, prepare: bool | None = None, **kw: Any
    ) -> Any:
        t0 = time.perf_counter()
        rows = self._inner(conn, sql, params, prepare=prepare, **kw)
        if self.on:
            self.calls.append(
                (reads.pyformat(sql), dict(params), prepare is True, time.perf_counter() - t0)
            )
        return rows

    def _before(self, conn: Any, cursor: Any, statement: str, params: Any, *_a: Any) -> None:
        self._t0 = time.perf_counter()

    def _after(self, conn: Any, cursor: Any, statement: str, params: Any, *_a: Any) -> None:
        if self.on:
            self.calls.append((statement, params, False, time.perf_counter() - self._t0))


def label(statement: str) -> str:
    s = " ".join(statement.split())
    if "ranked AS" in s:
        return "lexical leg (bm25_ctes)"
    if s.startswith("WITH sc") and "record_vectors" in s:
        return "vector leg"
    return s[:100]


_NAMED = re.compile(r"%\((\w+)\)s")


def _explain_generic(cur: Any, statement: str, params: Any) -> list[str]:
    """EXPLAIN of ``statement`` as the store runs it: PREPAREd, its generic plan forced."""
    names: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in names:
            names.append(m.group(1))
        return f"${names.index(m.group(1)) + 1}"

    sql = _NAMED.sub(number, statement).replace("%%", "%")
    cur.execute("SET LOCAL plan_cache_mode = force_generic_plan")
    cur.execute("PREPARE ragport_explained AS " + sql)
    client = psycopg.ClientCursor(cur.connection)
    args = ", ".join(["%s"] * len(names))
    client.execute(
        f"EXPLAIN (ANALYZE, BUFFERS, SETTINGS) EXECUTE ragport_explained({args})",
        [params[n] for n in names],
    )
    rows = [r[0] for r in client.fetchall()]
    cur.execute("DEALLOCATE ragport_explained")
    return rows


def explain(engine: Any, calls: Sequence[tuple[str, Any, bool, float]]) -> list[str]:
    """Replays ``calls`` in one rolled-back transaction on one connection (session settings
    included) and EXPLAINs every SELECT among them: ANALYZE, BUFFERS; a statement the store
    runs with its generic plan (``reads.fetch_generic``) is EXPLAINed with that plan."""
    out: list[str] = []
    raw = engine.raw_connection()
    try:
        cur = raw.driver_connection.cursor()
        for statement, params, generic, _s in calls:
            head = statement.lstrip()[:12].upper()
            if head.startswith(("WITH", "SELECT")) and "set_config" not in statement:
                if generic:
                    plan = _explain_generic(cur, statement, params)
                else:
                    cur.execute("EXPLAIN (ANALYZE, BUFFERS, SETTINGS) " + statement, params)
                    plan = [r[0] for r in cur.fetchall()]
                kind = "generic plan" if generic else "custom plan"
                out += [f"-- {label(statement)} ({kind})", statement, "", *plan, ""]
            elif not head.startswith("SET TRANSA"):  # the replay is one transaction already
                cur.execute(statement, params)
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
    first: list[tuple[str, Any, bool, float]] = []
    for i, item in enumerate(items):
        cap.calls.clear()
        cap.on = True
        t0 = time.perf_counter()
        run(item)
        totals.append(time.perf_counter() - t0)
        cap.on = False
        if i == 0:
            first = list(cap.calls)
        for statement, _p, _g, s in cap.calls:
            per.setdefault(label(statement), []).append(s)
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

                def run(s: str) -> None:
                    system.delete(s)

                def restore(s: str = victims[0]) -> None:
                    system.update(s, data.chunks(s, 1))

                lines = profile("delete one source", run, victims, cap, engine, restore)
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
