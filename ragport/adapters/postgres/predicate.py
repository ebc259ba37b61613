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
    "RSCOPE",
    "SCOPE",
    "VISIBLE",
    "acl_predicate",
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
    """The scope's pointer (``sc``) and its forgotten ids (``tb``), read in the same statement
    (one snapshot)."""
    return (
        pointer_cte(s)
        + f", tb AS (SELECT coalesce(array_agg(id), '{{}}') AS ids FROM {s}.tombstones "
        f"WHERE {SCOPE} AND reason = 'forgotten') "
    )


def predicate(
    s: str,
    params: dict[str, Any],
    authorization: Authorization | None,
    metadata_filter: Mapping[str, Any] | Filter | None,
    *,
    scalar: bool = False,
    probe: bool = False,
) -> str:
    """The shared WHERE of both legs: scope, visibility, tombstones, grants, filter.

    It reads the ``sc`` and ``tb`` CTEs of ``predicate_ctes``: joined into the FROM list by
    default, or (``scalar=True``) as scalar subqueries, with no join at all. Adds the binds
    of the authorization (``:principal``, ``:groups``, ``:av``) and of the filter (``:mf0``,
    ...) to ``params``.

    ``probe=True`` checks the tombstones per row through their primary key instead of
    comparing with the ``tb`` list (which it then does not read): a few microseconds a row
    whatever the number of tombstones, for a leg that may read many rows (the lexical one).
    """
    pointer, ids = ("(SELECT pointer FROM sc)", "CAST((SELECT ids FROM tb) AS text[])")
    if not scalar:
        pointer, ids = "sc.pointer", "tb.ids"
    where = [
        RSCOPE,
        VISIBLE.replace("sc.pointer", pointer),
        f"NOT (r.id = ANY({ids}) OR r.source_id = ANY({ids}) OR r.lineage && {ids} OR r.roots && {ids})",
    ]
    if probe:
        where[2] = (
            f"NOT EXISTS (SELECT 1 FROM {s}.tombstones z WHERE z.tenant_id = :t "
            "AND z.resource_id = :r AND z.corpus_id = :c AND z.reason = 'forgotten' "
            "AND z.id = ANY(ARRAY[r.id, r.source_id] || r.lineage || r.roots))"
        )
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


def acl_predicate(s: str, authorization: Authorization) -> str:
    """The grant rule on ``records r``: a chunk's source, or every root of a derived record,
    has a grant naming ``:principal`` or one of ``:groups`` (at ``:av`` when the
    authorization carries an access version)."""
    version = "" if authorization.access_version is None else " AND g.access_version = :av"
    grant = (
        f"SELECT 1 FROM {s}.grants g WHERE g.tenant_id = :t AND g.resource_id = :r "
        "AND g.corpus_id = :c AND g.source_id = {src} "
        "AND (:principal = ANY(g.principal_ids) OR g.group_ids && CAST(:groups AS text[]))"
        + version
    )
    return (
        "((r.kind = 'chunk' AND EXISTS (" + grant.format(src="r.source_id") + ")) "
        "OR (r.kind = 'derived' AND cardinality(r.roots) > 0 AND NOT EXISTS ("
        "SELECT 1 FROM unnest(r.roots) AS root(id) WHERE NOT EXISTS ("
        + grant.format(src="root.id")
        + "))))"
    )
