"""The sync state ``sync_knowledge`` keeps in its checkpoint, and how a page moves it.

The state is JSON: the mode (``bootstrap`` or ``changes``), the connector's cursor, the
source ids the sync has indexed (``known``), during a bootstrap the ids listed so far
(``seen``), and the items awaiting a retry (``retry``: attempts and the earliest next try).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Literal

import attrs

from ragport.domain.errors import ForgottenError, ParseError, SyncCursorError, ValidationError
from ragport.ports.sync import Page

STATE_VERSION = 1
# Retry backoff of failed and withheld items: the first retry at once (the next run), then
# 1, 2, 4, ... minutes after the last failure, at most RETRY_MAX_S (a day) apart.
RETRY_BASE_S = 60
RETRY_MAX_S = 86_400


# A parser's verdict on the bytes themselves (malformed, too large, unsupported, ...) repeats
# for the same bytes, so it is not retried: an upstream edit lists the item again anyway.
# A load failure, a parse timeout, a killed worker, a missing dependency or any other
# exception may be transient and is retried.
TRANSIENT_PARSE_REASONS = frozenset({"timeout", "worker", "memory", "dependency"})


def is_retryable(exc: BaseException) -> bool:
    """Whether a failed item may succeed on a later run with the same upstream content (a
    forgotten id never does until it is re-admitted)."""
    if isinstance(exc, ForgottenError):
        return False
    if isinstance(exc, ParseError):
        return exc.reason in TRANSIENT_PARSE_REASONS
    return True


def retry_delay(attempts: int) -> timedelta:
    """How long after its ``attempts``-th failure an item is tried again."""
    if attempts <= 1:
        return timedelta(0)
    return timedelta(seconds=min(RETRY_BASE_S * 2 ** min(attempts - 2, 16), RETRY_MAX_S))


@attrs.frozen
class _State:
    mode: Literal["bootstrap", "changes"]
    cursor: str | None
    known: frozenset[str] = frozenset()
    seen: frozenset[str] = frozenset()
    # source id -> (failed attempts, earliest next try as an ISO 8601 instant)
    retry: Mapping[str, tuple[int, str]] = attrs.field(factory=dict)

    def encode(self) -> str:
        state: dict[str, Any] = {
            "v": STATE_VERSION,
            "mode": self.mode,
            "cursor": self.cursor,
            "known": sorted(self.known),
            "seen": sorted(self.seen),
        }
        if self.retry:
            state["retry"] = {k: list(v) for k, v in sorted(self.retry.items())}
        return json.dumps(state, separators=(",", ":"), ensure_ascii=False)

    def retry_due(self, now: datetime) -> bool:
        return any(_instant(at) <= now for _, at in self.retry.values())


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text)


START = _State("bootstrap", None)


def _decode_state(text: str | None) -> _State:
    if text is None:
        return START
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):  # a deeply nested checkpoint is malformed too
        raw = None
    ok = (
        isinstance(raw, dict)
        and raw.get("v") == STATE_VERSION
        and raw.get("mode") in ("bootstrap", "changes")
        and (raw.get("cursor") is None or isinstance(raw.get("cursor"), str))
        and isinstance(raw.get("known"), list)
        and isinstance(raw.get("seen"), list)
        and all(isinstance(i, str) for i in raw["known"] + raw["seen"])
        and (raw["mode"] == "bootstrap" or isinstance(raw.get("cursor"), str))
    )
    retry = _decode_retry(raw.get("retry", {})) if ok else None
    if not ok or retry is None:
        raise SyncCursorError("the stored sync checkpoint is malformed", reason="malformed")
    return _State(
        raw["mode"], raw["cursor"], frozenset(raw["known"]), frozenset(raw["seen"]), retry
    )


def _decode_retry(raw: object) -> dict[str, tuple[int, str]] | None:
    if not isinstance(raw, dict):
        return None
    retry: dict[str, tuple[int, str]] = {}
    for source_id, entry in raw.items():
        if not (
            isinstance(entry, list)
            and len(entry) == 2
            and isinstance(entry[0], int)
            and not isinstance(entry[0], bool)
            and entry[0] >= 1
            and isinstance(entry[1], str)
        ):
            return None
        try:
            when = _instant(entry[1])
        except ValueError:
            return None
        if when.tzinfo is None:
            return None
        retry[source_id] = (entry[0], entry[1])
    return retry


@attrs.frozen
class _PageOutcome:
    upserted: tuple[str, ...]
    skipped: tuple[str, ...]
    withheld: tuple[str, ...]
    failed: tuple[str, ...]
    deleted: tuple[str, ...]
    swept: int
    wrote: bool = True
    # failed items a retry may heal (not a parser's verdict on the same bytes)
    retryable: tuple[str, ...] = ()
    # (source id, reason, redacted error) of each failed item
    failures: tuple[tuple[str, str, str], ...] = ()


@attrs.define(slots=True)
class _Tally:
    """What a run has committed so far, page by page (``SyncResult``'s counts)."""

    pages: int = 0
    upserted: int = 0
    deleted: int = 0
    skipped: int = 0
    withheld: int = 0
    failed: int = 0
    swept: int = 0

    def add(self, outcome: _PageOutcome) -> None:
        """Count one committed page."""
        self.pages += 1
        self.upserted += len(outcome.upserted)
        self.skipped += len(outcome.skipped)
        self.withheld += len(outcome.withheld)
        self.failed += len(outcome.failed)
        self.deleted += len(outcome.deleted)
        self.swept += outcome.swept


def _next_retry(
    retry: Mapping[str, tuple[int, str]], outcome: _PageOutcome, page: Page, now: datetime
) -> dict[str, tuple[int, str]]:
    """Failed and withheld items count one more attempt; what succeeded or is gone drops."""
    done = {*outcome.upserted, *outcome.skipped, *page.deletions, *outcome.deleted}
    final = set(outcome.failed) - set(outcome.retryable)  # the same bytes fail the same way
    nxt = {k: v for k, v in retry.items() if k not in done and k not in final}
    for source_id in (*outcome.retryable, *outcome.withheld):
        attempts = nxt[source_id][0] + 1 if source_id in nxt else 1
        nxt[source_id] = (attempts, (now + retry_delay(attempts)).isoformat())
    return nxt


def _next_state(state: _State, page: Page, outcome: _PageOutcome, now: datetime) -> _State:
    present = {*outcome.upserted, *outcome.skipped, *outcome.failed}
    gone = {*page.deletions, *outcome.withheld, *outcome.deleted} - present
    known = (state.known | present) - gone
    retry = _next_retry(state.retry, outcome, page, now)
    if state.mode == "changes":
        return _State("changes", page.cursor or state.cursor, known, retry=retry)
    seen = state.seen | {u.source_id for u in page.upserts}
    if page.exhausted:
        if page.cursor is None:
            raise ValidationError(
                "the last bootstrap page must carry the cursor changes start from",
                field="cursor",
            )
        # What the full listing no longer holds cannot be retried.
        return _State(
            "changes", page.cursor, known, retry={k: v for k, v in retry.items() if k in seen}
        )
    if page.cursor is None:
        raise ValidationError(
            "a bootstrap page that is not the last needs a cursor", field="cursor"
        )
    return _State("bootstrap", page.cursor, known, seen, retry)


@attrs.frozen
class SyncFailure:
    """One item that failed in a run: its source id, a reason code (``too_large``, ``timeout``,
    ``malformed``, ... or the error type) and the error, redacted and free of document text.
    ``retrying``: the checkpoint keeps the item for a retry (a load failure, a parse timeout,
    a killed worker); a parser's verdict on the same bytes waits for the item to change."""

    source_id: str
    reason: str
    error: str
    retrying: bool


@attrs.frozen
class SyncResult:
    """What one ``sync_knowledge`` run committed.

    ``pages`` committed, sources ``upserted`` (rows written), ``deleted`` (rows retired:
    upstream deletions and the sweep, ``swept`` of them the sweep), ``skipped`` (unchanged),
    ``withheld`` (access mapping said no), ``failed`` (load or parse failed; previous version
    kept). ``cursor`` is the connector cursor the checkpoint now holds, ``exhausted`` whether
    the listing was read to its end, ``bootstrapped`` whether a full listing ran (the first
    sync or after a cursor error), ``lost`` whether another worker advanced the checkpoint
    first (this worker then stopped and its page was rolled back: it wrote nothing).
    ``retrying`` is how many failed or withheld items the checkpoint keeps for a retry.
    ``failures`` names each item that failed in this run, with its reason (``failed`` of them).
    """

    pages: int
    upserted: int
    deleted: int
    skipped: int
    withheld: int
    cursor: str | None
    exhausted: bool
    failed: int = 0
    swept: int = 0
    bootstrapped: bool = False
    lost: bool = False
    retrying: int = 0
    failures: tuple[SyncFailure, ...] = ()


@attrs.frozen
class SyncProgress:
    """What ``sync_knowledge`` has done so far, handed to ``on_progress``.

    ``listed``: upserts and deletions of the pages read so far (it grows page by page; the
    total is not known in advance); ``done``: how many of them were handled (an upsert when
    it is about to be loaded, a deletion when its page committed); ``pages``: pages
    committed; ``source_id``: the upsert about to be loaded, else ``None``.
    """

    pages: int
    listed: int
    done: int
    source_id: str | None = None
