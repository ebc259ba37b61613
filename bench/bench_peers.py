"""ragport against the systems its users would pick instead, on one PostgreSQL + pgvector server
(issue 45): LangChain (``langchain-postgres`` ``PGVectorStore`` + ``index()`` +
``SQLRecordManager``), LlamaIndex (``llama-index-vector-stores-postgres`` + ``IngestionPipeline``)
and Haystack (``pgvector-haystack`` ``PgvectorDocumentStore``), each used as its own docs
recommend (bench/peers/sys_*.py; /work/shared/reference/peers-benchmark.md has the reasons).

One driver (this process, ragport's venv) starts the embedded PostgreSQL server and one worker
process per system (``bench/peers/worker.py``: ragport's in this interpreter, the peers' in the
separate venv ``make bench-peers`` creates, ``.venv-peers``; never in ragport's own install),
and sends them the same steps in turn, the systems' order rotating every round so that a busy
spell of the shared machine falls on all of them:

1. ingest in rounds of 100 sources (each system's normal write path);
2. replace 100 sources (10 -> 8 chunks) in 10 rounds of 10;
3. the same for 100 other sources while a reader thread asks, as fast as it can, for the
   top-10 of the source being replaced (filtered to it): answers mixing versions, empty or
   partial are counted (and a control pass with no writer first);
4. delete 10 sources, one per round;
5-7. 200 queries (six words of a live chunk): vector top-10, filtered by tag (1% of rows),
   hybrid top-10 (each system's own), access-checked (a user in 2 of 20 groups; ragport's
   grants, the peers' metadata filter; workload 7's target compares ragport's with its own
   equality filter on the chunks' ``team``, which selects the same rows), in batches of 10 per system and kind after 10
   untimed warm-up queries each.

Then recall@10 against exact numpy cosine over the final live set, whether every system stored
the same vectors (minimum cosine with the precomputed ones), correctness counts of workloads 2,
3, 4 and 7, and each system's own hybrid on the Cranfield collection (nDCG@10; vectors from the
MiniLM embedder, cached in bench/out; feature hashing with ``--quick``). Ratios are the peer's
figure over ragport's in this run (latency: above 1 is slower than ragport; chunks/s: above 1
is faster). Timings are taken in each worker around the system's own call.

Run: ``make bench-peers`` (creates .venv-peers, then ``--chunks 20000``), or
``.venv/bin/python bench/bench_peers.py --chunks 200000`` (hours), ``--quick`` (a few hundred
chunks, a minute or two), ``--systems ragport`` (no peers venv needed).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "peers"))

from _results import figure, note_postgres, ratio, target, write_result  # noqa: E402
from common import (  # noqa: E402
    KINDS,
    RAGPORT_KINDS,
    TOP_K,
    Dataset,
    VectorTable,
    exact_top,
    feature_hash,
    log,
    ndcg_at_k,
    percentile,
    recall_at_k,
    receive,
    send,
)

SYSTEMS = ("ragport", "langchain", "llamaindex", "haystack")
PEERS = SYSTEMS[1:]
PEERS_PYTHON = HERE.parent / ".venv-peers" / "bin" / "python"
CRANFIELD = HERE.parents[1] / "shared" / "data" / "cranfield"  # beside the checkout
SOURCES_PER_ROUND = 100
WARMUP = 10
BATCH = 10


# -- workers ------------------------------------------------------------------------------------
class Worker:
    """One system's worker process and its JSON-lines pipe."""

    def __init__(self, name: str, python: str, log_path: Path):
        self.name = name
        self._log = log_path.open("w")
        self.proc = subprocess.Popen(
            [python, str(HERE / "peers" / "worker.py"), name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            cwd=HERE.parent,
            env={**os.environ, "PYTHONPATH": str(HERE.parent), "TOKENIZERS_PARALLELISM": "false"},
        )

    def call(self, op: str, **args: Any) -> Any:
        send(self.proc.stdin, {"op": op, **args})
        reply = receive(self.proc.stdout)
        if not reply["ok"]:
            raise RuntimeError(f"{self.name}.{op}: {reply['error']} (log: {self._log.name})")
        return reply["result"]

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, EOFError, BrokenPipeError):
            self.call("close")
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.close()


def rotated(items: Sequence[str], i: int) -> list[str]:
    k = i % len(items)
    return [*items[k:], *items[:k]]


