"""``DerivedArtifactHandlerContract``: the promises of ``ragport.ports.derived`` as pytest tests.

Use it by subclassing and supplying a ``handler`` fixture that yields the handler under test,
serving the scope of the ``handler_scope`` fixture (override that one too if your handler
needs a scope of its own)::

    class TestMyHandler(DerivedArtifactHandlerContract):
        @pytest.fixture
        def handler(self, handler_scope):
            handler = MyHandler(scope=handler_scope)
            yield handler
            handler.drop_everything()

The suite calls the handler with the ids below. To let it see what the calls *do*, override
``handler_serves`` too: a callable ``(scope, source_id) -> collection`` of whatever identifies
each artifact the handler still serves for that source (ids, keys, texts), and seed artifacts
for ``SOURCE_ID`` in the ``handler`` fixture::

        @pytest.fixture
        def handler_serves(self, handler):
            return lambda scope, source_id: set(handler.artifact_ids(scope, source_id))

Then ``on_propagate`` must stop serving every id it is given, and ``on_repoint`` must move
exactly as many artifacts as it reports. Without ``handler_serves`` those two tests skip
with that reason (a handler that does nothing would otherwise pass). A handler may refuse a
scope it does not serve, but only by raising an error that carries no text it was given.
Everything is deterministic; nothing here imports an adapter.

**Fixed ids.** Every test calls the handler with the same ids, in ``handler_scope`` (default
``Scope("contract-tenant", "contract-resource", "contract-derived")``):

- ``SOURCE_ID`` (``"contract-derived-src"``): the source propagated and re-pointed. Seed the
  artifacts of your layer for it in the ``handler`` fixture.
- ``PROPAGATED_IDS`` (``SOURCE_ID`` and ``"contract-derived-src-summary"``): the ids handed to
  ``on_propagate``, as ``propagate`` hands a lineage closure (the source, then a derived
  record resting on it). If your layer files artifacts under a derived record's id, seed one
  under the second id too.
- ``RENAMED_ID`` (``"contract-derived-renamed"``): where ``on_repoint`` moves ``SOURCE_ID``.
  Seed nothing under it: what it serves before the move is counted too.
- ``CANARY`` (``"CANARY-derived-7f3a9c"``): the error test hands both methods ids built from
  it (``CANARY-derived-7f3a9c-source``, ``-derived``, ``-target``), in ``handler_scope`` and in
  ``FOREIGN_SCOPE`` (``Scope("contract-tenant-2", "contract-resource", "contract-derived")``);
  nothing raised may quote them.

An id the handler holds nothing for is not an error: it counts 0 (``RENAMED_ID`` and, for
most layers, ``f"{SOURCE_ID}-summary"`` hold nothing; a second call finds nothing left).

**Counting, per id.** ``handler_serves(scope, id)`` is asked once for each id of
``PROPAGATED_IDS`` (and for ``SOURCE_ID`` and ``RENAMED_ID`` around ``on_repoint``), and the
suite adds up the sizes of what it returns: an artifact returned under two ids counts twice.
So ``on_propagate`` must return at least ``sum(len(serves(scope, i)) for i in
PROPAGATED_IDS)``, measured before the call (one per artifact, each served under one id,
meets it exactly), and ``on_repoint`` exactly how far ``len(serves(scope, SOURCE_ID))`` fell
and ``len(serves(scope, RENAMED_ID))`` rose. Counts say what the call did, not what it was
given: a second ``on_propagate`` of the same ids may return 0.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable

import pytest

from ragport.contract_tests._base import ContractSuite, required_fixture
from ragport.domain.model import Scope
from ragport.ports.derived import DerivedArtifactHandler

__all__ = [
    "CANARY",
    "PROPAGATED_IDS",
    "RENAMED_ID",
    "SOURCE_ID",
    "DerivedArtifactHandlerContract",
]

SOURCE_ID = "contract-derived-src"
"""The source the suite propagates and re-points."""
RENAMED_ID = "contract-derived-renamed"
"""Where the suite re-points ``SOURCE_ID`` to."""
CANARY = "CANARY-derived-7f3a9c"
"""Marks text handed to the handler: it must never come back inside an error."""
PROPAGATED_IDS = (SOURCE_ID, f"{SOURCE_ID}-summary")
"""The closure the suite hands ``on_propagate`` for ``SOURCE_ID``."""
FOREIGN_SCOPE = Scope("contract-tenant-2", "contract-resource", "contract-derived")


Served = Callable[[Scope, str], Collection[Hashable]]
"""``handler_serves``: the artifacts a handler serves for a source id in a scope."""


def _observer(serves: Served | None) -> Served:
    if serves is None:
        pytest.skip(
            "override `handler_serves` (what the handler still serves for a source id) and "
            "seed SOURCE_ID in `handler`, so the suite can see what the handler did"
        )
    return serves


def _count(value: object, what: str) -> int:
    assert isinstance(value, int) and not isinstance(value, bool), (
        f"{what} must return an int, got {type(value).__name__}"
    )
    assert value >= 0, f"{what} returned a negative count: {value}"
    return value


def _assert_clean(exc: BaseException, given: tuple[str, ...], what: str) -> None:
    for rendered in (str(exc), repr(exc), *(str(a) for a in exc.args)):
        for text in given:
            assert text not in rendered, (
                f"{what} raised {type(exc).__name__} quoting text it was given: {rendered!r}"
            )


class DerivedArtifactHandlerContract(ContractSuite):
    """Every DerivedArtifactHandler promise. Subclass it and override the ``handler`` fixture."""

    @pytest.fixture
    def handler_scope(self) -> Scope:
        """The scope the handler serves; override it if your handler needs another one."""
        return Scope("contract-tenant", "contract-resource", "contract-derived")

    handler = required_fixture(
        "DerivedArtifactHandlerContract",
        "handler",
        "yield a DerivedArtifactHandler serving `handler_scope`",
    )

    @pytest.fixture
    def handler_serves(self) -> Served | None:
        """What the handler still serves: ``(scope, source_id) -> collection``, one item per
        artifact. Override it (and seed ``SOURCE_ID``) so the suite can check the effect of
        ``on_propagate`` and ``on_repoint``; ``None`` skips those checks."""
        return None

    def test_handler_satisfies_the_protocol(self, handler: DerivedArtifactHandler) -> None:
        """Checks ``DerivedArtifactHandler.kind``, ``DerivedArtifactHandler.on_propagate``,
        ``DerivedArtifactHandler.on_repoint``: the handler defines every member and both methods are
        callable.

        If this fails, check that the adapter defines every member of DerivedArtifactHandler.
        """
        assert isinstance(handler, DerivedArtifactHandler)
        assert callable(handler.on_propagate)
        assert callable(handler.on_repoint)

    def test_kind_is_a_non_empty_stable_string(
        self, handler: DerivedArtifactHandler, handler_scope: Scope
    ) -> None:
        """Checks ``DerivedArtifactHandler.kind``: it is a non-empty string without surrounding
        blanks that does not change, also after ``on_propagate``.

        If this fails, check the handler's `kind`: it keys result `layers`, so it must be a
        short constant such as "rag" or "summaries".
        """
        kind = handler.kind
        assert isinstance(kind, str)
        assert kind and kind == kind.strip()
        assert handler.kind == kind
        handler.on_propagate(SOURCE_ID, (SOURCE_ID,), handler_scope)
        assert handler.kind == kind, "kind changed after on_propagate"

    def test_on_propagate_returns_a_non_negative_int(
        self, handler: DerivedArtifactHandler, handler_scope: Scope
    ) -> None:
        """Checks ``DerivedArtifactHandler.on_propagate``: ``on_propagate(source_id, ids, scope)``
        returns how many artifacts it touched, an int (not a bool) ``>= 0``.

        If this fails, check that on_propagate returns a plain int count, never None or bool.
        """
        _count(handler.on_propagate(SOURCE_ID, PROPAGATED_IDS, handler_scope), "on_propagate")

    def test_on_propagate_is_idempotent(
        self, handler: DerivedArtifactHandler, handler_scope: Scope
    ) -> None:
        """Checks ``DerivedArtifactHandler.on_propagate``: a second and a third call with the same
        arguments are safe and return a count again.

        If this fails, check that on_propagate tolerates artifacts that are already gone
        (deletion propagation re-runs every handler after a failure).
        """
        ids = PROPAGATED_IDS
        _count(handler.on_propagate(SOURCE_ID, ids, handler_scope), "on_propagate")
        _count(handler.on_propagate(SOURCE_ID, ids, handler_scope), "a second on_propagate")
        _count(handler.on_propagate(SOURCE_ID, ids, handler_scope), "a third on_propagate")

    def test_on_propagate_stops_serving_every_id_it_is_given(
        self,
        handler: DerivedArtifactHandler,
        handler_scope: Scope,
        handler_serves: Served | None,
    ) -> None:
        """Checks ``DerivedArtifactHandler.on_propagate``: afterwards nothing is served for any of
        ``ids`` in the scope, the count it returns covers what vanished, and a second call brings
        nothing back.

        ``ids`` is ``PROPAGATED_IDS`` (``SOURCE_ID`` and ``f"{SOURCE_ID}-summary"``). What
        vanished is counted per id: ``handler_serves`` is asked for each of the two ids
        before the call and the sizes are added, so an artifact served under both counts
        twice and the returned count must be at least that sum.

        If this fails, check that on_propagate removes (or withholds) every artifact of every
        id in ``ids`` in exactly ``scope``; if it fails before on_propagate is called, seed
        artifacts for SOURCE_ID in the `handler` fixture.
        """
        serves = _observer(handler_serves)
        before = {i: set(serves(handler_scope, i)) for i in PROPAGATED_IDS}
        assert before[SOURCE_ID], (
            "the handler serves nothing for SOURCE_ID before on_propagate: seed artifacts for "
            "it in the `handler` fixture, or the suite cannot see what on_propagate does"
        )
        touched = _count(
            handler.on_propagate(SOURCE_ID, PROPAGATED_IDS, handler_scope), "on_propagate"
        )
        still = {i: sorted(map(repr, serves(handler_scope, i))) for i in PROPAGATED_IDS}
        assert not any(still.values()), f"still served after on_propagate: {still}"
        vanished = sum(len(items) for items in before.values())
        assert touched >= vanished, (
            f"on_propagate stopped serving {vanished} artifacts but reported {touched}"
        )
        _count(handler.on_propagate(SOURCE_ID, PROPAGATED_IDS, handler_scope), "a second call")
        assert not any(serves(handler_scope, i) for i in PROPAGATED_IDS), (
            "a second on_propagate brought artifacts back"
        )

    def test_on_repoint_returns_a_non_negative_int(
        self, handler: DerivedArtifactHandler, handler_scope: Scope
    ) -> None:
        """Checks ``DerivedArtifactHandler.on_repoint``: ``on_repoint(from_id, to_id, scope)``
        returns how many artifacts moved, an int ``>= 0``, also when called again after everything
        moved.

        If this fails, check that on_repoint returns a plain int count and tolerates being
        called once per page (so again after everything moved).
        """
        _count(handler.on_repoint(SOURCE_ID, RENAMED_ID, handler_scope), "on_repoint")
        _count(handler.on_repoint(SOURCE_ID, RENAMED_ID, handler_scope), "a second on_repoint")

    def test_on_repoint_moves_as_many_artifacts_as_it_reports(
        self,
        handler: DerivedArtifactHandler,
        handler_scope: Scope,
        handler_serves: Served | None,
    ) -> None:
        """Checks ``DerivedArtifactHandler.on_repoint``: it moves exactly the count it returns from
        ``from_id`` to ``to_id`` (0 is honest for a layer whose artifacts ``repoint_source`` itself
        moves).

        ``from_id`` is ``SOURCE_ID`` and ``to_id`` ``RENAMED_ID``. The count must equal how many
        items ``handler_serves(scope, SOURCE_ID)`` lost and ``handler_serves(scope,
        RENAMED_ID)`` gained, each measured as the size of the collection for that one id.

        If this fails, check that on_repoint re-files each artifact it counts under ``to_id``
        and no longer serves it under ``from_id``, and counts nothing it did not move.
        """
        serves = _observer(handler_serves)
        from_before = len(serves(handler_scope, SOURCE_ID))
        to_before = len(serves(handler_scope, RENAMED_ID))
        moved = _count(handler.on_repoint(SOURCE_ID, RENAMED_ID, handler_scope), "on_repoint")
        assert moved <= from_before, f"on_repoint reported {moved} of {from_before} artifacts"
        after = (len(serves(handler_scope, SOURCE_ID)), len(serves(handler_scope, RENAMED_ID)))
        assert after == (from_before - moved, to_before + moved), (
            f"on_repoint reported {moved} moved; served (from, to) went from "
            f"{(from_before, to_before)} to {after}"
        )

    def test_errors_never_contain_the_text_they_were_given(
        self, handler: DerivedArtifactHandler, handler_scope: Scope
    ) -> None:
        """Checks ``DerivedArtifactHandler.on_propagate``, ``DerivedArtifactHandler.on_repoint``:
        whatever they raise, in their own scope or a foreign one, quotes none of the ids they were
        handed.

        If this fails, check the handler's error messages: name the failure, never echo a
        source id, record id or document text (they reach logs and on_renamed callbacks).
        """
        source = f"{CANARY}-source"
        ids = (source, f"{CANARY}-derived")
        target = f"{CANARY}-target"

        def propagate(scope: Scope) -> object:
            return handler.on_propagate(source, ids, scope)

        def repoint(scope: Scope) -> object:
            return handler.on_repoint(source, target, scope)

        calls: tuple[tuple[str, Callable[[Scope], object]], ...] = (
            ("on_propagate", propagate),
            ("on_repoint", repoint),
        )
        for scope in (handler_scope, FOREIGN_SCOPE):
            for what, call in calls:
                try:
                    _count(call(scope), what)
                except AssertionError:
                    raise
                except Exception as exc:
                    _assert_clean(exc, (CANARY,), what)
