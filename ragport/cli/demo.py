"""``ragport demo``: the bundled corpus through every guarantee, printed step by step.

The steps and their outcomes come from ``ragport.bootstrap.demo.run_demo``; this module
prints each as it finishes (a line of explanation, the details, an outcome line after
``->``), or with ``--json`` one JSON document at the end. ``--clean`` removes the demo's data.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from ragport.bootstrap import build_embedder
from ragport.bootstrap.demo import (
    DEMO_CORPUS,
    DEMO_QUESTIONS,
    DemoStep,
    clean_demo,
    open_demo_stores,
    run_demo,
)
from ragport.cli.config import _config, _store_url
from ragport.cli.options import Parents, command
from ragport.cli.output import EXIT_OK, _print_json
from ragport.domain.errors import ValidationError
from ragport.domain.limits import check_limit

__all__ = ["DEMO_QUERIES", "DemoOut", "StepOut"]

DEMO_QUERIES = DEMO_QUESTIONS


@attrs.frozen
class StepOut:
    """One step of ``ragport demo --json`` (stable field names; docs/cli.md)."""

    number: int
    name: str
    explanation: str
    outcome: dict[str, Any]
    seconds: float


@attrs.frozen
class DemoOut:
    """``ragport demo --json``: where it ran, with which embedder, and every step."""

    store: str
    kind: str
    embedder: str
    corpus: str
    seconds: float
    steps: list[StepOut]


def _short(text: str, width: int = 110) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3].rstrip() + "..."


def _cite(hit: Mapping[str, Any]) -> str:
    parts = [hit["source_id"]]
    if hit["heading"]:
        parts.append(" > ".join(hit["heading"]))
    if hit["page"] is not None:
        parts.append(f"page {hit['page']}")
    return f"[{hit['citation_id']}] {' · '.join(parts)}  score={hit['score']:.3f}"


def _ingest(o: Mapping[str, Any]) -> list[str]:
    width = max(len(f["source_id"]) for f in o["files"])
    lines = [
        f"{f['source_id']:<{width}}  {f['parser']:<8} {f['bytes']:>8,} bytes  "
        f"{f['chunks']:>3} chunks" + (f"  {f['pages']} pages" if f["pages"] else "")
        for f in o["files"]
    ]
    return [
        *lines,
        f"-> {len(o['files'])} files, {o['chunks']} chunks, generation {o['generation']}",
    ]


def _questions(o: Mapping[str, Any]) -> list[str]:
    lines = []
    for answer in o["answers"]:
        lines.append(f"Q: {answer['question']}")
        lines.extend(f"   {_cite(h)}" for h in answer["hits"])
        if answer["hits"]:
            lines.append(f'     "{_short(answer["hits"][0]["text"])}"')
    top = [a["hits"][0] for a in o["answers"] if a["hits"]]
    cited = ", ".join(
        f"{h['source_id']}" + (f" page {h['page']}" if h["page"] is not None else "") for h in top
    )
    return [*lines, f"-> {len(o['answers'])} questions answered; top citations: {cited}"]


def _unchanged(o: Mapping[str, Any]) -> list[str]:
    lines = [
        f"{f['source_id']}: {'unchanged, skipped' if f['skipped'] else 're-indexed'}"
        for f in o["files"]
    ]
    return [
        *lines,
        f"-> {o['skipped']} of {len(o['files'])} files unchanged, skipped; {o['indexed']} "
        f"chunks embedded; generation {o['generation_before']} -> {o['generation_after']}",
    ]


def _replace(o: Mapping[str, Any]) -> list[str]:
    return [
        f"Q: {o['query']}",
        f"{o['source_id']}: {o['retired']} chunks retired, {o['indexed']} written at "
        f"generation {o['generation']}",
        f'-> "{o["old_phrase"]}": {o["old_phrase_hits_before"]} hit(s) before, '
        f"{o['old_phrase_hits']} hit(s) from {o['source_id']} after ({o['old_phrase_stored']} "
        f'stored chunks hold it); "{o["new_phrase"]}": {o["new_phrase_hits"]} hit(s)',
    ]


def _access(o: Mapping[str, Any]) -> list[str]:
    withheld = o["withheld"]
    reasons = ", ".join(f"{k}: {v}" for k, v in sorted(withheld["reasons"].items()))
    lines = [
        f"Q: {o['query']}  (as {o['principal']}, groups {', '.join(o['groups'])})",
        f"denial report: {len(withheld['sources'])} source(s) withheld "
        f"({', '.join(withheld['sources'])}); by reason: {reasons or 'none'}",
    ]
    if o["top"] is not None:
        lines.append(f"   {_cite(o['top'])}")
    return [
        *lines,
        f"-> {o['denied_source']}: {o['trusted_hits_from_source']} hit(s) for a trusted caller, "
        f"{o['hits_from_source']} for {o['principal']}",
    ]


def _forget(o: Mapping[str, Any]) -> list[str]:
    return [
        f"Q: {o['query']}",
        f"tombstoned: {', '.join(o['tombstoned'])}",
        f"-> derived summary {o['derived_id']}: {o['derived_hits_before']} hit(s) before, "
        f"{o['derived_hits']} after; {o['source_id']}: {o['source_hits_before']} before, "
        f"{o['source_hits']} after",
    ]


def _rollback(o: Mapping[str, Any]) -> list[str]:
    return [
        f"generation {o['generation_before']} -> {o['generation']}: {o['discarded']} row(s) "
        f"discarded, {o['restored']} restored",
        f"-> {o['source_id']}'s previous version is back (old phrase: {o['old_phrase_hits']} "
        f"hit(s), new phrase: {o['new_phrase_hits']}); the forgotten source stays gone "
        f"({o['forgotten_source_hits']} hits)",
    ]


def _folder_sync(o: Mapping[str, Any]) -> list[str]:
    first, second, changes = o["first_sync"], o["second_sync"], o["changes"]
    return [
        f"first sync into corpus {o['corpus']}: {first['upserted']} upserted",
        f"then: edit {changes['edit']}, rename {' -> '.join(changes['rename'])}, "
        f"delete {changes['delete']}",
        f"second sync: {second['upserted']} upserted, {second['deleted']} deleted, "
        f"{second['skipped']} unchanged, {second['failed']} failed",
        f"-> {o['edited']} edited, {o['renamed']} renamed, {o['deleted']} deleted, "
        f"{o['unchanged']} unchanged; the corpus holds {', '.join(o['sources'])}",
    ]


def _data(o: Mapping[str, Any]) -> list[str]:
    if o["kind"] == "memory":
        return [f"-> in memory: {o['note']}"]
    lines = [f"-> {o['where']}", f"explore it: {o['explore']}", f"remove it: {o['remove']}"]
    if o.get("remove_server"):
        lines.append(f"remove the embedded server and every corpus in it: {o['remove_server']}")
    return lines


PRINTERS: dict[str, Callable[[Mapping[str, Any]], list[str]]] = {
    "ingest": _ingest,
    "questions": _questions,
    "unchanged": _unchanged,
    "replace": _replace,
    "access": _access,
    "forget": _forget,
    "rollback": _rollback,
    "folder_sync": _folder_sync,
    "data": _data,
}


def _print_step(step: DemoStep) -> None:
    print(f"\n{step.number}. {step.name}: {step.explanation} ({step.seconds:.2f} s)")
    for line in PRINTERS[step.name](step.outcome):
        print(f"   {line}")


def _demo(args: argparse.Namespace) -> int:
    url = _store_url(args)
    if args.clean:
        place, found = clean_demo(url)
        if place.kind == "memory":
            print("the in-memory store keeps nothing: nothing to remove")
        else:
            print(f"{place.description}: {'dropped' if found else 'nothing to remove'}")
        return EXIT_OK
    check_limit("top_k", args.top_k)
    questions = tuple(args.query or DEMO_QUESTIONS)
    if any(not q.strip() for q in questions):
        raise ValidationError("a --query is empty", field="query")
    embedder = build_embedder(args.embedder or _config(args).embedder)
    started = time.perf_counter()
    with open_demo_stores(url) as (stores, checkpoints, place):
        if not args.json:
            print(
                f"ragport demo: {place.description}, embedder {embedder.id}, corpus {DEMO_CORPUS}"
            )
        steps = run_demo(
            stores=stores,
            checkpoints=checkpoints,
            place=place,
            embedder=embedder,
            tenant=args.tenant or "local",
            resource=args.resource or "default",
            questions=questions,
            top_k=args.top_k,
            size=args.size,
            overlap=args.overlap,
            on_step=None if args.json else _print_step,
        )
    seconds = round(time.perf_counter() - started, 3)
    if args.json:
        _print_json(
            DemoOut(
                store=place.description,
                kind=place.kind,
                embedder=embedder.id,
                corpus=DEMO_CORPUS,
                seconds=seconds,
                steps=[
                    StepOut(s.number, s.name, s.explanation, dict(s.outcome), s.seconds)
                    for s in steps
                ],
            )
        )
    else:
        print(f"\ndone: {len(steps)} steps in {seconds:.1f} s")
    return EXIT_OK


def register(sub: Any, parents: Parents) -> None:
    """``demo`` on ``sub``."""
    demo = command(sub, "demo", "run the bundled corpus through every guarantee, step by step",
                   ["ragport demo", "ragport demo --store memory:// --embedder hash --json",
                    "ragport demo --clean"], [parents.embed, parents.json_out])  # fmt: skip
    demo.add_argument(
        "--store",
        help="memory://, postgresql://... or embedded (default: RAGPORT_STORE, ragport.toml, "
        "else the embedded server); the demo writes only to schema ragport_demo, emptied first",
    )
    demo.add_argument("--tenant", help="tenant id (default: ragport.toml, else local)")
    demo.add_argument("--resource", help="resource id (default: ragport.toml, else default)")
    demo.add_argument("--query", action="append", help="a question to ask in step 2 (repeatable)")
    demo.add_argument("--top-k", type=int, default=3, help="hits per question")
    demo.add_argument("--size", type=int, default=400, help="chunk size in characters")
    demo.add_argument("--overlap", type=int, default=40, help="chunk overlap in characters")
    demo.add_argument("--clean", action="store_true", help="remove the demo's data and exit")
    demo.set_defaults(func=_demo)
