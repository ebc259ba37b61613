"""Overhead of the reranking seam (rerank_hits) beyond the reranker's own time.

A reranker that returns its input unchanged is timed directly and through ``rerank_hits``
(caps, worker thread with deadline, concurrency slot, permutation check) for 50 candidates.

Run: .venv/bin/python bench/bench_rerank_seam.py
"""

from __future__ import annotations

import statistics
import sys
import time
from datetime import UTC, datetime

from _results import figure, target, write_result

from ragport import Hit
from ragport.application import rerank_hits
from ragport.domain import Provenance


class Identity:
    def rerank(self, query, hits):
        return list(hits)


def candidates(n: int = 50) -> list[Hit]:
    now = datetime.now(UTC)
    hits = []
    for i in range(n):
        cid = f"doc#{i + 1:04d}"
        provenance = Provenance(
            source_id="doc",
            chunk_id=cid,
            citation_id=cid,
            provider="bench",
            tenant_id="t",
            resource_id="r",
            corpus_id="c",
            retrieval="hybrid",
            retrieved_at=now,
        )
        text = f"candidate text number {i} " * 20
        hits.append(Hit(cid, "doc", text, {}, 1.0 / (i + 1), i + 1, provenance))
    return hits


def main() -> int:
    hits = candidates()
    reranker = Identity()
    direct, seam = [], []
    for _ in range(2000):
        t0 = time.perf_counter()
        reranker.rerank("rerank seam", hits)
        t1 = time.perf_counter()
        rerank_hits("rerank seam", hits, reranker=reranker)
        t2 = time.perf_counter()
        direct.append(t1 - t0)
        seam.append(t2 - t1)
    overhead = statistics.median(seam) - statistics.median(direct)
    print(
        f"rerank_hits over {len(hits)} candidates: median {statistics.median(seam) * 1e6:.0f} us, "
        f"reranker alone {statistics.median(direct) * 1e6:.1f} us, seam overhead "
        f"{overhead * 1e6:.0f} us (p95 {statistics.quantiles(seam, n=20)[-1] * 1e6:.0f} us)"
    )
    write_result(
        "rerank_seam",
        figures={
            "seam_ms": figure(
                f"rerank_hits, {len(hits)} candidates", "ms", samples=[t * 1e3 for t in seam]
            ),
            "direct_ms": figure("the reranker alone", "ms", samples=[t * 1e3 for t in direct]),
            "overhead_ms": figure("seam overhead (difference of medians)", "ms", overhead * 1e3),
        },
        targets=[target("overhead_ms", "<=", 1.0)],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