# -- data for the workers -----------------------------------------------------------------------
def cranfield_data(
    folder: Path, limit_queries: int | None
) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    """Cranfield's documents (whitespace collapsed, so every system embeds the same text) and
    its judged queries with their gains."""
    docs = []
    for line in (folder / "corpus.jsonl").read_text().splitlines():
        d = json.loads(line)
        docs.append({"id": str(d["id"]), "text": " ".join(str(d["text"]).split())})
    gains: dict[str, dict[str, float]] = {}
    for line in (folder / "qrels.tsv").read_text().splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[2].strip().isdigit():
            gains.setdefault(parts[0], {})[parts[1]] = float(parts[2])
    queries = []
    for line in (folder / "queries.jsonl").read_text().splitlines():
        q = json.loads(line)
        if str(q["id"]) in gains:
            text = " ".join(str(q["text"]).split())
            queries.append({"id": str(q["id"]), "text": text, "gains": gains[str(q["id"])]})
    return docs, queries[:limit_queries] if limit_queries else queries


def cranfield_vectors(texts: list[str], embedder: str) -> np.ndarray:
    if embedder == "hash":
        return feature_hash(texts)
    from ragport.adapters.embedders import MiniLmEmbedder

    cache = HERE / "out" / "peers-cranfield-minilm.npz"
    import hashlib

    keys = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
    known: dict[str, np.ndarray] = {}
    if cache.exists():
        with np.load(cache) as data:
            known = {k: data[k] for k in data.files}
    missing = [t for t, k in zip(texts, keys, strict=True) if k not in known]
    if missing:
        vectors = MiniLmEmbedder().embed(missing)
        for t, v in zip(missing, vectors, strict=True):
            known[hashlib.sha256(t.encode()).hexdigest()] = v
        cache.parent.mkdir(parents=True, exist_ok=True)
        np.savez(cache, **known)
    return np.stack([known[k] for k in keys]).astype(np.float32)


def prepare(folder: Path, data: Dataset, queries: list[dict[str, Any]]) -> None:
    """Every text any system will embed, with its vector: the corpus' chunks (both versions),
    the queries and the reader's marker words."""
    texts = sorted(
        set(data.texts.values()) | {q["text"] for q in queries} | set(data.marker.values())
    )
    t0 = time.perf_counter()
    VectorTable.save(folder, "corpus", texts, feature_hash(texts))
    log(f"{len(texts):,} texts embedded (feature hashing) in {time.perf_counter() - t0:.1f} s")


# -- the run ------------------------------------------------------------------------------------
def ingest(workers: Mapping[str, Worker], data: Dataset, out: dict[str, Any]) -> None:
    rounds = [
        data.ids[i : i + SOURCES_PER_ROUND] for i in range(0, len(data.ids), SOURCES_PER_ROUND)
    ]
    for i, sources in enumerate(rounds):
        for name in rotated(list(workers), i):
            r = workers[name].call("ingest", sources=sources)
            out[name]["ingest_seconds"].append(r["seconds"])
            out[name]["ingest_chunks"] += r["chunks"]
        log(f"ingest round {i + 1}/{len(rounds)}")
    for name, w in workers.items():
        out[name]["grant_seconds"] = w.call("grants")["seconds"]


def expected_keys(data: Dataset, source: str, version: int) -> list[str]:
    return sorted(c["key"] for c in data.chunks(source, version))


def wrong_sources(answers: Mapping[str, Any], data: Dataset, version: int | None) -> int:
    """Sources whose reader answer is not exactly ``version``'s chunks (None: no chunk)."""
    wrong = 0
    for s, (_kind, keys) in answers.items():
        want = [] if version is None else expected_keys(data, s, version)
        wrong += keys != want
    return wrong


