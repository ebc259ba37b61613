"""Domain value objects and rules: scopes, callers, grants, chunks, trust, limits, visibility."""

from __future__ import annotations

import hashlib

import attrs
import pytest

import ragport
from ragport.domain.model import decide_access, is_visible

HARD_FIELDS = [f.name for f in attrs.fields(ragport.Limits) if f.name != "ceilings"]


# -- Scope ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["tenant_id", "resource_id", "corpus_id"])
@pytest.mark.parametrize(
    "bad",
    ["", "   ", "x" * 257, "a\x00b", "line\nbreak", "tab\there", "del\x7f", "c1\x85"],
    ids=["empty", "blank", "257-chars", "nul", "newline", "tab", "del", "c1-control"],
)
def test_scope_rejects_malformed_ids_with_field(field: str, bad: str) -> None:
    """A malformed scope id is a ScopeError naming its field. If this fails, check _scope_id."""
    values = {"tenant_id": "t1", "resource_id": "r1", "corpus_id": "c1", field: bad}
    with pytest.raises(ragport.domain.errors.ScopeError) as info:
        ragport.Scope(**values)
    assert info.value.field == field
    assert isinstance(info.value, ragport.ValidationError)


def test_scope_accepts_256_chars_and_compares_exactly() -> None:
    """256-char ids are fine and scopes compare by value. If this fails, check SCOPE_ID_MAX."""
    long = "x" * 256
    scope = ragport.Scope(long, "r1", "c1")
    assert scope.tenant_id == long
    assert ragport.Scope("t", "r", "c") == ragport.Scope("t", "r", "c")
    assert ragport.Scope("t", "r", "c") != ragport.Scope("t", "r", "c2")
    assert ragport.Scope("t", "r", "c") != ragport.Scope("t", "r", "c ")


# -- Authorization and Grant ---------------------------------------------------------------------


def _groups(n: int) -> list[str]:
    return [f"g{i:05d}" for i in range(n)]


@pytest.mark.parametrize("n", [33, 40, 1_000, 65_536])
def test_authorization_accepts_as_many_groups_as_a_grant(n: int) -> None:
    """A directory user in 40 (or 1,000, or 65,536) groups is a valid caller: the ceiling is
    a grant's. If this fails, check GROUP_IDS_MAX and HARD_LIMITS.group_ids."""
    auth = ragport.Authorization("alice", "t1", group_ids=_groups(n))
    assert len(auth.group_ids) == n
    assert auth.group_ids[0] == "g00000"
    assert len(ragport.Grant("doc", group_ids=_groups(n)).group_ids) == n


@pytest.mark.parametrize("value", ["Authorization", "Grant", "Access"])
def test_one_group_past_the_hard_ceiling_is_refused(value: str) -> None:
    """65,537 distinct groups is a ValidationError(limit="group_ids") for a caller, a grant and
    a connector's Access alike. If this fails, check _group_ids in ragport/domain/model.py."""
    groups = _groups(ragport.domain.HARD_LIMITS.group_ids + 1)
    build = {
        "Authorization": lambda: ragport.Authorization("alice", "t1", group_ids=groups),
        "Grant": lambda: ragport.Grant("doc", group_ids=groups),
        "Access": lambda: ragport.domain.Access(group_ids=groups),
    }[value]
    with pytest.raises(ragport.ValidationError) as info:
        build()
    assert info.value.limit == "group_ids"
    assert info.value.field == "group_ids"


def test_duplicate_groups_count_once_against_the_ceiling() -> None:
    """The ceiling counts distinct ids: a list padded with repeats is not refused for them.
    If this fails, check that _ids counts after dropping duplicates."""
    groups = _groups(ragport.domain.HARD_LIMITS.group_ids) + ["g00000"] * 10
    auth = ragport.Authorization("alice", "t1", group_ids=groups)
    assert len(auth.group_ids) == ragport.domain.HARD_LIMITS.group_ids


