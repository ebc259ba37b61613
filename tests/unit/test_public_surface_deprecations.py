"""Names that left ``ragport``'s top level keep working for one release, with a warning.

``ragport._MOVED`` maps each to the module it lives in now; ``ragport.__getattr__`` warns
``DeprecationWarning`` naming that home and returns the very object the home holds. The
project itself never goes through these aliases (its code, tests, docs, examples and bench
import from the home: a scan below, and pyproject's pytest ``filterwarnings`` turns the warning
into an error in every test), so the warning a user sees is one their own code caused.
"""

from __future__ import annotations

import ast
import importlib
import re
import warnings
from pathlib import Path

import pytest

import ragport

ROOT = Path(__file__).resolve().parents[2]
MOVED: dict[str, str] = ragport._MOVED
PYTHON_BLOCK = re.compile(r"^(`{3,4})python\n(.*?)^\1$", re.S | re.M)


def _ragport_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [
        str(w.message)
        for w in caught
        if issubclass(w.category, DeprecationWarning) and str(w.message).startswith("ragport.")
    ]


@pytest.mark.parametrize("name", sorted(MOVED))
def test_a_moved_name_warns_and_is_the_object_of_its_home(name: str):
    """``ragport.<name>`` warns once, naming the new home, and is the home's own object.

    If this fails, check ``_HOMES`` in ragport/__init__.py (the home named there must export
    the name) and ``__getattr__``'s warning.
    """
    home = MOVED[name]
    with pytest.warns(DeprecationWarning) as caught:
        value = getattr(ragport, name)
    assert value is getattr(importlib.import_module(home), name)
    messages = _ragport_warnings(list(caught))
    assert len(messages) == 1
    assert f"{home}.{name}" in messages[0] and messages[0].startswith(f"ragport.{name} ")
    assert caught[0].filename == __file__  # stacklevel: the warning points at the caller


def test_from_ragport_import_a_moved_name_warns_at_the_import():
    """``from ragport import <moved name>`` (the form most code uses) warns and binds the
    home's object.

    If this fails, check that ``__getattr__`` is module-level in ragport/__init__.py.
    """
    namespace: dict[str, object] = {}
    with pytest.warns(DeprecationWarning, match=r"ragport\.application\.index_chunks"):
        exec("from ragport import index_chunks", namespace)
    from ragport.application import index_chunks

    assert namespace["index_chunks"] is index_chunks


def test_star_import_and_the_kept_names_do_not_warn():
    """``from ragport import *`` and every name of ``__all__`` resolve without a warning.

    If this fails, a name in ``__all__`` is not bound in ragport/__init__.py (it goes through
    ``__getattr__``), or a moved name is still listed in ``__all__``.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        namespace: dict[str, object] = {}
        exec("from ragport import *", namespace)
        kept = [getattr(ragport, name) for name in ragport.__all__]
    assert _ragport_warnings(caught) == []
    assert set(ragport.__all__) <= set(namespace) and all(v is not None for v in kept)
    assert not set(MOVED) & set(ragport.__all__)


def test_an_unknown_name_is_an_attribute_error_without_a_warning():
    """A name ragport never had is an ``AttributeError`` (so ``hasattr`` is False), not a
    warning.

    If this fails, check the ``home is None`` branch of ``ragport.__getattr__``.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not hasattr(ragport, "no_such_name")
        with pytest.raises(AttributeError):
            ragport.__getattribute__("no_such_name")
    assert _ragport_warnings(caught) == []


def test_type_checkers_see_each_moved_name_from_its_home():
    """The ``if TYPE_CHECKING:`` imports of ragport/__init__.py are exactly ``_MOVED``: a
    host's type checker keeps seeing each moved name, with its type, from the same home.

    If this fails, add or remove the ``from <home> import <name> as <name>`` line to match
    ``_HOMES``.
    """
    tree = ast.parse(Path(ragport.__file__).read_text(encoding="utf-8"))
    block = next(
        node
        for node in tree.body
        if isinstance(node, ast.If)
        and isinstance(node.test, ast.Name)
        and node.test.id == "TYPE_CHECKING"
    )
    seen = {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.asname == alias.name
    }
    assert seen == MOVED


# -- the project itself never goes through a moved name ---------------------------------------

SCANNED = ("ragport", "tests", "bench", "examples")


def _moved_uses(source: str) -> list[str]:
    """Every ``from ragport import <moved>`` and ``ragport.<moved>`` (or ``<alias>.<moved>``
    after ``import ragport as <alias>``) in ``source``."""
    tree = ast.parse(source)
    aliases = {"ragport"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname for a in node.names if a.name == "ragport" and a.asname}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "ragport" and node.level == 0:
            found += [f"from ragport import {a.name}" for a in node.names if a.name in MOVED]
        elif (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
            and node.attr in MOVED
        ):
            found.append(f"{node.value.id}.{node.attr} (line {node.lineno})")
    return found


def _project_sources() -> list[tuple[str, str]]:
    sources = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if ".venv" not in path.parts:
                sources.append((str(path.relative_to(ROOT)), path.read_text(encoding="utf-8")))
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for n, match in enumerate(PYTHON_BLOCK.finditer(text), start=1):
            sources.append((f"{page.relative_to(ROOT)}#{n}", match.group(2)))
    return sources


def test_the_project_never_uses_a_moved_name():
    """ragport's own code, tests, bench, examples and docs examples import every moved name
    from its home, never through ``ragport``'s deprecated alias.

    If this fails, import the listed names from the home ``_MOVED`` names (for instance
    ``from ragport.application import index_chunks``).
    """
    offenders = {}
    for where, source in _project_sources():
        try:
            uses = _moved_uses(source)
        except SyntaxError:  # a docs block that is not a whole module; the docs test runs it
            continue
        if uses:
            offenders[where] = uses
    assert offenders == {}


def test_the_scan_sees_both_forms_of_use():
    """The scan behind the test above finds an import, an attribute use and an alias's use.

    If this fails, check ``_moved_uses``.
    """
    source = (
        "import ragport as rp\nfrom ragport import Scope, index_chunks\n"
        "ragport.compact\nrp.chunk_text('x', source_id='s')\nragport.Scope\n"
    )
    uses = _moved_uses(source)
    assert uses[0] == "from ragport import index_chunks"
    assert sorted(uses[1:]) == ["ragport.compact (line 3)", "rp.chunk_text (line 4)"]


def test_the_deprecations_page_names_each_moved_name_with_its_home():
    """docs/deprecations.md's table of the section "a short top level" gives every moved name
    in the row of its home (the page's other sections and tables are not read).

    If this fails, update that table in docs/deprecations.md from ``_HOMES`` in
    ragport/__init__.py (or keep the section's heading ending in "a short top level").
    """
    page = (ROOT / "docs" / "deprecations.md").read_text(encoding="utf-8")
    section = re.split(r"^## .*a short top level$", page, maxsplit=1, flags=re.M)[1]
    section = re.split(r"^## ", section, maxsplit=1, flags=re.M)[0]
    rows = {
        match.group(1): set(re.findall(r"`(\w+)`", match.group(2)))
        for match in re.finditer(r"^\| `(ragport[\w.]*)` [^|]*\| (.*) \|$", section, re.M)
    }
    assert rows == {home: set(names) for home, names in ragport._HOMES.items()}
