"""The settings a corpus remembers (``ragport.bootstrap.corpus_settings``), on the command line.

``ingest``, ``sync folder`` and ``sync drive`` read the corpus's recorded settings once its
store is open: an option not given takes the recorded value (one line on stderr lists those
used), an option given is recorded for later runs, and one given that differs from the
recorded value is reported (``corpus kb: --encoding changed from iso8859-1 to utf-8``).
"""

from __future__ import annotations

import argparse
import hashlib
from collections.abc import Callable
from typing import Any, TypeVar

import attrs

from ragport.bootstrap import Stores
from ragport.bootstrap.corpus_settings import CorpusSettings, CorpusSettingsStore, settings_store
from ragport.cli.config import _store_url
from ragport.cli.output import _note
from ragport.domain.errors import ValidationError
from ragport.domain.limits import check_limit
from ragport.domain.model import Scope

FLAGS = {
    "encoding": "--encoding",
    "max_bytes": "--max-bytes",
    "timeout": "--timeout",
    "wall_timeout": "--wall-timeout",
    "size": "--size",
    "overlap": "--overlap",
}
DEFAULTS = {"size": 1000, "overlap": 100}  # --size / --overlap when neither given nor recorded

_T = TypeVar("_T")


@attrs.frozen
class CorpusOptions:
    """The corpus's settings ``store``, what it ``recorded`` before this run, and what this
    run records (``update``: the options given, then the root it chose)."""

    store: CorpusSettingsStore
    recorded: CorpusSettings
    update: CorpusSettings
    filled: tuple[str, ...] = ()  # the options taken from ``recorded``
    changed: bool = False  # an option given differs from its recorded value

    def checked(self, check: Callable[[], _T]) -> _T:
        """``check()`` (``_limits``, ``_text_encoding``), its ``ValidationError`` about an
        option taken from the recorded settings saying so (exit 2, naming the option)."""
        try:
            return check()
        except ValidationError as exc:
            if exc.field not in self.filled:
                raise
            flag = FLAGS[str(exc.field)]
            raise ValidationError(
                f"{exc} (the value recorded with the corpus: give {flag} to change it)",
                field=exc.field,
                limit=exc.limit,
            ) from None


def legacy_prefix(args: argparse.Namespace) -> str:
    """The keys of this store and schema in the data-directory roots file begin with this."""
    url = _store_url(args)
    # A store URL may carry a password: the file keeps only a digest of it.
    store = hashlib.sha256(url.encode()).hexdigest()[:16] if url else "embedded"
    return f"{store}|{args.schema}|"


def legacy_key(args: argparse.Namespace) -> str:
    """The key of this store and scope in the data-directory roots file of older ragports."""
    return legacy_prefix(args) + "|".join([args.tenant, args.resource, args.corpus])


def _shown(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _canonical(name: str, value: object) -> object:
    if name == "encoding" and isinstance(value, str):
        from ragport.adapters.parsers._common import check_encoding

        return check_encoding(value)
    return value


def corpus_options(args: argparse.Namespace, stores: Stores, scope: Scope) -> CorpusOptions:
    """Fill the options of ``args`` left unset from the corpus's recorded settings (then
    ``--size`` / ``--overlap`` from ``DEFAULTS``), report the recorded ones used and the given
    ones that change them, and check the chunking settings before anything is recorded."""
    home = settings_store(stores, _store_url(args), key=legacy_key(args))
    recorded = home.get(scope)
    given: dict[str, Any] = {}
    used: list[str] = []
    changed = False
    corpus = scope.corpus_id
    for name, flag in FLAGS.items():
        if name not in vars(args):
            continue  # this command has no such option (sync drive: --encoding)
        value, old = getattr(args, name), getattr(recorded, name)
        if value is not None:
            given[name] = _canonical(name, value)
            if old is not None and old != given[name]:
                changed = True
                _note(
                    f"corpus {corpus}: {flag} changed from {_shown(old)} to "
                    f"{_shown(given[name])} (recorded for later runs)"
                )
        elif old is not None:
            setattr(args, name, old)
            used.append(name)
    if used:
        shown = ", ".join(f"{FLAGS[n]} {_shown(getattr(recorded, n))}" for n in used)
        _note(f"corpus {corpus}: recorded {shown} (give an option to change it)")
    for name, default in DEFAULTS.items():
        if name in vars(args) and getattr(args, name) is None:
            setattr(args, name, default)
    _check_chunking(args)
    if given and not home.keeps_settings:
        flags = ", ".join(FLAGS[n] for n in given)
        _note(f"this store keeps no corpus settings: {flags} not recorded")
    return CorpusOptions(home, recorded, CorpusSettings(**given), tuple(used), changed)


def _check_chunking(args: argparse.Namespace) -> None:
    """``--size`` and ``--overlap`` within their limits, overlap below size (exit 2), so a
    bad value is never recorded."""
    if "size" not in vars(args):
        return
    check_limit("chunk_size", args.size)
    check_limit("overlap", args.overlap)
    if args.overlap >= args.size:
        raise ValidationError("--overlap must be smaller than --size", field="overlap")


def record(options: CorpusOptions, scope: Scope, *, root: str | None = None) -> None:
    """Record the options given and ``root`` (when it changed or was only in the data
    directory) with the corpus."""
    update = options.update if root is None else attrs.evolve(options.update, root=root)
    if update != CorpusSettings():
        options.store.update(scope, update)
