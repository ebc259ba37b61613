"""Value objects of the domain: scopes, callers, grants, chunks, records, hits and citations.

All are frozen attrs classes validated in their constructors; change them with
``attrs.evolve``. No vectors live here: vectors travel in port-level types.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from datetime import datetime
from typing import Any, Literal, NewType

import attrs

from ragport.domain.errors import ScopeError, ValidationError
from ragport.domain.lexical import check_lexical_mode
from ragport.domain.limits import HARD_LIMITS
from ragport.domain.values import (
    ID_MAX,
    SCOPE_ID_MAX,
    copy_frozen,
    freeze_metadata,
    is_valid_content_hash,
    metadata_bytes,
    validate_content_hash,
    validate_id,
    validate_text,
)

__all__ = [
    "GROUP_IDS_MAX",
    "ID_MAX",
    "SCOPE_ID_MAX",
    "AccessDecision",
    "AccessDenial",
    "AccessReason",
    "Authorization",
    "Capabilities",
    "Chunk",
    "Citation",
    "Grant",
    "Hit",
    "Provenance",
    "Record",
    "RecordId",
    "RecordKind",
    "Rename",
    "RetrievalLeg",
    "Scope",
    "SourceId",
    "Tombstone",
    "TombstoneReason",
    "Trust",
    "chunk_id",
    "copy_frozen",
    "decide_access",
    "freeze_metadata",
    "is_forgotten",
    "is_valid_content_hash",
    "is_visible",
    "metadata_bytes",
    "strongest_tombstone",
    "validate_content_hash",
    "validate_id",
    "validate_text",
]

SourceId = NewType("SourceId", str)
RecordId = NewType("RecordId", str)
RecordKind = Literal["chunk", "derived"]
TombstoneReason = Literal["forgotten", "corrected"]
RetrievalLeg = Literal["vector", "lexical", "hybrid"]
AccessReason = Literal["granted", "no_grant", "version_mismatch", "check_failed"]


def strongest_tombstone(existing: Tombstone | None, new: Tombstone) -> Tombstone:
    """Which tombstone an id keeps: ``forgotten`` is never downgraded to ``corrected``."""
    if existing is None or (existing.reason == "corrected" and new.reason == "forgotten"):
        return new
    return existing


def chunk_id(source_id: str, index: int) -> str:
    """The stable id of chunk ``index`` (zero-based) of ``source_id``: ``source#0001``."""
    return f"{source_id}#{index + 1:04d}"


def _scope_id(instance: Any, attribute: attrs.Attribute[str], value: str) -> None:
    try:
        validate_id(value, field=attribute.name, max_length=SCOPE_ID_MAX)
    except ValidationError as exc:
        raise ScopeError(str(exc), field=attribute.name) from None


def _ids(values: Iterable[str] | None, field: str, ceiling: int | None = None) -> tuple[str, ...]:
    """Validated, distinct ids in first-seen order; past ``ceiling`` distinct ids is a
    ``ValidationError(limit=field)``, raised as soon as the one too many is read."""
    if values is None:
        return ()
    if isinstance(values, str):
        raise ValidationError(f"{field} must be a sequence of ids, not a string", field=field)
    out: list[str] = []
    seen: set[str] = set()
    for v in values:
        validate_id(v, field=field)
        if v not in seen:
            if ceiling is not None and len(out) == ceiling:
                raise ValidationError(
                    f"{field} holds more than {ceiling} ids", field=field, limit=field
                )
            seen.add(v)
            out.append(v)
    return tuple(out)


GROUP_IDS_MAX = HARD_LIMITS.group_ids
"""The most group ids an ``Authorization``, a ``Grant`` or an ``Access`` holds: the hard
ceiling of ``Limits.group_ids``, so a caller may always hold as many groups as a grant lists."""


def _group_ids(values: Iterable[str] | None) -> tuple[str, ...]:
    return _ids(values, "group_ids", GROUP_IDS_MAX)


def _principal_ids(values: Iterable[str] | None) -> tuple[str, ...]:
    return _ids(values, "principal_ids")


