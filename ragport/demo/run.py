"""The demo's steps: the bundled corpus through every guarantee, step by step.

``run_demo`` hands each of nine steps to ``on_step`` as a ``DemoStep`` whose ``outcome`` is
JSON data (keys in docs/cli.md), measured from the store, not asserted:

1. ``ingest``: every bundled file through ``replace_document`` and ``parser_for``;
2. ``questions``: cited answers (file, heading breadcrumb, PDF page);
3. ``unchanged``: the same files again, skipped by content hash;
4. ``replace``: a new version of one document; the old phrase is gone from results;
5. ``access``: a principal denied one source; the denial report and its results;
6. ``forget``: a source forgotten with the derived summary resting on it;
7. ``rollback``: back to the generation before the replacement;
8. ``folder_sync``: a temporary folder synced, then an edit, a rename and a deletion;
9. ``data``: where the demo's data lives and how to remove it.

``open_demo_stores`` gives the stores: in memory, or the schema ``ragport_demo`` (dropped and
created again first, so every run starts empty) of the embedded server or a PostgreSQL URL.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any, cast

import attrs

from ragport.application import (
    RagDeletionHandler,
    SharedGeneration,
    create_deletion_propagator,
    index_derived,
    replace_document,
    retrieve_context,
    rollback_generation,
)
from ragport.application.sync import SyncOptions
from ragport.application.write_options import WriteOptions
from ragport.bootstrap.stores import EMBEDDED, Stores, open_checkpoints, open_stores, postgres_url
from ragport.bootstrap.syncing import sync_connector
from ragport.domain.documents import DOCUMENT_SUFFIXES, media_type_for
from ragport.domain.model import AccessDenial, Authorization, Grant, Hit, Scope
from ragport.ports.capabilities import supports
from ragport.ports.documents import LoadedDocument, Parser
from ragport.ports.embedder import Embedder
from ragport.ports.sync import CheckpointStore

__all__ = [
    "DEMO_CORPUS",
    "DEMO_QUESTIONS",
    "DEMO_SCHEMA",
    "DemoPlace",
    "DemoSettings",
    "DemoStep",
    "clean_demo",
    "demo_files",
    "demo_markdown",
    "open_demo_stores",
    "run_demo",
]

from ragport.demo.text import (  # noqa: I001
    DELETED_FILE,
    EDITED,
    RENAMED,
    RENAMED_TO,
    DEMO_CORPUS,
    DEMO_QUESTIONS,
    DEMO_SCHEMA,
    DENIED,
    DENIED_QUERY,
    FOLDER_CORPUS,
    FOLDER_FILES,
    FORGET_QUERY,
    FORGOTTEN,
    GROUP,
    NEW_PHRASE,
    OLD_PHRASE,
    PRINCIPAL,
    REPLACE_QUERY,
    REPLACED,
    SUMMARY,
    SUMMARY_ID,
)
from ragport.application.retrieval_request import RetrievalRequest


@attrs.frozen
class DemoStep:
    """One step of the demo: ``outcome`` is JSON data measured from the store."""

    number: int
    name: str
    explanation: str
    outcome: Mapping[str, Any]
    seconds: float


@attrs.frozen
class DemoPlace:
    """Where the demo's data lives: ``kind`` is ``memory``, ``embedded`` or ``postgresql``."""

    kind: str
    description: str
    data_dir: str | None
    schema: str | None


def demo_markdown() -> dict[str, str]:
    """The bundled corpus's Markdown files: file name -> text."""
    return {
        name: data.decode("utf-8")
        for name, data in demo_files().items()
        if name.endswith((".md", ".markdown"))
    }


def demo_files() -> dict[str, bytes]:
    """The bundled corpus: file name -> bytes (every document under ragport/demo/)."""
    folder = resources.files("ragport") / "demo"
    return {
        entry.name: entry.read_bytes()
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.is_file() and Path(entry.name).suffix.lower() in DOCUMENT_SUFFIXES
    }


def _drop_schema(url: str, schema: str) -> bool:
    """Drop ``schema`` (the demo's own) on the server at ``url``; True if it existed."""
    from sqlalchemy import text

    from ragport.adapters.postgres._driver import make_engine
    from ragport.adapters.postgres.background import finish_all
    from ragport.adapters.postgres.schema import quote_schema, validate_schema_name

    name = validate_schema_name(schema)
    finish_all(timeout=30)  # merges scheduled for the schema run before it goes
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            found = conn.execute(
                text("SELECT 1 FROM pg_namespace WHERE nspname = :n"), {"n": name}
            ).first()
            conn.execute(text(f"DROP SCHEMA IF EXISTS {quote_schema(name)} CASCADE"))
    finally:
        engine.dispose()
    return found is not None


