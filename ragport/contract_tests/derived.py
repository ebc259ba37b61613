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

The suite calls the handler with the ids below; seed artifacts for ``SOURCE_ID`` in the
fixture if you want ``on_propagate`` and ``on_repoint`` to find something to do (the promises
hold either way). A handler may refuse a scope it does not serve, but only by raising an error
that carries no text it was given. Everything is deterministic; nothing here imports an adapter.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ragport.contract_tests._base import ContractSuite, required_fixture
from ragport.domain.model import Scope
from ragport.ports.derived import DerivedArtifactHandler

__all__ = [
    "CANARY",
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
FOREIGN_SCOPE = Scope("contract-tenant-2", "contract-resource", "contract-derived")


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

    def test_handler_satisfies_the_protocol(self, handler: DerivedArtifactHandler) -> None:
        """The handler has `kind`, `on_propagate` and `on_repoint`.

        If this fails, check that the adapter defines every member of DerivedArtifactHandler.
        """
        assert isinstance(handler, DerivedArtifactHandler)
        assert callable(handler.on_propagate)
        assert callable(handler.on_repoint)

    def test_kind_is_a_non_empty_stable_string(
        self, handler: DerivedArtifactHandler, handler_scope: Scope
    ) -> None:
        """`kind` is a non-empty string without surrounding blanks that never changes.

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
        """on_propagate(source_id, ids, scope) returns how many artifacts it touched (>= 0).

        If this fails, check that on_propagate returns a plain int count, never None or bool.
        """
        ids = (SOURCE_ID, f"{SOURCE_ID}-summary")
        _count(handler.on_propagate(SOURCE_ID, ids, handler_scope), "on_propagate")

    def test_on_propagate_is_idempotent(
        self, handler: DerivedArtifactHandler, handler_scope: Scope
    ) -> None:
        """A second on_propagate with the same arguments is safe and returns an int again.

        If this fails, check that on_propagate tolerates artifacts that are already gone
        (deletion propagation re-runs every handler after a failure).
        """
        ids = (SOURCE_ID, f"{SOURCE_ID}-summary")
        _count(handler.on_propagate(SOURCE_ID, ids, handler_scope), "on_propagate")
        _count(handler.on_propagate(SOURCE_ID, ids, handler_scope), "a second on_propagate")
        _count(handler.on_propagate(SOURCE_ID, ids, handler_scope), "a third on_propagate")

    def test_on_repoint_returns_a_non_negative_int(
        self, handler: DerivedArtifactHandler, handler_scope: Scope
    ) -> None:
        """on_repoint(from_id, to_id, scope) returns how many artifacts moved (>= 0), repeatably.

        If this fails, check that on_repoint returns a plain int count and tolerates being
        called once per page (so again after everything moved).
        """
        _count(handler.on_repoint(SOURCE_ID, RENAMED_ID, handler_scope), "on_repoint")
        _count(handler.on_repoint(SOURCE_ID, RENAMED_ID, handler_scope), "a second on_repoint")

    def test_errors_never_contain_the_text_they_were_given(
        self, handler: DerivedArtifactHandler, handler_scope: Scope
    ) -> None:
        """Whatever a handler raises for odd input carries none of the ids it was handed.

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
