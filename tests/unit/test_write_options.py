"""WriteOptions: the write side's options as one value, checked when built (as RetrievalRequest
is for reads), its numbers defaulting to the call's Limits."""

from __future__ import annotations

import attrs
import pytest

from ragport.adapters.memory import InMemoryStatusStore
from ragport.application import SharedGeneration, WriteOptions
from ragport.application.write_options import DEFAULT_WRITE_OPTIONS, check_write_options
from ragport.domain.errors import ValidationError
from ragport.domain.limits import DEFAULT_LIMITS, HARD_LIMITS, Limits


def test_defaults_come_from_the_limits() -> None:
    """Numbers left at None take the call's Limits. If this fails, check WriteOptions.settings."""
    assert DEFAULT_WRITE_OPTIONS.settings(DEFAULT_LIMITS)[:3] == (1_000, 100, 32)
    own = Limits(chunk_size=500, overlap=20, embed_batch=8)
    settings = WriteOptions().settings(own)
    assert (settings.size, settings.overlap, settings.batch_size) == (500, 20, 8)
    assert settings.advance_generation is True
    assert settings.skip_if_unchanged is None
    assert settings.shared_generation is None and settings.status_store is None


def test_given_numbers_win_over_the_limits() -> None:
    """A number given is used as is. If this fails, check WriteOptions.settings."""
    settings = WriteOptions(size=300, overlap=30, batch_size=4).settings(DEFAULT_LIMITS)
    assert (settings.size, settings.overlap, settings.batch_size) == (300, 30, 4)


@pytest.mark.parametrize(
    ("field", "value", "limit"),
    [
        ("size", 0, "chunk_size"),
        ("size", HARD_LIMITS.chunk_size + 1, "chunk_size"),
        ("overlap", -1, "overlap"),
        ("overlap", HARD_LIMITS.overlap + 1, "overlap"),
        ("batch_size", 0, "embed_batch"),
        ("batch_size", HARD_LIMITS.embed_batch + 1, "embed_batch"),
        ("size", 10.5, "chunk_size"),
        ("batch_size", True, "embed_batch"),
        ("overlap", "10", "overlap"),
    ],
)
def test_numbers_past_a_floor_or_hard_ceiling_are_refused(
    field: str, value: object, limit: str
) -> None:
    """Out-of-range or non-integer numbers raise ValidationError naming the field's limit.

    If this fails, check _number in application/write_options.py."""
    with pytest.raises(ValidationError) as caught:
        WriteOptions(**{field: value})  # type: ignore[arg-type]
    assert (caught.value.field, caught.value.limit) == (field, limit)


def test_the_ceilings_themselves_are_accepted() -> None:
    """The hard ceilings are inclusive. If this fails, check check_limit's comparison."""
    options = WriteOptions(
        size=HARD_LIMITS.chunk_size, overlap=HARD_LIMITS.overlap, batch_size=HARD_LIMITS.embed_batch
    )
    assert options.settings(DEFAULT_LIMITS).batch_size == HARD_LIMITS.embed_batch


def test_overlap_must_be_smaller_than_size() -> None:
    """Both given: refused when built; one given: refused when resolved against the limits.

    If this fails, check __attrs_post_init__ and settings."""
    with pytest.raises(ValidationError) as caught:
        WriteOptions(size=100, overlap=100)
    assert caught.value.field == "overlap"
    half = WriteOptions(size=50)  # the default overlap is 100
    with pytest.raises(ValidationError) as caught:
        half.settings(DEFAULT_LIMITS)
    assert caught.value.field == "overlap"
    assert WriteOptions(size=50, overlap=0).settings(DEFAULT_LIMITS).overlap == 0


def test_shared_generation_needs_advance_generation() -> None:
    """A shared generation is always published. If this fails, check __attrs_post_init__."""
    shared = SharedGeneration()
    assert (
        WriteOptions(shared_generation=shared).settings(DEFAULT_LIMITS).shared_generation is shared
    )
    with pytest.raises(ValidationError) as caught:
        WriteOptions(shared_generation=shared, advance_generation=False)
    assert caught.value.field == "shared_generation"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("shared_generation", object()),
        ("advance_generation", None),
        ("advance_generation", 1),
        ("skip_if_unchanged", "yes"),
        ("status_store", object()),
    ],
)
def test_objects_of_the_wrong_kind_are_refused(field: str, value: object) -> None:
    """Each field checks its kind. If this fails, check the converters of WriteOptions."""
    with pytest.raises(ValidationError) as caught:
        WriteOptions(**{field: value})  # type: ignore[arg-type]
    assert caught.value.field == field