def updates(workers: Mapping[str, Worker], data: Dataset, out: dict[str, Any]) -> None:
    rounds = [data.updates[i::10] for i in range(10)]
    for i, sources in enumerate(rounds):
        for name in rotated(list(workers), i):
            for s in sources:
                out[name]["update_seconds"].append(
                    workers[name].call("update", source=s)["seconds"]
                )
    for name, w in workers.items():
        answers = w.call("read_sources", sources=data.updates, old=10, new=8)
        out[name]["w2_wrong_sources"] = wrong_sources(answers, data, 2)
    log("workload 2 done")
    # workload 3: the control (no writer), then the replacements under a reader
    for name, w in workers.items():
        answers = w.call("read_sources", sources=data.reader_updates, old=10, new=8)
        out[name]["w3_control_wrong"] = wrong_sources(answers, data, 1)
    rounds = [data.reader_updates[i::10] for i in range(10)]
    for i, sources in enumerate(rounds):
        for name in rotated(list(workers), i):
            for s in sources:
                r = workers[name].call("update_with_reader", source=s)
                out[name]["reader_update_seconds"].append(r.pop("seconds"))
                for k, v in r.items():
                    out[name]["w3"][k] = out[name]["w3"].get(k, 0) + v
    for name, w in workers.items():
        answers = w.call("read_sources", sources=data.reader_updates, old=10, new=8)
        out[name]["w3_after_wrong"] = wrong_sources(answers, data, 2)
    log("workload 3 done")


def deletes(workers: Mapping[str, Worker], data: Dataset, out: dict[str, Any]) -> None:
    for i, s in enumerate(data.deletes):
        for name in rotated(list(workers), i):
            out[name]["delete_seconds"].append(workers[name].call("delete", source=s)["seconds"])
    for name, w in workers.items():
        answers = w.call("read_sources", sources=data.deletes, old=10, new=8)
        out[name]["w4_wrong_sources"] = wrong_sources(answers, data, None)
    log("workload 4 done")


def vectors_check(
    workers: Mapping[str, Worker], data: Dataset, table: VectorTable, out: Any
) -> None:
    live = data.final_live()
    rng = np.random.default_rng(7)
    sample = [live[int(i)] for i in rng.choice(len(live), size=min(200, len(live)), replace=False)]
    want = {c["key"]: table([c["text"]])[0] for c in sample}
    for name, w in workers.items():
        stored = w.call("stored_vectors", keys=list(want))
        cosines = [
            float(np.dot(np.asarray(v), want[k]) / (np.linalg.norm(v) * np.linalg.norm(want[k])))
            for k, v in stored.items()
        ]
        out[name]["vector_min_cosine"] = min(cosines) if cosines else None
        out[name]["vector_checked"] = len(cosines)


def queries(
    workers: Mapping[str, Worker], qs: list[dict[str, Any]], out: dict[str, Any]
) -> dict[str, dict[str, list[list[str]]]]:
    """Warm-up, then the timed batches; returns every system's keys per kind and query."""

    def kinds(name: str) -> tuple[str, ...]:
        return KINDS + RAGPORT_KINDS if name == "ragport" else KINDS

    for name, w in workers.items():
        for kind in kinds(name):
            w.call("query", kind=kind, queries=qs[:WARMUP])
    keys: dict[str, dict[str, list[list[str]]]] = {
        n: {k: [[] for _ in qs] for k in kinds(n)} for n in workers
    }
    batches = range(0, len(qs), BATCH)
    for b, start in enumerate(batches):
        batch = qs[start : start + BATCH]
        for kind in rotated(KINDS + RAGPORT_KINDS, b):
            for name in rotated(list(workers), b):
                if kind not in kinds(name):
                    continue
                for j, r in enumerate(workers[name].call("query", kind=kind, queries=batch)):
                    out[name]["latency"][kind].append(r["seconds"])
                    keys[name][kind][start + j] = r["keys"]
        if b % 5 == 4:
            log(f"query batch {b + 1}/{len(batches)}")
    return keys