@attrs.frozen(cache_hash=True)
class Scope:
    """The exact ``(tenant_id, resource_id, corpus_id)`` every read and write names."""

    tenant_id: str = attrs.field(validator=_scope_id)
    resource_id: str = attrs.field(validator=_scope_id)
    corpus_id: str = attrs.field(validator=_scope_id)


@attrs.frozen
class Authorization:
    """A host-verified caller.

    ``group_ids`` holds at most ``GROUP_IDS_MAX`` (65,536) distinct ids, as many as a
    ``Grant``; past it is a ``ValidationError(limit="group_ids")`` here, where the value is
    built, whichever store it goes to. A deployment's per-call ceiling is
    ``Limits.group_ids`` (default 1,024), checked by ``retrieve_context``.
    """

    principal_id: str = attrs.field()
    tenant_id: str = attrs.field()
    group_ids: tuple[str, ...] = attrs.field(default=(), converter=_group_ids)
    access_version: int | None = attrs.field(default=None)

    @principal_id.validator
    def _principal(self, attribute: attrs.Attribute[str], value: str) -> None:
        validate_id(value, field="principal_id")

    @tenant_id.validator
    def _tenant(self, attribute: attrs.Attribute[str], value: str) -> None:
        validate_id(value, field="tenant_id", max_length=SCOPE_ID_MAX)

    @access_version.validator
    def _version(self, attribute: attrs.Attribute[int | None], value: int | None) -> None:
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 0
        ):
            raise ValidationError(
                "access_version must be a non-negative integer", field="access_version"
            )

    @functools.cached_property
    def _group_set(self) -> frozenset[str]:
        """``group_ids`` as a set, built once: ``decide_access`` runs once per source."""
        return frozenset(self.group_ids)