def _place(url: str | None) -> DemoPlace:
    if url in ("memory://", "memory"):
        return DemoPlace("memory", "in-memory store", None, None)
    if url in (None, "", EMBEDDED):
        from ragport.adapters.postgres import default_data_dir

        data_dir = str(default_data_dir())
        return DemoPlace(
            "embedded", f"embedded PostgreSQL in {data_dir}, schema {DEMO_SCHEMA}", data_dir,
            DEMO_SCHEMA,
        )  # fmt: skip
    return DemoPlace("postgresql", f"PostgreSQL, schema {DEMO_SCHEMA}", None, DEMO_SCHEMA)


@contextmanager
def open_demo_stores(url: str | None) -> Iterator[tuple[Stores, CheckpointStore, DemoPlace]]:
    """The demo's stores, their checkpoint store and where they live, starting empty."""
    place = _place(url)
    if place.kind == "memory":
        with open_stores("memory://") as stores:
            yield stores, open_checkpoints(stores), place
        return
    with postgres_url(url) as server_url:
        _drop_schema(server_url, DEMO_SCHEMA)
        with open_stores(server_url, schema=DEMO_SCHEMA, upgrade=True) as stores:
            yield stores, open_checkpoints(stores, schema=DEMO_SCHEMA), place


def clean_demo(url: str | None) -> tuple[DemoPlace, bool]:
    """Remove the demo's data (drop schema ``ragport_demo``); False if there was none."""
    place = _place(url)
    if place.kind == "memory":
        return place, False
    with postgres_url(url) as server_url:
        return place, _drop_schema(server_url, DEMO_SCHEMA)


def _parser_name(name: str) -> str:
    from ragport.adapters.parsers import BaseParser, parser_for

    # the demo's bundled files are all of built-in types, which no plugin replaces
    return str(cast(BaseParser, parser_for(media_type_for(name) or name)).name)


def _hit_out(rank: int, hit: Hit) -> dict[str, Any]:
    return {
        "rank": rank,
        "citation_id": hit.provenance.citation_id,
        "id": hit.id,
        "source_id": hit.source_id,
        "heading": list(hit.metadata.get("heading", [])),
        "page": hit.metadata.get("page"),
        "score": round(float(hit.score), 4),
        "text": hit.text,
    }


