"""``WriteOptions``: how a write chunks, embeds, versions and records, checked once when built.

The write-side twin of ``RetrievalRequest``. ``replace_source``, ``replace_document``,
``index_chunks``, ``delete_source`` (and ``Rag``'s writes) take ``write_options=`` instead of
the chunk size, overlap, embed batch size, shared generation, publish and skip flags and
status store they each took as keywords. Build one value and reuse it for every write of a
command.
"""

from __future__ import annotations

from typing import NamedTuple

import attrs

from ragport.application.shared_generation import SharedGeneration
from ragport.domain.errors import ValidationError
from ragport.domain.limits import Limits, check_limit
from ragport.ports.status import IngestionStatusStore

__all__ = [
    "DEFAULT_WRITE_OPTIONS",
    "WriteOptions",
    "WriteSettings",
    "check_write_options",
    "refuse_unused",
]


def _number(value: int | None, *, limit: str, field: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{field} must be an integer", field=field, limit=limit)
    try:
        check_limit(limit, value)
    except ValidationError as exc:  # the same check, named by this value's field
        message = f"{field}: {exc.args[0]}" if exc.args else f"{field} is out of range"
        raise ValidationError(message, field=field, limit=limit) from None
    return value


def _size(value: int | None) -> int | None:
    return _number(value, limit="chunk_size", field="size")


def _overlap(value: int | None) -> int | None:
    return _number(value, limit="overlap", field="overlap")


def _batch_size(value: int | None) -> int | None:
    return _number(value, limit="embed_batch", field="batch_size")


def _shared(value: SharedGeneration | None) -> SharedGeneration | None:
    if value is not None and not isinstance(value, SharedGeneration):
        raise ValidationError(
            "shared_generation must be a SharedGeneration", field="shared_generation"
        )
    return value


def _advance(value: bool) -> bool:
    if not isinstance(value, bool):
        raise ValidationError(
            "advance_generation must be True or False", field="advance_generation"
        )
    return value


def _skip(value: bool | None) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise ValidationError(
            "skip_if_unchanged must be True, False or None", field="skip_if_unchanged"
        )
    return value


def _status(value: IngestionStatusStore | None) -> IngestionStatusStore | None:
    if value is not None and not isinstance(value, IngestionStatusStore):
        raise ValidationError("status_store must be an IngestionStatusStore", field="status_store")
    return value


class WriteSettings(NamedTuple):
    """A ``WriteOptions`` with every number resolved against one call's ``Limits``."""

    size: int
    overlap: int
    batch_size: int
    shared_generation: SharedGeneration | None
    advance_generation: bool
    skip_if_unchanged: bool | None
    status_store: IngestionStatusStore | None


@attrs.frozen(kw_only=True)
class WriteOptions:
    """How a write chunks, embeds, versions and records its status.

    Every field is checked when the value is built (``ValidationError`` naming the field), so
    an options value that exists is well-formed.

    - ``size`` (chunk size in characters; default 1,000, at least 1, at most 16,384),
      ``overlap`` (characters shared by neighbouring chunks; default 100, at most 4,096, and
      smaller than ``size``), ``batch_size`` (texts per embedder call; default 32, at least 1,
      at most 128): a number left at ``None`` takes its value from the call's
      ``Runtime.limits`` (``chunk_size``, ``overlap``, ``embed_batch``); a number given must
      lie within its floor and ``HARD_LIMITS`` (``ValidationError(field=..., limit=...)``).
      ``size`` and ``overlap`` matter to the writes that chunk (``replace_document``,
      ``Rag.replace_text``); ``batch_size`` to those that embed.
    - ``shared_generation``: write into the generation earlier writes through the same
      ``SharedGeneration`` used, while it is still the scope's newest (docs/retrieval.md);
      needs ``advance_generation``.
    - ``advance_generation`` (default ``True``): publish the write's generation at once;
      ``False`` stages it (``publish_generation`` makes it visible later).
    - ``skip_if_unchanged`` (default ``None``: skip when a ``content_hash`` is given): a
      write whose content hash matches the stored rows under the same embedder writes nothing.
    - ``status_store``: where the write records its ingestion status (none by default).

    A use case refuses (``ValidationError(field="write_options")``) a flag it cannot honour
    rather than ignore it: ``index_chunks`` and ``delete_source`` always publish,
    ``index_chunks`` shares no generation, neither skips; ``replace_document`` skips by its
    skip key unless ``skip_if_unchanged=False`` (then it parses and embeds again).
    """

    size: int | None = attrs.field(default=None, converter=_size)
    overlap: int | None = attrs.field(default=None, converter=_overlap)
    batch_size: int | None = attrs.field(default=None, converter=_batch_size)
    shared_generation: SharedGeneration | None = attrs.field(default=None, converter=_shared)
    advance_generation: bool = attrs.field(default=True, converter=_advance)
    skip_if_unchanged: bool | None = attrs.field(default=None, converter=_skip)
    status_store: IngestionStatusStore | None = attrs.field(default=None, converter=_status)

    def __attrs_post_init__(self) -> None:
        if self.size is not None and self.overlap is not None and self.overlap >= self.size:
            raise ValidationError(
                "overlap must be smaller than size", field="overlap", limit="overlap"
            )
        if self.shared_generation is not None and not self.advance_generation:
            raise ValidationError(
                "shared_generation needs advance_generation=True", field="shared_generation"
            )

    def settings(self, limits: Limits) -> WriteSettings:
        """Every number resolved: a field left at ``None`` takes ``limits``' value.

        ``ValidationError(field="overlap")`` when the resolved overlap is not smaller than the
        resolved size (``WriteOptions(size=50)`` under the default overlap of 100, say)."""
        size = limits.chunk_size if self.size is None else self.size
        overlap = limits.overlap if self.overlap is None else self.overlap
        if overlap >= size:
            raise ValidationError(
                f"overlap ({overlap}) must be smaller than size ({size}); set both in WriteOptions",
                field="overlap",
                limit="overlap",
            )
        return WriteSettings(
            size=size,
            overlap=overlap,
            batch_size=limits.embed_batch if self.batch_size is None else self.batch_size,
            shared_generation=self.shared_generation,
            advance_generation=self.advance_generation,
            skip_if_unchanged=self.skip_if_unchanged,
            status_store=self.status_store,
        )


DEFAULT_WRITE_OPTIONS = WriteOptions()


def refuse_unused(options: WriteOptions, use_case: str, *, staged: bool, shared: bool,
                  skip: bool) -> None:  # fmt: skip
    """Fail closed on a field ``use_case`` cannot honour (rather than ignore it):
    ``advance_generation=False`` unless it can stage (``staged``), a ``shared_generation``
    unless it can share one (``shared``), a ``skip_if_unchanged`` unless it can skip
    (``skip``). Sizes it does not use (``size`` and ``overlap`` for a write that does not
    chunk) are ignored, so one value serves every write of a command."""
    refused = [
        name
        for name, used, given in (
            ("advance_generation", staged, not options.advance_generation),
            ("shared_generation", shared, options.shared_generation is not None),
            ("skip_if_unchanged", skip, options.skip_if_unchanged is not None),
        )
        if given and not used
    ]
    if refused:
        raise ValidationError(
            f"{use_case} cannot honour write_options.{refused[0]}: leave it at its default",
            field="write_options",
        )


def check_write_options(options: object) -> WriteOptions:
    """``options`` if it is a ``WriteOptions`` (``DEFAULT_WRITE_OPTIONS`` for ``None``;
    ``ValidationError(field="write_options")`` otherwise)."""
    if options is None:
        return DEFAULT_WRITE_OPTIONS
    if not isinstance(options, WriteOptions):
        raise ValidationError("write_options must be a WriteOptions", field="write_options")
    return options