def test_the_group_ceiling_is_a_limits_value() -> None:
    """``Limits.group_ids`` defaults to 1,024 and may be set up to its hard ceiling, which is
    at least a grant's (65,536); past it is refused. If this fails, check _TABLE in limits.py."""
    from ragport.domain.model import GROUP_IDS_MAX

    assert ragport.domain.DEFAULT_LIMITS.group_ids == 1_024
    assert ragport.domain.HARD_LIMITS.group_ids == GROUP_IDS_MAX == 65_536
    assert ragport.Limits(group_ids=40).group_ids == 40
    assert ragport.Limits(group_ids=65_536).group_ids == 65_536
    with pytest.raises(ragport.ValidationError) as info:
        ragport.Limits(group_ids=65_537)
    assert info.value.limit == "group_ids"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"principal_id": ""}, "principal_id"),
        ({"tenant_id": "bad\x00"}, "tenant_id"),
        ({"group_ids": "g1"}, "group_ids"),
        ({"group_ids": ["ok", ""]}, "group_ids"),
        ({"access_version": -1}, "access_version"),
        ({"access_version": True}, "access_version"),
    ],
)
def test_authorization_rejects_bad_fields(kwargs: dict[str, object], field: str) -> None:
    """Bad principal/tenant/groups/version fail by field. If this fails, check Authorization."""
    values: dict[str, object] = {"principal_id": "alice", "tenant_id": "t1", **kwargs}
    with pytest.raises(ragport.ValidationError) as info:
        ragport.Authorization(**values)  # type: ignore[arg-type]
    assert info.value.field == field


def test_grant_deduplicates_and_reports_empty() -> None:
    """Grant ids are deduplicated; no ids means empty. If this fails, check Grant and _ids."""
    grant = ragport.Grant("doc", principal_ids=["alice", "alice", "bob"], group_ids=["g"])
    assert grant.principal_ids == ("alice", "bob")
    assert grant.group_ids == ("g",)
    assert grant.access_version == 1
    assert not grant.is_empty
    assert ragport.Grant("doc").is_empty


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"source_id": ""}, "source_id"),
        ({"access_version": -1}, "access_version"),
        ({"access_version": False}, "access_version"),
        ({"principal_ids": "alice"}, "principal_ids"),
        ({"group_ids": ["ok", "bad\x00"]}, "group_ids"),
    ],
)
def test_grant_rejects_bad_fields(kwargs: dict[str, object], field: str) -> None:
    """Bad grant inputs fail by field. If this fails, check Grant validators."""
    values: dict[str, object] = {"source_id": "doc", **kwargs}
    with pytest.raises(ragport.ValidationError) as info:
        ragport.Grant(**values)  # type: ignore[arg-type]
    assert info.value.field == field


# -- Chunk ---------------------------------------------------------------------------------------


def test_chunk_of_builds_id_and_offsets() -> None:
    """Chunk.of derives id and end from source, index and text. If this fails, check Chunk.of."""
    chunk = ragport.Chunk.of("guide", 11, "hello", start=40, metadata={"k": [1]})
    assert chunk.id == "guide#0012"
    assert (chunk.start, chunk.end) == (40, 45)
    assert chunk.metadata == {"k": [1]}
    assert chunk.text == "hello"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"id": "doc#0002"}, "id"),
        ({"id": "doc#1"}, "id"),
        ({"id": "other#0001"}, "id"),
        ({"end": 6}, "end"),
        ({"start": 3, "end": 2}, "end"),
        ({"index": -1, "id": "doc#0000"}, "index"),
        ({"start": -1, "end": 4}, "start"),
        ({"source_id": ""}, "source_id"),
    ],
)
def test_chunk_rejects_broken_invariants(kwargs: dict[str, object], field: str) -> None:
    """Wrong id or offsets are a ValidationError by field. If this fails, check Chunk validators."""
    values: dict[str, object] = {
        "id": "doc#0001",
        "source_id": "doc",
        "index": 0,
        "start": 0,
        "end": 5,
        "text": "hello",
        **kwargs,
    }
    with pytest.raises(ragport.ValidationError) as info:
        ragport.Chunk(**values)  # type: ignore[arg-type]
    assert info.value.field == field