class _Demo:
    """The state the steps share: stores, embedder, scope, settings, earlier outcomes."""

    def __init__(
        self,
        *,
        stores: Stores,
        checkpoints: CheckpointStore,
        embedder: Embedder,
        scope: Scope,
        size: int,
        overlap: int,
        top_k: int,
    ) -> None:
        from ragport.adapters.loaders import ResourceDocumentLoader
        from ragport.adapters.parsers import parser_for

        self.stores = stores
        self.checkpoints = checkpoints
        self.embedder = embedder
        self.scope = scope
        self.size = size
        self.overlap = overlap
        self.top_k = top_k
        self.files = demo_files()
        self.versions: dict[str, bytes] = dict(self.files)
        self.loader = ResourceDocumentLoader(loader=self._load)
        self.parser: Callable[[str], Parser] = parser_for
        modes = tuple(stores.chunks.capabilities.lexical_modes)
        self.lexical = str(modes[0]) if supports(stores.chunks, "lexical") else "off"
        self.replaced_at = 0

    def _load(self, uri: str) -> LoadedDocument:
        return LoadedDocument(self.versions[uri], media_type=media_type_for(uri))

    def ingest(self, name: str, shared: SharedGeneration | None = None) -> Any:
        return replace_document(
            uri=name, loader=self.loader, parser=self.parser, embedder=self.embedder,
            store=self.stores.chunks, scope=self.scope, source_id=name,
            write_options=WriteOptions(
                size=self.size, overlap=self.overlap, status_store=self.stores.status,
                shared_generation=shared,
            ),
        )  # fmt: skip

    def ask(
        self,
        query: str,
        *,
        authorization: Authorization | None = None,
        denials: list[AccessDenial] | None = None,
        top_k: int | None = None,
        scope: Scope | None = None,
    ) -> list[Hit]:
        result = retrieve_context(
            query,
            embedder=self.embedder,
            store=self.stores.chunks,
            scope=scope or self.scope,
            authorization=authorization,
            on_access_denied=denials.append if denials is not None else None,
            request=RetrievalRequest(top_k=top_k or self.top_k, lexical=self.lexical),
        )
        return list(result.hits)

    def phrase_hits(self, query: str, source_id: str, phrase: str) -> int:
        """Hits of ``source_id`` among the top 10 for ``query`` whose text holds ``phrase``."""
        return sum(
            1 for h in self.ask(query, top_k=10) if h.source_id == source_id and phrase in h.text
        )

    def current(self, scope: Scope | None = None) -> int:
        return int(self.stores.chunks.current_generation(scope or self.scope))

    # 1
    def step_ingest(self) -> dict[str, Any]:
        files = []
        shared = SharedGeneration()  # one command, one generation: one rollback undoes it
        for name, data in self.files.items():
            result = self.ingest(name, shared)
            records = self.stores.chunks.get_by_source(self.scope, name)
            pages = {r.metadata.get("page") for r in records} - {None}
            files.append(
                {
                    "source_id": name,
                    "parser": _parser_name(name),
                    "bytes": len(data),
                    "chunks": result.indexed,
                    "pages": len(pages) or None,
                    "generation": result.generation,
                }
            )
        return {
            "files": files,
            "chunks": sum(f["chunks"] for f in files),
            "generation": self.current(),
        }

    # 2
    def step_questions(self, questions: Sequence[str]) -> dict[str, Any]:
        answers = []
        for question in questions:
            hits = [_hit_out(n, h) for n, h in enumerate(self.ask(question), start=1)]
            answers.append({"question": question, "hits": hits})
        return {"lexical": self.lexical, "answers": answers}

    # 3
    def step_unchanged(self) -> dict[str, Any]:
        before = self.current()
        files = []
        for name in self.files:
            result = self.ingest(name)
            files.append({"source_id": name, "skipped": result.skipped, "indexed": result.indexed})
        return {
            "files": files,
            "skipped": sum(1 for f in files if f["skipped"]),
            "indexed": sum(f["indexed"] for f in files),
            "generation_before": before,
            "generation_after": self.current(),
        }

    # 4
    def step_replace(self) -> dict[str, Any]:
        old = self.files[REPLACED].decode()
        if OLD_PHRASE not in old:  # pragma: no cover - guards an edit of the bundled file
            raise AssertionError("the bundled leave policy lost the phrase step 4 replaces")
        before_hits = self.phrase_hits(REPLACE_QUERY, REPLACED, OLD_PHRASE)
        previous = self.current()
        self.versions[REPLACED] = old.replace(OLD_PHRASE, NEW_PHRASE).encode()
        result = self.ingest(REPLACED)
        self.replaced_at = result.generation
        stored = [r.text for r in self.stores.chunks.get_by_source(self.scope, REPLACED)]
        return {
            "source_id": REPLACED,
            "old_phrase": OLD_PHRASE,
            "new_phrase": NEW_PHRASE,
            "query": REPLACE_QUERY,
            "old_phrase_hits_before": before_hits,
            "old_phrase_hits": self.phrase_hits(REPLACE_QUERY, REPLACED, OLD_PHRASE),
            "new_phrase_hits": self.phrase_hits(REPLACE_QUERY, REPLACED, NEW_PHRASE),
            "old_phrase_stored": sum(1 for t in stored if OLD_PHRASE in t),
            "retired": result.deleted,
            "indexed": result.indexed,
            "previous_generation": previous,
            "generation": result.generation,
        }

    # 5
    def step_access(self) -> dict[str, Any]:
        grants = [
            Grant(sid, group_ids=("security",) if sid == DENIED else (GROUP,)) for sid in self.files
        ]
        self.stores.chunks.set_source_access(self.scope, grants)
        trusted = [h for h in self.ask(DENIED_QUERY, top_k=10) if h.source_id == DENIED]
        who = Authorization(PRINCIPAL, self.scope.tenant_id, group_ids=(GROUP,))
        denials: list[AccessDenial] = []
        hits = self.ask(DENIED_QUERY, authorization=who, denials=denials, top_k=10)
        reasons: dict[str, int] = {}
        for d in denials:
            reasons[d.reason] = reasons.get(d.reason, 0) + 1
        return {
            "principal": PRINCIPAL,
            "groups": [GROUP],
            "denied_source": DENIED,
            "query": DENIED_QUERY,
            "trusted_hits_from_source": len(trusted),
            "hits_from_source": sum(1 for h in hits if h.source_id == DENIED),
            "hits": len(hits),
            "withheld": {
                "sources": sorted({d.source_id for d in denials}),
                "hits": sum(d.hits for d in denials),
                "reasons": reasons,
            },
            "top": _hit_out(1, hits[0]) if hits else None,
        }

    # 6
    def step_forget(self) -> dict[str, Any]:
        index_derived(
            record_id=SUMMARY_ID,
            text=SUMMARY,
            lineage=[FORGOTTEN],
            embedder=self.embedder,
            store=self.stores.chunks,
            scope=self.scope,
            metadata={"kind": "summary"},
        )

        def counts() -> tuple[int, int]:
            hits = self.ask(FORGET_QUERY, top_k=10)
            return (
                sum(1 for h in hits if h.id == SUMMARY_ID),
                sum(1 for h in hits if h.source_id == FORGOTTEN),
            )

        derived_before, source_before = counts()
        who = Authorization(PRINCIPAL, self.scope.tenant_id, group_ids=(GROUP,))
        propagator = create_deletion_propagator(
            scope=self.scope,
            store=self.stores.chunks,
            authorization=who,
            handlers=(
                RagDeletionHandler(
                    store=self.stores.chunks, scope=self.scope, status_store=self.stores.status
                ),
            ),
        )
        result = propagator.propagate(FORGOTTEN)
        derived_after, source_after = counts()
        return {
            "source_id": FORGOTTEN,
            "derived_id": SUMMARY_ID,
            "query": FORGET_QUERY,
            "derived_hits_before": derived_before,
            "source_hits_before": source_before,
            "derived_hits": derived_after,
            "source_hits": source_after,
            "tombstoned": sorted(result.ids),
            "generation": self.current(),
        }

    # 7
    def step_rollback(self) -> dict[str, Any]:
        before = self.current()
        target = self.replaced_at - 1
        result = rollback_generation(
            store=self.stores.chunks, scope=self.scope, to=target, status_store=self.stores.status
        )
        forgotten = [h for h in self.ask(FORGET_QUERY, top_k=10) if h.source_id == FORGOTTEN]
        return {
            "to": target,
            "generation_before": before,
            "generation": result.generation,
            "discarded": result.discarded,
            "restored": result.restored,
            "source_id": REPLACED,
            "old_phrase_hits": self.phrase_hits(REPLACE_QUERY, REPLACED, OLD_PHRASE),
            "new_phrase_hits": self.phrase_hits(REPLACE_QUERY, REPLACED, NEW_PHRASE),
            "forgotten_source_hits": len(forgotten),
        }

    # 8
    def step_folder_sync(self) -> dict[str, Any]:
        from ragport.adapters.connectors import FolderConnector

        scope = attrs.evolve(self.scope, corpus_id=FOLDER_CORPUS)

        def snapshot() -> dict[str, str | None]:
            ids = self.stores.chunks.list_source_ids(scope, after=None, limit=100)
            return {
                sid: next(
                    (r.content_hash for r in self.stores.chunks.get_by_source(scope, sid)), None
                )
                for sid in ids
            }

        def sync(root: Path) -> dict[str, int]:
            result = sync_connector(
                FolderConnector(root),
                stores=self.stores,
                checkpoints=self.checkpoints,
                embedder=self.embedder,
                scope=scope,
                options=SyncOptions(write=WriteOptions(size=self.size, overlap=self.overlap)),
            )
            return {
                "upserted": result.upserted,
                "deleted": result.deleted,
                "skipped": result.skipped,
                "failed": result.failed,
            }

        with tempfile.TemporaryDirectory(prefix="ragport-demo-") as tmp:
            root = Path(tmp)
            for name, text in FOLDER_FILES.items():
                (root / name).write_text(text, encoding="utf-8")
            first = sync(root)
            before = snapshot()
            edited = root / EDITED
            edited.write_text(
                edited.read_text(encoding="utf-8") + "On Sundays it opens at 08:00.\n",
                encoding="utf-8",
            )
            (root / RENAMED).rename(root / RENAMED_TO)
            (root / DELETED_FILE).unlink()
            second = sync(root)
            after = snapshot()
        gone = sorted(set(before) - set(after))
        new = sorted(set(after) - set(before))
        renames = [
            (old, next(n for n in new if after[n] == before[old]))
            for old in gone
            if before[old] is not None and any(after[n] == before[old] for n in new)
        ]
        renamed_to = {n for _, n in renames}
        kept = sorted(set(before) & set(after))
        return {
            "corpus": FOLDER_CORPUS,
            "first_sync": first,
            "second_sync": second,
            "changes": {"edit": EDITED, "rename": [RENAMED, RENAMED_TO], "delete": DELETED_FILE},
            "edited": sum(1 for s in kept if before[s] != after[s]),
            "renamed": len(renames),
            "deleted": len(gone) - len(renames),
            "added": sum(1 for n in new if n not in renamed_to),
            "unchanged": sum(1 for s in kept if before[s] == after[s]),
            "renames": [list(r) for r in renames],
            "sources": sorted(after),
        }


