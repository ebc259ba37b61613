"""What every shipped suite shares: the required fixture's failing default and the override guard.

A suite derives from :class:`ContractSuite` (which carries the guard test) and declares its
required fixture with :func:`required_fixture`::

    class EmbedderContract(ContractSuite):
        embedder = required_fixture(
            "EmbedderContract", "embedder", "return (or yield, then clean up) the Embedder"
        )

The adapter author overrides the fixture by defining one of the same name in their subclass.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NoReturn

import pytest

from ragport.contract_tests._support import silent_overrides

__all__ = ["ContractSuite", "missing_fixture", "required_fixture"]


def missing_fixture(suite: str, name: str, expectation: str) -> NoReturn:
    """Fail the requesting test, saying which fixture ``suite`` needs and what it must give."""
    pytest.fail(
        f"{suite} needs the `{name}` fixture: override `{name}` in your test class to {expectation}"
    )


def required_fixture(suite: str, name: str, expectation: str) -> Any:
    """A fixture called ``name`` whose default fails with :func:`missing_fixture`.

    ``expectation`` finishes the sentence "override `name` in your test class to ...", e.g.
    "yield an empty ChunkStore and remove whatever the test wrote afterwards".
    """

    def default(self: object) -> Iterator[Any]:
        missing_fixture(suite, name, expectation)
        yield  # pragma: no cover

    default.__name__ = name
    default.__qualname__ = f"{suite}.{name}"
    default.__doc__ = f"The adapter under test. Override it: {expectation}."
    return pytest.fixture(name=name)(default)


class ContractSuite:
    """Base of every shipped suite: a contract test may be replaced only by an xfail."""

    def test_contract_tests_are_not_overridden(self) -> None:
        """No contract test is replaced except by wrapping it in xfail(reason=...).

        If this fails, check the listed methods of your test class: delete the override, or
        decorate it with `pytest.mark.xfail(reason="...")` so the gap is visible.
        """
        found = silent_overrides(type(self))
        assert not found, f"contract tests overridden without xfail(reason=...): {found}"
