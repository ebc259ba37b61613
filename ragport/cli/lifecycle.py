"""The lifecycle commands: delete, forget, status, sources, grants, generations, rollback,
compact, reindex.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any, cast

import attrs

from ragport.application import (
    RagDeletionHandler,
    SharedGeneration,
    compact,
    create_deletion_propagator,
    delete_source,
    list_ingestion_status,
    readmit_source,
    rollback_generation,
)
from ragport.application.admission import forgotten_among
from ragport.application.status import count_ingestion_states
from ragport.application.write_options import WriteOptions
from ragport.bootstrap import (
    FORGOTTEN,
    SourceRow,
    Stores,
    build_embedder,
    list_sources,
    reindex_corpus,
)
from ragport.cli.config import _scope, _stores
from ragport.cli.options import Parents, command, group
from ragport.cli.output import (
    EXIT_FAILED,
    EXIT_OK,
    NothingFound,
    _confirm,
    _json,
    _note,
    _print_json,
    _table,
)
from ragport.cli.progress import track, wanted
from ragport.domain.errors import (
    ValidationError,
)
from ragport.domain.limits import HARD_LIMITS
from ragport.domain.model import Authorization, Grant, Scope
from ragport.ports.capabilities import supports
from ragport.ports.history import SupportsGenerationHistory, check_history_args


def _known_sources(stores: Stores, scope: Scope, source_ids: Sequence[str]) -> list[str]:
    """The ids among ``source_ids`` with no visible record in ``scope``."""
    return [s for s in source_ids if not stores.chunks.get_by_source(scope, s)]


def _delete(args: argparse.Namespace) -> int:
    if not args.source_id and args.prefix is None:
        raise ValidationError("name a SOURCE or pass --prefix P", field="source_id")
    scope = _scope(args)
    with _stores(args) as stores:
        wanted = list(dict.fromkeys(args.source_id))
        unknown = _known_sources(stores, scope, wanted)
        if unknown:
            raise NothingFound(
                f"no source {', '.join(unknown)} in corpus {scope.corpus_id}; nothing deleted "
                "(`ragport sources` lists them)"
            )
        if args.prefix is not None:
            matched = [
                row.source_id
                for row in list_sources(stores, scope)
                if row.source_id.startswith(args.prefix) and row.chunks
            ]
            if not matched:
                raise NothingFound(
                    f"no source of corpus {scope.corpus_id} starts with {args.prefix!r}"
                )
            if not _confirm(
                f"delete {len(matched)} source(s) starting with {args.prefix!r} from corpus "
                f"{scope.corpus_id}?",
                yes=args.yes,
            ):
                _note("nothing deleted")
                return EXIT_FAILED
            wanted = list(dict.fromkeys([*wanted, *matched]))
        shared = SharedGeneration()  # one generation per command: one rollback undoes it
        results = [
            delete_source(
                source_id=source_id,
                store=stores.chunks,
                scope=scope,
                write_options=WriteOptions(status_store=stores.status, shared_generation=shared),
            )
            for source_id in wanted
        ]
    if args.json:
        _print_json(results)
    else:
        for r in results:
            print(f"{r.source_id}: {r.deleted} record(s) retired (generation {r.generation})")
    return EXIT_OK


def _forget(args: argparse.Namespace) -> int:
    scope = _scope(args)
    # Without --principal the command line acts for the corpus's owner, as `delete` does.
    authorization = (
        Authorization(args.principal, args.tenant, group_ids=tuple(args.group or ()))
        if args.principal is not None
        else None
    )
    if authorization is None and args.group:
        raise ValidationError("--group needs --principal", field="group")
    with _stores(args) as stores:
        if _known_sources(stores, scope, [args.source_id]):
            raise NothingFound(f"no source {args.source_id} in corpus {scope.corpus_id}")
        propagator = create_deletion_propagator(
            scope=scope,
            store=stores.chunks,
            authorization=authorization,
            handlers=(
                RagDeletionHandler(store=stores.chunks, scope=scope, status_store=stores.status),
            ),
            as_owner=authorization is None,
        )
        result = propagator.propagate(args.source_id)
    if args.json:
        _print_json(result)
    else:
        print(
            f"{result.source_id}: forgotten; {result.tombstoned} id(s) tombstoned, "
            f"layers {dict(result.layers)}"
        )
    return EXIT_OK


def _readmit(args: argparse.Namespace) -> int:
    scope = _scope(args)
    with _stores(args) as stores:
        result = readmit_source(
            source_id=args.source_id, store=stores.chunks, scope=scope, status_store=stores.status
        )
    if not result.readmitted:
        raise NothingFound(
            f"{args.source_id} is not forgotten in corpus {scope.corpus_id}; nothing changed"
        )
    if args.json:
        _print_json(result)
    else:
        print(
            f"{result.source_id}: re-admitted; {result.purged} stored record(s) of the forgotten "
            "content purged and its grant revoked: ingest it again to write it"
        )
    return EXIT_OK


def _count_sources(stores: Stores, scope: Scope) -> int:
    total, after = 0, None
    while True:
        ids = stores.chunks.list_source_ids(scope, after=after, limit=1_000)
        total += len(ids)
        if len(ids) < 1_000:
            return total
        after = ids[-1]


def _status(args: argparse.Namespace) -> int:
    scope = _scope(args)
    with _stores(args) as stores:
        # as retrieval sees it: a source whose last attempt failed while its previous version
        # stays served is indexed (stale), with that attempt's error
        page = list_ingestion_status(
            store=stores.status, scope=scope, limit=args.limit, cursor=args.cursor,
            chunk_store=stores.chunks,
        )  # fmt: skip
        generation = stores.chunks.current_generation(scope)
        totals = count_ingestion_states(
            store=stores.status, scope=scope, chunk_store=stores.chunks, forgotten_state=FORGOTTEN
        )
        forgotten = forgotten_among(stores.chunks, scope, [i.source_id for i in page.items])
    total = sum(totals.values())
    if args.json:
        shown = _json.unstructure(page)
        for item in shown["items"]:
            if item["source_id"] in forgotten:
                item["state"] = FORGOTTEN
        print(
            json.dumps(
                {"corpus": scope.corpus_id, "generation": generation, "total": total,
                 "states": totals, **shown},
                indent=2, ensure_ascii=False,
            )
        )  # fmt: skip
    else:
        states = ", ".join(f"{n} {state}" for state, n in sorted(totals.items()))
        print(
            f"corpus {scope.corpus_id}: generation {generation}, {total} source(s)"
            + (f" ({states})" if states else "")
        )
        _table(
            ["source", "state", "chunks", "bytes", "updated", "last error"],
            [
                (
                    item.source_id,
                    FORGOTTEN
                    if item.source_id in forgotten
                    else item.state + (" (stale)" if item.freshness == "stale" else ""),
                    f"{item.chunks_indexed}/{item.chunks_total}",
                    item.bytes,
                    item.updated_at.strftime("%Y-%m-%d %H:%M:%S") if item.updated_at else "",
                    item.error or "",
                )
                for item in page.items
            ],
        )
        if page.cursor:
            print(f"more: --cursor {page.cursor}")
    if not page.items and generation == 0 and args.cursor is None:
        raise NothingFound(f"corpus {scope.corpus_id} is empty or unknown")
    return EXIT_OK


def _sources(args: argparse.Namespace) -> int:
    scope = _scope(args)
    with _stores(args) as stores:
        wanted = None if args.limit is None else args.limit + 1  # one more: is there a next page
        rows: list[SourceRow] = list(
            list_sources(stores, scope, start=args.cursor, limit=wanted, counts=True)
        )
        total = _count_sources(stores, scope)
    more = args.limit is not None and len(rows) > args.limit
    rows = rows[: args.limit] if more else rows
    cursor = rows[-1].source_id if more else None
    if args.json:
        print(
            json.dumps(
                {"corpus": scope.corpus_id, "total": total, "items": _json.unstructure(rows),
                 "cursor": cursor},
                indent=2, ensure_ascii=False,
            )
        )  # fmt: skip
    else:
        _table(
            ["source", "chunks", "generation", "content hash", "embedder", "state"],
            [
                (
                    r.source_id,
                    r.chunks,
                    r.generation,
                    (r.content_hash or "")[:12],
                    r.embedder,
                    r.state,
                )
                for r in rows
            ],
            title=f"corpus {scope.corpus_id}: {total} source(s)"
            + (f", {len(rows)} shown" if len(rows) != total else ""),
        )
        if cursor:
            print(f"more: --cursor {cursor}")
    if not rows and args.cursor is None:
        raise NothingFound(f"corpus {scope.corpus_id} is empty or unknown")
    return EXIT_OK


@attrs.frozen
class GrantOut:
    """One source's grant as ``ragport grants show --json`` prints it: the lists are null when
    no grant is stored; ``granted`` is false both then and for an empty grant (each denies
    every caller with an authorization)."""

    source_id: str
    principal_ids: list[str] | None
    group_ids: list[str] | None
    access_version: int | None
    granted: bool = False  # false for no grant and for an empty one: both deny every caller


# How a source no authorization may see is shown, whether it has no grant or an empty one.
NO_GRANT = "(no grant: denied to every caller with an authorization)"


def _grants_set(args: argparse.Namespace) -> int:
    if (args.source_id is None) == (args.prefix is None):
        raise ValidationError("name one SOURCE or pass --prefix P", field="source_id")
    scope = _scope(args)
    with _stores(args) as stores:
        if args.source_id is not None:
            if _known_sources(stores, scope, [args.source_id]):
                raise NothingFound(
                    f"no source {args.source_id} in corpus {scope.corpus_id}; no grant set"
                )
            targets = [args.source_id]
        else:
            targets = [
                row.source_id
                for row in list_sources(stores, scope)
                if row.source_id.startswith(args.prefix) and row.chunks
            ]
            if not targets:
                raise NothingFound(
                    f"no source of corpus {scope.corpus_id} starts with {args.prefix!r}; "
                    "no grant set"
                )
            if not _confirm(
                f"replace the grant of {len(targets)} source(s) starting with {args.prefix!r} "
                f"in corpus {scope.corpus_id}?",
                yes=args.yes,
            ):
                _note("no grant set")
                return EXIT_FAILED
        grants = [
            Grant(
                source_id,
                principal_ids=tuple(args.principal or ()),
                group_ids=tuple(args.group or ()),
                access_version=args.access_version,
            )
            for source_id in targets
        ]
        stores.chunks.set_source_access(scope, grants)  # one call: all or none
    grant = grants[0]
    who = (
        f"principals {list(grant.principal_ids)}, groups {list(grant.group_ids)}, "
        f"access version {grant.access_version}"
    )
    if not grant.principal_ids and not grant.group_ids:
        who = f"{NO_GRANT} (access version {grant.access_version})"
    for source_id in targets:
        print(f"{source_id}: {who}")
    return EXIT_OK


def _grants_show(args: argparse.Namespace) -> int:
    scope = _scope(args)
    with _stores(args) as stores:
        wanted = list(args.source_id) or [
            r.source_id for r in list_sources(stores, scope) if r.chunks
        ]
        found = stores.chunks.get_source_access(scope, wanted)
    rows = []
    for source_id in wanted:
        g = found.get(source_id)
        rows.append(
            GrantOut(
                source_id,
                None if g is None else list(g.principal_ids),
                None if g is None else list(g.group_ids),
                None if g is None else g.access_version,
                g is not None and bool(g.principal_ids or g.group_ids),
            )
        )
    if args.json:
        _print_json(rows)
    else:
        _table(
            ["source", "principals", "groups", "access version"],
            [
                (
                    r.source_id,
                    NO_GRANT if not r.granted else " ".join(r.principal_ids or []),
                    " ".join(r.group_ids or []),
                    r.access_version if r.access_version is not None else "",
                )
                for r in rows
            ],
        )
    if not rows:
        raise NothingFound(f"corpus {scope.corpus_id} is empty or unknown")
    return EXIT_OK


@attrs.frozen
class ChangeOut:
    """What one generation changed (``ragport generations --json``, ``changes``): the source
    ids written and retired at it (at most ``--max-ids`` each) and the full counts."""

    generation: int
    written: list[str]
    retired: list[str]
    sources_written: int
    sources_retired: int
    records_written: int
    records_retired: int


@attrs.frozen
class GenerationsOut:
    """``ragport generations --json``: the pointer, the counter, the compaction floor and what
    each recent generation changed. ``written`` / ``retired`` map a generation to its source
    ids (kept from the first version of this output); ``changes`` adds the counts.
    ``history`` is false when the store keeps no generation history: ``written`` then lists
    the sources still visible, by the generation that wrote them, and ``retired`` is empty."""

    corpus: str
    current: int
    counter: int
    floor: int
    written: dict[int, list[str]]
    retired: dict[int, list[str]]
    changes: list[ChangeOut]
    history: bool


def _ids(shown: Sequence[str], total: int) -> str:
    more = total - len(shown)
    return " ".join(shown) + (f" (+{more} more)" if more > 0 else "")


def _generations(args: argparse.Namespace) -> int:
    scope = _scope(args)
    limit, max_ids = check_history_args(args.limit, args.max_ids)
    with _stores(args) as stores:
        with stores.chunks.unit_of_work(scope) as uow:
            current = uow.generations.current()
            counter = uow.generations.counter()
            floor = uow.generations.floor()
        history = supports(stores.chunks, "generation_history")
        changes: list[ChangeOut] = []
        if history:
            store = cast(SupportsGenerationHistory, stores.chunks)
            for c in store.generation_history(scope, limit=limit, max_ids=max_ids):
                changes.append(ChangeOut(c.generation, list(c.written), list(c.retired),
                                         c.sources_written, c.sources_retired,
                                         c.records_written, c.records_retired))  # fmt: skip
        else:
            _note("this store keeps no generation history: showing the sources still visible")
            visible: dict[int, list[str]] = {}
            for row in list_sources(stores, scope, counts=True):
                if row.generation is not None:
                    visible.setdefault(row.generation, []).append(row.source_id)
            for g, ids in sorted(visible.items(), reverse=True)[:limit]:
                changes.append(ChangeOut(g, ids[:max_ids], [], len(ids), 0, 0, 0))
    out = GenerationsOut(
        scope.corpus_id,
        current,
        counter,
        floor,
        written={c.generation: c.written for c in changes},
        retired={c.generation: c.retired for c in changes},
        changes=changes,
        history=history,
    )
    if args.json:
        _print_json(out)
    else:
        print(f"corpus {scope.corpus_id}: current {current}, counter {counter}, floor {floor}")
        _table(
            ["generation", "written", "retired", "records +/-"],
            [
                (
                    c.generation,
                    _ids(c.written, c.sources_written),
                    _ids(c.retired, c.sources_retired),
                    f"+{c.records_written} -{c.records_retired}" if history else "",
                )
                for c in changes
            ],
        )
    if current == 0:
        raise NothingFound(f"corpus {scope.corpus_id} is empty or unknown")
    return EXIT_OK


def _rollback(args: argparse.Namespace) -> int:
    scope = _scope(args)
    with _stores(args) as stores:
        with stores.chunks.unit_of_work(scope) as uow:
            current = uow.generations.current()
        if not _confirm(
            f"show corpus {scope.corpus_id} as it was at generation {args.to} (now "
            f"{current}; undo with `ragport rollback --to {current}` until a compact)?",
            yes=args.yes,
        ):
            _note("nothing rolled back")
            return EXIT_FAILED
        result = rollback_generation(
            store=stores.chunks, scope=scope, to=args.to, status_store=stores.status
        )
    if args.json:
        _print_json(result)
    else:
        print(
            f"corpus {scope.corpus_id} now shows generation {result.generation}: "
            f"{result.discarded} row(s) discarded, {result.restored} restored"
        )
    return EXIT_OK


def _compact(args: argparse.Namespace) -> int:
    scope = _scope(args)
    with _stores(args) as stores:
        if not _confirm(
            f"remove the retired rows of corpus {scope.corpus_id} older than its last "
            f"{args.keep} generation(s) for good (rollback before them becomes impossible)?",
            yes=args.yes,
        ):
            _note("nothing removed")
            return EXIT_FAILED
        result = compact(store=stores.chunks, scope=scope, keep=args.keep)
    if args.json:
        _print_json(result)
    else:
        print(
            f"corpus {scope.corpus_id}: {result.purged} retired row(s) physically removed "
            f"(their text is gone from the store); rollback possible to generation "
            f"{result.floor} and above"
        )
    return EXIT_OK


def _reindex(args: argparse.Namespace) -> int:
    scope = _scope(args)
    embedder = build_embedder(args.embedder)
    with _stores(args) as stores:
        sources = [
            r.source_id for r in list_sources(stores, scope) if r.chunks and r.state != FORGOTTEN
        ]
        if not sources:
            raise NothingFound(f"corpus {scope.corpus_id} is empty or unknown")
        with track(
            "reindex", total=len(sources), unit="sources", enabled=wanted(json_out=args.json)
        ) as bar:

            def tick(n: int, source_id: str) -> None:
                bar.update(done=n, item=source_id)

            result = reindex_corpus(
                store=stores.chunks, scope=scope, embedder=embedder, sources=sources, on_source=tick
            )
    if args.json:
        _print_json(result)
    else:
        print(
            f"corpus {scope.corpus_id}: {result.sources} source(s), {result.chunks} chunk(s) "
            f"re-embedded with {embedder.id}; visible at generation {result.generation}"
        )
    return EXIT_OK


def register(sub: Any, parents: Parents) -> None:
    """``delete``, ``forget``, ``readmit``, ``status``, ``sources``, ``grants set|show``,
    ``generations``, ``rollback``, ``compact`` and ``reindex`` on ``sub``."""
    corpus_only, json_out = parents.corpus_only, parents.json_out
    delete = command(
        sub, "delete", "retire every record of one or more sources (a new generation)",
        ["ragport delete guides/old.md --corpus handbook", "ragport delete --prefix drafts/ --yes"],
        [corpus_only, json_out],
    )  # fmt: skip
    delete.add_argument("source_id", nargs="*", help="source ids (as `ragport sources` lists)")
    delete.add_argument("--prefix", help="also every source whose id starts with this")
    delete.add_argument("--yes", action="store_true", help="do not ask before a --prefix delete")
    delete.set_defaults(func=_delete)

    forget = command(
        sub, "forget",
        "forget a source everywhere: tombstone it and what rests on it, remove its rows",
        ["ragport forget leave.md --corpus handbook",
         "ragport forget leave.md --principal admin --corpus handbook"],
        [corpus_only, json_out],
    )  # fmt: skip
    forget.add_argument("source_id", help="the source id")
    forget.add_argument(
        "--principal",
        help="who forgets (needs a grant on the source); default: the corpus's owner, "
        "as for delete",
    )
    forget.add_argument("--group", action="append", help="a group of the principal (repeatable)")
    forget.set_defaults(func=_forget)

    readmit = command(
        sub, "readmit",
        "let a forgotten id be written again (audited): purges what is left of its forgotten "
        "content and revokes its grant; ingest it again afterwards",
        ["ragport readmit leave.md --corpus handbook"],
        [corpus_only, json_out],
    )  # fmt: skip
    readmit.add_argument("source_id", help="the forgotten source id")
    readmit.set_defaults(func=_readmit)

    status = command(sub, "status", "ingestion status of a corpus",
                     ["ragport status --corpus handbook"], [corpus_only, json_out])  # fmt: skip
    status.add_argument(
        "--limit", type=int, default=50, help=f"rows per page, at most {HARD_LIMITS.status_page}"
    )
    status.add_argument("--cursor", help="continue after this page (printed as `more:`)")
    status.set_defaults(func=_status)

    sources = command(
        sub, "sources",
        "every source of a corpus: chunks, generation, content hash, embedder",
        ["ragport sources --corpus handbook", "ragport sources --limit 100 --cursor guides/z.md"],
        [corpus_only, json_out],
    )  # fmt: skip
    sources.add_argument("--limit", type=int, help="rows per page (default: all)")
    sources.add_argument("--cursor", help="start after this source id")
    sources.set_defaults(func=_sources)

    _register_grants(sub, parents)
    _register_history(sub, parents)


def _register_grants(sub: Any, parents: Parents) -> None:
    grants_sub = group(
        sub, "grants", "read and set who may see a source", "Read and set who may see a source.",
        "grants_command",
    )  # fmt: skip
    gset = command(
        grants_sub, "set", "replace the grant of a source (or of every source under --prefix)",
        ["ragport grants set leave.md --principal alice --group staff --corpus handbook",
         "ragport grants set --prefix hr/ --group hr --corpus handbook --yes"],
        [parents.corpus_only],
    )  # fmt: skip
    gset.add_argument("source_id", nargs="?", help="the source id")
    gset.add_argument("--prefix", help="every source whose id starts with this (asks first)")
    gset.add_argument("--yes", action="store_true", help="do not ask before a --prefix set")
    gset.add_argument("--principal", action="append", help="a principal id (repeatable)")
    gset.add_argument("--group", action="append", help="a group id (repeatable)")
    gset.add_argument("--access-version", type=int, default=1, help="the grant's access version")
    gset.set_defaults(func=_grants_set)
    gshow = command(grants_sub, "show", "show the grants of sources (default: every source)",
                    ["ragport grants show --corpus handbook"],
                    [parents.corpus_only, parents.json_out])  # fmt: skip
    gshow.add_argument("source_id", nargs="*", help="source ids (default: every source)")
    gshow.set_defaults(func=_grants_show)


def _register_history(sub: Any, parents: Parents) -> None:
    corpus_only, json_out = parents.corpus_only, parents.json_out
    generations = command(
        sub, "generations",
        "the generation pointer, the counter, and the sources each recent generation wrote and retired",
        ["ragport generations --corpus handbook"], [corpus_only, json_out],
    )  # fmt: skip
    generations.add_argument(
        "--limit", type=int, default=10, help="recent generations shown, at most 1000"
    )
    generations.add_argument(
        "--max-ids", type=int, default=20,
        help="source ids listed per generation and kind (the counts stay whole), at most 10000",
    )  # fmt: skip
    generations.set_defaults(func=_generations)

    rollback = command(sub, "rollback", "show the corpus as it was at generation N",
                       ["ragport rollback --to 3 --corpus handbook --yes"],
                       [corpus_only, json_out])  # fmt: skip
    rollback.add_argument("--to", type=int, required=True, help="the generation to go back to")
    rollback.add_argument("--yes", action="store_true", help="do not ask before rolling back")
    rollback.set_defaults(func=_rollback)

    compact = command(
        sub, "compact",
        "physically remove retired rows (and their text) older than the last N generations",
        ["ragport compact --keep 2 --corpus handbook --yes"], [corpus_only, json_out],
    )  # fmt: skip
    compact.add_argument("--keep", type=int, default=1, help="generations kept for rollback")
    compact.add_argument("--yes", action="store_true", help="do not ask before removing rows")
    compact.set_defaults(func=_compact)

    reindex = command(
        sub, "reindex",
        "re-embed a corpus under another embedder (old vectors serve until the new commit)",
        ["ragport reindex --embedder minilm --corpus handbook"], [corpus_only, json_out],
    )  # fmt: skip
    reindex.add_argument(
        "--embedder", required=True, help="the new embedder: minilm, hash or a plugin's name"
    )
    reindex.set_defaults(func=_reindex)
