"""Every shipped contract test's docstring opens with the port members it checks.

A ``test_*`` function of ``ragport.contract_tests`` starts its docstring with
"Checks ``Name.member``, ...: <the rule>": ``Name`` is a class defined in ``ragport/ports/``
(or ``Capabilities``) and ``member`` one of its attributes, so whoever sees a contract test fail
knows which promise of which port broke. Names without a dot may follow the members: the use
cases of ``ragport.application`` (``retrieve_context``) a test runs over them. The checker reads
the source with ``ast``, so it also runs on a string (the second test feeds it wrong ones).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path

import attrs

import ragport.application
import ragport.contract_tests
import ragport.ports
from ragport.domain.model import Capabilities

SUITES = Path(ragport.contract_tests.__file__).resolve().parent

NOT_A_PORT_RULE: dict[str, str] = {
    "_base.py::ContractSuite.test_contract_tests_are_not_overridden": (
        "it checks the adapter's test class (no contract test replaced except by an xfail), "
        "which is no member of any port"
    ),
}
"""Tests whose rule concerns no port member, keyed ``<file>::<Class>.<test>``, with why."""

_REF = r"``[^`\s]+``"
_HEADER = re.compile(rf"Checks ({_REF}(?:(?:, and |, | and ){_REF})*): \S")


def _port_classes() -> dict[str, type]:
    """Every public class defined in ``ragport.ports`` or a submodule, by name, and
    ``Capabilities`` (``ragport.domain.model``)."""
    modules = [ragport.ports] + [
        importlib.import_module(info.name)
        for info in pkgutil.walk_packages(ragport.ports.__path__, "ragport.ports.")
    ]
    found: dict[str, set[type]] = {}
    for module in modules:
        for name, value in vars(module).items():
            defined_here = inspect.isclass(value) and value.__module__.startswith("ragport.ports")
            if defined_here and not name.startswith("_"):
                found.setdefault(name, set()).add(value)
    classes = {name: next(iter(kinds)) for name, kinds in found.items() if len(kinds) == 1}
    classes["Capabilities"] = Capabilities
    return classes


PORTS = _port_classes()
USE_CASES = frozenset(ragport.application.__all__)


def _has_member(cls: type, member: str) -> bool:
    """Whether ``member`` is a field, method, property or annotated attribute of ``cls``.

    Looked up in the class bodies of ``cls`` and its bases (not ``object``'s or ``typing``'s), in
    their annotations and in the attrs fields; a name with a leading underscore counts only as a
    function or property written in one of those bodies (``LexicalIndex.__len__``), never as the
    machinery ``Protocol`` adds (``__init__``, ``_is_protocol``).
    """
    if attrs.has(cls) and member in {field.name for field in attrs.fields(cls)}:
        return True
    for klass in cls.__mro__:
        if klass.__module__ in ("builtins", "typing", "typing_extensions"):
            continue
        namespace = vars(klass)
        if member.startswith("_"):
            value = namespace.get(member)
            function = value.fget if isinstance(value, property) else value
            if inspect.isfunction(function) and function.__qualname__.startswith(
                f"{klass.__qualname__}."
            ):
                return True
            continue
        if member in namespace or member in namespace.get("__annotations__", {}):
            return True
    return False


def _reference_problems(reference: str) -> list[str]:
    """Why the ``Name.member`` (or use-case) reference does not resolve; empty when it does."""
    name, dot, member = reference.partition(".")
    if not dot:
        return [] if reference in USE_CASES else [f"``{reference}`` is no use case"]
    cls = PORTS.get(name)
    if cls is None:
        return [f"``{reference}``: {name} is no class of ragport.ports nor Capabilities"]
    if "." in member or not _has_member(cls, member):
        return [f"``{reference}``: {name} has no member {member!r}"]
    return []


def docstring_problem(docstring: str | None) -> str | None:
    """What is wrong with a contract test's docstring, or ``None`` when it opens as it should."""
    if not docstring:
        return "no docstring"
    text = " ".join(docstring.split())
    header = _HEADER.match(text)
    if header is None:
        return "does not start with 'Checks ``Name.member``, ...: <rule>'"
    references = re.findall(r"``([^`]+)``", header.group(1))
    if "." not in references[0]:
        return f"the first reference ``{references[0]}`` is no ``Name.member``"
    problems = [p for reference in references for p in _reference_problems(reference)]
    return "; ".join(problems) or None


_TestNode = ast.FunctionDef | ast.AsyncFunctionDef


def _test_functions(source: str) -> Iterator[tuple[str, _TestNode]]:
    """``(<Class>.<test>, node)`` for every ``test_*`` function of ``source``, at module level
    or in a class at any depth."""

    def visit(body: list[ast.stmt], prefix: str) -> Iterator[tuple[str, _TestNode]]:
        for node in body:
            if isinstance(node, ast.ClassDef):
                yield from visit(node.body, f"{prefix}{node.name}.")
            elif isinstance(node, _TestNode) and node.name.startswith("test_"):
                yield f"{prefix}{node.name}", node

    return visit(ast.parse(source).body, "")


