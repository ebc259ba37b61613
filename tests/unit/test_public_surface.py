"""The public surface, pinned: a change to a public name or signature is a deliberate one.

``public_surface.txt`` (next to this file) records ``ragport.__all__`` with the signature of
each callable, the public members of ``ragport.Rag`` and ``ragport.aio.AsyncRag`` with their
signatures, ``ragport.aio.__all__``, ``ragport.application.__all__`` and the names the top
level still answers with a ``DeprecationWarning``. When you change one of them on purpose,
regenerate the file and commit it with the change:

    python tests/unit/test_public_surface.py --update

(or ``RAGPORT_UPDATE_SURFACE=1 pytest tests/unit/test_public_surface.py``), then read the diff:
it is the change your users will see. Dropping or renaming a public name needs a one-release
``DeprecationWarning`` shim.
"""

from __future__ import annotations

import difflib
import inspect
import os
import re
import sys
from pathlib import Path
from typing import Any

SNAPSHOT = Path(__file__).with_name("public_surface.txt")
REGENERATE = "python tests/unit/test_public_surface.py --update"
UPDATE_ENV = "RAGPORT_UPDATE_SURFACE"
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_LONG_DEFAULT = 60
"""A default whose repr is longer than this prints as ``<TypeName>``: a ``Limits`` default is
part of the signature, the value of each of its thirty fields is not."""


class _Short:
    def __init__(self, value: object) -> None:
        self.text = repr(value)
        if len(self.text) > _LONG_DEFAULT:
            self.text = f"<{type(value).__name__}>"

    def __repr__(self) -> str:
        return self.text


def _signature(obj: Any) -> str:
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):  # a builtin without a signature (an exception's __init__)
        return "(...)"
    parameters = [
        p if p.default is p.empty else p.replace(default=_Short(p.default))
        for p in signature.parameters.values()
    ]
    return _ADDRESS.sub("", str(signature.replace(parameters=parameters)))


def _describe(name: str, obj: Any) -> str:
    if inspect.isclass(obj):
        return f"class {name}{_signature(obj)}"
    if callable(obj):
        return f"def {name}{_signature(obj)}"
    return f"{name}: {type(obj).__name__}"


def _members(cls: type) -> list[str]:
    """Every public member of ``cls`` (inherited ones too): methods with their signatures,
    properties with their return annotation, anything else by its type."""
    lines = []
    for name in sorted(dir(cls)):
        if name.startswith("_"):
            continue
        static = inspect.getattr_static(cls, name)
        if isinstance(static, property):
            returns = inspect.signature(static.fget).return_annotation if static.fget else None
            lines.append(f"property {name} -> {returns}")
        elif isinstance(static, staticmethod | classmethod) or inspect.isfunction(static):
            kind = "async def" if inspect.iscoroutinefunction(getattr(cls, name)) else "def"
            lines.append(f"{kind} {name}{_signature(getattr(cls, name))}")
        else:
            lines.append(_describe(name, static))
    return lines


def render() -> str:
    """The public surface as text, one line per name, in a stable order."""
    import ragport
    import ragport.aio
    import ragport.application

    sections: list[tuple[str, list[str]]] = [
        (
            "ragport.__all__",
            [_describe(name, getattr(ragport, name)) for name in sorted(ragport.__all__)],
        ),
        ("ragport.Rag", _members(ragport.Rag)),
        ("ragport.aio.__all__", sorted(ragport.aio.__all__)),
        ("ragport.aio.AsyncRag", _members(ragport.aio.AsyncRag)),
        ("ragport.application.__all__", sorted(ragport.application.__all__)),
    ]
    moved: dict[str, str] = getattr(ragport, "_MOVED", {})
    sections.append(
        (
            "ragport deprecated names (warn, then resolve from their home)",
            [f"{name} -> {home}.{name}" for name, home in sorted(moved.items())],
        )
    )
    out = [
        "# The public surface of ragport, pinned by tests/unit/test_public_surface.py.",
        f"# Regenerate on a deliberate change: {REGENERATE}",
    ]
    for title, lines in sections:
        out += ["", f"[{title}]", *lines]
    return "\n".join(out) + "\n"


def test_the_public_surface_matches_the_snapshot():
    """The top-level names, the facade's methods and their signatures are the recorded ones.

    If this fails, the public surface changed. If that is deliberate, regenerate the snapshot
    (see the message) and commit it with the change; if not, restore the name or signature.
    """
    current = render()
    if os.environ.get(UPDATE_ENV):
        SNAPSHOT.write_text(current, encoding="utf-8")
    recorded = SNAPSHOT.read_text(encoding="utf-8") if SNAPSHOT.exists() else ""
    if current != recorded:
        diff = "".join(
            difflib.unified_diff(
                recorded.splitlines(keepends=True),
                current.splitlines(keepends=True),
                fromfile=f"{SNAPSHOT.name} (recorded)",
                tofile="current surface",
            )
        )
        raise AssertionError(
            "ragport's public surface changed (a top-level name, a signature of ragport's top "
            "level, Rag or AsyncRag, or ragport.application.__all__). Such a change must be "
            f"deliberate: if it is, regenerate the snapshot with `{REGENERATE}` (or "
            f"{UPDATE_ENV}=1 pytest tests/unit/test_public_surface.py), review the diff and commit it with "
            "your change; a dropped or renamed public name also needs a one-release "
            "DeprecationWarning shim.\n" + diff
        )


def test_the_snapshot_sees_a_changed_signature(monkeypatch):
    """A changed signature of a top-level callable changes the rendering the test compares.

    If this fails, check that render() prints each callable's inspect.signature.
    """
    import ragport

    before = render()
    name = next(n for n in sorted(ragport.__all__) if inspect.isfunction(getattr(ragport, n)))

    def changed(*, renamed_keyword: int = 0) -> None:
        del renamed_keyword

    monkeypatch.setattr(ragport, name, changed)
    assert render() != before


def test_docs_index_lists_every_top_level_name():
    """docs/index.md names every name of ``ragport.__all__`` (it groups them for a newcomer).

    If this fails, add the new top-level name to its group in docs/index.md, with one line.
    """
    import ragport

    page = (Path(__file__).resolve().parents[2] / "docs" / "index.md").read_text(encoding="utf-8")
    section = page.split("## The top level", 1)[1].split("\n## ", 1)[0]
    missing = [name for name in ragport.__all__ if f"`{name}" not in section]
    assert missing == []


def main(argv: list[str]) -> int:
    if argv != ["--update"]:
        print(f"usage: {REGENERATE}", file=sys.stderr)
        return 2
    # The checkout this file is in, not whichever ragport is installed (a worktree's own).
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    SNAPSHOT.write_text(render(), encoding="utf-8")
    print(f"wrote {SNAPSHOT}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