def quality(
    data: Dataset, qs: list[dict[str, Any]], table: VectorTable, keys: Any, out: dict[str, Any]
) -> None:
    """recall@10 of vector, filter and access against exact numpy top-10 over the final live
    set; short answers; access answers naming a chunk of a group the user is not in."""
    live = data.final_live()
    matrix = table([c["text"] for c in live])
    live_keys = [c["key"] for c in live]
    tags = np.array([c["tag"] for c in live])
    groups = np.array([c["owner_group"] for c in live])
    group_of = {c["key"]: c["owner_group"] for c in live}
    truth: dict[str, list[list[str]]] = {k: [] for k in ("vector", "filter", "access")}
    for q in qs:
        vec = table([q["text"]])[0]
        truth["vector"].append(exact_top(matrix, live_keys, vec, None, TOP_K)[0])
        truth["filter"].append(exact_top(matrix, live_keys, vec, tags == q["tag"], TOP_K)[0])
        mask = np.isin(groups, q["groups"])
        truth["access"].append(exact_top(matrix, live_keys, vec, mask, TOP_K)[0])
    truth["team_filter"] = truth["group_filter"] = truth["access"]
    for name, per_kind in keys.items():
        for kind, exact in truth.items():
            if kind not in per_kind:
                continue
            found = per_kind[kind]
            out[name]["recall"][kind] = float(
                np.mean([recall_at_k(f, t) for f, t in zip(found, exact, strict=True)])
            )
            out[name]["short"][kind] = sum(
                len(f) < min(TOP_K, len(t)) for f, t in zip(found, exact, strict=True)
            )
        out[name]["short"]["hybrid"] = sum(len(f) < TOP_K for f in per_kind["hybrid"])
        out[name]["hybrid_mean_results"] = float(np.mean([len(f) for f in per_kind["hybrid"]]))
        out[name]["w7_leaks"] = sum(
            group_of.get(k) not in q["groups"]
            for q, found in zip(qs, per_kind["access"], strict=True)
            for k in found
        )


def cranfield(
    workers: Mapping[str, Worker],
    folder: Path,
    data: Path,
    limit: int | None,
    embedder: str,
    out: Any,
) -> None:
    docs, qs = cranfield_data(data, limit)
    texts = sorted({d["text"] for d in docs} | {q["text"] for q in qs})
    VectorTable.save(folder, "cranfield", texts, cranfield_vectors(texts, embedder))
    for name, w in workers.items():
        r = w.call("cranfield", folder=str(folder), docs=docs, queries=[q["text"] for q in qs])
        scores = [
            ndcg_at_k(ranked, q["gains"]) for (ranked, _s), q in zip(r["ranked"], qs, strict=True)
        ]
        out[name]["cranfield"] = {
            "ndcg_at_10": float(np.mean(scores)),
            "queries": len(qs),
            "docs": len(docs),
            "p50_ms": 1000 * (percentile([s for _r, s in r["ranked"]], 50) or 0.0),
            "embedder": embedder,
        }
    log("cranfield done")


def index_scans(url: str) -> dict[str, int]:
    """Scans per index of the systems' tables (is each HNSW index used at all?)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT schemaname || '.' || indexrelname, idx_scan FROM pg_stat_user_indexes "
            "WHERE indexrelname ILIKE '%hnsw%' OR indexrelname ILIKE '%embedding%' "
            "OR indexrelname ILIKE '%vector%' ORDER BY 1"
        ).fetchall()
    return {str(k): int(v) for k, v in rows}


# -- results ------------------------------------------------------------------------------------
def ms(values: Sequence[float], q: float = 50) -> float | None:
    p = percentile(values, q)
    return None if p is None else 1000 * p


def summary(out: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Per system: the headline figures of each workload."""
    table: dict[str, dict[str, Any]] = {}
    for name, o in out.items():
        seconds = sum(o["ingest_seconds"])
        row = {
            "ingest_chunks_per_s": o["ingest_chunks"] / seconds if seconds else None,
            "update_ms": ms(o["update_seconds"]),
            "w3_wrong_answers": sum(
                o["w3"].get(k, 0) for k in ("mixed", "empty", "partial", "error")
            ),
            "w3_answers": sum(o["w3"].values()),
            "delete_ms": ms(o["delete_seconds"]),
        }
        for kind in KINDS + (RAGPORT_KINDS if name == "ragport" else ()):
            row[f"{kind}_ms"] = ms(o["latency"][kind])
            row[f"{kind}_p95_ms"] = ms(o["latency"][kind], 95)
        for kind, value in o["recall"].items():
            row[f"{kind}_recall"] = value
        row["cranfield_ndcg"] = o.get("cranfield", {}).get("ndcg_at_10")
        table[name] = row
    return table


HIGHER = (
    "ingest_chunks_per_s",
    "vector_recall",
    "filter_recall",
    "access_recall",
    "cranfield_ndcg",
)


def best_peer(rows: Mapping[str, Mapping[str, Any]], key: str) -> float | None:
    values = [rows[p][key] for p in PEERS if p in rows and rows[p].get(key) is not None]
    if not values:
        return None
    return max(values) if key in HIGHER else min(values)