def contract_test_problems(source: str, where: str) -> dict[str, str]:
    """``{"<where>::<Class>.<test>": problem}`` for every ``test_*`` function in ``source``
    whose docstring does not open as it should."""
    problems: dict[str, str] = {}
    for name, node in _test_functions(source):
        problem = docstring_problem(ast.get_docstring(node))
        if problem is not None:
            problems[f"{where}::{name}"] = problem
    return problems


def _imported_tests() -> set[str]:
    """Every ``test_*`` method of every class the ``ragport.contract_tests`` modules define."""
    keys: set[str] = set()
    modules = [ragport.contract_tests] + [
        importlib.import_module(info.name)
        for info in pkgutil.walk_packages(
            ragport.contract_tests.__path__, "ragport.contract_tests."
        )
    ]
    for module in modules:
        assert module.__file__ is not None
        where = Path(module.__file__).resolve().relative_to(SUITES).as_posix()
        for cls in vars(module).values():
            if inspect.isclass(cls) and cls.__module__ == module.__name__:
                for name, value in vars(cls).items():
                    if name.startswith("test_") and callable(value):
                        keys.add(f"{where}::{cls.__qualname__}.{name}")
    return keys


def test_every_contract_test_docstring_names_the_port_members_it_checks() -> None:
    """Every ``test_*`` of ``ragport.contract_tests`` opens its docstring with ``Checks`` and
    ``Name.member`` references that resolve in ``ragport.ports`` (or ``Capabilities``), then a
    colon and the rule; the walk sees every test the suites define, and each exemption in
    ``NOT_A_PORT_RULE`` still names a test.

    If this fails, fix the listed docstrings: name the port members whose behaviour the test
    asserts ("Checks ``ChunkStore.query``, ``ChunkStore.get_by_source``: <rule>"), spelled as
    in ``ragport/ports/*.py``; a use case the test runs (``retrieve_context``) may follow them.
    """
    problems: dict[str, str] = {}
    walked: set[str] = set()
    for path in sorted(SUITES.rglob("*.py")):
        where = path.relative_to(SUITES).as_posix()
        source = path.read_text(encoding="utf-8")
        problems.update(contract_test_problems(source, where))
        walked |= {f"{where}::{name}" for name, _ in _test_functions(source)}
    unseen = sorted(_imported_tests() - walked)
    assert not unseen, f"the docstring walk misses these contract tests: {unseen}"
    stale = sorted(set(NOT_A_PORT_RULE) - walked)
    assert not stale, f"NOT_A_PORT_RULE names tests that no longer exist: {stale}"
    offenders = {key: why for key, why in problems.items() if key not in NOT_A_PORT_RULE}
    assert not offenders, f"{len(offenders)} contract test docstrings do not open right:\n" + (
        "\n".join(f"{key}: {why}" for key, why in sorted(offenders.items()))
    )


BROKEN = '''
class ExampleContract:
    def test_without_the_prefix(self, store):
        """The store keeps what it is given.

        If this fails, nothing.
        """

    def test_naming_a_member_that_does_not_exist(self, store):
        """Checks ``ChunkStore.no_such_member``: something it does not have."""

    def test_naming_a_class_outside_the_ports(self, store):
        """Checks ``Scope.tenant_id``: a domain value, not a port."""

    def test_naming_protocol_machinery(self, store):
        """Checks ``ChunkStore.__init__``: what Protocol adds is no member."""

    def test_without_a_rule(self, store):
        """Checks ``ChunkStore.query``."""

    def test_without_a_docstring(self, store):
        pass

    def test_that_opens_right(self, store):
        """Checks ``ChunkStore.query``, ``LexicalIndex.__len__``, ``Upsert.load``,
        ``Capabilities.lexical_modes`` and ``retrieve_context``: a rule."""


def test_at_module_level():
    """Checks ``retrieve_context``: a use case alone names no port member."""
'''


def test_the_checker_reports_docstrings_that_open_wrong() -> None:
    """``contract_test_problems`` reports a docstring without ``Checks``, one naming
    ``ChunkStore.no_such_member``, a class outside ``ragport.ports``, ``Protocol`` machinery, no
    rule, no docstring and a use case alone, and passes the one that opens right.

    If this fails, the checker above lets wrong docstrings through (or refuses a right one):
    check ``_HEADER``, ``_port_classes`` and ``_has_member``.
    """
    problems = contract_test_problems(BROKEN, "example.py")
    assert set(problems) == {
        "example.py::ExampleContract.test_without_the_prefix",
        "example.py::ExampleContract.test_naming_a_member_that_does_not_exist",
        "example.py::ExampleContract.test_naming_a_class_outside_the_ports",
        "example.py::ExampleContract.test_naming_protocol_machinery",
        "example.py::ExampleContract.test_without_a_rule",
        "example.py::ExampleContract.test_without_a_docstring",
        "example.py::test_at_module_level",
    }, problems
    assert (
        "no_such_member"
        in problems["example.py::ExampleContract.test_naming_a_member_that_does_not_exist"]
    )
    assert "Checks" in problems["example.py::ExampleContract.test_without_the_prefix"]