def test_a_status_store_and_flags_travel_unchanged() -> None:
    """Ports and flags are carried as given. If this fails, check WriteSettings."""
    status = InMemoryStatusStore()
    options = WriteOptions(status_store=status, skip_if_unchanged=False, advance_generation=False)
    settings = options.settings(DEFAULT_LIMITS)
    assert settings.status_store is status
    assert settings.skip_if_unchanged is False and settings.advance_generation is False


def test_the_value_is_frozen_and_checked_on_evolve() -> None:
    """Frozen; attrs.evolve re-validates. If this fails, check @attrs.frozen on WriteOptions."""
    options = WriteOptions(size=400)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        options.size = 10  # type: ignore[misc]
    with pytest.raises(ValidationError):
        attrs.evolve(options, overlap=400)


def test_check_write_options() -> None:
    """None is the default value; anything else but a WriteOptions is refused.

    If this fails, check check_write_options."""
    assert check_write_options(None) is DEFAULT_WRITE_OPTIONS
    options = WriteOptions(size=10, overlap=1)
    assert check_write_options(options) is options
    with pytest.raises(ValidationError) as caught:
        check_write_options({"size": 10})
    assert caught.value.field == "write_options"


def test_a_flag_a_use_case_cannot_honour_is_refused_not_ignored() -> None:
    """index_chunks and delete_source fail closed on the flags they cannot honour; sizes
    they do not use are ignored. If this fails, check refuse_unused in write_options.py."""
    from ragport.adapters.embedders import HashEmbedder
    from ragport.adapters.memory import InMemoryStore
    from ragport.application import delete_source, index_chunks
    from ragport.domain.model import Chunk, Scope

    scope, store, emb = Scope("t", "r", "c"), InMemoryStore(), HashEmbedder(16)
    chunks = [Chunk.of("a", 0, "alpha text")]
    for options in (
        WriteOptions(advance_generation=False),
        WriteOptions(shared_generation=SharedGeneration()),
        WriteOptions(skip_if_unchanged=True),
    ):
        with pytest.raises(ValidationError) as caught:
            index_chunks(chunks=chunks, embedder=emb, store=store, scope=scope,
                         write_options=options)  # fmt: skip
        assert caught.value.field == "write_options"
    assert not store.get_by_source(scope, "a")
    index_chunks(chunks=chunks, embedder=emb, store=store, scope=scope,
                 write_options=WriteOptions(size=10, overlap=0))  # fmt: skip
    with pytest.raises(ValidationError) as caught:
        delete_source(source_id="a", store=store, scope=scope,
                      write_options=WriteOptions(advance_generation=False))  # fmt: skip
    assert caught.value.field == "write_options" and store.get_by_source(scope, "a")
    delete_source(source_id="a", store=store, scope=scope,
                  write_options=WriteOptions(shared_generation=SharedGeneration()))  # fmt: skip
    assert not store.get_by_source(scope, "a")


def test_replace_document_re_embeds_with_skip_if_unchanged_false() -> None:
    """The skip key skips unchanged bytes unless skip_if_unchanged=False. If this fails,
    check prepare_document's unchanged check."""
    from ragport.adapters.embedders import HashEmbedder
    from ragport.adapters.memory import InMemoryStore
    from ragport.adapters.parsers import TextParser
    from ragport.application import replace_document
    from ragport.domain.model import Scope
    from ragport.ports.documents import LoadedDocument

    class Loader:
        def load(self, uri: str) -> LoadedDocument:
            return LoadedDocument(b"Parental leave lasts sixteen weeks.", "text/plain")

    parts: dict[str, object] = {"uri": "doc", "loader": Loader(), "parser": TextParser(),
                                "embedder": HashEmbedder(16), "store": InMemoryStore(),
                                "scope": Scope("t", "r", "c")}  # fmt: skip
    assert not replace_document(**parts).skipped  # type: ignore[arg-type]
    assert replace_document(**parts).skipped  # type: ignore[arg-type]
    again = replace_document(**parts, write_options=WriteOptions(skip_if_unchanged=False))  # type: ignore[arg-type]
    assert not again.skipped and again.indexed == 1
