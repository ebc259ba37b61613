"""The shared WHERE of every read: exact scope, visibility at the pointer, tombstones, grants,
metadata filter. Pure SQL builders: each returns SQL text and fills a dict of bind values.

``s`` is always the quoted schema (``quote_schema``), the only identifier interpolated;
every value is a bind parameter (``:t``, ``:r``, ``:c`` the scope, see ``scope_params``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ragport.adapters.postgres.filters import compile_filter
from ragport.domain.filters import Filter, parse_filter
from ragport.domain.model import Authorization, Scope

__all__ = [
    "GROUP_MATCH",
    "RSCOPE",
    "SCOPE",
    "VISIBLE",
    "acl_predicate",
    "granted",
    "not_forgotten",
    "pointer_cte",
    "predicate",
    "predicate_ctes",
    "scope_params",
]

SCOPE = "tenant_id = :t AND resource_id = :r AND corpus_id = :c"
"""The exact scope, unqualified; ``RSCOPE`` is the same on the ``records r`` alias."""
RSCOPE = "r.tenant_id = :t AND r.resource_id = :r AND r.corpus_id = :c"
VISIBLE = "r.generation <= sc.pointer AND (r.retired_generation IS NULL OR r.retired_generation > sc.pointer)"
"""A ``records r`` row visible at the pointer of the ``sc`` CTE (``pointer_cte``)."""


def scope_params(scope: Scope, **extra: Any) -> dict[str, Any]:
    """The binds ``:t``, ``:r``, ``:c`` of ``scope``, plus ``extra``."""
    return {"t": scope.tenant_id, "r": scope.resource_id, "c": scope.corpus_id, **extra}


def pointer_cte(s: str) -> str:
    """``WITH sc AS (...)``: the scope's pointer (0 for a scope never written)."""
    return (
        f"WITH sc AS (SELECT coalesce((SELECT pointer FROM {s}.scopes WHERE {SCOPE}), 0) "
        "AS pointer) "
    )


def predicate_ctes(s: str) -> str:
    """The CTEs ``predicate`` reads: the scope's pointer (``sc``), in the same statement (one
    snapshot). Tombstones are probed per row (``not_forgotten``), so no list is read here."""
    return pointer_cte(s)


def predicate(
    s: str,
    params: dict[str, Any],
    authorization: Authorization | None,
    metadata_filter: Mapping[str, Any] | Filter | None,
    *,
    scalar: bool = False,
) -> str:
    """The shared WHERE of both legs: scope, visibility, tombstones, grants, filter.

    It reads the ``sc`` CTE of ``predicate_ctes``: joined into the FROM list by default, or
    (``scalar=True``) as a scalar subquery, with no join at all; tombstones are probed per row
    (``not_forgotten``), never read as a list. Adds the binds
    of the authorization (``:principal``, ``:groups``, ``:av``) and of the filter (``:mf0``,
    ...) to ``params``.
    """
    pointer = "(SELECT pointer FROM sc)" if scalar else "sc.pointer"
    where = [RSCOPE, VISIBLE.replace("sc.pointer", pointer), not_forgotten(s)]
    if authorization is not None:
        params.update(
            principal=authorization.principal_id,
            groups=list(authorization.group_ids),
            av=authorization.access_version,
        )
        where.append(acl_predicate(s, authorization))
    flt = parse_filter(metadata_filter)
    if flt is not None:
        clause, bound = compile_filter(flt, column="r.metadata", prefix="mf")
        params.update(bound)
        where.append(clause)
    return " AND ".join(where)


def not_forgotten(s: str) -> str:
    """No ``forgotten`` tombstone names the ``records r`` row's id, source, lineage or roots.

    A probe of the tombstones' primary key per row the leg reads (one index descent per id),
    so its cost follows the rows read, not the number of tombstones; and none at all while the
    scope has no forgotten tombstone (a one-time check, evaluated first).
    """
    tombstones = (
        f"SELECT 1 FROM {s}.tombstones x WHERE x.tenant_id = :t AND x.resource_id = :r "
        "AND x.corpus_id = :c AND x.reason = 'forgotten'"
    )
    return (
        f"(NOT EXISTS ({tombstones}) OR NOT EXISTS ({tombstones} "
        "AND x.id = ANY(ARRAY[r.id, r.source_id] || r.lineage || r.roots)))"
    )


GROUP_MATCH = (
    "EXISTS (SELECT 1 FROM unnest(g.group_ids) AS gg(id) "
    "WHERE gg.id = ANY(CAST(:groups AS text[])))"
)
"""A grant ``g`` lists one of the caller's ``:groups``: each of the grant's few groups probed
in the caller's list. Planned for its values (``prepare=False``), the list is a constant,
which PostgreSQL hashes once per statement, so a probe costs the same at 1,000 groups as at
10 (``bench/bench_pg_groups.py``). ``g.group_ids && :groups`` unpacked the caller's whole list
again on every grant it looked at, and its selectivity estimate read every element at
planning: 3x the time of a vector query at 1,000 groups, 100k rows."""


def granted(authorization: Authorization, *, overlap: bool = False) -> str:
    """A grant ``g`` of the scope names ``:principal`` or one of ``:groups`` (at ``:av`` when
    ``authorization`` carries an access version): the caller's grants, any source.

    ``overlap=True`` tests the groups by ``g.group_ids && :groups`` when the caller holds at
    most ``OVERLAP_GROUPS`` of them: for a scan of many grants with a short list that is
    cheaper than ``GROUP_MATCH``'s subquery per grant (a long list is unpacked per grant by
    ``&&``, so it keeps ``GROUP_MATCH``). Both select the same grants."""
    groups = GROUP_MATCH
    if overlap and len(authorization.group_ids) <= OVERLAP_GROUPS:
        groups = "g.group_ids && CAST(:groups AS text[])"
    version = "" if authorization.access_version is None else " AND g.access_version = :av"
    return (
        "g.tenant_id = :t AND g.resource_id = :r AND g.corpus_id = :c "
        f"AND (:principal = ANY(g.principal_ids) OR {groups})" + version
    )


OVERLAP_GROUPS = 32


def acl_predicate(s: str, authorization: Authorization) -> str:
    """The grant rule on ``records r``: a chunk's source, or every root of a derived record,
    has a grant naming ``:principal`` or one of ``:groups`` (at ``:av`` when the
    authorization carries an access version). Each grant is one probe of ``grants_pkey``,
    its groups tested by ``&&`` when the caller holds at most ``OVERLAP_GROUPS`` (``granted``
    with ``overlap``): the HNSW walk of an access-checked read probes one grant per
    candidate, and the subquery of ``GROUP_MATCH`` per probe made the walk's statement
    1.19x the same walk under an equality filter, ``&&`` 1.16x (200,000 chunks, 140
    candidates a read; server time, median of 20 queries)."""
    grant = f"SELECT 1 FROM {s}.grants g WHERE g.source_id = {{src}} AND " + granted(
        authorization, overlap=True
    )
    return (
        "((r.kind = 'chunk' AND EXISTS (" + grant.format(src="r.source_id") + ")) "
        "OR (r.kind = 'derived' AND cardinality(r.roots) > 0 AND NOT EXISTS ("
        "SELECT 1 FROM unnest(r.roots) AS root(id) WHERE NOT EXISTS ("
        + grant.format(src="root.id")
        + "))))"
    )
