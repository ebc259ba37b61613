"""The ``ragport`` command line (composition root for the command line)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ragport.application import retrieve_context
from ragport.bootstrap import build_embedder, build_stores, demo_documents, ingest_text
from ragport.domain.errors import RagportError
from ragport.domain.model import Scope

__all__ = ["main"]

DEMO_QUERIES = (
    "Who has to approve a large payment?",
    "How long is parental leave?",
)


def _demo(args: argparse.Namespace) -> int:
    store, status_store = build_stores("memory://")
    embedder = build_embedder("hash")
    scope = Scope("demo-tenant", "handbook", "demo")
    print(f"ragport demo: in-memory store, embedder {embedder.id}, scope {scope.corpus_id}")
    for name, text in demo_documents().items():
        result = ingest_text(
            name=name,
            text=text,
            store=store,
            status_store=status_store,
            embedder=embedder,
            scope=scope,
            size=args.size,
            overlap=args.overlap,
        )
        chunks, gen = result.indexed, result.generation
        print(f"  ingested {result.source_id}: {chunks} chunks (generation {gen})")
    for query in args.query or DEMO_QUERIES:
        result = retrieve_context(
            query, embedder=embedder, store=store, scope=scope, top_k=args.top_k
        )
        print(f"\nquery: {query}")
        for hit in result.hits:
            heading = " > ".join(hit.metadata.get("heading", [])) or "(no heading)"
            print(f"  [{hit.provenance.citation_id}] score={hit.score:.3f}  {heading}")
        print("context:")
        for line in result.text.splitlines():
            print(f"    {line}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragport", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo", help="ingest the bundled corpus in memory and print cited results"
    )
    demo.add_argument("--query", action="append", help="a query to run (repeatable)")
    demo.add_argument("--top-k", type=int, default=3)
    demo.add_argument("--size", type=int, default=400, help="chunk size in characters")
    demo.add_argument("--overlap", type=int, default=40)
    demo.set_defaults(func=_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return int(args.func(args))
    except RagportError as exc:
        print(f"ragport: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