@attrs.frozen
class Grant:
    """Who may see one source. Empty principal and group lists revoke all access.

    ``group_ids`` holds at most ``GROUP_IDS_MAX`` (65,536) distinct ids.
    """

    source_id: str = attrs.field()
    principal_ids: tuple[str, ...] = attrs.field(default=(), converter=_principal_ids)
    group_ids: tuple[str, ...] = attrs.field(default=(), converter=_group_ids)
    access_version: int = attrs.field(default=1)

    @source_id.validator
    def _source(self, attribute: attrs.Attribute[str], value: str) -> None:
        validate_id(value, field="source_id")

    @access_version.validator
    def _version(self, attribute: attrs.Attribute[int], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValidationError(
                "access_version must be a non-negative integer", field="access_version"
            )

    @property
    def is_empty(self) -> bool:
        return not self.principal_ids and not self.group_ids


@attrs.frozen
class AccessDecision:
    """The outcome of checking one source against one authorization."""

    source_id: str
    allowed: bool
    reason: AccessReason


def decide_access(
    source_id: str, grant: Grant | None, authorization: Authorization
) -> AccessDecision:
    """The grant rule every store implements.

    Allowed only when a grant exists, names the principal or shares a group, and (when the
    authorization carries ``access_version``) has that same version. No grant or an empty
    grant is ``no_grant``; a version mismatch is ``version_mismatch``.
    """
    if grant is None or grant.is_empty:
        return AccessDecision(source_id, False, "no_grant")
    listed = authorization.principal_id in grant.principal_ids or not (
        authorization._group_set.isdisjoint(grant.group_ids)
    )
    if not listed:
        return AccessDecision(source_id, False, "no_grant")
    if (
        authorization.access_version is not None
        and authorization.access_version != grant.access_version
    ):
        return AccessDecision(source_id, False, "version_mismatch")
    return AccessDecision(source_id, True, "granted")


def is_visible(generation: int, retired_generation: int | None, pointer: int) -> bool:
    """The generation visibility rule: written at or below ``pointer`` and not yet retired there."""
    return generation <= pointer and (retired_generation is None or retired_generation > pointer)


def is_forgotten(record: Record, forgotten: AbstractSet[str]) -> bool:
    """Whether ``forgotten`` ids withhold ``record``: its id, its source, a lineage edge or a root.

    The roots make this hold at any depth: a derived record resting on a derived record that
    rests on a forgotten source carries that source among its flattened roots.
    """
    return bool(forgotten) and (
        record.id in forgotten
        or record.source_id in forgotten
        or not forgotten.isdisjoint(record.lineage)
        or not forgotten.isdisjoint(record.roots)
    )


def _as_tuple(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


def _non_negative(instance: Any, attribute: attrs.Attribute[int], value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(
            f"{attribute.name} must be a non-negative integer", field=attribute.name
        )


@attrs.frozen
class Chunk:
    """A span of one source.

    ``text == document[start:end]`` and ``id == f"{source_id}#{index + 1:04d}"``.
    """

    id: str
    source_id: str = attrs.field()
    index: int = attrs.field(validator=_non_negative)
    start: int = attrs.field(validator=_non_negative)
    end: int = attrs.field(validator=_non_negative)
    text: str = attrs.field()
    metadata: dict[str, Any] = attrs.field(
        factory=dict, converter=freeze_metadata, eq=True, hash=False
    )

    @source_id.validator
    def _source(self, attribute: attrs.Attribute[str], value: str) -> None:
        validate_id(value, field="source_id")

    @text.validator
    def _text(self, attribute: attrs.Attribute[str], value: str) -> None:
        validate_text(value, field="text")
        if self.end < self.start or self.end - self.start != len(value):
            raise ValidationError("chunk offsets must span exactly its text", field="end")
        if self.id != chunk_id(self.source_id, self.index):
            raise ValidationError("chunk id must be '<source_id>#<index+1, 4 digits>'", field="id")

    @classmethod
    def of(
        cls,
        source_id: str,
        index: int,
        text: str,
        *,
        start: int = 0,
        metadata: Mapping[str, Any] | None = None,
    ) -> Chunk:
        """Build a chunk whose id and end offset follow from its source, index and text."""
        return cls(
            id=chunk_id(source_id, index),
            source_id=source_id,
            index=index,
            start=start,
            end=start + len(text),
            text=text,
            metadata=freeze_metadata(metadata),
        )


@attrs.frozen
class Record:
    """A stored chunk or derived artifact, without its vector.

    ``generation`` is the generation it was written at; ``retired_generation`` the one at
    which a replacement hid it (``None`` while live). ``lineage`` lists what a derived record
    rests on; ``roots`` the flattened root source ids that decide who may see it.
    ``metadata`` is a deep copy of what the constructor got (``freeze_metadata``): the caller's
    mapping and the record never share a dict or list.
    """

    id: str
    scope: Scope
    source_id: str
    kind: RecordKind
    text: str
    metadata: dict[str, Any] = attrs.field(factory=dict, converter=freeze_metadata, hash=False)
    embedder_id: str | None = None
    dimensions: int | None = None
    generation: int = 0
    retired_generation: int | None = None
    content_hash: str | None = None
    lineage: tuple[str, ...] = attrs.field(default=(), converter=_as_tuple)  # never a shared list
    roots: tuple[str, ...] = attrs.field(default=(), converter=_as_tuple)
    chunk_index: int | None = None
    start: int | None = None
    end: int | None = None

    def __attrs_post_init__(self) -> None:
        if self.kind not in ("chunk", "derived"):
            raise ValidationError("record kind must be 'chunk' or 'derived'", field="kind")
        validate_id(self.id, field="id")
        validate_id(self.source_id, field="source_id")
        validate_text(self.text, field="text")
        for edge in self.lineage:
            validate_id(edge, field="lineage")
        for root in self.roots:
            validate_id(root, field="roots")

    @property
    def access_sources(self) -> tuple[str, ...]:
        """The source ids whose grants decide who may see this record."""
        if self.kind == "derived":
            return self.roots
        return (self.source_id,)


@attrs.frozen
class Tombstone:
    """A withheld id in one scope.

    ``forgotten`` withholds the id as a record id, a source id and a lineage edge.
    """

    id: str = attrs.field()
    reason: TombstoneReason = attrs.field(default="forgotten")

    @id.validator
    def _id(self, attribute: attrs.Attribute[str], value: str) -> None:
        validate_id(value, field="id")

    @reason.validator
    def _reason(self, attribute: attrs.Attribute[str], value: str) -> None:
        if value not in ("forgotten", "corrected"):
            raise ValidationError(
                "tombstone reason must be 'forgotten' or 'corrected'", field="reason"
            )


@attrs.frozen
class Trust:
    """Retrieved text is untrusted, inert data that may carry injection attempts. Always."""

    untrusted: bool = attrs.field(default=True)
    inert: bool = attrs.field(default=True)
    injection_capable: bool = attrs.field(default=True)

    def __attrs_post_init__(self) -> None:
        if not (self.untrusted and self.inert and self.injection_capable):
            raise ValidationError("retrieved text can never be marked trusted", field="trust")


@attrs.frozen
class Provenance:
    """Where a hit came from and how it was found."""

    source_id: str
    chunk_id: str
    citation_id: str
    provider: str
    tenant_id: str
    resource_id: str
    corpus_id: str
    retrieval: RetrievalLeg
    retrieved_at: datetime
    lineage: tuple[str, ...] = ()

    @property
    def scope(self) -> Scope:
        return Scope(self.tenant_id, self.resource_id, self.corpus_id)

    @classmethod
    def of_record(
        cls,
        record: Record,
        scope: Scope,
        *,
        provider: str,
        retrieval: RetrievalLeg,
        retrieved_at: datetime,
    ) -> Provenance:
        """Where ``record`` of ``scope`` came from: equal to ``Provenance(...)`` with the
        record's source, its id as chunk and citation id, its lineage and the scope's ids."""
        out = _new(cls)
        put = _PROVENANCE
        put["source_id"](out, record.source_id)
        put["chunk_id"](out, record.id)
        put["citation_id"](out, record.id)
        put["provider"](out, provider)
        put["tenant_id"](out, scope.tenant_id)
        put["resource_id"](out, scope.resource_id)
        put["corpus_id"](out, scope.corpus_id)
        put["retrieval"](out, retrieval)
        put["retrieved_at"](out, retrieved_at)
        put["lineage"](out, record.lineage)
        return out


@attrs.frozen(eq=False)
class Hit:
    """A retrieved record. Compared by identity: rerankers must hand back the same objects.

    ``metadata`` is a deep copy (``freeze_metadata``): writing to it never reaches the store.
    """

    id: str
    source_id: str
    text: str
    metadata: dict[str, Any] = attrs.field(converter=freeze_metadata)
    score: float = attrs.field()
    retrieval_rank: int = attrs.field()
    provenance: Provenance
    trust: Trust = attrs.field(factory=Trust)

    @property
    def scope(self) -> Scope:
        return self.provenance.scope

    @classmethod
    def of_record(
        cls,
        record: Record,
        *,
        text: str,
        score: float,
        retrieval_rank: int,
        provenance: Provenance,
        trust: Trust,
        take_metadata: bool = False,
    ) -> Hit:
        """The hit of ``record``: equal to ``Hit(...)`` with the record's id, source and
        metadata, but the metadata was frozen when the record was built, so it is copied
        (``copy_frozen``) rather than validated and frozen a second time.

        ``take_metadata``: the caller owns ``record`` and hands its metadata over (a store's
        read that declares ``Capabilities.private_reads``): the hit holds that object, no copy.
        """
        out = _new(cls)
        put = _HIT
        put["id"](out, record.id)
        put["source_id"](out, record.source_id)
        put["text"](out, text)
        put["metadata"](out, record.metadata if take_metadata else copy_frozen(record.metadata))
        put["score"](out, score)
        put["retrieval_rank"](out, retrieval_rank)
        put["provenance"](out, provenance)
        put["trust"](out, trust)
        return out


@attrs.frozen
class Citation:
    """What a model's answer cites: ``id`` is the citation id shown in the rendered text."""

    id: str
    source_id: str
    chunk_id: str
    provenance: Provenance
    trust: Trust = attrs.field(factory=Trust)

    @classmethod
    def of_hit(cls, hit: Hit) -> Citation:
        """The citation of ``hit``: equal to ``Citation(id=hit.provenance.citation_id,
        source_id=hit.source_id, chunk_id=hit.id, provenance=hit.provenance, trust=hit.trust)``."""
        out = _new(cls)
        put = _CITATION
        put["id"](out, hit.provenance.citation_id)
        put["source_id"](out, hit.source_id)
        put["chunk_id"](out, hit.id)
        put["provenance"](out, hit.provenance)
        put["trust"](out, hit.trust)
        return out


def _slots(cls: type) -> dict[str, Callable[[Any, Any], None]]:
    """Per field, the setter of a frozen attrs class's slot. The ``of_*`` constructors build
    their instances through these: values that were checked where they entered the domain are
    not checked again, and the frozen class's ``__setattr__`` is skipped (about twice as fast
    as the generated ``__init__``). Each of them names every field; a test compares it with
    the constructor on every field."""
    return {a.name: cls.__dict__[a.name].__set__ for a in attrs.fields(cls)}


_new = object.__new__
_PROVENANCE = _slots(Provenance)
_HIT = _slots(Hit)
_CITATION = _slots(Citation)


@attrs.frozen
class AccessDenial:
    """One withheld source in one query: reported once per source to ``on_access_denied``."""

    source_id: str
    scope: Scope
    reason: AccessReason
    hits: int
    error: str | None = None


@attrs.frozen
class Rename:
    """Re-file every record of ``from_id`` under ``to_id``."""

    from_id: str = attrs.field()
    to_id: str = attrs.field()

    @from_id.validator
    def _from(self, attribute: attrs.Attribute[str], value: str) -> None:
        validate_id(value, field="from_id")

    @to_id.validator
    def _to(self, attribute: attrs.Attribute[str], value: str) -> None:
        validate_id(value, field="to_id")


def _mode_names(value: Sequence[str]) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValidationError("lexical_modes must be a sequence of names", field="lexical_modes")
    return tuple(value)


@attrs.frozen
class Capabilities:
    """What a store can honestly promise: the one place a store declares what it offers.

    ``lexical_modes`` (non-empty: ``lexical_query`` and ``hybrid_query``), ``guarded_query``
    (``SupportsGuardedQuery``), ``borrowed_query`` (``SupportsBorrowedQuery``: used only with
    ``guarded_query``), ``preparation`` (``SupportsPreparation``) and
    ``generation_history`` (``SupportsGenerationHistory``) and ``forgotten_lookup``
    (``SupportsForgottenLookup``) name optional methods; ``ragport.ports.store.supports`` is
    the one check the use cases make, and the contract suite fails a store that declares what
    its class does not define. ``private_reads`` names no method: every record a read returns
    (``query``, ``guarded_query``, ``lexical_query``, ``hybrid_query``, ``get_by_source``)
    owns its metadata at every depth, shared with nothing the store keeps, hands out again or
    hands out for another record of the same answer; retrieval then builds its hits on that
    metadata instead of copying it once more (``ChunkStoreAliasingContract`` checks it).

    ``lexical_modes`` takes any names ``ragport.domain.lexical.check_lexical_mode`` accepts
    (lower-case letters, digits, ``_``, ``-``, starting with a letter, at most 32: ``bm25``,
    ``fts``, ``fts5``; ``off`` and ``auto`` are no modes), else ``ValidationError(field="lexical_modes")``.
    Retrieval accepts every declared name (``RetrievalRequest(lexical=name)``); ``bm25`` also
    promises ``tokenize_lexical``'s tokens (``SupportsLexicalSearch``).
    """

    lexical_modes: tuple[str, ...] = attrs.field(default=(), converter=_mode_names)
    authorization: Literal["acl", "none"] = "none"
    generations: bool = False
    transactions: bool = False
    guarded_query: bool = False
    preparation: bool = False
    generation_history: bool = False
    forgotten_lookup: bool = False
    private_reads: bool = False
    borrowed_query: bool = False

    @lexical_modes.validator
    def _modes(self, attribute: attrs.Attribute[tuple[str, ...]], value: tuple[str, ...]) -> None:
        for mode in value:
            if check_lexical_mode(mode, field="lexical_modes") in ("off", "auto"):
                raise ValidationError(
                    "'off' and 'auto' are requests, not lexical modes a store declares",
                    field="lexical_modes",
                )