def figures_and_targets(rows: Mapping[str, Mapping[str, Any]]) -> tuple[dict[str, Any], list[Any]]:
    figures: dict[str, Any] = {}
    units = {"ingest_chunks_per_s": "chunks/s", "w3_wrong_answers": "answers"}
    for name, row in rows.items():
        for key, value in row.items():
            unit = units.get(key, "ms" if key.endswith("_ms") else "")
            figures[f"{name}.{key}"] = figure(f"{name} {key}", unit, value)
    r = rows.get("ragport", {})
    targets = []

    def vs_peer(fig: str, key: str, op: str, bound: float, invert: bool = False) -> None:
        peer = best_peer(rows, key)
        mine = r.get(key)
        if invert:  # a rate: the target is ragport / fastest peer
            figures[fig] = ratio(fig, mine, peer, (f"ragport.{key}", f"fastest peer {key}"))
        else:
            figures[fig] = ratio(fig, mine, peer, (f"ragport.{key}", f"fastest peer {key}"))
        targets.append(target(fig, op, bound))

    vs_peer("t1 ingest / fastest peer", "ingest_chunks_per_s", ">=", 1.2, invert=True)
    vs_peer("t2 update / fastest peer", "update_ms", "<=", 1.0)
    figures["t3 ragport wrong answers"] = figure(
        "t3 ragport wrong answers", "answers", r.get("w3_wrong_answers")
    )
    targets.append(target("t3 ragport wrong answers", "<=", 0))
    vs_peer("t4 delete / fastest peer", "delete_ms", "<=", 1.0)
    vs_peer("t5 filtered / fastest peer", "filter_ms", "<=", 1.0)
    vs_peer("t6 hybrid p50 / fastest peer", "hybrid_ms", "<=", 1.0)
    vs_peer("t6 hybrid p95 / fastest peer", "hybrid_p95_ms", "<=", 1.0)
    # the "ragport's own equality-filter query": the same rows (the user's team)
    figures["t7 access / own filter"] = ratio(
        "t7 access / own filter",
        r.get("access_ms"),
        r.get("team_filter_ms"),
        ("ragport.access_ms", "ragport.team_filter_ms"),
    )
    targets.append(target("t7 access / own filter", "<=", 1.2))
    # no target: the same rows by owner_group $in the user's two groups
    figures["t7 access / same rows by $in filter"] = ratio(
        "t7 access / same rows by $in filter",
        r.get("access_ms"),
        r.get("group_filter_ms"),
        ("ragport.access_ms", "ragport.group_filter_ms"),
    )
    for key, fig in (
        ("filter_recall", "t5 filter recall - best peer"),
        ("vector_recall", "t5 vector recall - best peer"),
        ("access_recall", "t7 access recall - best peer"),
        ("cranfield_ndcg", "t6 Cranfield nDCG@10 - best peer"),
    ):
        peer, mine = best_peer(rows, key), r.get(key)
        value = None if peer is None or mine is None else mine - peer
        figures[fig] = figure(fig, "", value)
        targets.append(target(fig, ">=", 0.0))
    for peer in PEERS:
        if peer not in rows:
            continue
        for key in ("ingest_chunks_per_s", "update_ms", "delete_ms", "vector_ms", "filter_ms",
                    "hybrid_ms", "hybrid_p95_ms", "access_ms"):  # fmt: skip
            name = f"ratio {peer}/ragport {key}"
            figures[name] = ratio(
                name, rows[peer].get(key), r.get(key), (f"{peer}.{key}", f"ragport.{key}")
            )
    return figures, targets


