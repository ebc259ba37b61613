"""How the demo's steps read: each step's lines (explanation, details, an outcome line after
``->``) for the terminal, and the ``--json`` document (``DemoOut``; stable field names,
docs/cli.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from ragport.demo.run import DEMO_CORPUS, DemoPlace, DemoStep

__all__ = ["DemoOut", "StepOut", "demo_out", "step_lines"]


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


def step_lines(step: DemoStep) -> list[str]:
    """The lines ``ragport demo`` prints for ``step``: a heading, then its details."""
    return [
        f"{step.number}. {step.name}: {step.explanation} ({step.seconds:.2f} s)",
        *(f"   {line}" for line in PRINTERS[step.name](step.outcome)),
    ]


def demo_out(place: DemoPlace, embedder: str, steps: Sequence[DemoStep], seconds: float) -> DemoOut:
    """``ragport demo --json``'s document."""
    return DemoOut(
        store=place.description,
        kind=place.kind,
        embedder=embedder,
        corpus=DEMO_CORPUS,
        seconds=seconds,
        steps=[StepOut(s.number, s.name, s.explanation, dict(s.outcome), s.seconds) for s in steps],
    )
