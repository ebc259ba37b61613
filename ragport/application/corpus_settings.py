"""The settings a corpus was ingested with, kept with the corpus in its store.

- ``CorpusSettings``: the corpus root and the options that decide what a file becomes
  (``encoding``, ``max_bytes``, ``timeout``, ``wall_timeout``, ``size``, ``overlap``);
  ``None``: not recorded.
- ``CorpusSettingsStore``: reads and updates them. They are one versioned JSON record in the
  store's checkpoint table (``SETTINGS_ID``, per scope, moved by compare-and-set, so two
  commands recording at once both land), beside the rows: ``ragport db dump`` / ``restore`` /
  ``copy`` carry them. For a store whose checkpoints are not kept (a plugin's bare
  ``ChunkStore``: checkpoints in memory) only the root is kept, in the user's data directory
  (``ragport.bootstrap.roots.CorpusRoots``, a ``RecordedRoots``), as before. A root recorded
  there by an older ragport is read when the store holds none, and moves into the store with
  the next update. ``ragport.bootstrap.corpus_settings.settings_store`` picks where.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import attrs

from ragport.domain.errors import StoreError, ValidationError
from ragport.domain.model import Scope
from ragport.ports.sync import CheckpointStore

__all__ = [
    "SETTINGS_ID",
    "CorpusSettings",
    "CorpusSettingsStore",
    "RecordedRoots",
    "carry_recorded_roots",
]


class RecordedRoots(Protocol):
    """Where older ragports recorded each corpus's root, by key (``store|schema|scope``):
    ``ragport.bootstrap.roots.CorpusRoots``, a file in the user's data directory."""

    def get(self, key: str) -> Path | None:
        """The root recorded under ``key``, if any."""

    def set(self, key: str, root: Path) -> None:
        """Record ``root`` under ``key``."""

    def entries(self) -> dict[str, Path]:
        """Every recorded key and its root."""


SETTINGS_ID = "ragport:corpus-settings"  # the checkpoint the record is kept under
_VERSION = 1
_ATTEMPTS = 5


def _text(value: object) -> str | None:
    if value is None or (isinstance(value, str) and 0 < len(value) <= 4096):
        return value
    raise ValueError("not a short string")


def _count(value: object) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 0):
        return value
    raise ValueError("not a positive integer")


def _seconds(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("not a number")
    if not (math.isfinite(value) and value > 0):
        raise ValueError("not a positive number")
    return float(value)


_KINDS: dict[str, Callable[[object], Any]] = {
    "root": _text,
    "encoding": _text,
    "max_bytes": _count,
    "timeout": _seconds,
    "wall_timeout": _seconds,
    "size": _count,
    "overlap": _count,
}


@attrs.frozen
class CorpusSettings:
    """What a corpus was ingested with; ``None`` where nothing was recorded."""

    root: str | None = None
    encoding: str | None = None
    max_bytes: int | None = None
    timeout: float | None = None
    wall_timeout: float | None = None
    size: int | None = None
    overlap: int | None = None

    def encode(self) -> str:
        """The stored form: ``{"version": 1, ...}`` with the recorded fields only."""
        given = {k: v for k, v in attrs.asdict(self).items() if v is not None}
        return json.dumps({"version": _VERSION, **given}, sort_keys=True)

    @classmethod
    def decode(cls, text: str | None, *, corpus: str) -> CorpusSettings:
        """The settings of a stored record (``None``: none recorded). A record of another
        version, with a key or a value this ragport does not know, is refused
        (``ValidationError(field="corpus_settings")``) rather than half read."""
        if text is None:
            return cls()
        try:
            data: Any = json.loads(text)
            if not isinstance(data, dict) or data.pop("version", None) != _VERSION:
                raise ValueError("another version")
            unknown = set(data) - set(_KINDS)
            if unknown:
                raise ValueError("unknown keys")
            return cls(**{k: _KINDS[k](v) for k, v in data.items()})
        except (ValueError, TypeError, RecursionError):
            raise ValidationError(
                f"the settings recorded with corpus {corpus!r} are not readable by this "
                "ragport (written by a newer one?); upgrade ragport to use them",
                field="corpus_settings",
            ) from None


class CorpusSettingsStore:
    """The settings of each corpus of one store (see the module docstring).

    ``checkpoints``: the store's own checkpoint store, or ``None`` for a store whose
    checkpoints are not kept (then the root alone goes to ``roots``). ``roots`` and ``key``:
    the data-directory file of older ragports and this store's key in it (``None``: none).
    """

    def __init__(
        self,
        checkpoints: CheckpointStore | None,
        *,
        roots: RecordedRoots | None = None,
        key: str = "",
    ) -> None:
        self._checkpoints = checkpoints
        self._roots = roots
        self._key = key

    @property
    def keeps_settings(self) -> bool:
        """Whether settings other than the root are kept (the store has checkpoints)."""
        return self._checkpoints is not None

    def _stored(self, scope: Scope) -> tuple[CorpusSettings, int]:
        if self._checkpoints is None:
            return CorpusSettings(), 0
        cursor, version = self._checkpoints.get(SETTINGS_ID, scope)
        return CorpusSettings.decode(cursor, corpus=scope.corpus_id), version

    def get(self, scope: Scope) -> CorpusSettings:
        """The recorded settings of ``scope``'s corpus (the root from the data directory when
        the store holds none)."""
        settings, _ = self._stored(scope)
        if settings.root is None and self._roots is not None:
            legacy = self._roots.get(self._key)
            if legacy is not None:
                settings = attrs.evolve(settings, root=str(legacy))
        return settings

    def update(self, scope: Scope, settings: CorpusSettings) -> None:
        """Record the fields of ``settings`` that are not ``None`` over the stored ones (a
        compare-and-set, tried again over a record that changed meanwhile; ``StoreError``
        if it keeps changing)."""
        changes = {k: v for k, v in attrs.asdict(settings).items() if v is not None}
        if self._checkpoints is None:
            if self._roots is not None and settings.root is not None:
                self._roots.set(self._key, Path(settings.root))
            return
        for _ in range(_ATTEMPTS):
            stored, version = self._stored(scope)
            wanted = attrs.evolve(stored, **changes)
            if wanted == stored:
                return
            if self._checkpoints.compare_and_set(SETTINGS_ID, scope, version, wanted.encode()):
                return
        raise StoreError("the corpus settings kept changing while they were recorded")


def carry_recorded_roots(checkpoints: CheckpointStore, roots: RecordedRoots, *, prefix: str) -> int:
    """Record in ``checkpoints`` the data-directory roots whose key starts with ``prefix``
    (``store|schema|``, see ``ragport.cli.settings.legacy_key``) for the corpora whose store
    record holds no root yet, so a dump made now carries them; how many it recorded."""
    carried = 0
    for key, root in sorted(roots.entries().items()):
        parts = key.split("|")
        if not key.startswith(prefix) or len(parts) != 5:
            continue
        try:
            scope = Scope(*parts[2:])
        except ValidationError:
            continue  # a key no ragport wrote: not a scope
        home = CorpusSettingsStore(checkpoints)
        if home.get(scope).root is None:
            home.update(scope, CorpusSettings(root=str(root)))
            carried += 1
    return carried