def print_table(rows: Mapping[str, Mapping[str, Any]]) -> None:
    keys = list(next(iter(rows.values())))
    print(f"{'figure':26}" + "".join(f"{n:>14}" for n in rows))
    for key in keys:
        cells = []
        for n in rows:
            v = rows[n].get(key)
            cells.append(f"{'–' if v is None else f'{v:.3f}':>14}")
        print(f"{key:26}" + "".join(cells))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=20000, help="10 chunks a source")
    parser.add_argument("--quick", action="store_true", help="400 chunks, 40 queries (smoke)")
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--peers-python", default=str(PEERS_PYTHON))
    parser.add_argument(
        "--cranfield-embedder",
        choices=("hash", "minilm"),
        default=None,
        help="Cranfield's vectors: MiniLM (default; cached in bench/out) or feature hashing "
        "(--quick's default)",
    )
    parser.add_argument("--cranfield-queries", type=int, default=None)
    parser.add_argument("--no-cranfield", action="store_true")
    parser.add_argument(
        "--cranfield", type=Path, default=CRANFIELD, help="the Cranfield folder (shared/data)"
    )
    parser.add_argument("--name", default=None, help="result name (default peers / peers_200k)")
    parser.add_argument("--logs", type=Path, default=HERE / "out" / "peers")
    args = parser.parse_args(argv)
    chunks = 400 if args.quick else args.chunks
    n_queries = 40 if args.quick else args.queries
    systems = [s for s in args.systems.split(",") if s]
    missing = [s for s in systems if s in PEERS and not Path(args.peers_python).exists()]
    if missing:
        log(f"no peers venv at {args.peers_python} (make bench-peers creates it): ragport only")
        systems = [s for s in systems if s not in PEERS]
    if not args.no_cranfield and not (args.cranfield / "corpus.jsonl").exists():
        parser.error(
            f"no Cranfield collection in {args.cranfield} (--cranfield DIR, --no-cranfield)"
        )
    name = args.name or ("peers" if chunks <= 20000 or args.quick else f"peers_{chunks // 1000}k")
    data = Dataset(
        chunks // 10, updated=100 if not args.quick else 10, deleted=10 if not args.quick else 4
    )
    qs = data.queries(n_queries)
    args.logs.mkdir(parents=True, exist_ok=True)
    from ragport.adapters.postgres import embedded_server

    out: dict[str, Any] = {
        s: {
            "ingest_seconds": [], "ingest_chunks": 0, "update_seconds": [],
            "reader_update_seconds": [], "delete_seconds": [], "w3": {},
            "latency": {k: [] for k in KINDS + RAGPORT_KINDS}, "recall": {}, "short": {},
        }
        for s in systems
    }  # fmt: skip
    started = time.time()
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp:
        folder = Path(tmp)
        prepare(folder, data, qs)
        with embedded_server(folder / "pg", keep_running=False) as url:
            note_postgres(url)
            workers: dict[str, Worker] = {}
            try:
                for s in systems:
                    python = sys.executable if s == "ragport" else args.peers_python
                    workers[s] = Worker(s, python, args.logs / f"{s}.log")
                versions = {}
                for s, w in workers.items():
                    versions[s] = w.call(
                        "setup", url=url, folder=str(folder), sources=data.n_sources
                    )["versions"]
                ingest(workers, data, out)
                updates(workers, data, out)
                deletes(workers, data, out)
                table = VectorTable.load(folder, "corpus")
                vectors_check(workers, data, table, out)
                keys = queries(workers, qs, out)
                quality(data, qs, table, keys, out)
                if not args.no_cranfield:
                    limit = args.cranfield_queries or (20 if args.quick else None)
                    embedder = args.cranfield_embedder or ("hash" if args.quick else "minilm")
                    cranfield(workers, folder, args.cranfield, limit, embedder, out)
                scans = index_scans(url)
            finally:
                for w in workers.values():
                    w.close()
    rows = summary(out)
    print_table(rows)
    figures, targets = figures_and_targets(rows)
    details = {
        "chunks": chunks,
        "sources": data.n_sources,
        "queries": len(qs),
        "systems": systems,
        "versions": versions,
        "rows": rows,
        "correctness": {
            s: {
                "w2_wrong_sources": o["w2_wrong_sources"],
                "w3_control_wrong": o["w3_control_wrong"],
                "w3_answers": o["w3"],
                "w3_after_wrong": o["w3_after_wrong"],
                "w4_wrong_sources": o["w4_wrong_sources"],
                "w7_leaks": o["w7_leaks"],
                "short_answers": o["short"],
                "vector_min_cosine": o["vector_min_cosine"],
                "vector_checked": o["vector_checked"],
                "hybrid_mean_results": o["hybrid_mean_results"],
            }
            for s, o in out.items()
        },
        "cranfield": {s: o.get("cranfield") for s, o in out.items()},
        "grant_seconds": out.get("ragport", {}).get("grant_seconds"),
        "index_scans": scans,
        "load_average": {"start": load, "end": os.getloadavg()},
        "wall_seconds": time.time() - started,
    }
    write_result(name, figures=figures, targets=targets, quick=args.quick, details=details)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