def test_chunk_metadata_is_copied_not_aliased() -> None:
    """Chunk metadata is a deep copy of the input. If this fails, check freeze_metadata."""
    meta = {"heading": ["A", "B"]}
    chunk = ragport.Chunk.of("doc", 0, "text", metadata=meta)
    meta["heading"].append("C")
    assert chunk.metadata == {"heading": ["A", "B"]}


def test_chunk_rejects_non_json_metadata() -> None:
    """Non-JSON metadata is refused. If this fails, check freeze_metadata."""
    with pytest.raises(ragport.ValidationError) as info:
        ragport.Chunk.of("doc", 0, "text", metadata={"x": float("nan")})
    assert info.value.field == "metadata"


# -- Trust ---------------------------------------------------------------------------------------


def test_trust_defaults_are_all_true() -> None:
    """Trust defaults to untrusted, inert, injection-capable. If this fails, check Trust."""
    trust = ragport.domain.Trust()
    assert (trust.untrusted, trust.inert, trust.injection_capable) == (True, True, True)


@pytest.mark.parametrize("flag", ["untrusted", "inert", "injection_capable"])
def test_trust_cannot_be_made_trusted(flag: str) -> None:
    """No Trust flag may be turned off, even via evolve. If this fails, check Trust post-init."""
    with pytest.raises(ragport.ValidationError):
        ragport.domain.Trust(**{flag: False})
    with pytest.raises(ragport.ValidationError):
        attrs.evolve(ragport.domain.Trust(), **{flag: False})


# -- Limits --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", HARD_FIELDS)
def test_limits_past_hard_ceiling_names_the_field(name: str) -> None:
    """Each hard ceiling + 1 is a ValidationError naming it. If this fails, check limits._TABLE."""
    with pytest.raises(ragport.ValidationError) as info:
        ragport.Limits(**{name: getattr(ragport.domain.HARD_LIMITS, name) + 1})
    assert info.value.limit == name
    assert info.value.field == name


@pytest.mark.parametrize("name", HARD_FIELDS)
def test_limits_reject_bool_values(name: str) -> None:
    """A bool is not an int limit. If this fails, check check_limit's bool guard."""
    with pytest.raises(ragport.ValidationError) as info:
        ragport.Limits(**{name: True})
    assert info.value.limit == name


@pytest.mark.parametrize("name", ["chunk_size", "top_k", "embed_batch", "status_page"])
def test_limits_reject_values_below_floor(name: str) -> None:
    """Zero is below the floor of positive limits. If this fails, check the floors in _TABLE."""
    with pytest.raises(ragport.ValidationError) as info:
        ragport.Limits(**{name: 0})
    assert info.value.limit == name


def test_hard_limits_construct_and_bound_defaults() -> None:
    """HARD_LIMITS is a valid Limits above every default. If this fails, check HARD_LIMITS."""
    hard = ragport.domain.HARD_LIMITS
    assert isinstance(hard, ragport.Limits)
    assert ragport.Limits(**attrs.asdict(hard)) == hard
    for name in HARD_FIELDS:
        assert getattr(ragport.domain.DEFAULT_LIMITS, name) <= getattr(hard, name), name
    assert hard.top_k == 32
    assert hard.embed_batch == 128
    assert hard.group_ids == 65_536
    assert hard.scopes_per_retrieve == 8
    assert hard.status_page == 200


@pytest.mark.parametrize(("chunk_size", "overlap"), [(100, 100), (100, 150), (1, 1)])
def test_limits_reject_overlap_not_below_chunk_size(chunk_size: int, overlap: int) -> None:
    """overlap >= chunk_size is refused. If this fails, check Limits.__attrs_post_init__."""
    with pytest.raises(ragport.ValidationError) as info:
        ragport.Limits(chunk_size=chunk_size, overlap=overlap)
    assert info.value.limit == "overlap"


