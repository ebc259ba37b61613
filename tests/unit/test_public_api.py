"""The public names of API.md stay importable, and importing ragport has no side effects."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import ragport

API_NAMES = {
    "Scope", "Authorization", "Grant", "Chunk", "Limits", "DEFAULT_LIMITS", "HARD_LIMITS", "Hit",
    "Citation", "Provenance", "Trust", "AccessDenial", "Rename", "ValidationError", "ScopeError",
    "CapabilityError", "EmbedderMismatchError", "RerankError", "ParseError", "UrlRejectedError",
    "SyncCursorError", "AccessDeniedError", "PropagationError", "AbortedError", "RagportError",
    "chunk_text", "chunk_markdown", "index_chunks", "replace_source", "delete_source",
    "replace_document", "LoadError", "Access", "sync_knowledge", "SyncResult",
    "retrieve_context", "list_ingestion_status", "rollback_generation", "compact",
    "RagContextProvider", "ContextBlock", "Evidence", "evidence_from_citation",
}  # fmt: skip


EXPORTED = {
    # the facade (issue 42: the top level a newcomer reads in a minute; docs/index.md)
    "open_rag", "Rag",
    # values users construct
    "Scope", "Authorization", "Grant", "Chunk", "Rename", "RetrievalRequest", "WriteOptions",
    "Runtime", "Limits",
    # results users read
    "RetrievalResult", "Hit", "Citation", "AccessDenial", "ReplaceResult", "SyncResult",
    # errors commonly caught (every error: ragport.domain.errors)
    "RagportError", "ValidationError", "CapabilityError", "StoreError", "EmbedderMismatchError",
    "AccessDeniedError", "ForgottenError", "ParseError", "AbortedError",
    "__version__",
}  # fmt: skip


def test_ragport_exports_exactly_the_pinned_names():
    """``ragport.__all__`` is exactly ``EXPORTED``: adding or dropping a public name is a decision.

    If this fails, update EXPORTED (and docs/index.md, shared/API.md when the name is public
    API) or restore the export in ragport/__init__.py; a name leaving the top level goes to
    ``_HOMES`` there (a one-release DeprecationWarning alias).
    """
    assert sorted(ragport.__all__) == sorted(EXPORTED)
    assert len(ragport.__all__) == len(set(ragport.__all__))
    assert len(ragport.__all__) <= 30


def _resolve(name: str) -> object:
    """``ragport.<name>``, whether exported or a moved name's deprecated alias."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return getattr(ragport, name)


def test_every_domain_error_can_still_be_caught_as_ragport_name():
    """Every error class of ``ragport.domain.errors`` is exported from ``ragport`` or still
    resolves there (a moved name, with its DeprecationWarning), and is the same class.

    If this fails, export the error from ragport/__init__.py or add it to ``_HOMES`` there.
    """
    from ragport.domain import errors

    classes = {
        name
        for name in errors.__all__
        if isinstance(getattr(errors, name), type)
        and issubclass(getattr(errors, name), errors.RagportError)
    }
    assert classes and not classes - set(ragport.__all__) - set(ragport._MOVED)
    assert all(_resolve(name) is getattr(errors, name) for name in classes)


def test_every_api_name_still_resolves_from_ragport():
    """Every name API.md lists "from ragport" is exported or a moved name that still resolves;
    every exported name resolves.

    If this fails, check ragport/__init__.py (``__all__`` and ``_HOMES``) against shared/API.md.
    """
    missing = API_NAMES - set(ragport.__all__) - set(ragport._MOVED)
    assert not missing
    unresolved = [name for name in API_NAMES | set(ragport.__all__) if _resolve(name) is None]
    assert not unresolved


def test_names_are_importable_from_the_layer_that_defines_them():
    """Domain names come from ragport.domain, use cases from ragport.application (the wired
    ``open_rag`` and ``Rag`` from ragport.bootstrap).

    If this fails, check the re-exports in ragport/domain/__init__.py and application/__init__.py.
    """
    from ragport import application, bootstrap, domain, ports

    layers = (domain, ports, application, bootstrap)
    homeless = [
        name
        for name in ragport.__all__
        if name != "__version__"
        and not any(getattr(layer, name, None) is getattr(ragport, name) for layer in layers)
    ]
    assert not homeless
    assert (
        domain.Scope is ragport.Scope and application.RetrievalRequest is ragport.RetrievalRequest
    )
    assert bootstrap.open_rag is ragport.open_rag and bootstrap.Rag is ragport.Rag
    assert domain.errors.EmbedderMismatchError.code == "ERR_RAG_EMBEDDER_MISMATCH"