def _data_outcome(place: DemoPlace) -> dict[str, Any]:
    if place.kind == "memory":
        return {
            "kind": "memory",
            "where": "in memory",
            "data_dir": None,
            "schema": None,
            "remove": None,
            "note": "nothing to remove: the in-memory store was gone when the command exited",
        }
    remove = "ragport demo --clean" + ("" if place.kind == "embedded" else " --store URL")
    out: dict[str, Any] = {
        "kind": place.kind,
        "where": place.description,
        "data_dir": place.data_dir,
        "schema": place.schema,
        "remove": remove,
        "explore": f'ragport query "brake inspection" --schema {DEMO_SCHEMA} --corpus '
        f"{DEMO_CORPUS}",
    }
    if place.data_dir is not None:
        out["remove_server"] = f"ragport db stop && rm -rf {place.data_dir}"
        out["note"] = (
            "the next ragport demo starts again from an empty schema; rm -rf removes the "
            "embedded server with every corpus in it, not only the demo's"
        )
    return out


EXPLANATIONS = {
    "ingest": "each file goes through its parser (Markdown, HTML, PDF, DOCX), is chunked and "
    "embedded, and replaces its source in one transaction; the files share one generation, "
    "so one rollback would undo the whole ingest",
    "questions": "answers carry citations: the file, the heading breadcrumb, the PDF page",
    "unchanged": "ingesting the same bytes again: the content hash matches, nothing is "
    "parsed or embedded",
    "replace": f"a new version of {REPLACED} ({OLD_PHRASE} becomes {NEW_PHRASE}) replaces the "
    "old one atomically: the old text is gone from results at once",
    "access": f"{DENIED} is granted to group security only: principal {PRINCIPAL} (group "
    f"{GROUP}) gets a denial report and none of its text",
    "forget": f"forgetting {FORGOTTEN} tombstones it and the derived summary resting on it "
    "(lineage), so neither can come back",
    "rollback": "back to the generation before the replacement: the previous version is "
    "visible again (tombstones are not rolled back: the forgotten source stays gone)",
    "folder_sync": "a folder kept in sync: one edit, one rename and one deletion, picked up "
    "by comparing the folder with the checkpoint",
    "data": "where the demo's data lives and how to remove it",
}