def test_limits_accept_overlap_just_below_chunk_size() -> None:
    """overlap == chunk_size - 1 is fine. If this fails, check the overlap rule's comparison."""
    assert ragport.Limits(chunk_size=100, overlap=99).overlap == 99


# -- decide_access -------------------------------------------------------------------------------

ALICE = ragport.Authorization("alice", "t1", group_ids=["eng"])
ALICE_V2 = ragport.Authorization("alice", "t1", group_ids=["eng"], access_version=2)


@pytest.mark.parametrize(
    ("grant", "auth", "allowed", "reason"),
    [
        (None, ALICE, False, "no_grant"),
        (ragport.Grant("doc"), ALICE, False, "no_grant"),
        (ragport.Grant("doc", principal_ids=["alice"]), ALICE, True, "granted"),
        (ragport.Grant("doc", group_ids=["eng"]), ALICE, True, "granted"),
        (ragport.Grant("doc", principal_ids=["bob"], group_ids=["ops"]), ALICE, False, "no_grant"),
        (ragport.Grant("doc", principal_ids=["alice"], access_version=2), ALICE, True, "granted"),
        (
            ragport.Grant("doc", principal_ids=["alice"], access_version=2),
            ALICE_V2,
            True,
            "granted",
        ),
        (
            ragport.Grant("doc", principal_ids=["alice"], access_version=1),
            ALICE_V2,
            False,
            "version_mismatch",
        ),
        (
            ragport.Grant("doc", group_ids=["eng"], access_version=3),
            ALICE_V2,
            False,
            "version_mismatch",
        ),
        (
            ragport.Grant("doc", principal_ids=["bob"], access_version=1),
            ALICE_V2,
            False,
            "no_grant",
        ),
    ],
    ids=[
        "no-grant",
        "empty-grant",
        "principal",
        "group",
        "unlisted",
        "no-version-asked",
        "version-match",
        "version-mismatch",
        "group-version-mismatch",
        "unlisted-and-mismatch",
    ],
)
def test_decide_access_truth_table(
    grant: ragport.Grant | None,
    auth: ragport.Authorization,
    allowed: bool,
    reason: str,
) -> None:
    """The grant rule's truth table. If this fails, check decide_access."""
    decision = decide_access("doc", grant, auth)
    assert (decision.source_id, decision.allowed, decision.reason) == ("doc", allowed, reason)


# -- is_visible ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("generation", "retired", "pointer", "visible"),
    [
        (0, None, 0, True),
        (1, None, 1, True),
        (1, None, 5, True),
        (2, None, 1, False),
        (1, 2, 1, True),
        (1, 2, 2, False),
        (1, 3, 2, True),
        (1, 1, 1, False),
        (3, 5, 2, False),
        (3, 5, 4, True),
        (3, 5, 5, False),
    ],
)
def test_is_visible_truth_table(
    generation: int, retired: int | None, pointer: int, visible: bool
) -> None:
    """generation <= p and (retired is None or retired > p). If this fails, check is_visible."""
    assert is_visible(generation, retired, pointer) is visible


# -- content hash --------------------------------------------------------------------------------

SHA = hashlib.sha256(b"ragport").hexdigest()


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        (SHA, True),
        (SHA.upper(), True),
        ("0" * 64, True),
        (SHA[:-1], False),
        (SHA + "0", False),
        ("g" * 64, False),
        (" " + SHA[1:], False),
        (SHA[:-1] + "\n", False),
        ("", False),
        (None, False),
        (SHA.encode(), False),
        (int(SHA, 16), False),
    ],
    ids=[
        "lower",
        "upper",
        "zeros",
        "63",
        "65",
        "non-hex",
        "space",
        "newline",
        "empty",
        "none",
        "bytes",
        "int",
    ],
)
def test_is_valid_content_hash(value: object, valid: bool) -> None:
    """Only 64 hex characters are a content hash. If this fails, check is_valid_content_hash."""
    assert ragport.domain.is_valid_content_hash(value) is valid