def test_all_errors_share_one_root():
    """Every exported error class derives from RagportError.

    If this fails, check the class bases in ragport/domain/errors.py.
    """
    errors = [getattr(ragport, n) for n in ragport.__all__ if n.endswith("Error")]
    assert len(errors) >= 5
    assert all(issubclass(e, ragport.RagportError) for e in errors)


ENV_READ = 3
"""The probe's exit status when a module under its root read the environment."""
_IMPORT_PROBE = """
import os, socket, sys, threading

ROOT = {root!r}
ENV_READ = {env_read}
reads = []
getitem, iterate = os._Environ.__getitem__, os._Environ.__iter__
skipped = ("os.py", "_collections_abc.py", "<frozen os>", "<frozen _collections_abc>")


def caller():
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.endswith(skipped):
        frame = frame.f_back
    return "" if frame is None else frame.f_code.co_filename


def watched_getitem(self, key):
    if caller().startswith(ROOT):
        reads.append(key)
    return getitem(self, key)


def watched_iter(self):
    if caller().startswith(ROOT):
        reads.append("*")
    return iterate(self)


os._Environ.__getitem__, os._Environ.__iter__ = watched_getitem, watched_iter
sys.path.insert(0, {extra_path!r})


def refuse(*a, **k):
    raise RuntimeError("socket opened at import")


socket.socket = refuse
before = threading.active_count()
import {modules}
if threading.active_count() != before:
    sys.exit("a thread started at import")
if reads:
    print(f"environment read at import: {{reads}}", file=sys.stderr)
    sys.exit(ENV_READ)
"""


def _import_probe(modules: str, *, root: str, extra_path: str = "") -> subprocess.CompletedProcess:
    """Import ``modules`` in a fresh interpreter: no socket, no thread, no environment read by
    any module under ``root``."""
    code = _IMPORT_PROBE.format(
        root=root, extra_path=extra_path, modules=modules, env_read=ENV_READ
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)


def test_import_opens_no_socket_and_reads_no_environment():
    """Importing ragport (and its in-memory adapters) opens no socket, starts no thread and
    reads no environment variable from any ragport module.

    If this fails, look for work done at import time in the module the traceback names (an
    environment read belongs in bootstrap or the CLI, at call time).
    """
    root = str(Path(ragport.__file__).parent)
    done = _import_probe(
        "ragport, ragport.adapters.memory, ragport.adapters.embedders, ragport.bootstrap, "
        "ragport.cli",
        root=root,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    "body",
    [
        "import os\nos.environ.get('HOME')\n",
        "import os\nos.getenv('HOME')\n",
        "import os\ndict(os.environ)\n",
    ],
    ids=["environ-get", "getenv", "copy"],
)
def test_the_import_probe_sees_an_environment_read(tmp_path: Path, body: str):
    """The probe behind the test above fails on a module that reads the environment at import.

    If this fails, check _IMPORT_PROBE's hooks on os._Environ.
    """
    (tmp_path / "reads_env_at_import.py").write_text(body)
    done = _import_probe("reads_env_at_import", root=str(tmp_path), extra_path=str(tmp_path))
    assert done.returncode == ENV_READ, done.stderr


def test_import_loads_no_framework():
    """``import ragport`` (and ``ragport.integrations``) imports no LangChain, LlamaIndex or MCP.

    If this fails, look for a framework import outside ragport/integrations/<framework>.py.
    """
    code = (
        "import sys, ragport, ragport.integrations, ragport.bootstrap\n"
        "loaded = [m for m in ('langchain_core', 'llama_index', 'mcp', 'pydantic') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_ragport_ports_exports_every_public_name_of_every_port_module():
    """``ragport.ports.__all__`` is exactly the union of the port modules' ``__all__``.

    If this fails, re-export the new port name in ragport/ports/__init__.py.
    """
    import importlib
    import pkgutil

    import ragport.ports

    expected: set[str] = set()
    for info in pkgutil.iter_modules(ragport.ports.__path__):
        module = importlib.import_module(f"ragport.ports.{info.name}")
        expected.update(module.__all__)
    assert set(ragport.ports.__all__) == expected
    unresolved = [name for name in expected if not hasattr(ragport.ports, name)]
    assert not unresolved


def test_every_protocol_member_of_every_port_has_a_docstring():
    """Every method and property a port Protocol declares says what it promises.

    If this fails, give the listed members a docstring in ragport/ports/.
    """
    import inspect

    import ragport.ports

    missing = []
    for name in ragport.ports.__all__:
        port = getattr(ragport.ports, name)
        if not (inspect.isclass(port) and getattr(port, "_is_protocol", False)):
            continue
        for member, value in vars(port).items():
            if member.startswith("_") and member not in ("__len__", "__contains__"):
                continue
            function = value.fget if isinstance(value, property) else value
            if callable(function) and not (function.__doc__ or "").strip():
                missing.append(f"{name}.{member}")
    assert missing == []