@attrs.frozen(kw_only=True)
class DemoSettings:
    """What the demo runs with: the scope's ``tenant`` and ``resource`` (its corpus is
    ``DEMO_CORPUS``), the ``questions`` of step 2 with ``top_k`` hits each, the chunk
    ``size`` and ``overlap``."""

    tenant: str = "local"
    resource: str = "default"
    questions: Sequence[str] = DEMO_QUESTIONS
    top_k: int = 3
    size: int = 400
    overlap: int = 40


def run_demo(
    *,
    stores: Stores,
    checkpoints: CheckpointStore,
    place: DemoPlace,
    embedder: Embedder,
    settings: DemoSettings | None = None,
    on_step: Callable[[DemoStep], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> list[DemoStep]:
    """Run the nine steps (see the module) over empty ``stores``; each goes to ``on_step``."""
    settings = DemoSettings() if settings is None else settings
    questions = settings.questions
    demo = _Demo(
        stores=stores,
        checkpoints=checkpoints,
        embedder=embedder,
        scope=Scope(settings.tenant, settings.resource, DEMO_CORPUS),
        size=settings.size,
        overlap=settings.overlap,
        top_k=settings.top_k,
    )
    plan: list[tuple[str, Callable[[], Mapping[str, Any]]]] = [
        ("ingest", demo.step_ingest),
        ("questions", lambda: demo.step_questions(questions)),
        ("unchanged", demo.step_unchanged),
        ("replace", demo.step_replace),
        ("access", demo.step_access),
        ("forget", demo.step_forget),
        ("rollback", demo.step_rollback),
        ("folder_sync", demo.step_folder_sync),
        ("data", lambda: _data_outcome(place)),
    ]
    steps = []
    for number, (name, run) in enumerate(plan, start=1):
        started = clock()
        outcome = run()
        step = DemoStep(number, name, EXPLANATIONS[name], outcome, round(clock() - started, 3))
        steps.append(step)
        if on_step is not None:
            on_step(step)
    return steps
