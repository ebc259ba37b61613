"""The PostgreSQL lexical statement of this tree against another tree's, on the same data.

Loads ``bench_postgres.Corpus(N)`` with ``index_chunks`` (5,000 chunks per call) into schema
``prof`` of an embedded server in DIR (kept running and reused by later runs), builds 40
queries as ``bench_postgres.bench_retrieve`` builds its hybrid ones, and runs each through
this tree's ``queries.lexical_sql`` and the baseline's (a ``queries.py`` file of another
checkout), alternating on one connection; the ranks must agree to 1e-6.

Run: .venv/bin/python bench/bench_pg_lexical.py N DIR BASELINE_QUERIES_PY
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

import numpy as np

import ragport
from ragport.adapters.postgres import PostgresStore, embedded_server, queries, reads
from ragport.adapters.postgres import predicate as pr

sys.path.insert(0, str(Path(__file__).parent))
import bench_postgres as bp


def main() -> None:
    rows, data, baseline = int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    spec = importlib.util.spec_from_file_location("baseline_queries", baseline)
    assert spec is not None and spec.loader is not None
    old = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(old)
    with embedded_server(data, keep_running=True) as url:
        store = PostgresStore(url, schema="prof", create=True)
        scope = ragport.Scope("bench", "r", "c")
        corpus = bp.Corpus(rows)
        if store.current_generation(scope) == 0:
            emb = bp.PrecomputedEmbedder()
            emb.add(corpus.texts, corpus.vectors)
            t0 = time.perf_counter()
            chunks = [c for s in range(len(corpus.sources)) for c in corpus.chunks(s)]
            for i in range(0, len(chunks), 5000):
                ragport.index_chunks(
                    chunks=chunks[i : i + 5000], embedder=emb, store=store, scope=scope
                )
            print(f"loaded {rows:,} rows in {time.perf_counter() - t0:.0f} s", flush=True)
        rng = np.random.default_rng(bp.SEED + 1)
        picks = rng.integers(0, len(corpus.texts), 40)
        qs = [" ".join(corpus.texts[p].split()[:4]) + f" h{i}" for i, p in enumerate(picks)]
        times: dict[str, list[float]] = {"new": [], "old": []}
        with store.engine.connect() as conn:
            raw = reads.RawRead(conn.connection)
            for q in qs:
                params = pr.scope_params(scope, k=20, query=q)
                where = pr.predicate('"prof"', params, None, None)
                ranks = {}
                for name, module in (("new", queries), ("old", old)):
                    sql = module.lexical_sql('"prof"', "english", where)
                    t0 = time.perf_counter()
                    got = reads.fetch(raw, sql, params, prepare=False)
                    times[name].append(time.perf_counter() - t0)
                    ranks[name] = [float(r.rank) for r in got]
                assert len(ranks["new"]) == len(ranks["old"]), q
                assert all(
                    abs(a - b) <= 1e-6 for a, b in zip(ranks["new"], ranks["old"], strict=True)
                ), q
        new, old_t = np.array(times["new"]) * 1e3, np.array(times["old"]) * 1e3
        print(
            f"{rows:,} rows, {len(qs)} queries, lexical statement (k 20): p50 this tree "
            f"{np.median(new):.1f} ms, baseline {np.median(old_t):.1f} ms "
            f"({np.median(old_t) / np.median(new):.1f}x); p95 {np.percentile(new, 95):.1f} / "
            f"{np.percentile(old_t, 95):.1f} ms; ranks equal to 1e-6 on every query"
        )


if __name__ == "__main__":
    main()
